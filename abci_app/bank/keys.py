import hashlib

from abci_app.encoding import KeyReader, lp

BALANCE_PREFIX = b"\x02"
SUPPLY_KEY = b"\x03"
# every key this module writes starts with one of these (ModuleSpec.key_prefixes)
KEY_PREFIXES: tuple[bytes, ...] = (BALANCE_PREFIX, SUPPLY_KEY)


def module_address(name: str) -> bytes:
    """A module account: an address no private key can sign for (sha256 of a tagged name)."""
    return hashlib.sha256(b"loconet/module/" + name.encode()).digest()[:20]


FEE_COLLECTOR = module_address("fee_collector")

# Every module account of the app (Cosmos's blocked addresses): MsgSend refuses them, so their
# balances move only through their modules and each module's books can be checked exactly.
MODULE_ACCOUNTS: frozenset[bytes] = frozenset(
    module_address(n)
    for n in (
        "fee_collector",
        "bonded_pool",
        "unbonding_pool",
        "provider_bonds",
        "job_escrow",
        "settlement_escrow",
    )
)


def balance_key(address: bytes) -> bytes:
    """0x02 | len(addr) | addr -> u128 big-endian uloco"""
    return BALANCE_PREFIX + lp(address)


def parse_balance_key(key: bytes) -> bytes:
    """Inverse of ``balance_key``: the address."""
    r = KeyReader(key, BALANCE_PREFIX)
    address = r.lp()
    r.end()
    return address
