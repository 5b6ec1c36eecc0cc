"""providers state layout (see README.md)::

    0x40                                   -> ProvidersParams
    0x41 | len(addr) | addr                -> Provider
    0x42 | u64 unbonding height | len | addr -> b""   (unbonding queue; amount is Provider.unbonding)
    0x43 | len(addr) | addr                -> u64 height  (tombstone: jailed, exited; never again)
    0x44 | len(addr) | addr                -> u64 reputation (last reputation of a provider that left)
"""


from abci_app.bank.keys import module_address
from abci_app.encoding import lp, u64_key

PARAMS_KEY = b"\x40"
PROVIDER_PREFIX = b"\x41"
UNBONDING_PREFIX = b"\x42"
TOMBSTONE_PREFIX = b"\x43"
LAST_REPUTATION_PREFIX = b"\x44"

# Module account holding every provider bond and unbonding amount (no key can sign for it).
PROVIDER_BONDS = module_address("provider_bonds")


def provider_key(address: bytes) -> bytes:
    return PROVIDER_PREFIX + lp(address)


def unbonding_key(height: int, address: bytes) -> bytes:
    return UNBONDING_PREFIX + u64_key(height) + lp(address)


def tombstone_key(address: bytes) -> bytes:
    return TOMBSTONE_PREFIX + lp(address)



def last_reputation_key(address: bytes) -> bytes:
    return LAST_REPUTATION_PREFIX + lp(address)
