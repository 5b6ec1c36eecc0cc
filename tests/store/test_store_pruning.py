"""Pruning: old heights go away with a clear error, the database stays bounded."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from abci_app.store import MerkleStore, StoreError, VersionNotAvailable, verify_proof
from tests.kits.storekit import table_count


def _value(height: int, i: int) -> bytes:
    return hashlib.sha256(b"%d:%d" % (height, i)).digest()


def test_invalid_heights_raise_version_not_available_with_range() -> None:
    store = MerkleStore(None, keep_recent=3)
    for h in range(1, 11):
        store.stage(h, {b"k": b"%d" % h})
        store.commit()
    assert store.earliest_height == 8
    assert store.get_at(b"k", 8) == b"8"
    with pytest.raises(VersionNotAvailable, match=r"height 7 is not available: it was pruned") as e:
        store.get_at(b"k", 7)
    assert "8..10" in str(e.value)
    assert "keep_recent=3" in str(e.value)
    with pytest.raises(VersionNotAvailable, match=r"height 11 .* latest committed height is 10"):
        store.get_at(b"k", 11)
    with pytest.raises(VersionNotAvailable, match="8..10"):
        list(store.iterate_at(0, b""))
    with pytest.raises(VersionNotAvailable, match="8..10"):
        store.prove(b"k", 5)
    with pytest.raises(VersionNotAvailable, match="8..10"):
        store.root_at(7)
    assert isinstance(VersionNotAvailable(1, 2, 3, 4), StoreError)


def test_invalid_keep_recent() -> None:
    with pytest.raises(StoreError, match="keep_recent"):
        MerkleStore(None, keep_recent=0)


def test_rewriting_the_same_keys_keeps_the_database_bounded() -> None:
    keep, n_keys = 5, 30
    store = MerkleStore(None, keep_recent=keep)
    store.stage(1, {b"key%02d" % i: _value(1, i) for i in range(n_keys)})
    store.commit()
    written = []
    sizes = []
    for h in range(2, 161):
        store.stage(h, {b"key%02d" % ((h + i) % n_keys): _value(h, i) for i in range(6)})
        store.commit()
        written.append(store.stats.pages_written)
        sizes.append(
            {t: table_count(store, t) for t in ("pages", "stale_pages", "kv_history", "roots")}
        )
    live_pages = 2 * n_keys - 1  # a tree with n leaves has n - 1 internal nodes: fewer pages
    bound = live_pages + keep * max(written)
    assert all(s["pages"] <= bound for s in sizes), (bound, max(s["pages"] for s in sizes))
    assert all(s["roots"] == keep for s in sizes[keep:])
    assert all(s["kv_history"] <= n_keys + keep * 6 for s in sizes)
    late = max(s["pages"] for s in sizes[100:])
    early = max(s["pages"] for s in sizes[20:60])
    assert late <= early + max(written), (early, late)
    # every retained height is still complete
    for past in range(store.earliest_height, store.height + 1):
        root = store.root_at(past)
        for i in range(n_keys):
            key = b"key%02d" % i
            assert verify_proof(store.prove(key, past), root, key, store.get_at(key, past))


def test_deleted_keys_leave_no_history_behind() -> None:
    store = MerkleStore(None, keep_recent=2)
    store.stage(1, {b"a%d" % i: b"x" for i in range(50)})
    store.commit()
    store.stage(2, {b"a%d" % i: None for i in range(50)})
    store.commit()
    assert store.get_at(b"a7", 1) == b"x"
    for h in range(3, 5):
        store.stage(h, {})
        store.commit()
    assert table_count(store, "kv_history") == 0
    assert table_count(store, "pages") == 0
    assert list(store.iterate_at(store.earliest_height, b"")) == []


def test_lower_keep_recent_on_reopen_prunes_at_next_commit(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = MerkleStore(path, keep_recent=50)
    for h in range(1, 21):
        store.stage(h, {b"k%d" % (h % 4): _value(h, 0)})
        store.commit()
    assert store.earliest_height == 0
    store.close()
    store = MerkleStore(path, keep_recent=3)
    assert store.earliest_height == 18
    store.stage(21, {b"k0": b"new"})
    store.commit()
    assert store.earliest_height == 19
    assert store.stats.pages_pruned > 0
    assert table_count(store, "roots") == 3
    assert store.get_at(b"k1", 19) == _value(17, 0)
    store.close()
