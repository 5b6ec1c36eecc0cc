"""Merkle proofs of membership and non-membership, and their client-side check.

A proof follows sha256(key) from the root down to the first leaf or empty subtree
on its path. It carries the sibling hashes met on the way (root side first) and
what it found there:

* membership: the key's own leaf; ``value`` is the value;
* non-membership: an empty subtree (``leaf`` None), or the leaf of another key
  whose hash shares the path so far (``leaf`` = (its key hash, its value hash));
  ``value`` is None.

Canonical encoding (:meth:`Proof.to_bytes`), all integers big-endian:

    u8   format = 1
    u32  len(key)        key
    u8   0 (absent) | 1 (present), then if present: u32 len(value)  value
    u8   0 (empty subtree) | 1 (leaf), then if leaf: key_hash (32)  value_hash (32)
    u16  number of siblings (<= 256)   siblings (32 bytes each, root side first)
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import StoreError
from .tree import (
    EMPTY_HASH,
    HASH_LEN,
    KEY_BITS,
    compute_internal_hash,
    compute_leaf_hash,
    hash_key,
    hash_value,
)

PROOF_FORMAT = 1


@dataclass(frozen=True)
class Proof:
    key: bytes
    value: bytes | None
    siblings: tuple[bytes, ...]
    leaf: tuple[bytes, bytes] | None  # (key_hash, value_hash) of the leaf found, None if empty

    def to_bytes(self) -> bytes:
        out = bytearray((PROOF_FORMAT,))
        out += len(self.key).to_bytes(4, "big") + self.key
        if self.value is None:
            out.append(0)
        else:
            out.append(1)
            out += len(self.value).to_bytes(4, "big") + self.value
        if self.leaf is None:
            out.append(0)
        else:
            out.append(1)
            out += self.leaf[0] + self.leaf[1]
        out += len(self.siblings).to_bytes(2, "big")
        for sibling in self.siblings:
            out += sibling
        return bytes(out)

    @classmethod
    def from_bytes(cls, data: bytes) -> Proof:
        """Strict decoder: raises StoreError unless ``data`` is exactly one canonical proof."""
        reader = _Reader(bytes(data))
        if reader.u8() != PROOF_FORMAT:
            raise StoreError("malformed proof: unknown format byte")
        key = reader.take(reader.u32())
        value: bytes | None
        flag = reader.u8()
        if flag == 0:
            value = None
        elif flag == 1:
            value = reader.take(reader.u32())
        else:
            raise StoreError("malformed proof: value flag must be 0 or 1")
        leaf: tuple[bytes, bytes] | None
        flag = reader.u8()
        if flag == 0:
            leaf = None
        elif flag == 1:
            leaf = (reader.take(HASH_LEN), reader.take(HASH_LEN))
        else:
            raise StoreError("malformed proof: leaf flag must be 0 or 1")
        count = int.from_bytes(reader.take(2), "big")
        if count > KEY_BITS:
            raise StoreError(f"malformed proof: {count} siblings, at most {KEY_BITS}")
        siblings = tuple(reader.take(HASH_LEN) for _ in range(count))
        if reader.pos != len(reader.data):
            raise StoreError("malformed proof: trailing bytes")
        return cls(key, value, siblings, leaf)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise StoreError("malformed proof: truncated")
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def u8(self) -> int:
        return self.take(1)[0]

    def u32(self) -> int:
        return int.from_bytes(self.take(4), "big")


def _is_hash(x: object) -> bool:
    return isinstance(x, bytes) and len(x) == HASH_LEN


def _shares_prefix(a: bytes, b: bytes, bits: int) -> bool:
    shift = KEY_BITS - bits
    return int.from_bytes(a, "big") >> shift == int.from_bytes(b, "big") >> shift


def _verify(proof: Proof, root: bytes, key: bytes, value: bytes | None) -> bool:
    if not isinstance(proof, Proof) or not _is_hash(root) or not isinstance(key, bytes):
        return False
    if value is not None and not isinstance(value, bytes):
        return False
    if proof.key != key or proof.value != value:
        return False
    siblings = proof.siblings
    if not isinstance(siblings, tuple) or len(siblings) > KEY_BITS:
        return False
    if not all(_is_hash(s) for s in siblings):
        return False
    key_hash = hash_key(key)
    depth = len(siblings)
    if proof.leaf is None:
        if value is not None:
            return False
        node = EMPTY_HASH
    else:
        if not isinstance(proof.leaf, tuple) or len(proof.leaf) != 2:
            return False
        leaf_key_hash, leaf_value_hash = proof.leaf
        if not _is_hash(leaf_key_hash) or not _is_hash(leaf_value_hash):
            return False
        if value is not None:
            if leaf_key_hash != key_hash or leaf_value_hash != hash_value(value):
                return False
        elif leaf_key_hash == key_hash or not _shares_prefix(leaf_key_hash, key_hash, depth):
            return False
        node = compute_leaf_hash(leaf_key_hash, leaf_value_hash)
    key_int = int.from_bytes(key_hash, "big")
    for d in range(depth - 1, -1, -1):
        if (key_int >> (KEY_BITS - 1 - d)) & 1:
            node = compute_internal_hash(siblings[d], node)
        else:
            node = compute_internal_hash(node, siblings[d])
    return node == root


def verify_proof(proof: Proof, root: bytes, key: bytes, value: bytes | None) -> bool:
    """True iff ``proof`` shows ``key -> value`` (``value`` None: key absent) in the
    tree whose root hash is ``root`` (a block header's app hash). Never raises."""
    try:
        return _verify(proof, root, key, value)
    except Exception:  # noqa: BLE001 - a hostile proof must give False, never an error
        return False
