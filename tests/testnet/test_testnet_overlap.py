"""Issue 30 on real processes: a 2-validator testnet with 3 provider workers across a simulated WAN
(``--wan 100ms:100mbit``: every p2p link and every worker's blob server behind toxiproxy), fixed
roles (2 train every round, 1 only verifies), runs a 4-round job whose training takes seconds.
The chain opens round r + 1 as soon as round r's commitments are all in and round r - 1 is final
(early close, one-step-delay gating), so each trainer trains round r + 1 while round r is
verified and aggregated: its own aggregation of round r (on the duty thread) runs during its
training of round r + 1, as the spans in its stats.json show; every round is finalized, every
update accepted, nobody slashed, and the phases closed early (the windows are long upper
bounds)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from node import testnet_market as tm
from node import wan
from node.ports import find_free_base, random_bases
from node.testnet import load, nodes_of
from tests.kits.tnkit import cli, query, wait_for

pytestmark = pytest.mark.integration
ROUNDS = 4


VALIDATORS, PROVIDERS = 2, 3


def wan_base_port() -> int:
    n = max(VALIDATORS, PROVIDERS)
    offs = [100 * i + k for i in range(n + 1) for k in (0, 1, 2, 4, 5, 24)]
    offs += wan.port_offsets(VALIDATORS, PROVIDERS)
    return find_free_base([b + 56 for b in random_bases(20_000, 32_000, 100)], offs)


def test_a_wan_testnet_trains_the_next_round_while_the_last_one_is_verified(
    tmp_path: Path,
) -> None:
    d = tmp_path / "net"
    try:
        cli(
            *("testnet", "up", "--dir", str(d), "--validators", str(VALIDATORS)),
            *("--providers", str(PROVIDERS), "--fixed-roles", "--no-job"),
            *("--base-port", str(wan_base_port()), "--wan", "100ms:100mbit", "--timeout", "150"),
        )
        run_job(d)
    finally:
        if (d / "testnet.json").exists():
            cli("testnet", "down", "--dir", str(d), check=False)


def run_job(d: Path) -> None:
    nodes = nodes_of(load(d))
    workers = tm.workers_of(load(d))
    trainers = [w for w in workers if w.role == "train"]
    assert len(trainers) == 2, [w.role for w in workers]
    job, dataset, model = tm.builtin_job(ROUNDS, workers)
    # long windows (upper bounds); H = 400 steps: seconds of training per round
    job.update(
        inner_steps=400,
        trace_interval=100,
        windows={"commit": 150, "reveal": 40, "verdict": 60, "attest": 40},
    )
    tm.seed_stores(workers, [dataset, model])
    job_id = tm.create_job(d, nodes[0].rpc_url, "validator0", job)
    wait_for(
        "the job to complete",
        lambda: query(nodes[0], f"/job/{job_id}")["status"] == "completed",
        timeout=600,
        every=1.0,
    )
    rounds = query(nodes[0], f"/rounds/{job_id}")["rounds"]
    assert len(rounds) == ROUNDS
    for r in rounds:
        assert r["phase"] == "finalized" and r["attested_model_hash"], r["round"]
        assert all(p["outcome"] == "accepted" for p in r["participants"]), r
        w = r["windows"]
        # early close: the round ended long before its windows would have
        assert r["finalized_height"] < w["open_height"] + 150, (r["round"], w)
    for r, nxt in zip(rounds, rounds[1:], strict=False):
        # round r + 1 opened before round r was finalized (it trained while r was verified)
        assert nxt["windows"]["open_height"] < r["finalized_height"], (r["round"], nxt)
    assert all(query(nodes[0], f"/provider/{w.address}")["slashed_total"] == 0 for w in workers)
    time.sleep(16)  # workers write stats.json at least every 15 s
    overlaps = []
    for w in trainers:
        st = json.loads((w.path / "stats.json").read_text())["rounds"]
        for rn in range(ROUNDS - 1):
            agg, nxt = st.get(f"{job_id}/{rn}", {}), st.get(f"{job_id}/{rn + 1}", {})
            if "aggregate_start" in agg and "train_start" in nxt:
                # the aggregation of round rn ran while round rn + 1 trained
                if (
                    nxt["train_start"] < agg["aggregate_end"]
                    and agg["aggregate_start"] < (nxt["train_end"])
                ):
                    overlaps.append((w.name, rn))
    assert overlaps, "no trainer aggregated round r while it trained round r + 1"
