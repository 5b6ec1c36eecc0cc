"""Retention: the worker runs the blob store's gc when a round is finalized and every GC_EVERY_S
from its loop, so a finalized round's temp blobs (trace states) are gone one margin after it
finalized, while pinned (cold: attested models, the dataset) and hot blobs (payloads) stay. The
store runs on a clock the test moves; the chain's answers are stand-ins."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from node.blobs import BlobStore
from node.client.keys import Keyring
from node.worker import worker as worker_mod
from node.worker.worker import ProviderWorker, WorkerConfig

MARGIN = 600.0


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


class Chain:
    """Answers tick()'s reads: height 10, no active job."""

    def call(self, fn: Any) -> int:
        return 10

    def query_json(self, path: str, height: int = 0) -> Any:
        return {"jobs": []}

    def close(self) -> None:
        pass


def finalized(rn: int, model: str) -> dict[str, Any]:
    return {"job_id": 3, "round": rn, "attested_model_hash": model, "participants": []}


def test_temp_blobs_go_one_margin_after_their_round_finalized_pinned_and_hot_stay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    Keyring(tmp_path).add("prov")
    w = ProviderWorker(
        WorkerConfig(
            home=tmp_path,
            key="prov",
            nodes=["http://127.0.0.1:9"],
            data_dir=tmp_path / "data",
            check_hardware=False,
        )
    )
    clock = Clock()
    w.store.close()
    w.store = BlobStore(tmp_path / "data" / "blobs", temp_margin_s=MARGIN, clock=clock)
    s = w.store
    dataset = s.put_bytes(os.urandom(2000), tier="cold")
    states = {
        rn: [s.put_bytes(os.urandom(500), "temp", f"3/{rn}") for _ in range(3)] for rn in (1, 2)
    }
    payload = s.put_bytes(os.urandom(700), "hot", "3/1")
    model = s.put_bytes(os.urandom(900), "hot", "3/1")  # the round's aggregate, attested

    w.on_finalized(finalized(1, model))  # released, and gc ran: the margin has not passed
    assert all(s.has(h) for h in states[1] + states[2])
    assert s.info(model).pinned  # the attested model, pinned at finalize

    clock.t += MARGIN + 1
    w.on_finalized(finalized(2, ""))  # its gc deletes round 1's temp blobs, keeps round 2's
    assert not any(s.has(h) for h in states[1])
    assert all(s.has(h) for h in states[2])
    assert s.has(payload) and s.has(model) and s.has(dataset)

    # no round finalizes any more (the job ended): the loop's periodic gc takes round 2's
    clock.t += MARGIN + 1
    w.nodes = Chain()  # type: ignore[assignment]
    w.tick()  # gc ran at the last finalize, less than GC_EVERY_S ago: not yet
    assert all(s.has(h) for h in states[2])
    monkeypatch.setattr(worker_mod, "GC_EVERY_S", 0.0)
    w.tick()
    assert not any(s.has(h) for h in states[2])
    assert s.has(payload) and s.has(model) and s.has(dataset)
    assert s.info(model).pinned and s.info(dataset).pinned
    w._pool.shutdown(wait=True)
    s.close()
