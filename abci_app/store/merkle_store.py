"""MerkleStore: versioned key-value state persisted in SQLite, with a Merkle root.

Tables (all keys and values are BLOBs, compared bytewise by SQLite):

    meta        one row: schema, height, app_hash, earliest (oldest readable height)
    roots       version -> Ref of that version's root (one row per retained height)
    pages       (version, path) -> a page of tree nodes (PAGE_LEVELS levels, see tree.py)
    stale_pages since -> the pages (version, path) that are not in the tree from height
                `since` on, packed in one row per block; deleted once `since` <= earliest
    kv_history  (key, version) -> value written at `version` (NULL = deleted there); the
                newest row of a key is its latest value (O(log n) point reads and ordered
                range scans, at any retained height)
    stale_kv    since -> the history rows (key, version) superseded at `since`, packed in
                one row per block (a delete
                supersedes its own tombstone); deleted once `since` <= earliest

`stage` reads only; `commit` writes one block in one SQLite transaction (WAL,
synchronous=FULL), so a crash leaves exactly the previous or the new version.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import islice
from typing import Self

from .errors import StoreError, VersionNotAvailable, check_bytes
from .proof import Proof
from .restore import restore_rows
from .schema import open_schema
from .stale import pack_stale_kv, pack_stale_nodes, prune
from .tree import (
    Counters,
    LeafNode,
    Ref,
    TreeUpdate,
    apply_updates,
    check_page,
    hash_key,
    hash_value,
    walk_path,
)

_PAGE = 512  # rows fetched per query while iterating
_BATCH = 500  # keys looked up per query while staging


@dataclass(frozen=True)
class StoreStats:
    """Work done by the last stage (and commit, once committed). Counts, not time."""

    height: int = 0
    changed_keys: int = 0  # keys whose value actually changed
    hashes: int = 0  # sha256 calls (key and value hashes included)
    node_reads: int = 0  # tree nodes read (from the page cache or the database)
    nodes_written: int = 0  # tree nodes in the pages written (new ones and copies)
    pages_written: int = 0  # page rows written by the commit
    pages_staled: int = 0  # stored pages this block replaced
    pages_pruned: int = 0  # page rows deleted by pruning in the commit
    history_pruned: int = 0  # kv_history rows deleted by pruning in the commit


@dataclass(frozen=True)
class _Staged:
    height: int
    tree: TreeUpdate
    changes: tuple[tuple[bytes, bytes | None], ...]  # effective changes, sorted by key
    kv_stale: tuple[tuple[bytes, int], ...]  # (key, version) superseded at `height`
    stats: StoreStats


class MerkleStore:
    """Versioned key-value state whose app hash is a sparse Merkle root.

    Reads (`get`, `iterate`, `get_at`, `iterate_at`, `prove`) see committed state
    only. A block is applied in two steps: `stage(height, changes)` computes the new
    root without writing; `commit()` persists it atomically and prunes heights older
    than the last `keep_recent`. Thread-safe (one lock); one process per database.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None,
        *,
        keep_recent: int = 100,
        node_cache: int = 1_000_000,
    ) -> None:
        """Opens (or creates) the store. `keep_recent` >= 1 heights stay readable;
        `node_cache` tree pages (~400 bytes each) are kept in memory."""
        if not isinstance(keep_recent, int) or keep_recent < 1:
            raise StoreError(f"keep_recent must be an integer >= 1, got {keep_recent!r}")
        self._keep_recent = keep_recent
        # page path -> u64 version || page, of the latest tree (and of older versions until the
        # page is rewritten). Pages are immutable per (version, path), so a hit whose version
        # matches is always right; only committed pages enter (after COMMIT); when full, the
        # entries written or read longest ago go first (the top levels, rewritten by every
        # block, stay). A page that is one leaf is not cached: the store reads it only when a
        # new key lands on it, a delete lifts it, or for proofs.
        self._cache: dict[bytes, bytes] = {}
        self._cache_size = max(0, node_cache)
        self._lock = threading.RLock()
        self._path = None if path is None else os.fspath(path)
        target = ":memory:" if self._path is None else self._path
        try:
            self._db = sqlite3.connect(target, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the state database {target!r}: {exc}") from exc
        try:
            self._open()
        except BaseException:
            self._db.close()
            raise
        self._staged: _Staged | None = None
        self._stats = StoreStats(height=self._height)

    def _open(self) -> None:
        height, app_hash, earliest = open_schema(self._db, self._path)
        root = self._root_ref(height)
        if root.hash != app_hash:
            raise StoreError(
                f"state database is corrupt: root of height {height} does not match its app hash"
            )
        self._height: int = height
        self._root: Ref = root
        self._earliest: int = max(earliest, height - self._keep_recent + 1)

    # -- committed state ---------------------------------------------------------------

    @property
    def height(self) -> int:
        """Last committed height; 0 when nothing was committed."""
        return self._height

    @property
    def app_hash(self) -> bytes:
        """Merkle root at `height` (32 zero bytes for the empty state)."""
        return self._root.hash

    @property
    def keep_recent(self) -> int:
        return self._keep_recent

    @property
    def earliest_height(self) -> int:
        """Oldest height that `get_at`, `iterate_at` and `prove` can still read."""
        return self._earliest

    @property
    def stats(self) -> StoreStats:
        """Work counters of the last stage/commit (for tests and benchmarks)."""
        return self._stats

    def root_at(self, height: int) -> bytes:
        """The app hash committed at `height`; raises VersionNotAvailable."""
        with self._lock:
            self._check_height(height)
            return self._root_ref(height).hash

    def get(self, key: bytes) -> bytes | None:
        key = check_bytes("key", key)
        with self._lock:
            row = self._db.execute(
                "SELECT value FROM kv_history WHERE key = ? ORDER BY version DESC LIMIT 1", (key,)
            ).fetchone()
        return None if row is None or row[0] is None else bytes(row[0])

    def iterate(self, start: bytes, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Latest committed (key, value) pairs with start <= key < end, ascending.

        Rows are read in pages; a commit made while iterating may show through.
        """
        return self._iterate(None, check_bytes("start", start), _end(end))

    def get_at(self, key: bytes, height: int) -> bytes | None:
        """Value of `key` committed at `height`; raises VersionNotAvailable."""
        key = check_bytes("key", key)
        with self._lock:
            self._check_height(height)
            if height == self._height:
                return self.get(key)
            row = self._db.execute(
                "SELECT value FROM kv_history WHERE key = ? AND version <= ? "
                "ORDER BY version DESC LIMIT 1",
                (key, height),
            ).fetchone()
        return None if row is None or row[0] is None else bytes(row[0])

    def iterate_at(
        self, height: int, start: bytes, end: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) pairs at `height` with start <= key < end, ascending."""
        with self._lock:
            self._check_height(height)
        return self._iterate(height, check_bytes("start", start), _end(end))

    def _iterate(
        self, height: int | None, start: bytes, end: bytes | None
    ) -> Iterator[tuple[bytes, bytes]]:
        lower_op = ">="
        while True:
            upper = "" if end is None else " AND key < ?"
            bounds: tuple[bytes, ...] = (start,) if end is None else (start, end)
            with self._lock:
                if height is not None:
                    self._check_height(height)
                # SQLite: with one max() aggregate, bare columns come from the max row.
                rows = self._db.execute(
                    f"SELECT key, value, max(version) FROM kv_history "
                    f"WHERE key {lower_op} ?{upper} AND version <= ? "
                    f"GROUP BY key ORDER BY key LIMIT {_PAGE}",
                    (*bounds, self._height if height is None else height),
                ).fetchall()
            for row in rows:
                if row[1] is not None:
                    yield bytes(row[0]), bytes(row[1])
            if len(rows) < _PAGE:
                return
            start, lower_op = bytes(rows[-1][0]), ">"

    def prove(self, key: bytes, height: int | None = None) -> Proof:
        """Proof that `key` has its value (or is absent) at `height` (default: latest)."""
        key = check_bytes("key", key)
        with self._lock:
            h = self._height if height is None else height
            self._check_height(h)
            root = self._root if h == self._height else self._root_ref(h)
            siblings, leaf = walk_path(root, hash_key(key), self._load_page)
            value = self.get_at(key, h)
        key_hash = hash_key(key)
        if isinstance(leaf, LeafNode) and leaf.key_hash == key_hash:
            if value is None or hash_value(value) != leaf.value_hash:
                raise StoreError(f"state database is corrupt: tree and values disagree at {h}")
            return Proof(key, value, tuple(siblings), (leaf.key_hash, leaf.value_hash))
        if value is not None:
            raise StoreError(f"state database is corrupt: tree and values disagree at {h}")
        leaf_pair = None if leaf is None else (leaf.key_hash, leaf.value_hash)
        return Proof(key, None, tuple(siblings), leaf_pair)

    # -- writing a block --------------------------------------------------------------

    def stage(self, height: int, changes: Mapping[bytes, bytes | None]) -> bytes:
        """Computes the root of `height` (= self.height + 1) after `changes` (None =
        delete) without persisting; replaces any block staged before. Returns the root."""
        with self._lock:
            if height != self._height + 1:
                raise StoreError(
                    f"stage: height must be {self._height + 1} (last committed is "
                    f"{self._height}), got {height}"
                )
            self._staged = None
            wanted: dict[bytes, bytes | None] = {}
            for raw_key, raw in changes.items():
                key = check_bytes("key", raw_key)
                wanted[key] = None if raw is None else check_bytes("value", raw)
            current = self._latest_rows(sorted(wanted))
            effective: list[tuple[bytes, bytes | None]] = []
            kv_stale: list[tuple[bytes, int]] = []
            for key in sorted(wanted):
                value = wanted[key]
                old = current.get(key)
                if (None if old is None else old[0]) == value:
                    continue  # a delete of a missing key, or a rewrite of the same value
                effective.append((key, value))
                # The row written at old[1] serves reads below `height` only. A key absent
                # now has no row to supersede: its tombstone is already scheduled.
                if old is not None:
                    kv_stale.append((key, old[1]))
                if value is None:  # the tombstone is needed only until older rows go
                    kv_stale.append((key, height))
            counters = Counters()
            updates = []
            present = set()
            for key, value in effective:
                kh = hash_key(key)
                updates.append((kh, None if value is None else hash_value(value)))
                counters.hashes += 1 if value is None else 2
                if key in current:
                    present.add(kh)
            tree = apply_updates(self._root, height, updates, self._load_page, counters, present)
            stats = StoreStats(
                height=height,
                changed_keys=len(effective),
                hashes=counters.hashes,
                node_reads=counters.node_reads,
                nodes_written=tree.nodes_written,
                pages_written=len(tree.pages),
                pages_staled=len(tree.stale),
            )
            self._staged = _Staged(height, tree, tuple(effective), tuple(kv_stale), stats)
            self._stats = stats
            return tree.root.hash

    def commit(self) -> bytes:
        """Persists the staged block in one transaction, prunes, returns the app hash."""
        with self._lock:
            staged = self._staged
            if staged is None:
                raise StoreError("commit: nothing staged; call stage(height, changes) first")
            if staged.height != self._height + 1:
                raise StoreError("commit: the staged block is not on top of the committed state")
            h = staged.height
            root = staged.tree.root
            earliest = max(self._earliest, h - self._keep_recent + 1)
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany(
                    "INSERT INTO pages(version, path, page) VALUES (?, ?, ?)",
                    [(h, path, page) for path, page in staged.tree.pages],
                )
                if staged.tree.stale:
                    db.execute(
                        "INSERT INTO stale_pages(since, pages) VALUES (?, ?)",
                        (h, pack_stale_nodes(staged.tree.stale)),
                    )
                db.executemany(
                    "INSERT INTO kv_history(key, version, value) VALUES (?, ?, ?)",
                    [(k, h, v) for k, v in staged.changes],
                )
                if staged.kv_stale:
                    db.execute(
                        "INSERT INTO stale_kv(since, keys) VALUES (?, ?)",
                        (h, pack_stale_kv(staged.kv_stale)),
                    )
                db.execute("INSERT INTO roots(version, ref) VALUES (?, ?)", (h, root.to_bytes()))
                db.execute(
                    "UPDATE meta SET height = ?, app_hash = ?, earliest = ? WHERE id = 0",
                    (h, root.hash, earliest),
                )
                pages_pruned, history_pruned = prune(db, earliest)
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            self._height, self._root, self._earliest = h, root, earliest
            self._staged = None
            self._cache_pages(h, staged.tree.pages)
            s = staged.stats
            self._stats = StoreStats(
                s.height, s.changed_keys, s.hashes, s.node_reads, s.nodes_written,
                s.pages_written, s.pages_staled, pages_pruned, history_pruned,
            )  # fmt: skip
            return root.hash

    def restore(self, height: int, pairs: Iterable[tuple[bytes, bytes]], app_hash: bytes) -> None:
        """Bulk import (state sync): on an empty store, commits the whole state ``pairs`` as
        version ``height``, which becomes the only readable height, if its root equals
        ``app_hash`` (the trusted one). Otherwise raises StoreError and writes nothing.

        ``pairs`` come in strictly ascending sha256(key) order, as a snapshot's chunks hold them
        (any other order, or a key twice, is a StoreError). They are streamed: the tree is built
        in one pass (``tree.build_sorted``) and its pages and the history rows are written in
        batches inside one SQLite transaction, committed only once the root is checked. So
        memory stays bounded whatever the size of the state (one ``stage`` of the whole state
        held every new node in memory: 2.3 GB at 1M keys), and a crash leaves the store empty."""
        with self._lock:
            if self._height != 0 or self._staged is not None:
                raise StoreError(
                    f"restore needs an empty store; this one is at height {self._height}"
                )
            if not isinstance(height, int) or isinstance(height, bool) or height < 1:
                raise StoreError(f"restore: height must be an integer >= 1, got {height!r}")
            root, keys, pages, nodes = restore_rows(self._db, height, pairs, app_hash)
            self._height, self._root, self._earliest = height, root, height
            self._stats = StoreStats(
                height=height,
                changed_keys=keys,
                hashes=2 * keys + nodes,
                nodes_written=nodes,
                pages_written=pages,
            )

    def close(self) -> None:
        """Drops any staged block and closes the database."""
        with self._lock:
            self._staged = None
            self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals --------------------------------------------------------------------

    def _check_height(self, height: int) -> None:
        if not isinstance(height, int) or not self._earliest <= height <= self._height:
            raise VersionNotAvailable(height, self._earliest, self._height, self._keep_recent)

    def _root_ref(self, height: int) -> Ref:
        row = self._db.execute("SELECT ref FROM roots WHERE version = ?", (height,)).fetchone()
        if row is None:
            raise StoreError(f"state database is corrupt: no root for height {height}")
        return Ref.from_bytes(row[0])

    def _latest_rows(self, keys: list[bytes]) -> dict[bytes, tuple[bytes, int]]:
        """key -> (value, version of its newest history row), for those of `keys` present."""
        found: dict[bytes, tuple[bytes, int]] = {}
        for i in range(0, len(keys), _BATCH):
            chunk = keys[i : i + _BATCH]
            marks = ",".join("?" * len(chunk))
            for key, value, version in self._db.execute(
                f"SELECT key, value, max(version) FROM kv_history WHERE key IN ({marks}) "
                "GROUP BY key",
                chunk,
            ):
                if value is not None:  # a tombstone: deleted, already scheduled for pruning
                    found[bytes(key)] = (bytes(value), version)
        return found

    def _load_page(self, version: int, path: bytes) -> bytes:
        hit = self._cache.get(path)
        if hit is not None and int.from_bytes(hit[:8], "big") == version:
            return hit[8:]
        row = self._db.execute(
            "SELECT page FROM pages WHERE version = ? AND path = ?", (version, path)
        ).fetchone()
        if row is None:
            raise StoreError(f"state database is corrupt: tree page missing at version {version}")
        page = check_page(bytes(row[0]))
        # cache it unless a newer page at this path is cached (a proof at a past height must
        # not push the latest tree's page out)
        if not page[1] & 1 and (hit is None or int.from_bytes(hit[:8], "big") < version):
            self._cache_pages(version, [(path, page)])
        return page

    def _cache_pages(self, version: int, pages: list[tuple[bytes, bytes]]) -> None:
        if self._cache_size == 0:
            return
        cache = self._cache
        pop = cache.pop
        v = version.to_bytes(8, "big")
        for path, page in pages:
            if not page[1] & 1:  # the page root is an internal node, not a lone leaf
                pop(path, None)  # re-inserted at the end: evicted last
                cache[path] = v + page
        if len(cache) > self._cache_size:
            # evict a tenth at once: walking a dict from its front costs as much as the entries
            # removed there before, so eviction one by one would be quadratic
            drop = len(cache) - self._cache_size + self._cache_size // 10
            for path in list(islice(cache, drop)):
                del cache[path]


def _end(end: bytes | None) -> bytes | None:
    return None if end is None else check_bytes("end", end)
