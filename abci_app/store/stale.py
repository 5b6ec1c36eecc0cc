"""What a commit supersedes, and pruning it: the packed ``stale_pages`` / ``stale_kv`` rows (one
per block) and the deletes once no retained height needs them. Apart from ``MerkleStore`` because
the packing is a file format of its own (benchmarks read it too)."""

from __future__ import annotations

import sqlite3

from .errors import StoreError


def prune(db: sqlite3.Connection, earliest: int) -> tuple[int, int]:
    """Deletes what no height >= earliest needs (inside the commit's transaction); returns the
    (page rows, history rows) deleted."""
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
