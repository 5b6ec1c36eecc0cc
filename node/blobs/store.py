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
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

from node.blobs import retention
from node.blobs.errors import BlobNotFound, HashMismatch
from node.blobs.files import CHUNK, BlobFiles, check_hash, sha256_file
from node.blobs.retention import GcReport

log = logging.getLogger("loconet.blobs")

TIERS = ("temp", "hot", "cold")
_RANK = {t: i for i, t in enumerate(TIERS)}
DEFAULT_QUOTA_BYTES = 10 << 30
DEFAULT_TEMP_MARGIN_S = 600.0
MAX_ROUND_KEY = 200


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


@contextmanager
def _open_close_lock(root: Path) -> Iterator[None]:
    """An exclusive flock on ``ROOT/meta.lock`` (see BlobStore.__init__), shared by threads and
    processes alike."""
    fd = os.open(root / "meta.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the flock


def _create_schema(db: sqlite3.Connection) -> None:
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


class BlobWriter:
    """A blob being written: bytes go to a temp file while being hashed; ``commit`` fsyncs and
    renames it into the store. Leaving the ``with`` block without a commit discards it."""

    def __init__(self, store: BlobStore) -> None:
        self._store = store
        self.tmp_path = store.files.new_tmp_path()
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
        self.files = BlobFiles(self.root)
        self.blob_dir = self.files.blob_dir
        self.tmp_dir = self.files.tmp_dir
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
        with _open_close_lock(self.root):
            self._db = sqlite3.connect(
                self.root / "meta.db", timeout=60, isolation_level=None, check_same_thread=False
            )
            self._db.execute("PRAGMA busy_timeout=60000")
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._init_schema(quota_bytes)
        self.files.clean_stale_tmp()
        self._reconcile()

    def _init_schema(self, quota_bytes: int | None) -> None:
        with self._tx() as db:
            _create_schema(db)
            row = db.execute("SELECT value FROM meta WHERE key='quota_bytes'").fetchone()
            self.quota_bytes = int(row[0]) if row else DEFAULT_QUOTA_BYTES
            if quota_bytes is not None:
                self._set_quota(db, int(quota_bytes), persist=True)

    def _set_quota(self, db: sqlite3.Connection, quota: int, persist: bool) -> None:
        used = retention.used(db)
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

    def _next_seq(self, db: sqlite3.Connection) -> int:
        return int(db.execute("SELECT COALESCE(MAX(use_seq), 0) + 1 FROM blobs").fetchone()[0])

    def _reconcile(self) -> tuple[int, int]:
        """Metadata rows without a file are dropped; complete files without a row are adopted."""
        orphans = adopted = 0
        with self._tx() as db:
            rows = {h for (h,) in db.execute("SELECT hash FROM blobs")}
            on_disk = self.files.hashes_on_disk()
            for h in sorted(rows - on_disk):
                db.execute("DELETE FROM blobs WHERE hash=?", (h,))
                db.execute("DELETE FROM holds WHERE hash=?", (h,))
                orphans += 1
            now = self._clock()
            for h in sorted(on_disk - rows):
                size = self.files.final_path(h).stat().st_size
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

    def _cutoff(self) -> float:
        """Temp blobs released at or before this time are past their margin."""
        return self._clock() - self.temp_margin_s

    def _delete(self, db: sqlite3.Connection, h: str) -> None:
        db.execute("DELETE FROM blobs WHERE hash=?", (h,))
        db.execute("DELETE FROM holds WHERE hash=?", (h,))
        self.files.final_path(h).unlink(missing_ok=True)

    def _make_room(self, db: sqlite3.Connection, need: int) -> list[str]:
        """Free space for ``need`` more bytes (expired temp blobs first, then evictions), or
        raise QuotaExceeded / EvictionNeeded having deleted nothing."""
        gone_by_age, victims = retention.room_victims(
            db, need, self.quota_bytes, self._cutoff(), self.may_evict
        )
        for h, _ in gone_by_age + victims:
            self._delete(db, h)
        if victims:
            freed = sum(s for _, s in victims)
            log.info("evicted %d blob(s) (%d B) to stay under the quota", len(victims), freed)
        return [h for h, _ in victims]

    def _commit(self, tmp: Path, h: str, size: int, tier: str, round_key: str | None) -> None:
        final = self.files.final_path(h)
        with self._tx() as db:
            row = db.execute("SELECT size FROM blobs WHERE hash=?", (h,)).fetchone()
            if row is not None and final.exists():
                self._merge(db, h, tier, round_key)
                return
            if row is not None:  # row without its file: drop it and store afresh
                self._delete(db, h)
            self._make_room(db, size)
            self.files.place(tmp, h)
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
        return self._row_exists(h) and self.files.final_path(h).is_file()

    def path(self, h: str) -> Path:
        """The blob's file (read it, never write it); marks the blob used."""
        if not self.has(h):
            raise BlobNotFound(f"blob {h} is not in the store {self.root}")
        self._touch(h)
        return self.files.final_path(h)

    def open(self, h: str, touch: bool = True) -> tuple[IO[bytes], int]:
        """An open binary file and its size (the server streams from it)."""
        check_hash(h)
        if not self._row_exists(h):
            raise BlobNotFound(f"blob {h} is not in the store {self.root}")
        try:
            f = open(self.files.final_path(h), "rb")  # noqa: SIM115 - returned to the caller
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
        if sha256_file(self.files.final_path(h)) == h:
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
        rep.stale_tmp_removed = self.files.clean_stale_tmp()
        rep.orphan_rows_removed, rep.adopted = self._reconcile()
        if verify:
            for info in self.ls():
                if not self.verify(info.hash):
                    rep.corrupt_removed.append(info.hash)
        with self._tx() as db:
            expired, evicted, _ = retention.gc_victims(
                db, self.quota_bytes, self._cutoff(), None if only is None else set(only)
            )
            for h, _ in expired + evicted:
                self._delete(db, h)
            retention.fill_report(db, rep, expired, evicted, self.quota_bytes)
        return rep

    def gc_plan(self) -> GcReport:
        """What ``gc()`` would expire and evict now (``expired``, ``evicted``, their bytes, and
        ``used_bytes``/``count`` after it), deleting and repairing nothing."""
        rep = GcReport()
        with self._lock:
            db = self._db
            expired, evicted, _ = retention.gc_victims(db, self.quota_bytes, self._cutoff())
            retention.fill_report(db, rep, expired, evicted, self.quota_bytes, planned=True)
        return rep

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
        with self._lock, _open_close_lock(self.root):
            self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
