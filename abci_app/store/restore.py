"""The bulk import of a whole state (state sync), streamed: ``MerkleStore.restore`` checks the
store is empty and takes the result; here the rows are written. Apart from the store class because
it is the one writer that does not go through stage and commit."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator

from .errors import StoreError, check_bytes
from .tree import Ref, build_sorted, hash_key, hash_value

RESTORE_BATCH = 20_000  # history rows or pages written per statement by a restore


class _BatchedRows:
    """The history rows and pages of a restore, written in batches of RESTORE_BATCH as they
    come (memory stays bounded whatever the size of the state), counted."""

    def __init__(self, db: sqlite3.Connection, height: int) -> None:
        self.db = db
        self.height = height
        self.rows: list[tuple[bytes, int, bytes]] = []
        self.pages: list[tuple[int, bytes, bytes]] = []
        self.keys = 0
        self.pages_written = 0

    def leaves(self, pairs: Iterable[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
        """(key hash, value hash) of each pair for the tree builder; the pair's history row is
        queued once the builder took it."""
        for raw_key, raw_value in pairs:
            key = check_bytes("key", raw_key)
            value = check_bytes("value", raw_value)
            # yielded first: the builder refuses a key out of order (or twice) before
            # its row can reach SQLite (a repeat filling a batch was an IntegrityError)
            yield hash_key(key), hash_value(value)
            self.rows.append((key, self.height, value))
            if len(self.rows) >= RESTORE_BATCH:
                self.flush_rows()

    def emit(self, path: bytes, page: bytes) -> None:
        self.pages.append((self.height, path, page))
        if len(self.pages) >= RESTORE_BATCH:
            self.flush_pages()

    def flush_rows(self) -> None:
        self.db.executemany(
            "INSERT INTO kv_history(key, version, value) VALUES (?, ?, ?)", self.rows
        )
        self.keys += len(self.rows)
        self.rows.clear()

    def flush_pages(self) -> None:
        self.db.executemany("INSERT INTO pages(version, path, page) VALUES (?, ?, ?)", self.pages)
        self.pages_written += len(self.pages)
        self.pages.clear()

    def drop(self) -> None:
        self.rows.clear()
        self.pages.clear()


def restore_rows(
    db: sqlite3.Connection, height: int, pairs: Iterable[tuple[bytes, bytes]], app_hash: bytes
) -> tuple[Ref, int, int, int]:
    """Writes the state ``pairs`` (strictly ascending sha256(key)) as version ``height`` in one
    transaction, committed only if its root is ``app_hash``; raises StoreError otherwise, having
    written nothing. Returns (root, keys, pages written, nodes written)."""
    out = _BatchedRows(db, height)
    db.execute("BEGIN IMMEDIATE")
    try:
        root, nodes = _build(height, out.leaves(pairs), out.emit)
        if root.hash != app_hash:
            raise StoreError(
                f"restored state of height {height} has root {root.hash.hex()}, "
                f"not the trusted app hash {app_hash.hex()}"
            )
        out.flush_rows()
        out.flush_pages()
        db.execute("INSERT INTO roots(version, ref) VALUES (?, ?)", (height, root.to_bytes()))
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
        out.drop()
    return root, out.keys, out.pages_written, nodes


def _build(
    height: int, leaves: Iterator[tuple[bytes, bytes]], emit: Callable[[bytes, bytes], None]
) -> tuple[Ref, int]:
    try:
        return build_sorted(height, leaves, emit)
    except StoreError as e:
        if "ascending" in str(e):
            raise StoreError(
                "restore: pairs must come in strictly ascending sha256(key) order "
                "(a snapshot's order), each key once"
            ) from None
        raise
