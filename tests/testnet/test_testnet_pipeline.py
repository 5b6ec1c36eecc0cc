"""A pipeline-parallel island on a live testnet (issue 35, 1): one real cometbft validator, three
real `loconet provider run` workers with fixed roles (two train every round, one verifies). The
first trainer is restarted as an island, `provider run --pipeline 2` (a 2-stage torchrun island,
gloo on this CPU); the verifier is a plain single-process worker. The island's round is
challenged (every round is), its segments re-executed by the one-process verifier in exact
mode, and accepted and paid; its committed trace names the island's slicing (slices = 4: one
replica of 4 microbatches), so the island, not a single process, made it."""

from __future__ import annotations

from pathlib import Path

import pytest

from node.blobs import BlobStore
from node.local import manifest
from node.local import testnet_market as tm
from node.local.manifest import load
from tests.kits.tnkit import network, query, wait_for

pytestmark = pytest.mark.integration


@pytest.mark.timeout(600)
def test_pipeline_island_round_is_accepted_by_one_process_verifiers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from trainer.state import load_state

    extra = ("--providers", "3", "--fixed-roles", "--no-job")
    with network(tmp_path, validators=1, extra=extra) as (d, nodes):
        n0 = nodes[0]
        m = load(d)
        workers = manifest.workers_of(m)
        island = workers[0]
        assert island.role == "train" and workers[-1].role == "verify"
        # restart the first trainer as a 2-stage island: start_worker's own command line, plus
        # --pipeline 2 (its pid file, so `testnet down` stops it as any worker)
        tm.stop_worker(island)
        wait_for("the worker to stop", lambda: not tm.is_running(island), timeout=30)
        spawn = tm.procs.spawn

        def as_island(args: list[str], **kw: object) -> int:
            return spawn([*args, "--pipeline", "2"], **kw)  # type: ignore[arg-type]

        with monkeypatch.context() as mp:
            mp.setattr(tm.procs, "spawn", as_island)
            tm.start_worker(d, island)
        job, dataset, model = tm.builtin_job(1, workers)
        # the island starts torchrun (two processes importing torch) for its round: a roomier
        # commit window than the built-in job's on a loaded 2-core machine
        job["windows"] = dict(job["windows"], commit=120)
        tm.seed_stores(workers, [dataset, model])
        job_id = tm.create_job(d, n0.rpc_url, "validator0", job)
        wait_for(
            "the job to complete",
            lambda: query(n0, f"/job/{job_id}")["status"] == "completed",
            timeout=450,
            every=1.0,
        )
        (r,) = query(n0, f"/rounds/{job_id}")["rounds"]
        (p,) = [p for p in r["participants"] if p["address"] == island.address]
        assert p["outcome"] == "accepted" and p["reward"] > 0, p
        votes = p["challenge"]["verifiers"]
        assert votes and all(v["voted"] and v["valid"] for v in votes), votes
        assert island.address not in {v["address"] for v in votes}
        assert not r["slashes"], r["slashes"]
        # the committed trace is the island's: its states name the slicing
        prog = json.loads((island.path / "progress.json").read_text())
        last = prog["rounds"][f"{job_id}/0"]["trace"][-1]
        st = load_state(bytes(BlobStore(island.path / "blobs", quota_bytes=1 << 30).read(last)))
        assert (st.slices, st.microbatches) == (4, 1)
