import hashlib

from abci_app.encoding import lp

BALANCE_PREFIX = b"\x02"
SUPPLY_KEY = b"\x03"

# Module accounts: addresses no private key can sign for.
FEE_COLLECTOR = hashlib.sha256(b"loconet/module/fee_collector").digest()[:20]


def balance_key(address: bytes) -> bytes:
    """0x02 | len(addr) | addr -> u128 big-endian uloco"""
    return BALANCE_PREFIX + lp(address)


def address_from_balance_key(key: bytes) -> bytes:
    return key[2 : 2 + key[1]]
