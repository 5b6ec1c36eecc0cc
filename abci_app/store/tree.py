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

Nodes are immutable and stored in *pages* of PAGE_LEVELS levels (see below), addressed by
``(version, path)``: ``version`` is the height of the commit that wrote the page, ``path`` the
bits leading to the page's root from the tree root (:func:`path_key`). An internal node stores,
for each child, its kind, the version of the child's page and its hash (:class:`Ref`), so a
reader of an old version follows page versions down from that version's root. A batch update
(:func:`apply_updates`) visits only the paths of the changed keys: it reads O(changed keys x
depth) nodes, writes new copies of the pages they are in and reports the pages it replaced as
*stale* so the store can delete them once no retained version needs them. This module does no
I/O: pages are read through a :data:`PageLoader`.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
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
        return _tnew(
            InternalNode,
            (
                _tnew(Ref, (lk, int.from_bytes(data[2:10], "big"), data[10:42])),
                _tnew(Ref, (rk, int.from_bytes(data[43:51], "big"), data[51:83])),
            ),
        )
    if n == _LEAF_LEN and data[0] == 0:
        return _tnew(LeafNode, (data[1:33], data[33:65]))
    raise StoreError("corrupt tree node in the store")


# Nodes are stored in *pages*: the tree is cut every PAGE_LEVELS levels, and a page holds the
# nodes of one subtree whose root depth is a multiple of PAGE_LEVELS, down to (not including) the
# next cut. A node at (depth, prefix) lives in the page at (depth - r, prefix >> r), r = depth %
# PAGE_LEVELS, in slot (1 << r) - 1 + (prefix mod 2**r) (heap order: 0 = the page root, the
# children of slot s are 2s + 1 and 2s + 2).
# A page is written whole: when anything in it changes, the block writes a new copy of the page
# at its own version (the untouched nodes copied byte for byte) and the old copy becomes stale.
# So a stored node's version is the version of its page: a reference to a child in the same page
# carries no information (readers use the parent's page version), one to a child that is a page
# root (the child's depth is a multiple of PAGE_LEVELS) is that page's version.
# Stored form: u8 mask of the slots present, u8 mask of those that are leaves, then the encoded
# nodes by slot (so the offset of a slot is a popcount away; pages are never decoded).
PAGE_LEVELS = 3
PAGE_SLOTS = (1 << PAGE_LEVELS) - 1  # 7: the masks fit one byte each
_LEAF_SHORTER = _INTERNAL_LEN - _LEAF_LEN


def _in_page_subtree(slot: int) -> tuple[int, ...]:
    """The slots of the subtree of ``slot`` inside its page (heap order, itself first)."""
    out, todo = [], [slot]
    while todo:
        t = todo.pop(0)
        if t < PAGE_SLOTS:
            out.append(t)
            todo += [2 * t + 1, 2 * t + 2]
    return tuple(out)


_IN_PAGE_SUBTREE = tuple(_in_page_subtree(s) for s in range(PAGE_SLOTS))
_OFFSETS: dict[int, tuple[int, ...]] = {}


def _slot_offsets(present: int, leaves: int) -> tuple[int, ...]:
    """Offsets of the 7 slots in a stored page with these masks (-1: slot empty), memoised."""
    key = (present << 8) | leaves
    offs = _OFFSETS.get(key)
    if offs is None:
        out, off = [], 2
        for slot in range(PAGE_SLOTS):
            if (present >> slot) & 1:
                out.append(off)
                off += _LEAF_LEN if (leaves >> slot) & 1 else _INTERNAL_LEN
            else:
                out.append(-1)
        offs = _OFFSETS[key] = tuple(out)
    return offs


# (version, page path_key) -> the stored page (checked by check_page); raises StoreError when the
# page is missing.
PageLoader = Callable[[int, bytes], bytes]


def page_node(page: bytes, slot: int) -> bytes | None:
    """The encoded node in ``slot`` of a stored page, None when the slot is empty."""
    present = page[0]
    if not (present >> slot) & 1:
        return None
    below = (1 << slot) - 1
    leaves = page[1]
    off = (
        2
        + _INTERNAL_LEN * (present & below).bit_count()
        - _LEAF_SHORTER * (leaves & below).bit_count()
    )
    return page[off : off + (_LEAF_LEN if (leaves >> slot) & 1 else _INTERNAL_LEN)]


def encode_page(entries: list[tuple[int, bytes]]) -> bytes:
    """A page's stored form from its (slot, encoded node) entries."""
    entries.sort(key=_by_int)
    present = leaves = 0
    for slot, node in entries:
        present |= 1 << slot
        if node[0] == 0:
            leaves |= 1 << slot
    return bytes((present, leaves)) + b"".join([node for _, node in entries])


def check_page(page: bytes) -> bytes:
    """Returns ``page`` if it is a well-formed stored page; raises StoreError otherwise."""
    n = len(page)
    if n < 2 or not page[0] & 1 or page[0] >> PAGE_SLOTS or page[1] & ~page[0]:
        raise StoreError("corrupt tree page in the store")
    present, leaves = page[0], page[1]
    if n != 2 + _INTERNAL_LEN * present.bit_count() - _LEAF_SHORTER * leaves.bit_count():
        raise StoreError("corrupt tree page in the store")
    off = 2
    for slot in range(PAGE_SLOTS):
        if (present >> slot) & 1:
            leaf = (leaves >> slot) & 1
            if page[off] != (0 if leaf else 1):
                raise StoreError("corrupt tree page in the store")
            off += _LEAF_LEN if leaf else _INTERNAL_LEN
    return page


# A subtree during an update is either a stored ``Ref`` (kind, version of its page, hash) or a
# new node, a plain tuple whose version slot is None so both read alike (child[0] kind, child[2]
# hash):
#   new leaf:     (KIND_LEAF, None, hash, key_hash, value_hash)
#   new internal: (KIND_INTERNAL, None, hash, left child, right child, old page or None)
# where ``old page`` is the stored page the replaced node was in (its stored children in the
# same page are copied from there; a node made by ``build`` has no stored children).
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
    pages: list[tuple[bytes, bytes]] = field(default_factory=list)  # (page path, page) to write
    stale: list[tuple[int, bytes]] = field(default_factory=list)  # (version, page path) replaced
    nodes_written: int = 0  # nodes in the written pages (new and copied)


class _Updater:
    """One batch update. Subtrees are visited once, children by index ranges of the sorted
    updates (no copies); the hot paths use plain tuples and inline sha256. Inside a page the
    stored page and the slot are passed down, so only page roots compute a path."""

    def __init__(
        self,
        version: int,
        load: PageLoader,
        counters: Counters,
        ups: list[_Update],
        present: frozenset[bytes] | set[bytes],
        in_place: bool = True,
    ) -> None:
        self.version = version
        self.in_place = in_place
        self.vbytes = version.to_bytes(8, "big")
        self.load_page = load
        self.counters = counters
        self.ups = ups
        self.present = present
        self.out: list[tuple[bytes, list[tuple[int, bytes]]]] = []  # new pages: path, entries
        self.done: list[tuple[bytes, bytes]] = []  # new pages already encoded: path, page
        self.stale: list[tuple[int, bytes]] = []

    def node(self, page: bytes, slot: int, version: int) -> bytes:
        raw = page_node(page, slot)
        if raw is None:
            raise StoreError(f"state database is corrupt: tree node missing at version {version}")
        self.counters.node_reads += 1
        return raw

    def update(
        self, ref: _Child, depth: int, prefix: int, lo: int, hi: int, page: bytes | None, slot: int
    ) -> _Child:
        """``page``/``slot``: where ``ref``'s node is stored when it is in its parent's page;
        None at a page root (the page is then read here, and reported stale)."""
        if lo == hi:
            return ref
        ups = self.ups
        kind = ref[0]
        if kind == KIND_EMPTY:
            return self.build(depth, prefix, [u for u in ups[lo:hi] if u[2] is not None])
        pkey = b""
        if page is None:  # a page root: its page copy is replaced
            nb = (depth + 7) >> 3
            pkey = _DEPTH_BYTES[depth] + (prefix << (nb * 8 - depth)).to_bytes(nb, "big")
            if kind == KIND_INTERNAL and self.in_place:
                done = self.page_in_place(ref, depth, prefix, lo, hi, pkey)
                if done is not None:
                    return done
            self.stale.append((ref[1], pkey))
        if kind == KIND_LEAF:
            return self.build(depth, prefix, self.leaf_items(ref, lo, hi, page, slot, pkey))
        # an internal node, read and decoded inline (the hot path: one per level of every
        # changed path; page_node inlined)
        if page is None:
            page, slot = self.load_page(ref[1], pkey), 0
        mask = page[0]
        if not (mask >> slot) & 1:
            raise StoreError(f"state database is corrupt: tree node missing at version {ref[1]}")
        below = (1 << slot) - 1
        off = (
            2
            + _INTERNAL_LEN * (mask & below).bit_count()
            - _LEAF_SHORTER * (page[1] & below).bit_count()
        )
        raw = page[off : off + _INTERNAL_LEN]
        self.counters.node_reads += 1
        if raw[0] != 1 or len(raw) != _INTERNAL_LEN:
            raise StoreError("corrupt tree: an internal reference points to something else")
        lk, rk = raw[1], raw[42]
        if lk > KIND_INTERNAL or rk > KIND_INTERNAL:
            raise StoreError("corrupt node reference in the store")
        split = bisect_left(ups, ((prefix << 1) | 1) << (KEY_BITS - depth - 1), lo, hi, key=_by_int)
        d1, p2 = depth + 1, prefix << 1
        if d1 % PAGE_LEVELS:  # children in the same page
            lv = rv = ref[1]
            cpage, ls = page, 2 * slot + 1
        else:
            lv, rv = int.from_bytes(raw[2:10], "big"), int.from_bytes(raw[43:51], "big")
            cpage, ls = None, -1
        left = (lk, lv, raw[10:42])
        if split > lo:
            left = self.update(left, d1, p2, lo, split, cpage, ls)
        right = (rk, rv, raw[51:83])
        if hi > split:
            right = self.update(right, d1, p2 | 1, split, hi, cpage, ls + 1)
        # the canonical node at (depth, prefix) with these children
        lk, rk = left[0], right[0]
        if lk == KIND_EMPTY:
            if rk == KIND_EMPTY:
                return EMPTY_REF
            if rk == KIND_LEAF:
                return self.lift(right, d1, p2 | 1, cpage, ls + 1)
        elif rk == KIND_EMPTY and lk == KIND_LEAF:
            return self.lift(left, d1, p2, cpage, ls)
        self.counters.hashes += 1
        return (
            KIND_INTERNAL,
            None,
            _sha256(INTERNAL_DOMAIN + left[2] + right[2]).digest(),
            left,
            right,
            page,
        )

    def leaf_items(
        self, ref: _Child, lo: int, hi: int, page: bytes | None, slot: int, pkey: bytes
    ) -> list[_Update]:
        """The keys of the subtree that is the stored leaf ``ref`` after ``ups[lo:hi]`` (sorted,
        no deletes): the leaf's own key unless an update replaces or deletes it. ``page`` None:
        the leaf is a page of its own, at ``pkey``."""
        ups = self.ups
        present = self.present
        if any(ups[i][1] in present for i in range(lo, hi)):
            # A subtree that is one leaf holds one key: a key known to be in the tree whose
            # update reaches this leaf is the leaf's own key, so the leaf need not be read.
            return [u for u in ups[lo:hi] if u[2] is not None]
        if page is None:
            page, slot = self.load_page(ref[1], pkey), 0
        raw = self.node(page, slot, ref[1])
        if raw[0] != 0:
            raise StoreError("corrupt tree: a leaf reference points to an internal node")
        merged = {u[1]: u for u in ups[lo:hi]}
        kh = raw[1:33]
        if kh not in merged:
            merged[kh] = (int.from_bytes(kh, "big"), kh, raw[33:65])
        return sorted((u for u in merged.values() if u[2] is not None), key=_by_int)

    def page_in_place(
        self, ref: _Child, depth: int, prefix: int, lo: int, hi: int, pkey: bytes
    ) -> _Child | None:
        """The fast path for a page whose shape the updates do not change (the common case:
        they pass through its internal nodes, or rewrite a leaf's value): the new copy is the
        stored page with the changed hashes and versions overwritten in place, written at once
        (no node tuples, no second pass). Returns the new page root as a stored ``Ref`` tuple at
        this version, or None, having undone everything, when the shape would change (a key
        inserted or deleted inside this page, or a child page that empties or becomes a lone
        leaf): the caller then takes the general path."""
        counters = self.counters
        mark = (len(self.out), len(self.done), len(self.stale), counters.hashes,
                counters.node_reads)  # fmt: skip
        page = self.load_page(ref[1], pkey)
        buf = bytearray(page)
        offs = _slot_offsets(page[0], page[1])
        h = self.slot_in_place(buf, page, offs, ref[1].to_bytes(8, "big"), 0, depth, prefix, lo, hi)
        if h is None:
            del self.out[mark[0] :], self.done[mark[1] :], self.stale[mark[2] :]
            counters.hashes, counters.node_reads = mark[3], mark[4]
            return None
        self.stale.append((ref[1], pkey))
        self.done.append((pkey, bytes(buf)))
        return _tnew(Ref, (KIND_INTERNAL, self.version, h))

    def slot_in_place(
        self,
        buf: bytearray,
        page: bytes,
        offs: tuple[int, ...],
        ovb: bytes,
        slot: int,
        depth: int,
        prefix: int,
        lo: int,
        hi: int,
    ) -> bytes | None:
        """Updates the node in ``slot`` of the page being rewritten in ``buf`` (shape kept);
        returns its new hash, or None when the shape would change. ``ovb``: the stored page's
        version (u64), which the general path writes into the empty references it passes."""
        if hi - lo == 1:
            return self.one_in_place(buf, page, offs, ovb, slot, depth, prefix, lo)
        off = offs[slot]
        if off < 0:
            raise StoreError("state database is corrupt: tree node missing in its page")
        ups = self.ups
        if page[off] == 0:  # a leaf in this page: only a rewrite of its own key keeps the shape
            if hi - lo != 1:
                return None
            _, kh, vh = ups[lo]
            if vh is None or page[off + 1 : off + 33] != kh:
                return None
            buf[off + 33 : off + 65] = vh
            self.counters.hashes += 1
            self.counters.node_reads += 1
            return _sha256(LEAF_DOMAIN + kh + vh).digest()
        self.counters.node_reads += 1
        if page[off] != 1:
            raise StoreError("corrupt tree: an internal reference points to something else")
        lk, rk = page[off + 1], page[off + 42]
        if lk > KIND_INTERNAL or rk > KIND_INTERNAL:
            raise StoreError("corrupt node reference in the store")
        split = bisect_left(ups, ((prefix << 1) | 1) << (KEY_BITS - depth - 1), lo, hi, key=_by_int)
        d1, p2 = depth + 1, prefix << 1
        vb = self.vbytes
        lh = rh = None
        if d1 % PAGE_LEVELS:  # children in this page: references carry this page's version
            if split > lo:
                if lk == KIND_EMPTY:
                    return None
                lh = self.slot_in_place(buf, page, offs, ovb, 2 * slot + 1, d1, p2, lo, split)
                if lh is None:
                    return None
            if hi > split:
                if rk == KIND_EMPTY:
                    return None
                rh = self.slot_in_place(buf, page, offs, ovb, 2 * slot + 2, d1, p2 | 1, split, hi)
                if rh is None:
                    return None
            buf[off + 2 : off + 10] = vb if lk else ovb
            buf[off + 43 : off + 51] = vb if rk else ovb
        else:  # children are page roots: updated by the general path, kept by reference
            hashes = self.page_roots_in_place(buf, page, off, d1, p2, lo, split, hi)
            if hashes is None:
                return None
            lh, rh = hashes
        if lh is None:
            lh = page[off + 10 : off + 42]
        else:
            buf[off + 10 : off + 42] = lh
        if rh is None:
            rh = page[off + 51 : off + 83]
        else:
            buf[off + 51 : off + 83] = rh
        self.counters.hashes += 1
        return _sha256(INTERNAL_DOMAIN + lh + rh).digest()

    def page_roots_in_place(
        self,
        buf: bytearray,
        page: bytes,
        off: int,
        d1: int,
        p2: int,
        lo: int,
        split: int,
        hi: int,
    ) -> tuple[bytes | None, bytes | None] | None:
        """:meth:`slot_in_place` for the internal node at ``off`` whose children (at depth
        ``d1``, prefixes ``p2`` and ``p2 | 1``) are page roots: the general path updates them
        (``ups[lo:split]`` left, ``ups[split:hi]`` right) and the node keeps them by reference,
        rewritten in ``buf``. Returns the new (left, right) hashes (None: that child unchanged),
        or None when the shape would change."""
        lk, rk = page[off + 1], page[off + 42]
        lnew = rnew = None
        if split > lo:
            lv = int.from_bytes(page[off + 2 : off + 10], "big")
            lnew = self.update((lk, lv, page[off + 10 : off + 42]), d1, p2, lo, split, None, -1)
            lk = lnew[0]
        if hi > split:
            rv = int.from_bytes(page[off + 43 : off + 51], "big")
            rnew = self.update((rk, rv, page[off + 51 : off + 83]), d1, p2 | 1, split, hi, None, -1)
            rk = rnew[0]
        # the canonical node here would not be an internal one (a leaf moves up)
        if (lk == KIND_EMPTY and rk != KIND_INTERNAL) or (rk == KIND_EMPTY and lk != KIND_INTERNAL):
            return None
        lh = rh = None
        if lnew is not None:
            if lnew[1] is None:
                lnew = self.collect(lnew, d1, p2, None, 0)
            buf[off + 1 : off + 42] = _KIND_BYTE[lk] + lnew[1].to_bytes(8, "big") + lnew[2]
            lh = lnew[2]
        if rnew is not None:
            if rnew[1] is None:
                rnew = self.collect(rnew, d1, p2 | 1, None, 0)
            buf[off + 42 : off + 83] = _KIND_BYTE[rk] + rnew[1].to_bytes(8, "big") + rnew[2]
            rh = rnew[2]
        return lh, rh

    def one_in_place(
        self,
        buf: bytearray,
        page: bytes,
        offs: tuple[int, ...],
        ovb: bytes,
        slot: int,
        depth: int,
        prefix: int,
        i: int,
    ) -> bytes | None:
        """:meth:`slot_in_place` for one update (most of a path below the top levels): down the
        page in a loop, then the hashes back up (the same bytes and counts)."""
        ki, kh, vh = self.ups[i]
        counters = self.counters
        vb = self.vbytes
        # the internal nodes passed: (offset of the changed child hash, bytes before it in the
        # node's hash input, bytes after it)
        path: list[tuple[int, bytes, bytes]] = []
        while True:
            off = offs[slot]
            if off < 0:
                raise StoreError("state database is corrupt: tree node missing in its page")
            counters.node_reads += 1
            kind = page[off]
            if kind == 0:  # a leaf: only a rewrite of its own key keeps the shape
                if vh is None or page[off + 1 : off + 33] != kh:
                    return None
                buf[off + 33 : off + 65] = vh
                h = _sha256(LEAF_DOMAIN + kh + vh).digest()
                break
            if kind != 1:
                raise StoreError("corrupt tree: an internal reference points to something else")
            lk, rk = page[off + 1], page[off + 42]
            if lk > KIND_INTERNAL or rk > KIND_INTERNAL:
                raise StoreError("corrupt node reference in the store")
            bit = (ki >> (KEY_BITS - 1 - depth)) & 1
            depth += 1
            prefix = (prefix << 1) | bit
            if depth % PAGE_LEVELS:  # the child is in this page
                if (rk if bit else lk) == KIND_EMPTY:
                    return None
                buf[off + 2 : off + 10] = vb if lk else ovb
                buf[off + 43 : off + 51] = vb if rk else ovb
                # where the new child hash goes, and the sibling's hash (unchanged)
                if bit:
                    path.append((off + 51, INTERNAL_DOMAIN + page[off + 10 : off + 42], b""))
                else:
                    path.append((off + 10, INTERNAL_DOMAIN, page[off + 51 : off + 83]))
                slot = 2 * slot + 1 + bit
                continue
            # the child is a page root: the general path updates it, kept here by reference
            a = off + 42 if bit else off + 1  # the changed reference
            new = self.update(
                (page[a], int.from_bytes(page[a + 1 : a + 9], "big"), page[a + 9 : a + 41]),
                depth, prefix, i, i + 1, None, -1,
            )  # fmt: skip
            nk, other = new[0], (lk if bit else rk)
            if (nk == KIND_EMPTY and other != KIND_INTERNAL) or (
                other == KIND_EMPTY and nk != KIND_INTERNAL
            ):
                return None  # the node here would not be an internal one (a leaf moves up)
            if new[1] is None:
                new = self.collect(new, depth, prefix, None, 0)
            buf[a : a + 41] = _KIND_BYTE[nk] + new[1].to_bytes(8, "big") + new[2]
            h = _sha256(
                INTERNAL_DOMAIN + buf[off + 10 : off + 42] + buf[off + 51 : off + 83]
            ).digest()
            break
        for at, before, after in reversed(path):
            buf[at : at + 32] = h
            h = _sha256(before + h + after).digest()
        counters.hashes += len(path) + 1
        return h

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
        return (
            KIND_INTERNAL,
            None,
            _sha256(INTERNAL_DOMAIN + left[2] + right[2]).digest(),
            left,
            right,
            None,
        )

    def lift(self, child: _Child, depth: int, prefix: int, page: bytes | None, slot: int) -> _Child:
        """A lone leaf moves up to its parent's position (it is then a new node)."""
        if child[1] is None:
            return child
        if page is None:  # the leaf was a page of its own
            pkey = path_key(depth, prefix)
            self.stale.append((child[1], pkey))
            page, slot = self.load_page(child[1], pkey), 0
        raw = self.node(page, slot, child[1])
        if raw[0] != 0:
            raise StoreError("corrupt tree: a leaf reference points to an internal node")
        return (KIND_LEAF, None, child[2], raw[1:33], raw[33:65])

    def collect(
        self, child: _Child, depth: int, prefix: int, out: list[tuple[int, bytes]] | None, slot: int
    ) -> Ref:
        """Assigns positions to the new node ``child`` and its new descendants and queues them
        for writing, with a copy of every untouched node of the pages they are in.
        ``out``/``slot``: the new page this position is in, None at a page root."""
        if out is None:
            nb = (depth + 7) >> 3
            path = _DEPTH_BYTES[depth] + (prefix << (nb * 8 - depth)).to_bytes(nb, "big")
            out, slot = [], 0
            self.out.append((path, out))
        v = self.version
        if child[0] == KIND_LEAF:
            out.append((slot, LEAF_DOMAIN + child[3] + child[4]))
            return _tnew(Ref, (KIND_LEAF, v, child[2]))
        d1 = depth + 1
        if d1 % PAGE_LEVELS:
            cout, ls = out, 2 * slot + 1
        else:
            cout, ls = None, -1
        left, right = child[3], child[4]
        # a stored child is kept as is when it is a page root (or empty), copied otherwise
        if left[1] is None:
            left = self.collect(left, d1, prefix << 1, cout, ls)
        elif cout is not None and left[0] != KIND_EMPTY:
            left = self.copy(left, child[5], out, ls)
        if right[1] is None:
            right = self.collect(right, d1, (prefix << 1) | 1, cout, ls + 1)
        elif cout is not None and right[0] != KIND_EMPTY:
            right = self.copy(right, child[5], out, ls + 1)
        out.append(
            (
                slot,
                b"".join(
                    (
                        INTERNAL_DOMAIN,
                        _KIND_BYTE[left[0]],
                        self.vbytes if left[1] == v else left[1].to_bytes(8, "big"),
                        left[2],
                        _KIND_BYTE[right[0]],
                        self.vbytes if right[1] == v else right[1].to_bytes(8, "big"),
                        right[2],
                    )
                ),
            )
        )
        return _tnew(Ref, (KIND_INTERNAL, v, child[2]))

    def copy(self, child: _Child, old: bytes, out: list[tuple[int, bytes]], slot: int) -> Ref:
        """Copies the stored node ``child`` (in ``slot`` of the stored page ``old``) and its
        descendants in that page into the new copy ``out`` of the page, byte for byte (in-page
        references carry no version, so the bytes stay valid)."""
        mask, leaves = old[0], old[1]
        if not (mask >> slot) & 1:
            raise StoreError(f"state database is corrupt: tree node missing at version {child[1]}")
        for t in _IN_PAGE_SUBTREE[slot]:
            if (mask >> t) & 1:
                below = (1 << t) - 1
                off = (
                    2
                    + _INTERNAL_LEN * (mask & below).bit_count()
                    - _LEAF_SHORTER * (leaves & below).bit_count()
                )
                out.append(
                    (t, old[off : off + (_LEAF_LEN if (leaves >> t) & 1 else _INTERNAL_LEN)])
                )
                self.counters.node_reads += 1
        return _tnew(Ref, (child[0], self.version, child[2]))


def apply_updates(
    root: Ref,
    version: int,
    updates: Sequence[tuple[bytes, bytes | None]],
    load: PageLoader,
    counters: Counters | None = None,
    present: frozenset[bytes] | set[bytes] = frozenset(),
    in_place: bool = True,
) -> TreeUpdate:
    """Applies ``updates`` ((key_hash, value_hash or None to delete), distinct key
    hashes, any order) to the tree at ``root`` and returns the new tree's root, the
    pages to write at ``version`` and the stored pages that the new tree no longer uses.

    ``present``: key hashes the caller knows are in the tree at ``root`` (the store knows
    which changed keys exist); the leaf of such a key is then not read back. Speed only.
    ``in_place=False``: every page by the general path (tests check that both write the same).

    Work is O(len(updates) x depth); pages outside the updated paths are not touched.
    """
    ups = sorted(((int.from_bytes(kh, "big"), kh, vh) for kh, vh in updates), key=_by_int)
    for i in range(1, len(ups)):
        if ups[i - 1][0] == ups[i][0]:
            raise StoreError("apply_updates: duplicate key hash")
    updater = _Updater(
        version, load, counters if counters is not None else Counters(), ups, present, in_place
    )
    new_root = updater.update(root, 0, 0, 0, len(ups), None, 0)
    if new_root[1] is None:
        root_ref = updater.collect(new_root, 0, 0, None, 0)
    else:  # nothing changed (or the tree is empty)
        root_ref = _tnew(Ref, tuple(new_root[:3]))
    pages = [(pkey, encode_page(entries)) for pkey, entries in updater.out]
    written = sum(len(entries) for _, entries in updater.out)
    pages += updater.done
    written += sum(page[0].bit_count() for _, page in updater.done)
    return TreeUpdate(root_ref, pages, updater.stale, written)


def walk_path(root: Ref, key_hash: bytes, load: PageLoader) -> tuple[list[bytes], LeafNode | None]:
    """Follows ``key_hash`` from ``root`` to the leaf or empty subtree on its path.

    Returns the sibling hashes met on the way (root side first) and the leaf found
    there (None for an empty subtree). The leaf may belong to another key.
    """
    ki = int.from_bytes(key_hash, "big")
    kind, version, depth, prefix = root.kind, root.version, 0, 0
    siblings: list[bytes] = []
    page = b""
    while kind != KIND_EMPTY:
        r = depth % PAGE_LEVELS
        if r == 0:
            page = load(version, path_key(depth, prefix))
        raw = page_node(page, (1 << r) - 1 + (prefix & ((1 << r) - 1)))
        if raw is None:
            raise StoreError(f"state database is corrupt: tree node missing at version {version}")
        node = decode_node(raw)
        if isinstance(node, LeafNode):
            return siblings, node
        bit = (ki >> (KEY_BITS - 1 - depth)) & 1
        sibling, ref = (node.left, node.right) if bit else (node.right, node.left)
        siblings.append(sibling.hash)
        kind = ref.kind
        if (depth + 1) % PAGE_LEVELS == 0:
            version = ref.version
        prefix = (prefix << 1) | bit
        depth += 1
    return siblings, None


# -- subtrees from their leaves (state-sync chunks: abci_app/snapshots.py) -----------------------


def subtree_summary(leaves: Sequence[tuple[bytes, bytes]], depth: int) -> tuple[int, bytes]:
    """(kind, hash) of the compact subtree holding exactly ``leaves``, at a position ``depth``
    bits down: ``leaves`` are (key hash, value hash) pairs in strictly ascending key-hash order
    that share their first ``depth`` bits (the caller checks both). No key: (KIND_EMPTY,
    EMPTY_HASH); one: (KIND_LEAF, its leaf hash), wherever it sits below; two or more:
    (KIND_INTERNAL, the internal hash) by the rules in this module's docstring."""
    n = len(leaves)
    if n == 0:
        return KIND_EMPTY, EMPTY_HASH
    if n == 1:
        return KIND_LEAF, compute_leaf_hash(*leaves[0])
    ints = [int.from_bytes(kh, "big") for kh, _ in leaves]
    return KIND_INTERNAL, _internal_of(leaves, ints, 0, n, depth)


def _internal_of(
    leaves: Sequence[tuple[bytes, bytes]], ints: list[int], lo: int, hi: int, depth: int
) -> bytes:
    """Hash of the internal node over ``leaves[lo:hi]`` (two or more) at ``depth``."""
    # the keys share their first ``depth`` bits; those whose next bit is 1 come last
    bit = 1 << (KEY_BITS - 1 - depth)
    split = bisect_left(ints, (ints[lo] & ~((bit << 1) - 1)) | bit, lo, hi)
    children = []
    for a, b in ((lo, split), (split, hi)):
        if b - a == 0:
            children.append(EMPTY_HASH)
        elif b - a == 1:
            children.append(compute_leaf_hash(*leaves[a]))
        else:
            children.append(_internal_of(leaves, ints, a, b, depth + 1))
    return compute_internal_hash(children[0], children[1])


def fold_summaries(summaries: Sequence[tuple[int, bytes]]) -> tuple[int, bytes]:
    """(kind, hash) of the tree whose 2^d subtrees at depth d, left to right, are
    ``summaries``: siblings combine as the compact form says (two empty: empty; one leaf beside
    an empty subtree: that leaf, moved up; anything else: an internal node). The root hash of the
    whole state when ``summaries`` cover depth d."""
    level = list(summaries)
    if not level or len(level) & (len(level) - 1):
        raise ValueError("fold_summaries needs a power-of-two number of subtrees")
    while len(level) > 1:
        nxt = []
        for (lk, lh), (rk, rh) in zip(level[0::2], level[1::2], strict=True):
            if lk == KIND_EMPTY and rk != KIND_INTERNAL:
                nxt.append((rk, rh))
            elif rk == KIND_EMPTY and lk == KIND_LEAF:
                nxt.append((lk, lh))
            else:
                nxt.append((KIND_INTERNAL, compute_internal_hash(lh, rh)))
        level = nxt
    return level[0]


# -- a whole tree from its sorted leaves, streamed (state-sync restore) ---------------------------


class _SortedBuilder:
    """:func:`build_sorted`'s state: the next two leaves of the input (so a subtree knows whether
    it holds none, one or more), and the pages built so far are handed to ``emit``."""

    def __init__(
        self,
        version: int,
        leaves: Iterable[tuple[bytes, bytes]],
        emit: Callable[[bytes, bytes], None],
    ) -> None:
        self.vbytes = version.to_bytes(8, "big")
        self.emit = emit
        self.it = iter(leaves)
        self.last = -1
        self.nodes = 0
        self.a = self.pull()
        self.b = self.pull() if self.a is not None else None

    def pull(self) -> tuple[int, bytes, bytes] | None:
        nxt = next(self.it, None)
        if nxt is None:
            return None
        kh, vh = nxt
        if len(kh) != HASH_LEN or len(vh) != HASH_LEN:
            raise StoreError("build_sorted: key and value hashes are 32 bytes")
        ki = int.from_bytes(kh, "big")
        if ki <= self.last:
            raise StoreError("build_sorted: leaves must come in strictly ascending key-hash order")
        self.last = ki
        return ki, kh, vh

    def sub(
        self, depth: int, prefix: int, out: list[tuple[int, bytes]] | None, slot: int
    ) -> tuple[int, bytes]:
        """(kind, hash) of the subtree at (depth, prefix): it holds the next leaves whose first
        ``depth`` bits are ``prefix``; its nodes go into ``out`` (the page being built) from
        ``slot`` on, or into a page of their own at a page root (``out`` None)."""
        a, shift = self.a, KEY_BITS - depth
        if a is None or a[0] >> shift != prefix:
            return KIND_EMPTY, EMPTY_HASH
        root = out is None
        if out is None:
            out, slot = [], 0
        b = self.b
        if b is None or b[0] >> shift != prefix:  # alone here: its leaf
            self.a, self.b = b, (self.pull() if b is not None else None)
            node = LEAF_DOMAIN + a[1] + a[2]
            kind, h = KIND_LEAF, _sha256(node).digest()
        else:
            if depth >= KEY_BITS:  # unreachable with strictly ascending hashes
                raise StoreError("two different keys have the same sha256")
            d1 = depth + 1
            cout, ls = (out, 2 * slot + 1) if d1 % PAGE_LEVELS else (None, -1)
            lk, lh = self.sub(d1, prefix << 1, cout, ls)
            rk, rh = self.sub(d1, (prefix << 1) | 1, cout, ls + 1)
            vb, zero = self.vbytes, bytes(8)
            node = b"".join(
                (
                    INTERNAL_DOMAIN,
                    _KIND_BYTE[lk],
                    vb if lk else zero,
                    lh,
                    _KIND_BYTE[rk],
                    vb if rk else zero,
                    rh,
                )
            )
            kind, h = KIND_INTERNAL, _sha256(INTERNAL_DOMAIN + lh + rh).digest()
        out.append((slot, node))
        self.nodes += 1
        if root:
            self.emit(path_key(depth, prefix), encode_page(out))
        return kind, h


def build_sorted(
    version: int,
    leaves: Iterable[tuple[bytes, bytes]],
    emit: Callable[[bytes, bytes], None],
) -> tuple[Ref, int]:
    """The tree holding ``leaves`` ((key hash, value hash), strictly ascending key hash; a
    StoreError otherwise), every node written at ``version``, built in one pass over the input:
    each page is handed to ``emit(path, page)`` as soon as it is complete (children before their
    parents), so memory stays O(depth) however many leaves there are. Returns (root, nodes
    written). Byte for byte the pages :func:`apply_updates` writes for the same leaves onto the
    empty tree (tests check it); what the store's bulk restore uses instead of one
    ``apply_updates`` over the whole state, whose new nodes all stay in memory until written."""
    b = _SortedBuilder(version, leaves, emit)
    kind, h = b.sub(0, 0, None, 0)
    if b.a is not None:  # unreachable: the root subtree takes every leaf
        raise StoreError("build_sorted: leaves left over")
    return (EMPTY_REF if kind == KIND_EMPTY else Ref(kind, version, h)), b.nodes
