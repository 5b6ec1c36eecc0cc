"""Binary sparse Merkle tree over sha256(key) with compact leaves.

The tree has 256 levels, one per bit of ``sha256(key)`` (most significant bit
first, 0 = left). It is stored in canonical compact form, as in Diem's Jellyfish
Merkle Tree but binary:

* a subtree holding no key is *empty*; its hash is 32 zero bytes;
* a subtree holding exactly one key is represented by that key's *leaf*, placed at
  the shallowest position on the key's path where it is alone;
* a subtree holding two or more keys is an *internal* node with two children.

    leaf_hash     = sha256(0x00 || sha256(key) || sha256(value))
    internal_hash = sha256(0x01 || left_hash || right_hash)

The root therefore depends only on the set of (key, value) pairs, never on the
order in which they were written.

Nodes are immutable and addressed by ``(version, path)``: ``version`` is the height
of the commit that created the node, ``path`` the bits leading to it from the root
(:func:`path_key`). An internal node stores, for each child, its kind, the version
that created it and its hash (:class:`Ref`), so a reader of an old version follows
child versions down from that version's root. A batch update
(:func:`apply_updates`) visits only the paths of the changed keys: it reads
O(changed keys x depth) nodes, writes as many new ones and reports the nodes it
replaced as *stale* so the store can delete them once no retained version needs them.
This module does no I/O: nodes are read through a :data:`NodeLoader`.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import NamedTuple, TypeAlias

from .errors import StoreError

HASH_LEN = 32
KEY_BITS = 256
EMPTY_HASH = bytes(HASH_LEN)
LEAF_DOMAIN = b"\x00"
INTERNAL_DOMAIN = b"\x01"

KIND_EMPTY = 0
KIND_LEAF = 1
KIND_INTERNAL = 2

_REF_LEN = 1 + 8 + HASH_LEN
_LEAF_LEN = 1 + 2 * HASH_LEN
_INTERNAL_LEN = 1 + 2 * _REF_LEN


@dataclass(slots=True)
class Counters:
    """Work counters; tests use them to show the cost per block (no timing)."""

    hashes: int = 0
    node_reads: int = 0


def hash_key(key: bytes) -> bytes:
    return hashlib.sha256(key).digest()


def hash_value(value: bytes) -> bytes:
    return hashlib.sha256(value).digest()


def compute_leaf_hash(key_hash: bytes, value_hash: bytes) -> bytes:
    return hashlib.sha256(LEAF_DOMAIN + key_hash + value_hash).digest()


def compute_internal_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(INTERNAL_DOMAIN + left + right).digest()


def path_key(depth: int, prefix: int) -> bytes:
    """Canonical bytes of a node position: depth (u16 BE) || the ``depth`` leading
    bits of the key hash, left-aligned in ceil(depth / 8) bytes, the rest zero."""
    nbytes = (depth + 7) // 8
    return depth.to_bytes(2, "big") + (prefix << (nbytes * 8 - depth)).to_bytes(nbytes, "big")


class Ref(NamedTuple):
    """A stored subtree: its kind, the version (height) that wrote it, its hash."""

    kind: int
    version: int
    hash: bytes

    def to_bytes(self) -> bytes:
        return bytes((self.kind,)) + self.version.to_bytes(8, "big") + self.hash

    @classmethod
    def from_bytes(cls, data: bytes) -> Ref:
        if len(data) != _REF_LEN or data[0] not in (KIND_EMPTY, KIND_LEAF, KIND_INTERNAL):
            raise StoreError("corrupt node reference in the store")
        return cls(data[0], int.from_bytes(data[1:9], "big"), data[9:])


EMPTY_REF = Ref(KIND_EMPTY, 0, EMPTY_HASH)


class LeafNode(NamedTuple):
    key_hash: bytes
    value_hash: bytes


class InternalNode(NamedTuple):
    left: Ref
    right: Ref


def encode_leaf(key_hash: bytes, value_hash: bytes) -> bytes:
    return LEAF_DOMAIN + key_hash + value_hash


def encode_internal(left: Ref, right: Ref) -> bytes:
    return INTERNAL_DOMAIN + left.to_bytes() + right.to_bytes()


_tnew = tuple.__new__
_KIND_BYTE = (b"\x00", b"\x01", b"\x02")
_DEPTH_BYTES = tuple(d.to_bytes(2, "big") for d in range(KEY_BITS + 1))
_sha256 = hashlib.sha256


def decode_node(data: bytes) -> LeafNode | InternalNode:
    n = len(data)
    if n == _INTERNAL_LEN and data[0] == 1:
        lk, rk = data[1], data[42]
        if lk > KIND_INTERNAL or rk > KIND_INTERNAL:
            raise StoreError("corrupt node reference in the store")
        return _tnew(InternalNode, (
            _tnew(Ref, (lk, int.from_bytes(data[2:10], "big"), data[10:42])),
            _tnew(Ref, (rk, int.from_bytes(data[43:51], "big"), data[51:83])),
        ))
    if n == _LEAF_LEN and data[0] == 0:
        return _tnew(LeafNode, (data[1:33], data[33:65]))
    raise StoreError("corrupt tree node in the store")


# (version, path_key) -> encoded node; raises StoreError when the node is missing.
NodeLoader = Callable[[int, bytes], bytes]

# A subtree during an update is either a stored ``Ref`` (kind, version, hash) or a new node,
# a plain tuple whose version slot is None so both read alike (child[0] kind, child[2] hash):
#   new leaf:     (KIND_LEAF, None, hash, key_hash, value_hash)
#   new internal: (KIND_INTERNAL, None, hash, left child, right child)
_Child: TypeAlias = tuple
# (int(key_hash), key_hash, value_hash or None for a delete)
_Update = tuple[int, bytes, bytes | None]
_by_int = itemgetter(0)


def _mid(depth: int, prefix: int) -> int:
    """Smallest key-hash integer in the right child of the node at (depth, prefix)."""
    return ((prefix << 1) | 1) << (KEY_BITS - depth - 1)


@dataclass
class TreeUpdate:
    """The result of :func:`apply_updates`: nothing here is persisted yet."""

    root: Ref
    nodes: list[tuple[bytes, bytes]] = field(default_factory=list)  # (path_key, node) to write
    stale: list[tuple[int, bytes]] = field(default_factory=list)  # (version, path_key) replaced


class _Updater:
    """One batch update. Subtrees are visited once, children by index ranges of the sorted
    updates (no copies); the hot paths use plain tuples and inline sha256."""

    def __init__(self, version: int, load: NodeLoader, counters: Counters, ups: list[_Update],
                 present: frozenset[bytes] | set[bytes]) -> None:
        self.version = version
        self.vbytes = version.to_bytes(8, "big")
        self.load_raw = load
        self.counters = counters
        self.ups = ups
        self.present = present
        self.nodes: list[tuple[bytes, bytes]] = []
        self.stale: list[tuple[int, bytes]] = []

    def load(self, version: int, path: bytes) -> LeafNode | InternalNode:
        self.counters.node_reads += 1
        return decode_node(self.load_raw(version, path))

    def update(self, ref: _Child, depth: int, prefix: int, lo: int, hi: int) -> _Child:
        if lo == hi:
            return ref
        ups = self.ups
        kind = ref[0]
        if kind == KIND_EMPTY:
            return self.build(depth, prefix, [u for u in ups[lo:hi] if u[2] is not None])
        nb = (depth + 7) >> 3
        path = _DEPTH_BYTES[depth] + (prefix << (nb * 8 - depth)).to_bytes(nb, "big")
        self.stale.append((ref[1], path))
        if kind == KIND_LEAF:
            present = self.present
            if any(ups[i][1] in present for i in range(lo, hi)):
                # A subtree that is one leaf holds one key: a key known to be in the tree whose
                # update reaches this leaf is the leaf's own key, so the leaf need not be read.
                items = [u for u in ups[lo:hi] if u[2] is not None]
            else:
                node = self.load(ref[1], path)
                if not isinstance(node, LeafNode):
                    raise StoreError("corrupt tree: a leaf reference points to an internal node")
                merged = {u[1]: u for u in ups[lo:hi]}
                kh = node.key_hash
                if kh not in merged:
                    merged[kh] = (int.from_bytes(kh, "big"), kh, node.value_hash)
                items = sorted((u for u in merged.values() if u[2] is not None), key=_by_int)
            return self.build(depth, prefix, items)
        # an internal node, decoded inline (the hot path: one per level of every changed path)
        self.counters.node_reads += 1
        raw = self.load_raw(ref[1], path)
        if len(raw) != _INTERNAL_LEN or raw[0] != 1:
            raise StoreError("corrupt tree: an internal reference points to something else")
        lk, rk = raw[1], raw[42]
        if lk > KIND_INTERNAL or rk > KIND_INTERNAL:
            raise StoreError("corrupt node reference in the store")
        split = bisect_left(ups, ((prefix << 1) | 1) << (KEY_BITS - depth - 1), lo, hi, key=_by_int)
        d1, p2 = depth + 1, prefix << 1
        left = (lk, int.from_bytes(raw[2:10], "big"), raw[10:42])
        if split > lo:
            left = self.update(left, d1, p2, lo, split)
        right = (rk, int.from_bytes(raw[43:51], "big"), raw[51:83])
        if hi > split:
            right = self.update(right, d1, p2 | 1, split, hi)
        return self.join(left, right, depth, prefix)

    def build(self, depth: int, prefix: int, items: Sequence[_Update]) -> _Child:
        """A fresh subtree at (depth, prefix) holding ``items`` (sorted, no deletes)."""
        if not items:
            return EMPTY_REF
        if len(items) == 1:
            _, kh, vh = items[0]
            assert vh is not None
            self.counters.hashes += 1
            return (KIND_LEAF, None, _sha256(LEAF_DOMAIN + kh + vh).digest(), kh, vh)
        if depth >= KEY_BITS:
            raise StoreError("two different keys have the same sha256")
        split = bisect_left(items, _mid(depth, prefix), key=_by_int)
        left = self.build(depth + 1, prefix << 1, items[:split])
        right = self.build(depth + 1, (prefix << 1) | 1, items[split:])
        self.counters.hashes += 1
        return (KIND_INTERNAL, None, _sha256(INTERNAL_DOMAIN + left[2] + right[2]).digest(), left, right)

    def join(self, left: _Child, right: _Child, depth: int, prefix: int) -> _Child:
        """The canonical node at (depth, prefix) with these children."""
        lk, rk = left[0], right[0]
        if lk == KIND_EMPTY:
            if rk == KIND_EMPTY:
                return EMPTY_REF
            if rk == KIND_LEAF:
                return self.lift(right, depth + 1, (prefix << 1) | 1)
        elif rk == KIND_EMPTY and lk == KIND_LEAF:
            return self.lift(left, depth + 1, prefix << 1)
        self.counters.hashes += 1
        return (KIND_INTERNAL, None, _sha256(INTERNAL_DOMAIN + left[2] + right[2]).digest(), left, right)

    def lift(self, child: _Child, depth: int, prefix: int) -> _Child:
        """A lone leaf moves up to its parent's position (it is then a new node)."""
        if child[1] is None:
            return child
        path = path_key(depth, prefix)
        node = self.load(child[1], path)
        if not isinstance(node, LeafNode):
            raise StoreError("corrupt tree: a leaf reference points to an internal node")
        self.stale.append((child[1], path))
        return (KIND_LEAF, None, child[2], node.key_hash, node.value_hash)

    def collect(self, child: _Child, depth: int, prefix: int) -> Ref:
        """Assigns positions to the new nodes and queues them for writing."""
        if child[1] is not None:
            return child  # type: ignore[return-value]  # a stored Ref, kept as is
        nb = (depth + 7) >> 3
        path = _DEPTH_BYTES[depth] + (prefix << (nb * 8 - depth)).to_bytes(nb, "big")
        if child[0] == KIND_LEAF:
            self.nodes.append((path, LEAF_DOMAIN + child[3] + child[4]))
            return _tnew(Ref, (KIND_LEAF, self.version, child[2]))
        left = self.collect(child[3], depth + 1, prefix << 1)
        right = self.collect(child[4], depth + 1, (prefix << 1) | 1)
        v = self.version
        self.nodes.append((path, b"".join((
            INTERNAL_DOMAIN,
            _KIND_BYTE[left[0]], self.vbytes if left[1] == v else left[1].to_bytes(8, "big"), left[2],
            _KIND_BYTE[right[0]], self.vbytes if right[1] == v else right[1].to_bytes(8, "big"), right[2],
        ))))
        return _tnew(Ref, (KIND_INTERNAL, v, child[2]))


def apply_updates(
    root: Ref,
    version: int,
    updates: Sequence[tuple[bytes, bytes | None]],
    load: NodeLoader,
    counters: Counters | None = None,
    present: frozenset[bytes] | set[bytes] = frozenset(),
) -> TreeUpdate:
    """Applies ``updates`` ((key_hash, value_hash or None to delete), distinct key
    hashes, any order) to the tree at ``root`` and returns the new tree's root, the
    nodes to write at ``version`` and the stored nodes that the new tree no longer uses.

    ``present``: key hashes the caller knows are in the tree at ``root`` (the store knows
    which changed keys exist); the leaf of such a key is then not read back. Speed only.

    Work is O(len(updates) x depth); nodes outside the updated paths are not touched.
    """
    ups = sorted(((int.from_bytes(kh, "big"), kh, vh) for kh, vh in updates), key=_by_int)
    for i in range(1, len(ups)):
        if ups[i - 1][0] == ups[i][0]:
            raise StoreError("apply_updates: duplicate key hash")
    updater = _Updater(version, load, counters if counters is not None else Counters(), ups, present)
    new_root = updater.update(root, 0, 0, 0, len(ups))
    root_ref = updater.collect(new_root, 0, 0)
    return TreeUpdate(root_ref, updater.nodes, updater.stale)


def walk_path(root: Ref, key_hash: bytes, load: NodeLoader) -> tuple[list[bytes], LeafNode | None]:
    """Follows ``key_hash`` from ``root`` to the leaf or empty subtree on its path.

    Returns the sibling hashes met on the way (root side first) and the leaf found
    there (None for an empty subtree). The leaf may belong to another key.
    """
    ki = int.from_bytes(key_hash, "big")
    ref, depth, prefix = root, 0, 0
    siblings: list[bytes] = []
    while ref.kind != KIND_EMPTY:
        node = decode_node(load(ref.version, path_key(depth, prefix)))
        if isinstance(node, LeafNode):
            return siblings, node
        bit = (ki >> (KEY_BITS - 1 - depth)) & 1
        if bit:
            siblings.append(node.left.hash)
            ref = node.right
        else:
            siblings.append(node.right.hash)
            ref = node.left
        prefix = (prefix << 1) | bit
        depth += 1
    return siblings, None
