"""State databases written by older schemas open as schema 3 with the same height, roots, values
and proofs, and keep committing and pruning. Both files were made by the previous store code
with crash_block(1..8), keep_recent=3: tests/store/data/state_schema1.db (stale lists one row
per entry) and state_schema2.db (one row per tree node; schema 3 stores pages of nodes)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from abci_app.store import MerkleStore, verify_proof
from tests.kits.storekit import crash_block, table_count

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("name", ["state_schema1.db", "state_schema2.db"])
def test_old_schema_database_is_migrated_in_place(tmp_path: Path, name: str) -> None:
    path = tmp_path / "state.db"
    shutil.copy(DATA / name, path)
    replay = MerkleStore(None, keep_recent=1000)
    roots = {}
    for h in range(1, 15):
        replay.stage(h, crash_block(h))
        roots[h] = replay.commit()

    store = MerkleStore(path, keep_recent=3)
    assert store._db.execute("SELECT schema FROM meta").fetchone() == (3,)
    tables = {r[0] for r in store._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "nodes" not in tables and "stale_nodes" not in tables
    assert (store.height, store.app_hash) == (8, roots[8])
    assert table_count(store, "stale_pages") == 2  # one packed row per block above earliest (7, 8)
    for h in range(store.earliest_height, 9):
        assert store.root_at(h) == roots[h]
        assert list(store.iterate_at(h, b"")) == list(replay.iterate_at(h, b""))
        for key in (b"k000", b"k007", b"k149", b"none"):
            assert verify_proof(store.prove(key, h), roots[h], key, replay.get_at(key, h))
    pruned = 0
    for h in range(9, 15):
        store.stage(h, crash_block(h))
        assert store.commit() == roots[h]
        pruned += store.stats.pages_pruned
        for key in (b"k000", b"k077", b"k149"):
            past = store.earliest_height
            assert verify_proof(store.prove(key, past), roots[past], key, replay.get_at(key, past))
    assert pruned > 0
    assert table_count(store, "stale_pages") == 2
    # pruning the migrated heights left exactly the pages of the retained trees
    fresh = MerkleStore(None, keep_recent=3)
    for h in range(1, 15):
        fresh.stage(h, crash_block(h))
        fresh.commit()
    assert table_count(store, "pages") == table_count(fresh, "pages")
    assert list(store.iterate_at(12, b"")) == list(replay.iterate_at(12, b""))
    store.close()
    again = MerkleStore(path, keep_recent=3)
    assert (again.height, again.app_hash) == (14, roots[14])
    again.close()
