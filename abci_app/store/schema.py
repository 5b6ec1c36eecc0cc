"""The state database's SQLite layout, and opening it (see merkle_store.py for what each table
holds). Kept apart from ``MerkleStore`` so the store class reads as its operations: the schema
and the checks made once at open do not change with them."""

from __future__ import annotations

import sqlite3

from .errors import StoreError
from .tree import EMPTY_REF

# 3: tree nodes stored in pages of PAGE_LEVELS levels, one row per page, and no kv_latest table
# (latest reads take a key's newest history row) (2: one row per node; 1: the stale lists one
# row per entry instead of one packed row per block)
SCHEMA_VERSION = 3

SCHEMA = """
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


def open_schema(db: sqlite3.Connection, path: str | None) -> tuple[int, bytes, int]:
    """Sets the connection up (WAL on a file, synchronous=FULL), creates the tables of an empty
    database, refuses one of another schema untouched, and returns its committed (height,
    app_hash, earliest) from the meta row."""
    if path is not None:
        mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StoreError(f"cannot switch {path!r} to WAL mode (got {mode!r})")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("PRAGMA cache_size=-32768")  # 32 MiB page cache
    # checkpoint the WAL every ~40 MiB instead of 4 MiB: pages rewritten by consecutive
    # blocks (the top of each B-tree) are copied into the main file once, not per block
    db.execute("PRAGMA wal_autocheckpoint=10000")
    db.execute("BEGIN IMMEDIATE")
    try:
        _refuse_other_schema(db)
        for statement in SCHEMA.split(";"):
            if statement.strip():
                db.execute(statement)
        row = db.execute("SELECT schema, height, app_hash, earliest FROM meta").fetchone()
        if row is None:
            db.execute(
                "INSERT INTO meta(id, schema, height, app_hash, earliest) VALUES (0, ?, 0, ?, 0)",
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
        raise StoreError(f"state database has schema {schema}, this node reads {SCHEMA_VERSION}")
    return height, app_hash, earliest


def _refuse_other_schema(db: sqlite3.Connection) -> None:
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
