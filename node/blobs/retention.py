"""Which blobs may go, read from the store's metadata (``meta.db``) and deleting nothing: temp
blobs past their retention, the least recently used evictable ones, what a put of ``need`` bytes
would have to free. ``BlobStore`` deletes what these choose, inside its own transaction; kept
apart from it so the policy reads on its own (module docstring of node/blobs/store.py)."""

from __future__ import annotations

import sqlite3
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from typing import Any

from node.blobs.errors import EvictionNeeded, QuotaExceeded

Victims = list[tuple[str, int]]  # (hash, size), in the order they would go


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


def used(db: sqlite3.Connection) -> int:
    return int(db.execute("SELECT COALESCE(SUM(size), 0) FROM blobs").fetchone()[0])


def expired(db: sqlite3.Connection, cutoff: float) -> Victims:
    """Temp blobs that no open round holds, released at or before ``cutoff`` (LRU first)."""
    return [
        (str(h), int(s))
        for h, s in db.execute(
            "SELECT hash, size FROM blobs WHERE tier='temp' AND pinned=0 AND released_at IS "
            "NOT NULL AND released_at <= ? AND NOT EXISTS (SELECT 1 FROM holds WHERE "
            "holds.hash=blobs.hash) ORDER BY use_seq",
            (cutoff,),
        )
    ]


def evictable(db: sqlite3.Connection) -> Victims:
    """Blobs neither pinned nor held by an open round, least recently used first."""
    return [
        (str(h), int(s))
        for h, s in db.execute(
            "SELECT hash, size FROM blobs WHERE pinned=0"
            " AND NOT EXISTS (SELECT 1 FROM holds WHERE holds.hash=blobs.hash) ORDER BY use_seq"
        )
    ]


def gc_victims(
    db: sqlite3.Connection,
    quota: int,
    cutoff: float,
    only: Collection[str] | None = None,
    need: int = 0,
) -> tuple[Victims, Victims, int]:
    """What gc (``need`` = 0) or a put of ``need`` bytes would delete, deleting nothing:
    (expired, evicted, bytes used after). ``only``: no blob outside it is chosen."""
    left = used(db)
    gone_by_age = [(h, s) for h, s in expired(db, cutoff) if only is None or h in only]
    left -= sum(s for _, s in gone_by_age)
    gone = {h for h, _ in gone_by_age}
    evicted: Victims = []
    for h, size in evictable(db):
        if left + need <= quota:
            break
        if h in gone or (only is not None and h not in only):
            continue
        evicted.append((h, size))
        left -= size
    return gone_by_age, evicted, left


def room_victims(
    db: sqlite3.Connection,
    need: int,
    quota: int,
    cutoff: float,
    may_evict: bool | frozenset[str],
) -> tuple[Victims, Victims]:
    """The (expired, evicted) blobs to delete so that ``need`` more bytes fit the quota (none
    when they fit already); raises QuotaExceeded when even that is not enough, EvictionNeeded
    when ``may_evict`` does not allow every eviction (nothing is deleted either way)."""
    now_used = used(db)
    if now_used + need <= quota:
        return [], []
    gone_by_age, victims, after = gc_victims(db, quota, cutoff, need=need)
    if after + need > quota:
        raise QuotaExceeded(
            f"storing {need} B would exceed the quota of {quota} B: {now_used} B used, "
            f"of which only {now_used - after} B may be evicted (the rest is pinned or held by an "
            "open round); raise the quota or release finished rounds"
        )
    if may_evict is not True and any(may_evict is False or h not in may_evict for h, _ in victims):
        freed = sum(s for _, s in victims)
        raise EvictionNeeded(
            f"storing {need} B under the quota of {quota} B ({now_used} B used) "
            f"would evict {len(victims)} blob(s) ({freed} B): nothing was deleted",
            victims,
        )
    return gone_by_age, victims


def fill_report(
    db: sqlite3.Connection,
    rep: GcReport,
    gone_by_age: Victims,
    evicted: Victims,
    quota: int,
    planned: bool = False,
) -> None:
    """``rep``'s expiry and eviction figures, and the store's usage after them (``planned``:
    nothing was deleted yet, so what would go is taken off)."""
    rep.expired = [h for h, _ in gone_by_age]
    rep.evicted = [h for h, _ in evicted]
    rep.expired_bytes = sum(s for _, s in gone_by_age)
    rep.evicted_bytes = sum(s for _, s in evicted)
    rep.freed_bytes = rep.expired_bytes + rep.evicted_bytes
    total, count = db.execute("SELECT COALESCE(SUM(size), 0), COUNT(*) FROM blobs").fetchone()
    gone = len(gone_by_age) + len(evicted) if planned else 0
    rep.used_bytes = int(total) - (rep.freed_bytes if planned else 0)
    rep.count = int(count) - gone
    rep.quota_bytes = quota
