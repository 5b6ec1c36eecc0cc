"""Cost per block grows with the changed keys, not with the size of the state."""

from __future__ import annotations

from abci_app.store import MerkleStore, StoreStats


def _commit_ten_changes(state_size: int) -> StoreStats:
    store = MerkleStore(None, keep_recent=2)
    store.stage(1, {b"key-%d" % i: b"v0-%d" % i for i in range(state_size)})
    store.commit()
    # 5 rewrites, 3 inserts, 2 deletes
    changes: dict[bytes, bytes | None] = {b"key-%d" % i: b"v1" for i in range(0, 50, 10)}
    changes.update({b"new-%d" % i: b"v1" for i in range(3)})
    changes.update({b"key-%d" % i: None for i in (55, 77)})
    store.stage(2, changes)
    store.commit()
    return store.stats


def test_commit_work_does_not_grow_with_state_size() -> None:
    small = _commit_ten_changes(100)
    large = _commit_ten_changes(10_000)
    assert small.changed_keys == large.changed_keys == 10
    # the tree is ~log2(n) deep: 100x more state adds only the extra levels on 10 paths
    for field in ("hashes", "node_reads", "nodes_written", "pages_written", "pages_staled"):
        s, big = getattr(small, field), getattr(large, field)
        assert big <= 3 * s, (field, s, big)
        assert big <= 10 * 2 * 20, (field, big)  # 10 keys x (depth ~14 + slack) x 2


def test_commit_work_is_linear_in_changed_keys() -> None:
    store = MerkleStore(None)
    store.stage(1, {b"key-%d" % i: b"v" for i in range(5000)})
    store.commit()
    work = []
    for h, n in ((2, 10), (3, 100)):
        store.stage(h, {b"key-%d" % i: b"w%d" % h for i in range(n)})
        store.commit()
        work.append(store.stats.hashes)
    assert work[1] <= 12 * work[0]
    assert work[1] >= 5 * work[0]
