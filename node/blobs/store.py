"""A content-addressed blob store on local disk: files named by their sha256, three tiers with
retention, a disk quota, crash-safe metadata.

    ROOT/
      blobs/ab/abcd...ef   one file per blob, named by its sha256 (first two hex chars = subfolder)
      tmp/PID.RANDOM.part  writes in progress (renamed into blobs/ when complete and fsynced)
      meta.db              SQLite (WAL, synchronous=FULL): tier, pinned, round holds, last use
      meta.lock            flock held while a store opens or closes meta.db (see BlobStore.__init__)

Writes are atomic: bytes go to ``tmp/``, are fsynced, and are renamed onto their final name
(``os.replace``) inside the metadata transaction, then the folder is fsynced. A crash leaves at
worst a ``.part`` file (removed by the next open once its writer is dead) or a complete blob
without its metadata row (adopted as ``hot`` by the next open); never a partial blob under a
valid name. Several writers (threads or processes) of the same blob are safe: each writes its
own temp file, and the commit under SQLite's write lock keeps the first and drops the others.

Tiers and retention:

- ``temp``: trace states of open rounds. Held by the round key(s) it was put with; when every
  holding round is released (``release_round``) it is kept ``temp_margin_s`` more, then ``gc``
  deletes it. A temp blob put without a round key is kept for the margin only.
- ``hot``: base model, this and the last round's updates. Never deleted by retention; while a
  round holds it, never evicted; once released it is a cache entry evicted under quota pressure.
- ``cold``: attested models. Pinned: never evicted, never deleted by ``gc``.

A re-put keeps the strongest tier (temp < hot < cold) and adds the round hold.

Quota: a put that would exceed ``quota_bytes`` first deletes expired temp blobs, then evicts
the least recently used blobs that are neither pinned nor held by an open round. If that is not
enough the put is refused with ``QuotaExceeded`` and nothing is deleted. The quota is stored in
the metadata: a store opened with ``quota_bytes=None`` (the CLI) uses the one its owner set.
``may_evict`` (default True: the worker's automatic eviction) set to False makes a put that
would evict raise ``EvictionNeeded`` (listing the victims, nothing deleted) instead; set to a
set of hashes it lets the put evict those only: ``loconet blob put|get`` show the victims and
ask first. ``gc_plan()`` says what ``gc()`` would delete; ``gc(only=...)`` deletes no blob
outside the set it is given (the CLI passes what it showed).

Every hash that comes in (argument, file name) is checked to be 64 lowercase hex characters, so
no input can name a path outside ``blobs/``.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

from node.blobs.errors import (
    BlobNotFound,
    EvictionNeeded,
    HashMismatch,
    InvalidHash,
    QuotaExceeded,
)

log = logging.getLogger("loconet.blobs")

HASH_RE = re.compile(r"[0-9a-f]{64}")
TIERS = ("temp", "hot", "cold")
_RANK = {t: i for i, t in enumerate(TIERS)}
CHUNK = 1 << 20
DEFAULT_QUOTA_BYTES = 10 << 30
DEFAULT_TEMP_MARGIN_S = 600.0
STALE_TMP_AGE_S = 24 * 3600.0  # a .part file this old is removed even if its pid looks alive
MAX_ROUND_KEY = 200


def check_hash(h: object) -> str:
    """``h`` if it is a sha256 hex string (64 lowercase hex characters), else ``InvalidHash``."""
    if not isinstance(h, str) or HASH_RE.fullmatch(h) is None:
        shown = repr(h) if len(repr(h)) <= 80 else repr(h)[:77] + "..."
        raise InvalidHash(f"not a sha256 hash (64 lowercase hex characters): {shown}")
    return h


def check_tier(tier: object) -> str:
    if tier not in _RANK:
        raise ValueError(f"unknown tier {tier!r}: use one of {', '.join(TIERS)}")
    return str(tier)


def _check_round_key(key: object) -> str | None:
    if key is None:
        return None
    if not isinstance(key, str) or not key or len(key) > MAX_ROUND_KEY:
        raise ValueError(
            f"round_key must be a non-empty string of at most {MAX_ROUND_KEY} characters, got "
            f"{key!r}"
        )
    return key


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


@dataclass(frozen=True, slots=True)
class BlobInfo:
    hash: str
    size: int
    tier: str
    pinned: bool
    rounds: tuple[str, ...]
    created: float
    last_used: float
    released_at: float | None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["rounds"] = list(self.rounds)
        return d


@dataclass(slots=True)
class GcReport:
    expired: list[str] = field(default_factory=list)  # temp blobs past their retention
    evicted: list[str] = field(default_factory=list)  # removed to get back under the quota
    freed_bytes: int = 0
    expired_bytes: int = 0  # of freed_bytes, by expiry
    evicted_bytes: int = 0  # of freed_bytes, by eviction
    stale_tmp_removed: int = 0
    orphan_rows_removed: int = 0  # metadata rows whose file was gone
    adopted: int = 0  # complete blob files without a row (a crash between rename and commit)
    corrupt_removed: list[str] = field(default_factory=list)  # only with verify=True
    used_bytes: int = 0
    quota_bytes: int = 0
    count: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class BlobWriter:
    """A blob being written: bytes go to a temp file while being hashed; ``commit`` fsyncs and
    renames it into the store. Leaving the ``with`` block without a commit discards it."""

    def __init__(self, store: BlobStore) -> None:
        self._store = store
        self.tmp_path = store._new_tmp_path()
        self._f: IO[bytes] = open(self.tmp_path, "xb")  # noqa: SIM115 - closed by commit/abort
        self._h = hashlib.sha256()
        self.size = 0
        self._done = False

    def write(self, data: bytes) -> None:
        self._f.write(data)
        self._h.update(data)
        self.size += len(data)

    def hexdigest(self) -> str:
        return self._h.hexdigest()

    def commit(
        self, tier: str = "hot", round_key: str | None = None, expected: str | None = None
    ) -> str:
        """Make the blob durable and visible; returns its hash. ``expected``: refuse (and discard)
        the bytes with ``HashMismatch`` unless they hash to it."""
        check_tier(tier)
        _check_round_key(round_key)
        h = self._h.hexdigest()
        if expected is not None and h != check_hash(expected):
            self.abort()
            raise HashMismatch(f"content hashes to {h}, expected {expected}")
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()
        try:
            self._store._commit(self.tmp_path, h, self.size, tier, round_key)
        finally:
            self._done = True
            self.tmp_path.unlink(missing_ok=True)
        return h

    def abort(self) -> None:
        if not self._f.closed:
            self._f.close()
        self.tmp_path.unlink(missing_ok=True)
        self._done = True

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self._done:
            self.abort()


class BlobStore:
    """See the module docstring. Thread-safe; several processes may open the same root."""

    def __init__(
        self,
        root: Path | str,
        quota_bytes: int | None = None,
        *,
        temp_margin_s: float = DEFAULT_TEMP_MARGIN_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if quota_bytes is not None and quota_bytes <= 0:
            raise ValueError(f"quota_bytes must be positive, got {quota_bytes}")
        self.root = Path(root)
        self.blob_dir = self.root / "blobs"
        self.tmp_dir = self.root / "tmp"
        self.blob_dir.mkdir(parents=True, exist_ok=True)
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        self.temp_margin_s = float(temp_margin_s)
        self._clock = clock
        # what a put may evict to stay under the quota: True any unpinned, unheld blob (the
        # worker's cache behaviour); False none (EvictionNeeded instead); a set: those hashes
        self.may_evict: bool | frozenset[str] = True
        self._lock = threading.RLock()
        # Opening (creating the file, switching it to WAL, creating the schema) and closing (the
        # last connection checkpoints and deletes the WAL) take locks SQLite does not always wait
        # for: a store opened while another closes could fail at once with "database is locked".
        # Both run under an exclusive flock on meta.lock, shared by threads and processes alike.
        with self._open_close_lock():
            self._db = sqlite3.connect(
                self.root / "meta.db", timeout=60, isolation_level=None, check_same_thread=False
            )
            self._db.execute("PRAGMA busy_timeout=60000")
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._init_schema(quota_bytes)
        self._clean_stale_tmp()
        self._reconcile()

    @contextmanager
    def _open_close_lock(self) -> Iterator[None]:
        fd = os.open(self.root / "meta.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the flock

    def _init_schema(self, quota_bytes: int | None) -> None:
        with self._tx() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS blobs(hash TEXT PRIMARY KEY, size INTEGER NOT NULL,"
                " tier TEXT NOT NULL, pinned INTEGER NOT NULL, created REAL NOT NULL,"
                " last_used REAL NOT NULL, use_seq INTEGER NOT NULL, released_at REAL)"
            )
            db.execute("CREATE INDEX IF NOT EXISTS blobs_use ON blobs(use_seq)")
            db.execute(
                "CREATE TABLE IF NOT EXISTS holds(round_key TEXT NOT NULL, hash TEXT NOT NULL,"
                " PRIMARY KEY(round_key, hash))"
            )
            db.execute("CREATE INDEX IF NOT EXISTS holds_hash ON holds(hash)")
            db.execute("CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            row = db.execute("SELECT value FROM meta WHERE key='quota_bytes'").fetchone()
            self.quota_bytes = int(row[0]) if row else DEFAULT_QUOTA_BYTES
            if quota_bytes is not None:
                self._set_quota(db, int(quota_bytes), persist=True)

    def _set_quota(self, db: sqlite3.Connection, quota: int, persist: bool) -> None:
        used = self._used(db)
        if quota < self.quota_bytes and quota < used:
            # a lowered quota is the next gc's (or put's) licence to evict: say so once, here
            log.warning(
                "blob store %s: quota lowered from %d B to %d B, below the %d B it holds: gc and "
                "puts will evict unpinned blobs no open round holds to get under it",
                self.root,
                self.quota_bytes,
                quota,
                used,
            )
        self.quota_bytes = quota
        if persist:
            db.execute(
                "INSERT INTO meta(key, value) VALUES('quota_bytes', ?)"
                " ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                (str(quota),),
            )

    def set_quota(self, quota_bytes: int, persist: bool = True) -> None:
        """Use ``quota_bytes`` from now on; ``persist`` stores it for every later open (as
        ``BlobStore(root, quota_bytes)`` does), else it holds for this object only."""
        if quota_bytes <= 0:
            raise ValueError(f"quota_bytes must be positive, got {quota_bytes}")
        with self._tx() as db:
            self._set_quota(db, int(quota_bytes), persist)

    # ------------------------------------------------------------------ plumbing

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, holding SQLite's write lock (serialises every process)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _final_path(self, h: str) -> Path:
        return self.blob_dir / h[:2] / h

    def _new_tmp_path(self) -> Path:
        return self.tmp_dir / f"{os.getpid()}.{uuid.uuid4().hex}.part"

    def _next_seq(self, db: sqlite3.Connection) -> int:
        return int(db.execute("SELECT COALESCE(MAX(use_seq), 0) + 1 FROM blobs").fetchone()[0])

    def _clean_stale_tmp(self) -> int:
        """Remove ``.part`` files whose writer process is dead (or that are very old)."""
        removed = 0
        now = time.time()
        for p in self.tmp_dir.iterdir():
            pid_text = p.name.split(".", 1)[0]
            try:
                pid = int(pid_text)
                age = now - p.stat().st_mtime
            except (ValueError, FileNotFoundError):
                pid, age = -1, STALE_TMP_AGE_S + 1
            if pid == os.getpid() and age <= STALE_TMP_AGE_S:
                continue  # another writer in this process
            if pid > 0 and _pid_alive(pid) and age <= STALE_TMP_AGE_S:
                continue
            p.unlink(missing_ok=True)
            removed += 1
        if removed:
            log.info("removed %d stale temp file(s) from %s", removed, self.tmp_dir)
        return removed

    def _reconcile(self) -> tuple[int, int]:
        """Metadata rows without a file are dropped; complete files without a row are adopted."""
        orphans = adopted = 0
        with self._tx() as db:
            rows = {h for (h,) in db.execute("SELECT hash FROM blobs")}
            on_disk: set[str] = set()
            for sub in self.blob_dir.iterdir():
                if not sub.is_dir():
                    continue
                for f in sub.iterdir():
                    if HASH_RE.fullmatch(f.name) and f.name[:2] == sub.name:
                        on_disk.add(f.name)
            for h in sorted(rows - on_disk):
                db.execute("DELETE FROM blobs WHERE hash=?", (h,))
                db.execute("DELETE FROM holds WHERE hash=?", (h,))
                orphans += 1
            now = self._clock()
            for h in sorted(on_disk - rows):
                size = self._final_path(h).stat().st_size
                db.execute(
                    "INSERT INTO blobs VALUES(?, ?, 'hot', 0, ?, ?, ?, NULL)",
                    (h, size, now, now, self._next_seq(db)),
                )
                adopted += 1
        if orphans or adopted:
            log.info(
                "blob store %s: dropped %d row(s) without a file, adopted %d file(s)",
                self.root,
                orphans,
                adopted,
            )
        return orphans, adopted

    def _merge(self, db: sqlite3.Connection, h: str, tier: str, round_key: str | None) -> None:
        """An existing blob put again: keep the strongest tier, add the hold, mark it used."""
        old_tier, pinned = db.execute(
            "SELECT tier, pinned FROM blobs WHERE hash=?", (h,)
        ).fetchone()
        new_tier = tier if _RANK[tier] > _RANK[old_tier] else old_tier
        pinned = 1 if (pinned or new_tier == "cold") else 0
        now = self._clock()
        db.execute(
            "UPDATE blobs SET tier=?, pinned=?, last_used=?, use_seq=? WHERE hash=?",
            (new_tier, pinned, now, self._next_seq(db), h),
        )
        if round_key is not None:
            db.execute("INSERT OR IGNORE INTO holds VALUES(?, ?)", (round_key, h))
            db.execute("UPDATE blobs SET released_at=NULL WHERE hash=?", (h,))

    def _expired(self, db: sqlite3.Connection) -> list[tuple[str, int]]:
        """Temp blobs that no open round holds and whose margin has passed (LRU first)."""
        cutoff = self._clock() - self.temp_margin_s
        return [
            (str(h), int(s))
            for h, s in db.execute(
                "SELECT hash, size FROM blobs WHERE tier='temp' AND pinned=0 AND released_at IS "
                "NOT NULL AND released_at <= ? AND NOT EXISTS (SELECT 1 FROM holds WHERE "
                "holds.hash=blobs.hash) ORDER BY use_seq",
                (cutoff,),
            )
        ]

    def _gc_victims(
        self, db: sqlite3.Connection, only: Collection[str] | None = None, need: int = 0
    ) -> tuple[list[tuple[str, int]], list[tuple[str, int]], int]:
        """What gc (``need`` = 0) or a put of ``need`` bytes would delete, deleting nothing:
        (expired, evicted, bytes used after). ``only``: no blob outside it is chosen."""
        used = self._used(db)
        expired = [(h, s) for h, s in self._expired(db) if only is None or h in only]
        used -= sum(s for _, s in expired)
        gone = {h for h, _ in expired}
        evicted: list[tuple[str, int]] = []
        for h, size in self._evictable(db):
            if used + need <= self.quota_bytes:
                break
            if h in gone or (only is not None and h not in only):
                continue
            evicted.append((h, size))
            used -= size
        return expired, evicted, used

    def _delete(self, db: sqlite3.Connection, h: str) -> None:
        db.execute("DELETE FROM blobs WHERE hash=?", (h,))
        db.execute("DELETE FROM holds WHERE hash=?", (h,))
        self._final_path(h).unlink(missing_ok=True)

    def _used(self, db: sqlite3.Connection) -> int:
        return int(db.execute("SELECT COALESCE(SUM(size), 0) FROM blobs").fetchone()[0])

    def _evictable(self, db: sqlite3.Connection) -> list[tuple[str, int]]:
        return [
            (str(h), int(s))
            for h, s in db.execute(
                "SELECT hash, size FROM blobs WHERE pinned=0"
                " AND NOT EXISTS (SELECT 1 FROM holds WHERE holds.hash=blobs.hash) ORDER BY use_seq"
            )
        ]

    def _make_room(self, db: sqlite3.Connection, need: int) -> list[str]:
        """Free space for ``need`` more bytes (expired temp blobs first, then evictions), or
        raise QuotaExceeded / EvictionNeeded having deleted nothing."""
        used = self._used(db)
        if used + need <= self.quota_bytes:
            return []
        expired, victims, after = self._gc_victims(db, need=need)
        if after + need > self.quota_bytes:
            raise QuotaExceeded(
                f"storing {need} B would exceed the quota of {self.quota_bytes} B: {used} B used, "
                f"of which only {used - after} B may be evicted (the rest is pinned or held by an "
                "open round); raise the quota or release finished rounds"
            )
        allowed = self.may_evict
        if allowed is not True and any(allowed is False or h not in allowed for h, _ in victims):
            freed = sum(s for _, s in victims)
            raise EvictionNeeded(
                f"storing {need} B under the quota of {self.quota_bytes} B ({used} B used) "
                f"would evict {len(victims)} blob(s) ({freed} B): nothing was deleted",
                victims,
            )
        for h, _ in expired + victims:
            self._delete(db, h)
        if victims:
            freed = sum(s for _, s in victims)
            log.info("evicted %d blob(s) (%d B) to stay under the quota", len(victims), freed)
        return [h for h, _ in victims]

    def _commit(self, tmp: Path, h: str, size: int, tier: str, round_key: str | None) -> None:
        final = self._final_path(h)
        with self._tx() as db:
            row = db.execute("SELECT size FROM blobs WHERE hash=?", (h,)).fetchone()
            if row is not None and final.exists():
                self._merge(db, h, tier, round_key)
                return
            if row is not None:  # row without its file: drop it and store afresh
                self._delete(db, h)
            self._make_room(db, size)
            if not final.parent.is_dir():
                final.parent.mkdir(exist_ok=True)
                _fsync_dir(final.parent.parent)  # the new blobs/XX/ entry itself, on disk
            os.replace(tmp, final)
            _fsync_dir(final.parent)
            now = self._clock()
            pinned = 1 if tier == "cold" else 0
            released = now if (tier == "temp" and round_key is None) else None
            db.execute(
                "INSERT INTO blobs VALUES(?, ?, ?, ?, ?, ?, ?, ?)",
                (h, size, tier, pinned, now, now, self._next_seq(db), released),
            )
            if round_key is not None:
                db.execute("INSERT OR IGNORE INTO holds VALUES(?, ?)", (round_key, h))

    def _touch(self, h: str) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE blobs SET last_used=?, use_seq=? WHERE hash=?",
                (self._clock(), self._next_seq(db), h),
            )

    def _row_exists(self, h: str) -> bool:
        with self._lock:
            return self._db.execute("SELECT 1 FROM blobs WHERE hash=?", (h,)).fetchone() is not None

    # ------------------------------------------------------------------ public API

    def writer(self) -> BlobWriter:
        """Stream bytes into the store: ``with store.writer() as w: w.write(b); h = w.commit()``."""
        return BlobWriter(self)

    def put_bytes(self, data: bytes, tier: str = "hot", round_key: str | None = None) -> str:
        """Store ``data``; returns its sha256 hex. Idempotent (a re-put merges tier and hold)."""
        check_tier(tier)
        _check_round_key(round_key)
        h = hashlib.sha256(data).hexdigest()
        if self.has(h):
            try:
                self.retain(h, tier, round_key)
                return h
            except BlobNotFound:  # evicted meanwhile by another process: store it again
                pass
        with self.writer() as w:
            w.write(data)
            return w.commit(tier, round_key)

    def put_file(self, path: Path | str, tier: str = "hot", round_key: str | None = None) -> str:
        """Store a file's bytes (streamed, hashed on the way); returns the sha256 hex."""
        check_tier(tier)
        _check_round_key(round_key)
        with open(path, "rb") as src, self.writer() as w:
            while chunk := src.read(CHUNK):
                w.write(chunk)
            return w.commit(tier, round_key)

    def has(self, h: str) -> bool:
        check_hash(h)
        return self._row_exists(h) and self._final_path(h).is_file()

    def path(self, h: str) -> Path:
        """The blob's file (read it, never write it); marks the blob used."""
        if not self.has(h):
            raise BlobNotFound(f"blob {h} is not in the store {self.root}")
        self._touch(h)
        return self._final_path(h)

    def open(self, h: str, touch: bool = True) -> tuple[IO[bytes], int]:
        """An open binary file and its size (the server streams from it)."""
        check_hash(h)
        if not self._row_exists(h):
            raise BlobNotFound(f"blob {h} is not in the store {self.root}")
        try:
            f = open(self._final_path(h), "rb")  # noqa: SIM115 - returned to the caller
        except FileNotFoundError:
            raise BlobNotFound(f"blob {h} is not in the store {self.root}") from None
        if touch:
            self._touch(h)
        return f, os.fstat(f.fileno()).st_size

    def read(self, h: str) -> bytes:
        f, _ = self.open(h)
        with f:
            return f.read()

    def verify(self, h: str) -> bool:
        """Re-hash a stored blob; a corrupt one (disk fault, tampering) is deleted, False
        returned."""
        if not self.has(h):
            raise BlobNotFound(f"blob {h} is not in the store {self.root}")
        if sha256_file(self._final_path(h)) == h:
            return True
        with self._tx() as db:
            self._delete(db, h)
        log.warning("blob %s was corrupt on disk and has been deleted", h)
        return False

    def retain(self, h: str, tier: str = "hot", round_key: str | None = None) -> None:
        """Apply a tier and a round hold to a stored blob, exactly as re-putting its bytes would
        (the strongest tier wins; ``cold`` pins)."""
        check_tier(tier)
        _check_round_key(round_key)
        if not self.has(h):
            raise BlobNotFound(f"blob {h} is not in the store {self.root}")
        with self._tx() as db:
            if db.execute("SELECT 1 FROM blobs WHERE hash=?", (h,)).fetchone() is None:
                raise BlobNotFound(f"blob {h} is not in the store {self.root}")
            self._merge(db, h, tier, round_key)

    def hold(self, h: str, round_key: str) -> None:
        """Keep a stored blob for ``round_key`` until ``release_round(round_key)``; tier
        unchanged."""
        self.retain(h, "temp", round_key)

    def pin(self, h: str) -> None:
        """Make a blob cold and pinned: never evicted, never expired."""
        if not self.has(h):
            raise BlobNotFound(f"blob {h} is not in the store {self.root}")
        with self._tx() as db:
            db.execute(
                "UPDATE blobs SET pinned=1, tier='cold', released_at=NULL WHERE hash=?", (h,)
            )

    def unpin(self, h: str) -> None:
        """Undo ``pin``: the blob becomes an ordinary hot blob (evictable when no round holds
        it)."""
        if not self.has(h):
            raise BlobNotFound(f"blob {h} is not in the store {self.root}")
        with self._tx() as db:
            db.execute("UPDATE blobs SET pinned=0, tier='hot' WHERE hash=?", (h,))

    def release_round(self, round_key: str) -> list[str]:
        """The round is over (finalized, plus whatever margin the caller keeps in blocks): drop
        its holds. Temp blobs no other round holds start their ``temp_margin_s`` countdown; hot
        blobs become evictable. Returns the hashes it held."""
        _check_round_key(round_key)
        with self._tx() as db:
            held = [
                str(h)
                for (h,) in db.execute(
                    "SELECT hash FROM holds WHERE round_key=? ORDER BY hash", (round_key,)
                )
            ]
            db.execute("DELETE FROM holds WHERE round_key=?", (round_key,))
            now = self._clock()
            for h in held:
                if db.execute("SELECT 1 FROM holds WHERE hash=?", (h,)).fetchone() is None:
                    db.execute(
                        "UPDATE blobs SET released_at=? WHERE hash=? AND released_at IS NULL",
                        (now, h),
                    )
        return held

    def gc(self, verify: bool = False, only: Collection[str] | None = None) -> GcReport:
        """Delete expired temp blobs and stale temp files, repair metadata after a crash, evict
        down to the quota (never a pinned or held blob); ``verify`` re-hashes every blob (and
        deletes the corrupt ones). ``only``: expire and evict no blob outside this set (what
        ``gc_plan`` showed a person who confirmed it), even if the store changed meanwhile."""
        rep = GcReport()
        rep.stale_tmp_removed = self._clean_stale_tmp()
        rep.orphan_rows_removed, rep.adopted = self._reconcile()
        if verify:
            for info in self.ls():
                if not self.verify(info.hash):
                    rep.corrupt_removed.append(info.hash)
        with self._tx() as db:
            expired, evicted, _ = self._gc_victims(db, None if only is None else set(only))
            for h, _ in expired + evicted:
                self._delete(db, h)
            self._fill(db, rep, expired, evicted)
        return rep

    def gc_plan(self) -> GcReport:
        """What ``gc()`` would expire and evict now (``expired``, ``evicted``, their bytes, and
        ``used_bytes``/``count`` after it), deleting and repairing nothing."""
        rep = GcReport()
        with self._lock:
            db = self._db
            expired, evicted, _ = self._gc_victims(db)
            self._fill(db, rep, expired, evicted, planned=True)
        return rep

    def _fill(
        self,
        db: sqlite3.Connection,
        rep: GcReport,
        expired: list[tuple[str, int]],
        evicted: list[tuple[str, int]],
        planned: bool = False,
    ) -> None:
        rep.expired = [h for h, _ in expired]
        rep.evicted = [h for h, _ in evicted]
        rep.expired_bytes = sum(s for _, s in expired)
        rep.evicted_bytes = sum(s for _, s in evicted)
        rep.freed_bytes = rep.expired_bytes + rep.evicted_bytes
        used, count = db.execute("SELECT COALESCE(SUM(size), 0), COUNT(*) FROM blobs").fetchone()
        gone = len(expired) + len(evicted) if planned else 0
        rep.used_bytes = int(used) - (rep.freed_bytes if planned else 0)
        rep.count = int(count) - gone
        rep.quota_bytes = self.quota_bytes

    def ls(self) -> list[BlobInfo]:
        """Every blob, least recently used first."""
        with self._lock:
            holds: dict[str, list[str]] = {}
            for k, h in self._db.execute("SELECT round_key, hash FROM holds ORDER BY round_key"):
                holds.setdefault(h, []).append(k)
            return [
                BlobInfo(
                    h,
                    size,
                    tier,
                    bool(pinned),
                    tuple(holds.get(h, ())),
                    created,
                    last_used,
                    released,
                )
                for h, size, tier, pinned, created, last_used, released in self._db.execute(
                    "SELECT hash, size, tier, pinned, created, last_used, released_at FROM blobs "
                    "ORDER BY use_seq"
                )
            ]

    def info(self, h: str) -> BlobInfo:
        check_hash(h)
        for b in self.ls():
            if b.hash == h:
                return b
        raise BlobNotFound(f"blob {h} is not in the store {self.root}")

    def usage(self) -> dict[str, int]:
        with self._lock:
            used, count = self._db.execute(
                "SELECT COALESCE(SUM(size), 0), COUNT(*) FROM blobs"
            ).fetchone()
        return {"used_bytes": int(used), "count": int(count), "quota_bytes": self.quota_bytes}

    def close(self) -> None:
        with self._lock, self._open_close_lock():
            self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
