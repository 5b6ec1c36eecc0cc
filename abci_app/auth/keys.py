from abci_app.encoding import lp

ACCOUNT_PREFIX = b"\x01"


def account_key(address: bytes) -> bytes:
    """0x01 | len(addr) | addr -> state_pb2.Account"""
    return ACCOUNT_PREFIX + lp(address)
