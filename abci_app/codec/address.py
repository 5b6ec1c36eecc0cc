"""Account addresses: the first 20 bytes of sha256(ed25519 public key), as bech32 ``loco1...``.

CometBFT derives a validator's consensus address the same way (sha256(pubkey)[:20]), so a
consensus key and an account key of the same bytes have the same 20-byte address.
Bech32 (BIP-173) comes from the reference implementation in the ``bech32`` package.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

import bech32 as _bech32

from abci_app.errors import ErrInvalidAddress

HRP = "loco"
ADDRESS_LEN = 20


def address_from_pubkey(public_key: bytes) -> bytes:
    return hashlib.sha256(public_key).digest()[:ADDRESS_LEN]


@lru_cache(maxsize=1 << 16)  # a pure function; bech32's checksum costs ~60 µs in Python
def to_bech32(address: bytes) -> str:
    if len(address) != ADDRESS_LEN:
        raise ErrInvalidAddress(f"address must be {ADDRESS_LEN} bytes, got {len(address)}")
    data = _bech32.convertbits(address, 8, 5)
    assert data is not None
    out = _bech32.bech32_encode(HRP, data)
    assert out is not None
    return out


def from_bech32(text: str) -> bytes:
    """Decode a ``loco1...`` address; raises ErrInvalidAddress naming what is wrong."""
    hrp, data = _bech32.bech32_decode(text.strip())
    if hrp is None or data is None:
        raise ErrInvalidAddress(
            f"{text!r} is not a valid bech32 address (bad checksum or characters)"
        )
    if hrp != HRP:
        raise ErrInvalidAddress(f"{text!r} has prefix {hrp!r}; loconet addresses start with {HRP}1")
    raw = _bech32.convertbits(data, 5, 8, False)
    if raw is None or len(raw) != ADDRESS_LEN:
        raise ErrInvalidAddress(f"{text!r} does not decode to a {ADDRESS_LEN}-byte address")
    return bytes(raw)


def check_address(raw: bytes, field: str = "address") -> bytes:
    if len(raw) != ADDRESS_LEN:
        raise ErrInvalidAddress(f"{field} must be {ADDRESS_LEN} bytes, got {len(raw)}")
    return raw
