"""providers state layout (see README.md)::

0x40                                   -> ProvidersParams
0x41 | len(addr) | addr                -> Provider
0x42 | u64 unbonding height | len | addr -> b""   (unbonding queue; amount is Provider.unbonding)
0x43 | len(addr) | addr                -> u64 height  (tombstone: jailed, exited; never again)
0x44 | len(addr) | addr                -> u64 reputation (last reputation of a provider that left)
"""

from abci_app.bank.keys import module_address
from abci_app.encoding import KeyReader, lp, u64_key

PARAMS_KEY = b"\x40"
PROVIDER_PREFIX = b"\x41"
UNBONDING_PREFIX = b"\x42"
TOMBSTONE_PREFIX = b"\x43"
LAST_REPUTATION_PREFIX = b"\x44"
# every key this module writes starts with one of these (ModuleSpec.key_prefixes)
KEY_PREFIXES: tuple[bytes, ...] = (
    PARAMS_KEY,
    PROVIDER_PREFIX,
    UNBONDING_PREFIX,
    TOMBSTONE_PREFIX,
    LAST_REPUTATION_PREFIX,
)

# Module account holding every provider bond and unbonding amount (no key can sign for it).
PROVIDER_BONDS = module_address("provider_bonds")


def provider_key(address: bytes) -> bytes:
    return PROVIDER_PREFIX + lp(address)


def parse_provider_key(key: bytes) -> bytes:
    """Inverse of ``provider_key``: the address."""
    r = KeyReader(key, PROVIDER_PREFIX)
    address = r.lp()
    r.end()
    return address


def unbonding_key(height: int, address: bytes) -> bytes:
    return UNBONDING_PREFIX + u64_key(height) + lp(address)


def parse_unbonding_key(key: bytes) -> tuple[int, bytes]:
    """Inverse of ``unbonding_key``: (unbonding height, address)."""
    r = KeyReader(key, UNBONDING_PREFIX)
    height, address = r.u64(), r.lp()
    r.end()
    return height, address


def tombstone_key(address: bytes) -> bytes:
    return TOMBSTONE_PREFIX + lp(address)


def parse_tombstone_key(key: bytes) -> bytes:
    """Inverse of ``tombstone_key``: the address."""
    r = KeyReader(key, TOMBSTONE_PREFIX)
    address = r.lp()
    r.end()
    return address


def last_reputation_key(address: bytes) -> bytes:
    return LAST_REPUTATION_PREFIX + lp(address)


def parse_last_reputation_key(key: bytes) -> bytes:
    """Inverse of ``last_reputation_key``: the address."""
    r = KeyReader(key, LAST_REPUTATION_PREFIX)
    address = r.lp()
    r.end()
    return address
