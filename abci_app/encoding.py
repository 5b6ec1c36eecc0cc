"""Canonical encodings for keys and stored values (one encoding per thing; docs/design.md §9)."""

from __future__ import annotations

from typing import TypeVar

from google.protobuf.message import DecodeError, Message

from abci_app.errors import InvariantBroken

U128 = 16
MAX_U64 = 2**64 - 1

M = TypeVar("M", bound=Message)


def encode_uvarint(n: int) -> bytes:
    """Unsigned LEB128 varint (protobuf's, CometBFT v0.38's ABCI framing, length-delimited sign
    bytes)."""
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_LENGTH_BYTE = [bytes([n]) for n in range(256)]


def lp(b: bytes) -> bytes:
    """Length-prefixed bytes (one length byte) for composite keys."""
    n = len(b)
    if n > 255:
        raise ValueError("key part longer than 255 bytes")
    return _LENGTH_BYTE[n] + b


class KeyReader:
    """Reads a composite key back in the order its builder wrote it: the prefix, then ``u64()``
    and ``lp()`` parts, then ``end()``. Every ``keys.py`` pairs a builder ``x_key(...)`` with a
    ``parse_x_key(key)`` made of these calls, so no keeper slices keys by hand. State is written
    only by the builders: a key that does not parse is corruption (``InvariantBroken``)."""

    def __init__(self, key: bytes, prefix: bytes) -> None:
        if not key.startswith(prefix):
            raise InvariantBroken(f"key {key.hex()} does not start with prefix {prefix.hex()}")
        self._key = key
        self._pos = len(prefix)

    def _take(self, n: int) -> bytes:
        if self._pos + n > len(self._key):
            raise InvariantBroken(f"key {self._key.hex()} is shorter than its layout")
        part = self._key[self._pos : self._pos + n]
        self._pos += n
        return part

    def u64(self) -> int:
        return int.from_bytes(self._take(8), "big")

    def lp(self) -> bytes:
        return self._take(self._take(1)[0])

    def end(self) -> None:
        if self._pos != len(self._key):
            raise InvariantBroken(f"key {self._key.hex()} is longer than its layout")


def decode_lp(b: bytes) -> bytes:
    """Inverse of ``lp`` for a stored value that is exactly one length-prefixed part."""
    r = KeyReader(b, b"")
    part = r.lp()
    r.end()
    return part


def prefix_end(prefix: bytes) -> bytes:
    """The first key after every key that starts with ``prefix`` (for ``iterate(prefix, end)``)."""
    p = bytearray(prefix)
    while p and p[-1] == 0xFF:
        p.pop()
    if not p:
        raise ValueError("no key follows an all-0xff prefix")
    p[-1] += 1
    return bytes(p)


def u64_key(n: int) -> bytes:
    return n.to_bytes(8, "big")


def encode_amount(n: int) -> bytes:
    """Amounts in state: unsigned 128-bit big-endian (balances can exceed 2^64 uloco)."""
    if n < 0:
        raise InvariantBroken(f"negative amount {n} about to be stored")
    return n.to_bytes(U128, "big")


def decode_amount(b: bytes | None) -> int:
    if b is None:
        return 0
    if len(b) != U128:
        raise InvariantBroken(f"stored amount has {len(b)} bytes, expected {U128}")
    return int.from_bytes(b, "big")


def encode_msg(m: Message) -> bytes:
    return m.SerializeToString(deterministic=True)


def decode_msg(cls: type[M], b: bytes) -> M:
    try:
        return cls.FromString(b)
    except DecodeError as e:  # state was written by us: corruption halts the node
        raise InvariantBroken(f"corrupt {cls.__name__} in state: {e}") from None
