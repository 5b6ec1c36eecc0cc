"""MerkleStore.restore: the bulk import state sync uses (a whole state committed as one version,
only if its root is the trusted app hash)."""

from __future__ import annotations

from pathlib import Path

import pytest

from abci_app.store import MerkleStore, StoreError, VersionNotAvailable, verify_proof
from tests.kits.storekit import reference_root

STATE = {
    b"alice": b"100",
    b"bob": b"200",
    b"carol": b"",
    **{b"k%04d" % i: b"v%d" % i for i in range(300)},
}


def test_restore_commits_the_state_as_the_only_height(tmp_path: Path) -> None:
    root = reference_root(STATE)
    s = MerkleStore(tmp_path / "s.db", keep_recent=10)
    s.restore(500, sorted(STATE.items()), root)
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
        s.restore(7, sorted(STATE.items()), bytes(32))
    assert (s.height, s.app_hash, list(s.iterate(b""))) == (0, bytes(32), [])
    s.restore(7, sorted(STATE.items()), reference_root(STATE))  # the next try works
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
