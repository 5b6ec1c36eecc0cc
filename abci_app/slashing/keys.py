"""Slashing state layout (prefixes 0x30..0x32).

    0x30                         -> Params (slashing_pb2.Params)
    0x31 | lp(cons)              -> SigningInfo
    0x32 | lp(cons) | u64(slot)  -> b"\\x01" when the vote in window slot ``slot`` was missed
                                    (absent = signed); slot = index_offset % signed_blocks_window
"""

from __future__ import annotations

from abci_app.encoding import lp, u64_key

SLASHING_PARAMS_KEY = b"\x30"
SIGNING_INFO_PREFIX = b"\x31"
MISSED_PREFIX = b"\x32"


def signing_info_key(cons: bytes) -> bytes:
    return SIGNING_INFO_PREFIX + lp(cons)


def missed_prefix(cons: bytes) -> bytes:
    return MISSED_PREFIX + lp(cons)


def missed_key(cons: bytes, slot: int) -> bytes:
    return MISSED_PREFIX + lp(cons) + u64_key(slot)
