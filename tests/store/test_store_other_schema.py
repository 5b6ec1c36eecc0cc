"""A state database of another schema (no chain was released before the current one, so none is
converted) is refused with an error naming the fix, and the file is left exactly as it was."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from abci_app.store import MerkleStore
from abci_app.store.errors import StoreError
from abci_app.store.schema import SCHEMA_VERSION
from tests.kits.storekit import crash_block


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("other", [1, 2, SCHEMA_VERSION + 1])
def test_database_of_another_schema_is_refused_untouched(tmp_path: Path, other: int) -> None:
    path = tmp_path / "state.db"
    store = MerkleStore(path, keep_recent=3)
    for h in range(1, 4):
        store.stage(h, crash_block(h))
        store.commit()
    store.close()
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET schema = ? WHERE id = 0", (other,))
    db.commit()
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    before = _digest(path)
    tables_before = _tables(path)
    said = rf"schema {other}, this node reads {SCHEMA_VERSION}.*sync"
    with pytest.raises(StoreError, match=said):
        MerkleStore(path, keep_recent=3)
    assert _tables(path) == tables_before
    assert _digest(path) == before


def _tables(path: Path) -> list[str]:
    db = sqlite3.connect(path)
    try:
        return sorted(r[0] for r in db.execute("SELECT name FROM sqlite_master"))
    finally:
        db.close()
