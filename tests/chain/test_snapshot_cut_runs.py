"""``snapshots.cut`` builds the same snapshot however it splits the work: in one run in memory,
or in runs of ``pass_bytes`` spilled to temporary files in one pass over the state (several
passes once there are more runs than ``MAX_SPILL_FILES``). The chunks are byte for byte the
same, so nodes with different memory settings still offer one snapshot; each chunk still
rebuilds its subtree and the whole restores to the state's root."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from abci_app import snapshots
from abci_app.encoding import encode_uvarint
from abci_app.pb import abci
from abci_app.snapshots import Restore, cut, decode_chunk
from abci_app.store import MerkleStore

_rng = random.Random(5)
STATE = {_rng.randbytes(1 + i % 30): bytes(i % 97) * (i % 5) for i in range(3000)}


def _cut(pass_bytes: int, spill_dir: Path | None = None) -> tuple[abci.Snapshot, list[bytes]]:
    reads = [0]

    def pairs():
        reads[0] += 1
        return iter(STATE.items())

    chunks: list[bytes] = []
    snap = cut(pairs, 9, 4096, lambda i, c: chunks.append(c), pass_bytes, spill_dir)
    assert len(chunks) == snap.chunks and [decode_chunk(c, i) for i, c in enumerate(chunks)]
    _cut.reads = reads[0]  # type: ignore[attr-defined]
    return snap, chunks


def runs_of(chunks: list[bytes], pass_bytes: int = 8192) -> int:
    """How many runs ``cut`` groups these chunks into (its rule: add chunks while they fit)."""
    runs, held = 0, -1
    for i, c in enumerate(chunks):
        size = len(c) - 1 - len(encode_uvarint(i))  # the pairs' bytes, without the header
        if held < 0 or held + size > pass_bytes:
            runs, held = runs + 1, size
        else:
            held += size
    return runs


@pytest.mark.parametrize("spill_files", [64, 3])
def test_runs_spilled_or_not_make_the_same_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spill_files: int
) -> None:
    whole, whole_chunks = _cut(1 << 40)
    assert _cut.reads == 2  # type: ignore[attr-defined]  # size, then build
    monkeypatch.setattr(snapshots, "MAX_SPILL_FILES", spill_files)
    runs, run_chunks = _cut(8192, tmp_path)  # ~2 chunks a run: ~20 runs
    assert whole.chunks >= 16
    assert runs.SerializeToString() == whole.SerializeToString()
    assert run_chunks == whole_chunks
    # sizing + one spill pass per MAX_SPILL_FILES runs (it was sizing + one pass per run)
    assert _cut.reads == (2 if spill_files == 64 else 1 + -(-runs_of(run_chunks) // 3))  # type: ignore[attr-defined]
    assert list(tmp_path.iterdir()) == []  # the spill files are gone


def test_a_spilled_snapshot_restores(tmp_path: Path) -> None:
    src = MerkleStore(None)
    src.stage(1, STATE)
    src.commit()
    chunks: list[bytes] = []
    snap = cut(lambda: src.iterate_at(1, b""), 1, 4096, lambda i, c: chunks.append(c), 8192)
    r = Restore(snap, src.app_hash)
    assert Restore.check_offer(snap, src.app_hash) == abci.ResponseOfferSnapshot.ACCEPT
    for i, c in enumerate(chunks):
        resp, last = r.apply(i, c, "peer")
        assert resp.result == abci.ResponseApplySnapshotChunk.ACCEPT and last == (
            i == len(chunks) - 1
        )
    dst = MerkleStore(tmp_path / "dst.db")
    assert r.finish(dst).result == abci.ResponseApplySnapshotChunk.ACCEPT
    assert dst.app_hash == src.app_hash and dict(dst.iterate(b"")) == STATE


def test_the_empty_state_is_one_empty_chunk() -> None:
    chunks: list[bytes] = []
    snap = cut(lambda: iter(()), 3, 4096, lambda i, c: chunks.append(c), 8192)
    assert snap.chunks == 1 and decode_chunk(chunks[0], 0) == []
