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


def decode_node(data: bytes) -> LeafNode | InternalNode:
    if len(data) == _LEAF_LEN and data[:1] == LEAF_DOMAIN:
        return LeafNode(bytes(data[1:33]), bytes(data[33:65]))
    if len(data) == _INTERNAL_LEN and data[:1] == INTERNAL_DOMAIN:
        return InternalNode(
            Ref.from_bytes(data[1 : 1 + _REF_LEN]), Ref.from_bytes(data[1 + _REF_LEN :])
        )
    raise StoreError("corrupt tree node in the store")


# (version, path_key) -> encoded node; raises StoreError when the node is missing.
NodeLoader = Callable[[int, bytes], bytes]


class _NewLeaf(NamedTuple):
    key_hash: bytes
    value_hash: bytes
    hash: bytes


class _NewInternal(NamedTuple):
    left: _Child
    right: _Child
    hash: bytes


_Child: TypeAlias = "Ref | _NewLeaf | _NewInternal"
# (int(key_hash), key_hash, value_hash or None for a delete)
_Update = tuple[int, bytes, bytes | None]
_by_int = itemgetter(0)


def _kind(child: _Child) -> int:
    if isinstance(child, Ref):
        return child.kind
    return KIND_LEAF if isinstance(child, _NewLeaf) else KIND_INTERNAL


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
    def __init__(self, version: int, load: NodeLoader, counters: Counters) -> None:
        self.version = version
        self.load_raw = load
        self.counters = counters
        self.nodes: list[tuple[bytes, bytes]] = []
        self.stale: list[tuple[int, bytes]] = []

    def load(self, version: int, path: bytes) -> LeafNode | InternalNode:
        self.counters.node_reads += 1
        return decode_node(self.load_raw(version, path))

    def update(self, ref: Ref, depth: int, prefix: int, ups: Sequence[_Update]) -> _Child:
        if not ups:
            return ref
        if ref.kind == KIND_EMPTY:
            return self.build(depth, prefix, [u for u in ups if u[2] is not None])
        path = path_key(depth, prefix)
        node = self.load(ref.version, path)
        self.stale.append((ref.version, path))
        if isinstance(node, LeafNode):
            merged = {u[1]: u for u in ups}
            if node.key_hash not in merged:
                kh = node.key_hash
                merged[kh] = (int.from_bytes(kh, "big"), kh, node.value_hash)
            items = sorted((u for u in merged.values() if u[2] is not None), key=_by_int)
            return self.build(depth, prefix, items)
        split = bisect_left(ups, _mid(depth, prefix), key=_by_int)
        left = self.update(node.left, depth + 1, prefix << 1, ups[:split])
        right = self.update(node.right, depth + 1, (prefix << 1) | 1, ups[split:])
        return self.join(left, right, depth, prefix)

    def build(self, depth: int, prefix: int, items: Sequence[_Update]) -> _Child:
        """A fresh subtree at (depth, prefix) holding ``items`` (sorted, no deletes)."""
        if not items:
            return EMPTY_REF
        if len(items) == 1:
            _, kh, vh = items[0]
            assert vh is not None
            self.counters.hashes += 1
            return _NewLeaf(kh, vh, compute_leaf_hash(kh, vh))
        if depth >= KEY_BITS:
            raise StoreError("two different keys have the same sha256")
        split = bisect_left(items, _mid(depth, prefix), key=_by_int)
        left = self.build(depth + 1, prefix << 1, items[:split])
        right = self.build(depth + 1, (prefix << 1) | 1, items[split:])
        self.counters.hashes += 1
        return _NewInternal(left, right, compute_internal_hash(left.hash, right.hash))

    def join(self, left: _Child, right: _Child, depth: int, prefix: int) -> _Child:
        """The canonical node at (depth, prefix) with these children."""
        lk, rk = _kind(left), _kind(right)
        if lk == KIND_EMPTY and rk == KIND_EMPTY:
            return EMPTY_REF
        if lk == KIND_EMPTY and rk == KIND_LEAF:
            return self.lift(right, depth + 1, (prefix << 1) | 1)
        if rk == KIND_EMPTY and lk == KIND_LEAF:
            return self.lift(left, depth + 1, prefix << 1)
        self.counters.hashes += 1
        return _NewInternal(left, right, compute_internal_hash(left.hash, right.hash))

    def lift(self, child: _Child, depth: int, prefix: int) -> _Child:
        """A lone leaf moves up to its parent's position (it is then a new node)."""
        if not isinstance(child, Ref):
            return child
        path = path_key(depth, prefix)
        node = self.load(child.version, path)
        if not isinstance(node, LeafNode):
            raise StoreError("corrupt tree: a leaf reference points to an internal node")
        self.stale.append((child.version, path))
        return _NewLeaf(node.key_hash, node.value_hash, child.hash)

    def collect(self, child: _Child, depth: int, prefix: int) -> Ref:
        """Assigns positions to the new nodes and queues them for writing."""
        if isinstance(child, Ref):
            return child
        path = path_key(depth, prefix)
        if isinstance(child, _NewLeaf):
            self.nodes.append((path, encode_leaf(child.key_hash, child.value_hash)))
            return Ref(KIND_LEAF, self.version, child.hash)
        left = self.collect(child.left, depth + 1, prefix << 1)
        right = self.collect(child.right, depth + 1, (prefix << 1) | 1)
        self.nodes.append((path, encode_internal(left, right)))
        return Ref(KIND_INTERNAL, self.version, child.hash)


def apply_updates(
    root: Ref,
    version: int,
    updates: Sequence[tuple[bytes, bytes | None]],
    load: NodeLoader,
    counters: Counters | None = None,
) -> TreeUpdate:
    """Applies ``updates`` ((key_hash, value_hash or None to delete), distinct key
    hashes, any order) to the tree at ``root`` and returns the new tree's root, the
    nodes to write at ``version`` and the stored nodes that the new tree no longer uses.

    Work is O(len(updates) x depth); nodes outside the updated paths are not touched.
    """
    ups = sorted(((int.from_bytes(kh, "big"), kh, vh) for kh, vh in updates), key=_by_int)
    for i in range(1, len(ups)):
        if ups[i - 1][0] == ups[i][0]:
            raise StoreError("apply_updates: duplicate key hash")
    updater = _Updater(version, load, counters if counters is not None else Counters())
    new_root = updater.update(root, 0, 0, ups)
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
