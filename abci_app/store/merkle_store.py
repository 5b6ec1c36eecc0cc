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

from .errors import StoreError, VersionNotAvailable
from .proof import Proof
from .tree import (
    EMPTY_REF,
    Counters,
    LeafNode,
    Ref,
    TreeUpdate,
    apply_updates,
    build_sorted,
    check_page,
    hash_key,
    hash_value,
    walk_path,
)

# 3: tree nodes stored in pages of PAGE_LEVELS levels, one row per page, and no kv_latest table
# (latest reads take a key's newest history row) (2: one row per node; 1: the stale lists one
# row per entry instead of one packed row per block)
SCHEMA_VERSION = 3
_PAGE = 512  # rows fetched per query while iterating
_BATCH = 500  # keys looked up per query while staging
_RESTORE_BATCH = 20_000  # history rows or pages written per statement by a restore

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    id       INTEGER PRIMARY KEY CHECK (id = 0),
    schema   INTEGER NOT NULL,
    height   INTEGER NOT NULL,
    app_hash BLOB    NOT NULL,
    earliest INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS roots (
    version INTEGER PRIMARY KEY,
    ref     BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS pages (
    version INTEGER NOT NULL,
    path    BLOB    NOT NULL,
    page    BLOB    NOT NULL,
    PRIMARY KEY (version, path)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS stale_pages (
    since   INTEGER PRIMARY KEY,
    pages   BLOB    NOT NULL
);
CREATE TABLE IF NOT EXISTS kv_history (
    key     BLOB    NOT NULL,
    version INTEGER NOT NULL,
    value   BLOB,
    PRIMARY KEY (key, version)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS stale_kv (
    since   INTEGER PRIMARY KEY,
    keys    BLOB    NOT NULL
);
"""


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


def _check_bytes(what: str, x: object) -> bytes:
    if isinstance(x, bytes):
        return x
    if isinstance(x, (bytearray, memoryview)):
        return bytes(x)
    raise StoreError(f"{what} must be bytes, got {type(x).__name__}")


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
        db = self._db
        if self._path is not None:
            mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"cannot switch {self._path!r} to WAL mode (got {mode!r})")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("PRAGMA cache_size=-32768")  # 32 MiB page cache
        # checkpoint the WAL every ~40 MiB instead of 4 MiB: pages rewritten by consecutive
        # blocks (the top of each B-tree) are copied into the main file once, not per block
        db.execute("PRAGMA wal_autocheckpoint=10000")
        db.execute("BEGIN IMMEDIATE")
        try:
            has_meta = db.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
            ).fetchone()
            old = db.execute("SELECT schema FROM meta").fetchone() if has_meta else None
            if old is not None and old[0] != SCHEMA_VERSION:
                # no chain was released before this schema: a file of another one is refused
                # untouched (nothing is created in it), never converted
                raise StoreError(
                    f"state database has schema {old[0]}, this node reads {SCHEMA_VERSION}: "
                    "it was written by another version of loconet; move the node's data folder "
                    "away and sync the chain again (state sync or from genesis)"
                )
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            row = db.execute("SELECT schema, height, app_hash, earliest FROM meta").fetchone()
            if row is None:
                db.execute(
                    "INSERT INTO meta(id, schema, height, app_hash, earliest) "
                    "VALUES (0, ?, 0, ?, 0)",
                    (SCHEMA_VERSION, EMPTY_REF.hash),
                )
                db.execute("INSERT INTO roots(version, ref) VALUES (0, ?)", (EMPTY_REF.to_bytes(),))
                row = (SCHEMA_VERSION, 0, EMPTY_REF.hash, 0)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        schema, height, app_hash, earliest = row
        if schema != SCHEMA_VERSION:
            raise StoreError(
                f"state database has schema {schema}, this node reads {SCHEMA_VERSION}"
            )
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
        key = _check_bytes("key", key)
        with self._lock:
            row = self._db.execute(
                "SELECT value FROM kv_history WHERE key = ? ORDER BY version DESC LIMIT 1", (key,)
            ).fetchone()
        return None if row is None or row[0] is None else bytes(row[0])

    def iterate(self, start: bytes, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Latest committed (key, value) pairs with start <= key < end, ascending.

        Rows are read in pages; a commit made while iterating may show through.
        """
        return self._iterate(None, _check_bytes("start", start), _end(end))

    def get_at(self, key: bytes, height: int) -> bytes | None:
        """Value of `key` committed at `height`; raises VersionNotAvailable."""
        key = _check_bytes("key", key)
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
        return self._iterate(height, _check_bytes("start", start), _end(end))

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
        key = _check_bytes("key", key)
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
                key = _check_bytes("key", raw_key)
                wanted[key] = None if raw is None else _check_bytes("value", raw)
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
                pages_pruned, history_pruned = self._prune(earliest)
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
            db = self._db
            rows: list[tuple[bytes, int, bytes]] = []
            pages: list[tuple[int, bytes, bytes]] = []
            counts = [0, 0]  # keys, pages

            def flush_rows() -> None:
                db.executemany("INSERT INTO kv_history(key, version, value) VALUES (?, ?, ?)", rows)
                counts[0] += len(rows)
                rows.clear()

            def leaves() -> Iterator[tuple[bytes, bytes]]:
                for raw_key, raw_value in pairs:
                    key = _check_bytes("key", raw_key)
                    value = _check_bytes("value", raw_value)
                    # yielded first: the builder refuses a key out of order (or twice) before
                    # its row can reach SQLite (a repeat filling a batch was an IntegrityError)
                    yield hash_key(key), hash_value(value)
                    rows.append((key, height, value))
                    if len(rows) >= _RESTORE_BATCH:
                        flush_rows()

            def emit(path: bytes, page: bytes) -> None:
                pages.append((height, path, page))
                if len(pages) >= _RESTORE_BATCH:
                    db.executemany("INSERT INTO pages(version, path, page) VALUES (?, ?, ?)", pages)
                    counts[1] += len(pages)
                    pages.clear()

            db.execute("BEGIN IMMEDIATE")
            try:
                try:
                    root, nodes = build_sorted(height, leaves(), emit)
                except StoreError as e:
                    if "ascending" in str(e):
                        raise StoreError(
                            "restore: pairs must come in strictly ascending sha256(key) order "
                            "(a snapshot's order), each key once"
                        ) from None
                    raise
                if root.hash != app_hash:
                    raise StoreError(
                        f"restored state of height {height} has root {root.hash.hex()}, "
                        f"not the trusted app hash {app_hash.hex()}"
                    )
                flush_rows()
                db.executemany("INSERT INTO pages(version, path, page) VALUES (?, ?, ?)", pages)
                counts[1] += len(pages)
                db.execute(
                    "INSERT INTO roots(version, ref) VALUES (?, ?)", (height, root.to_bytes())
                )
                # nothing below `height` exists: the empty state's root row goes
                db.execute("DELETE FROM roots WHERE version < ?", (height,))
                db.execute(
                    "UPDATE meta SET height = ?, app_hash = ?, earliest = ? WHERE id = 0",
                    (height, root.hash, height),
                )
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            finally:
                rows.clear()
                pages.clear()
            self._height, self._root, self._earliest = height, root, height
            self._stats = StoreStats(
                height=height,
                changed_keys=counts[0],
                hashes=2 * counts[0] + nodes,
                nodes_written=nodes,
                pages_written=counts[1],
            )

    def _prune(self, earliest: int) -> tuple[int, int]:
        """Deletes what no height >= earliest needs (inside commit's transaction)."""
        db = self._db
        stale: list[tuple[int, bytes]] = []
        for (blob,) in db.execute("SELECT pages FROM stale_pages WHERE since <= ?", (earliest,)):
            stale += unpack_stale_nodes(blob)
        if stale:
            stale.sort()  # B-tree order: neighbouring deletes share pages
            db.executemany("DELETE FROM pages WHERE version = ? AND path = ?", stale)
            db.execute("DELETE FROM stale_pages WHERE since <= ?", (earliest,))
        old: list[tuple[bytes, int]] = []
        for (blob,) in db.execute("SELECT keys FROM stale_kv WHERE since <= ?", (earliest,)):
            old += unpack_stale_kv(blob)
        if old:
            old.sort()
            db.executemany("DELETE FROM kv_history WHERE key = ? AND version = ?", old)
            db.execute("DELETE FROM stale_kv WHERE since <= ?", (earliest,))
        db.execute("DELETE FROM roots WHERE version < ?", (earliest,))
        return len(stale), len(old)

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


def pack_stale_nodes(stale: list[tuple[int, bytes]]) -> bytes:
    """(version, path) pairs of nodes or pages as u64 version || path (a path is
    self-delimiting: u16 depth then ceil(depth / 8) bytes)."""
    return b"".join(v.to_bytes(8, "big") + p for v, p in stale)


def unpack_stale_nodes(blob: bytes) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    append, from_bytes = out.append, int.from_bytes
    i, n = 0, len(blob)
    while i < n:
        if i + 10 > n:
            raise StoreError("state database is corrupt: bad stale node list")
        depth = (blob[i + 8] << 8) | blob[i + 9]
        end = i + 10 + ((depth + 7) >> 3)
        if depth > 256 or end > n:
            raise StoreError("state database is corrupt: bad stale node list")
        append((from_bytes(blob[i : i + 8], "big"), blob[i + 8 : end]))
        i = end
    return out


def pack_stale_kv(stale: tuple[tuple[bytes, int], ...] | list[tuple[bytes, int]]) -> bytes:
    """(key, version) pairs as u64 version || u32 len(key) || key."""
    return b"".join(v.to_bytes(8, "big") + len(k).to_bytes(4, "big") + k for k, v in stale)


def unpack_stale_kv(blob: bytes) -> list[tuple[bytes, int]]:
    out, i, n = [], 0, len(blob)
    while i < n:
        if i + 12 > n:
            raise StoreError("state database is corrupt: bad stale history list")
        end = i + 12 + int.from_bytes(blob[i + 8 : i + 12], "big")
        if end > n:
            raise StoreError("state database is corrupt: bad stale history list")
        out.append((blob[i + 12 : end], int.from_bytes(blob[i : i + 8], "big")))
        i = end
    return out


def _end(end: bytes | None) -> bytes | None:
    return None if end is None else _check_bytes("end", end)
