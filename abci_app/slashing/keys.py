"""Slashing state layout (prefixes 0x30..0x32).

0x30                         -> Params (slashing_pb2.Params)
0x31 | lp(cons)              -> SigningInfo
0x32 | lp(cons) | u64(slot)  -> b"\\x01" when the vote in window slot ``slot`` was missed
                                (absent = signed); slot = index_offset % signed_blocks_window
"""

from __future__ import annotations

from abci_app.encoding import KeyReader, lp, u64_key

SLASHING_PARAMS_KEY = b"\x30"
SIGNING_INFO_PREFIX = b"\x31"
MISSED_PREFIX = b"\x32"
# every key this module writes starts with one of these (ModuleSpec.key_prefixes)
KEY_PREFIXES: tuple[bytes, ...] = (SLASHING_PARAMS_KEY, SIGNING_INFO_PREFIX, MISSED_PREFIX)


def signing_info_key(cons: bytes) -> bytes:
    return SIGNING_INFO_PREFIX + lp(cons)


def parse_signing_info_key(key: bytes) -> bytes:
    """Inverse of ``signing_info_key``: the consensus address."""
    r = KeyReader(key, SIGNING_INFO_PREFIX)
    cons = r.lp()
    r.end()
    return cons


def missed_prefix(cons: bytes) -> bytes:
    return MISSED_PREFIX + lp(cons)


def missed_key(cons: bytes, slot: int) -> bytes:
    return MISSED_PREFIX + lp(cons) + u64_key(slot)


def parse_missed_key(key: bytes) -> tuple[bytes, int]:
    """Inverse of ``missed_key``: (consensus address, window slot)."""
    r = KeyReader(key, MISSED_PREFIX)
    cons, slot = r.lp(), r.u64()
    r.end()
    return cons, slot
