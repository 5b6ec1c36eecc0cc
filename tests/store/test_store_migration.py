"""A state database written by schema 1 (stale lists one row per entry; the file was made by the
previous store code, tests/store/data/state_schema1.db: crash_block(1..8), keep_recent=3) opens
as schema 2 with the same height, roots, values and proofs, and keeps committing and pruning."""

from __future__ import annotations

import shutil
from pathlib import Path

from store_helpers import crash_block, table_count

from abci_app.store import MerkleStore, verify_proof

DATA = Path(__file__).parent / "data" / "state_schema1.db"


def test_schema1_database_is_migrated_in_place(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    shutil.copy(DATA, path)
    replay = MerkleStore(None, keep_recent=1000)
    roots = {}
    for h in range(1, 15):
        replay.stage(h, crash_block(h))
        roots[h] = replay.commit()

    store = MerkleStore(path, keep_recent=3)
    assert store._db.execute("SELECT schema FROM meta").fetchone() == (2,)
    assert (store.height, store.app_hash) == (8, roots[8])
    assert table_count(store, "stale_nodes") == 2  # one packed row per block above earliest (7, 8)
    for h in range(store.earliest_height, 9):
        assert store.root_at(h) == roots[h]
        for key in (b"k000", b"k007", b"k149"):
            assert verify_proof(store.prove(key, h), roots[h], key, replay.get_at(key, h))
    pruned = 0
    for h in range(9, 15):
        store.stage(h, crash_block(h))
        assert store.commit() == roots[h]
        pruned += store.stats.nodes_pruned
    assert pruned > 0
    assert table_count(store, "stale_nodes") == 2
    assert list(store.iterate_at(12, b"")) == list(replay.iterate_at(12, b""))
    store.close()
    again = MerkleStore(path, keep_recent=3)
    assert (again.height, again.app_hash) == (14, roots[14])
    again.close()
