"""Workers that crash, join and leave while a job runs: one real cometbft validator, real
`loconet provider run` processes, real HTTP blob servers, outcomes read from `/rounds/{job}`.

The job asks 2 participants per round and challenges nothing (genesis jobs.min_challenge_bps=0,
so no verifier is needed): with exactly 2 active providers the draw takes both, which makes
who is drawn in each round known in advance.

- round 0: providers A and B are drawn; A is killed with SIGKILL while it trains and stays down
  until the commit deadline (SIGKILL of its process group, as `kill -9`): its round ends
  ``missed_commit``. A is restarted and takes part (accepted) in a later round.
- as soon as round 1 opens (A and B drawn again): B sends ``tx provider exit`` and C (a funded
  account, no blob of the job seeded) registers and starts its worker. B's duty in flight is kept
  (its round-1 update is accepted); round 2 draws from the active providers only: A and C, never B.
- C, which was never handed a blob, trains round 2 from the base the chain names, the model
  attested in round 0, fetched by hash from a peer: its commitment's base_model_hash is round 0's
  attested model and its update is accepted."""

from __future__ import annotations

import json
import os
import signal
from dataclasses import asdict
from pathlib import Path

import pytest

from node.blobs import BlobStore
from node.client.keys import Keyring
from node.client.market_msgs import build_exit_provider, build_register_provider
from node.local import manifest
from node.local import testnet_market as tm
from node.local.manifest import load, save
from node.worker.ml import detect_hardware
from tests.kits.tnkit import network, query, wait_for

pytestmark = pytest.mark.integration
ROUNDS = 3


def _log_has(w: tm.WorkerInfo, text: str) -> bool:
    p = w.path / "worker.log"
    return p.exists() and text in p.read_text(errors="replace")


# long: one live testnet's workers killed, joining, leaving; splitting hides the order
def test_killed_worker_rejoins_newcomer_is_drawn_leaver_is_not(tmp_path: Path) -> None:
    extra = ("--providers", "2", "--no-job", "--accounts", "1")
    with network(tmp_path, "jobs.min_challenge_bps=0", validators=1, extra=extra) as (d, nodes):
        n0 = nodes[0]
        rpc = n0.rpc_url
        m = load(d)
        a, b = manifest.workers_of(m)
        job, dataset, model = tm.builtin_job(ROUNDS, [a, b])
        # commit 40 >= reveal + 2 x verdict + attest: round r-1 is final when round r+1 opens
        # 160 inner steps (2-6 s here): long enough to be killed in the middle of them
        job.update(
            inner_steps=160,
            trace_interval=40,
            challenge_bps=0,
            participants_per_round=2,
            num_shards=4,
            verifiers_per_challenge=1,
            windows={"commit": 40, "reveal": 2, "verdict": 3, "attest": 6},
        )
        tm.seed_stores([a, b], [dataset, model])
        job_id = tm.create_job(d, rpc, "validator0", job)

        def rounds() -> list[dict]:
            return query(n0, f"/rounds/{job_id}")["rounds"]

        # (a) kill -9 of A while it trains round 0
        wait_for(
            "A to train round 0",
            lambda: _log_has(a, f"round {job_id}/0: training"),
            timeout=90,
            every=0.1,
        )
        os.killpg(int((a.path / "worker.pid").read_text()), signal.SIGKILL)
        wait_for("A to die", lambda: not tm.is_running(a), timeout=10, every=0.1)
        # written once a round's work is made (absent: nothing made yet)
        prog = a.path / "progress.json"
        made = (
            json.loads(prog.read_text())["rounds"].get(f"{job_id}/0", {}) if prog.exists() else {}
        )
        assert "payload" not in made, (
            "A finished training before the kill: the job trains too fast to test this"
        )

        # (c) B exits and (b) C registers while round 0 (A and B) is in its commit window
        # (B's worker signs with the same key: its commitment lands first, so the sequences never
        # race)
        wait_for(
            "B's commitment",
            lambda: any(
                p["address"] == b.address and p["commitment"] for p in rounds()[0]["participants"]
            ),
            timeout=60,
        )
        c_key = "account0"
        c = tm.WorkerInfo(
            "provider2",
            c_key,
            Keyring(d).get(c_key).address,
            str((d / "provider2").resolve()),
            m["base_port"] + tm.BLOB_OFFSET + 200,
            [rpc],
        )
        # one block, both txs
        tm._send_all(
            rpc,
            d,
            [
                (b.key, build_exit_provider()),
                (
                    c_key,
                    build_register_provider(
                        tm.PROVIDER_BOND, detect_hardware(), 50_000, "local", c.endpoint
                    ),
                ),
            ],
        )
        assert rounds()[0]["phase"] == "commit", (
            "B exited / C registered after round 1 was drawn: commit window too short"
        )
        m = load(d)
        m["workers"].append(asdict(c))  # `testnet down` stops it too
        save(d, m)
        tm.start_worker(d, c)

        wait_for("round 0's commit deadline", lambda: rounds()[0]["phase"] != "commit", timeout=120)
        # what `testnet start provider0` does, without a CLI process's start-up
        tm.start_worker(d, a)

        done = wait_for(
            "the job to complete",
            lambda: (j := query(n0, f"/job/{job_id}"))["status"] == "completed" and j,
            timeout=240,
            every=1.0,
        )
        rs = rounds()
        assert len(rs) == ROUNDS and done["rounds_finalized"] == ROUNDS
        by = [{p["address"]: p for p in r["participants"]} for r in rs]

        assert set(by[0]) == {a.address, b.address}
        assert by[0][a.address]["outcome"] == "missed_commit" and by[0][a.address]["reward"] == 0, (
            by[0][a.address]
        )
        # B's duty in flight, kept
        assert by[0][b.address]["outcome"] == "accepted", by[0][b.address]
        later = [i for i in (1, 2) if by[i].get(a.address, {}).get("outcome") == "accepted"]
        assert later, (
            f"A never took part after its restart: {[by[i].get(a.address) for i in (1, 2)]}"
        )

        assert query(n0, f"/provider/{b.address}")["status"] == "exiting"
        for i in (1, 2):  # the active providers are A and C: B, exiting, is never drawn again
            assert set(by[i]) == {a.address, c.address}, f"round {i} drew {sorted(by[i])}"

        attested0 = rs[0]["attested_model_hash"]
        assert attested0 and attested0 != job["initial_model_hash"]
        assert rs[2]["base_model_hash"] == attested0
        pc = by[2][c.address]
        assert pc["outcome"] == "accepted" and pc["reward"] > 0, pc
        assert pc["commitment"]["base_model_hash"] == attested0
        store = BlobStore(c.path / "blobs", quota_bytes=1 << 30)
        # fetched by hash: never seeded
        assert store.has(attested0) and store.has(job["dataset_id"])
