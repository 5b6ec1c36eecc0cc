from abci_app.encoding import KeyReader, lp

ACCOUNT_PREFIX = b"\x01"
PARAMS_KEY = b"\x04"  # -> state_pb2.AuthParams
# every key this module writes starts with one of these (ModuleSpec.key_prefixes)
KEY_PREFIXES: tuple[bytes, ...] = (ACCOUNT_PREFIX, PARAMS_KEY)


def account_key(address: bytes) -> bytes:
    """0x01 | len(addr) | addr -> state_pb2.Account"""
    return ACCOUNT_PREFIX + lp(address)


def parse_account_key(key: bytes) -> bytes:
    """Inverse of ``account_key``: the address."""
    r = KeyReader(key, ACCOUNT_PREFIX)
    address = r.lp()
    r.end()
    return address
