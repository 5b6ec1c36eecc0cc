"""MerkleStore.restore: the bulk import state sync uses (a whole state committed as one version,
only if its root is the trusted app hash)."""

from __future__ import annotations

from pathlib import Path

import pytest

from abci_app.store import MerkleStore, StoreError, VersionNotAvailable, verify_proof
from abci_app.store.tree import hash_key
from tests.kits.storekit import reference_root

STATE = {
    b"alice": b"100",
    b"bob": b"200",
    b"carol": b"",
    **{b"k%04d" % i: b"v%d" % i for i in range(300)},
}


def in_hash_order(state: dict[bytes, bytes]) -> list[tuple[bytes, bytes]]:
    """A snapshot's order: ascending sha256(key)."""
    return sorted(state.items(), key=lambda kv: hash_key(kv[0]))


def test_restore_commits_the_state_as_the_only_height(tmp_path: Path) -> None:
    root = reference_root(STATE)
    s = MerkleStore(tmp_path / "s.db", keep_recent=10)
    s.restore(500, in_hash_order(STATE), root)
    assert (s.height, s.app_hash, s.earliest_height) == (500, root, 500)
    assert dict(s.iterate(b"")) == STATE == dict(s.iterate_at(500, b""))
    p = s.prove(b"bob")
    assert verify_proof(p, root, b"bob", b"200")
    with pytest.raises(VersionNotAvailable):
        s.get_at(b"alice", 499)
    # blocks continue on top, and the file reopens at the restored height
    s.stage(501, {b"alice": b"99", b"dave": b"1"})
    s.commit()
    s.close()
    s = MerkleStore(tmp_path / "s.db", keep_recent=10)
    assert (s.height, s.get(b"alice"), s.get_at(b"alice", 500)) == (501, b"99", b"100")
    assert s.app_hash == reference_root(STATE | {b"alice": b"99", b"dave": b"1"})
    s.close()


def test_invalid_restore_with_another_root_writes_nothing() -> None:
    s = MerkleStore(None)
    with pytest.raises(StoreError, match="not the trusted app hash"):
        s.restore(7, in_hash_order(STATE), bytes(32))
    assert (s.height, s.app_hash, list(s.iterate(b""))) == (0, bytes(32), [])
    s.restore(7, in_hash_order(STATE), reference_root(STATE))  # the next try works
    assert s.height == 7


def test_invalid_restore_onto_a_store_with_blocks() -> None:
    s = MerkleStore(None)
    s.stage(1, {b"a": b"1"})
    s.commit()
    with pytest.raises(StoreError, match="empty store"):
        s.restore(9, [(b"b", b"2")], reference_root({b"b": b"2"}))
    assert (s.height, s.get(b"b")) == (1, None)


@pytest.mark.parametrize("height", [0, -1])
def test_invalid_restore_height(height: int) -> None:
    with pytest.raises(StoreError, match="height"):
        MerkleStore(None).restore(height, [(b"a", b"1")], reference_root({b"a": b"1"}))


def test_invalid_restore_out_of_hash_order_or_a_key_twice_writes_nothing(tmp_path: Path) -> None:
    # restore streams the pairs into the tree in one pass: it needs the snapshot's order
    pairs = in_hash_order(STATE)
    swapped = pairs[:10] + [pairs[11], pairs[10]] + pairs[12:]
    twice = pairs[:50] + [pairs[49]] + pairs[50:]
    s = MerkleStore(tmp_path / "s.db")
    for bad in (swapped, twice, sorted(STATE.items())):
        with pytest.raises(StoreError, match="ascending sha256"):
            s.restore(7, bad, reference_root(STATE))
        assert (s.height, s.app_hash, list(s.iterate(b""))) == (0, bytes(32), [])
    s.restore(7, pairs, reference_root(STATE))
    assert dict(s.iterate(b"")) == STATE


def test_a_restore_cut_off_midway_leaves_the_store_empty(tmp_path: Path) -> None:
    # the pairs stream is written in batches inside one transaction: a failure after some
    # batches went to SQLite (here: the source of the pairs breaks) rolls all of them back
    state = {b"key%06d" % i: b"v" * (i % 50) for i in range(50_000)}
    pairs = in_hash_order(state)

    def breaks_at(n: int):
        yield from pairs[:n]
        raise OSError("peer went away")

    s = MerkleStore(tmp_path / "s.db")
    with pytest.raises(OSError, match="peer went away"):
        s.restore(40, breaks_at(45_000), reference_root(state))
    assert (s.height, list(s.iterate(b""))) == (0, [])
    s.close()
    s = MerkleStore(tmp_path / "s.db")  # and the file reopens empty, then restores whole
    assert (s.height, s.app_hash) == (0, bytes(32))
    s.restore(40, pairs, reference_root(state))
    assert s.get(b"key012345") == state[b"key012345"] and s.app_hash == reference_root(state)
    s.stage(41, {b"key000001": None, b"new": b"x"})
    s.commit()
    assert s.app_hash == reference_root(
        {k: v for k, v in state.items() if k != b"key000001"} | {b"new": b"x"}
    )
    s.close()


def test_restore_of_an_empty_state_and_of_one_key() -> None:
    s = MerkleStore(None)
    s.restore(3, [], bytes(32))
    assert (s.height, s.app_hash, list(s.iterate(b""))) == (3, bytes(32), [])
    s = MerkleStore(None)
    s.restore(3, [(b"only", b"1")], reference_root({b"only": b"1"}))
    assert verify_proof(s.prove(b"only"), s.app_hash, b"only", b"1")


def test_a_key_twice_at_a_batch_boundary_is_a_store_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # the row of a repeated key that filled a batch reached SQLite (UNIQUE (key, version)) before
    # the builder saw the repeat: sqlite3.IntegrityError, which Restore.finish does not catch
    from abci_app.store import restore

    monkeypatch.setattr(restore, "RESTORE_BATCH", 4)
    state = {b"k%d" % i: b"v" for i in range(10)}
    pairs = in_hash_order(state)
    for at in range(1, 9):
        twice = pairs[:at] + [pairs[at - 1]] + pairs[at:]
        s = MerkleStore(None)
        with pytest.raises(StoreError, match="ascending sha256"):
            s.restore(7, twice, reference_root(state))
        assert (s.height, list(s.iterate(b""))) == (0, [])
        s.restore(7, pairs, reference_root(state))
        assert dict(s.iterate(b"")) == state
