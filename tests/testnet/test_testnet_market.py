"""The living network: 4 validators and 4 provider workers (3 honest, 1 random-root cheater)
train a real job for 4 rounds over real cometbft, real HTTP blob servers and real processes.
Each round 2 providers train and the other 2 verify (the chain never lets participants verify
each other); the cheater's 4x bond makes it drawn with probability 6/7 per round.

Checked from the chain and from blobs fetched over HTTP: every honest commitment is accepted,
paid and never slashed; the cheater's challenged round ends in fraud and a slash; each attested
model hash equals an independent recomputation (the round's base model and the accepted
updates, fetched over HTTP, through the workers' own ml.aggregate_payloads); the held-out loss
of the last attested model is below the initial one. Midway, the validator node1 (provider1's
--node) is stopped: the rounds go on, provider1's log shows it switched to its fallback node2
(JSON-RPC and websocket) and a duty done after that, and the chain a commitment, vote or
attestation of provider1 after the stop."""

from __future__ import annotations

from pathlib import Path

import pytest

from node.local.manifest import load, workers_of
from node.worker import ml
from node.worker.follow import ws_url
from tests.kits.tnkit import blob_reader, cli, height, network, query, recompute_model, wait_for
from trainer.data import Corpus

pytestmark = pytest.mark.integration
ROUNDS = 4


# long: one live testnet's job, round by round; splitting would hide the order
def test_workers_train_catch_the_cheater_and_attest_the_aggregate(tmp_path: Path) -> None:
    extra = ("--providers", "4", "--cheaters", "random-root:1", "--rounds", str(ROUNDS))
    with network(tmp_path, extra=extra) as (d, nodes):
        m = load(d)
        job_id = m["job_id"]
        workers = workers_of(m)
        honest = {w.address for w in workers if w.behaviour == "honest"}
        (cheater,) = [w.address for w in workers if w.behaviour == "random-root"]
        n0 = nodes[0]
        wait_for(
            "round 0 in reveal",
            # the list is empty until the job's first round opens
            lambda: (rs := query(n0, f"/rounds/{job_id}")["rounds"]) and rs[0]["phase"] != "commit",
            timeout=120,
        )
        p1 = workers[1]  # honest (the cheater is the last); --node node1, then node2
        assert p1.behaviour == "honest" and len(p1.nodes) == 2, p1
        assert p1.nodes[0] == nodes[1].rpc_url.rstrip("/"), (p1.nodes, nodes[1].rpc_url)
        cli("testnet", "stop", "node1", "--dir", str(d))  # provider1's --node: it must fall back
        stopped_at = height(n0)
        job = wait_for(
            "the job to complete",
            lambda: (j := query(n0, f"/job/{job_id}"))["status"] == "completed" and j,
            timeout=400,
            every=1.0,
        )
        rounds = query(n0, f"/rounds/{job_id}")["rounds"]
        assert len(rounds) == ROUNDS and job["rounds_finalized"] == ROUNDS
        caught = []
        for r in rounds:
            by = {p["address"]: p for p in r["participants"]}
            # 2 train and 2 verify; once the cheater is jailed, 3 providers are left and the draw
            # keeps the 2 verifier seats outside the round (jobs.params.reserve_verifiers): 1 trains
            want = {2} if r["round"] == 0 else {1, 2}
            assert len(by) in want and set(by) <= honest | {cheater}, f"round {r['round']}"
            for a in honest & set(by):
                p = by[a]
                assert p["outcome"] == "accepted" and p["reward"] > 0 and p["slashed"] == 0, (
                    r["round"],
                    p,
                )
                assert all(v["voted"] and v["valid"] for v in p["challenge"]["verifiers"]), p
            if cheater in by:
                c = by[cheater]
                assert c["reward"] == 0 and c["outcome"] == "fraud" and c["slashed"] > 0, (
                    r["round"],
                    c,
                )
                caught.append(r["round"])
        assert caught, "the cheater was never drawn (probability (1/7)^4)"
        assert query(n0, f"/provider/{cheater}")["status"] != "active"  # jailed after its fraud
        assert query(n0, f"/provider/{cheater}")["slashed_total"] > 0

        # the attested models, recomputed here from the chain and blobs fetched over HTTP
        plan = ml.JobPlan.from_job(job)
        with blob_reader(tmp_path, [w.endpoint for w in workers]) as blob:
            for r in rounds:
                assert r["attested_model_hash"], f"round {r['round']} has no attested model"
                # the workers' own rule (screen, clipped mean, outer Nesterov with the momentum
                # the base model's bytes carry), called here as a library, not copied
                model, _, excluded = recompute_model(job, r, blob)
                assert excluded == {}, (r["round"], excluded)  # honest updates all pass the screen
                assert model == r["attested_model_hash"], f"round {r['round']}"
            corpus = Corpus(blob(plan.dataset_id))
            first = ml.val_loss(plan, blob(job["spec"]["initial_model_hash"]), corpus)
            last = ml.val_loss(plan, blob(rounds[-1]["attested_model_hash"]), corpus)
            assert last < first - 0.5, (first, last)
        # provider1 fell back to node2 (node/worker/follow.py: Nodes.rotate for its JSON-RPC
        # calls, ChainFollower for the websocket) and still did its duties afterwards
        log = (p1.path / "worker.log").read_text(errors="replace")
        switched = log.find(f"switching to node {p1.nodes[1]}")
        assert switched >= 0, f"provider1 never switched to {p1.nodes[1]}:\n{log[-3000:]}"
        assert f"subscribed to new blocks at {ws_url(p1.nodes[1])}" in log, log[-3000:]
        after = log[switched:]
        duty = ("update submitted at height", ": vote on ", ": attested ")
        assert any(x in after for x in duty), f"no duty logged after the switch:\n{after[-3000:]}"
        # and the chain shows it: a commitment or a vote of provider1 landed after node1 stopped,
        # or an attestation (every attestation follows the stop: round 0 was past commit then)
        acted = [
            r["round"]
            for r in rounds
            for p in r["participants"]
            if (
                p["address"] == p1.address
                and (
                    (p["commitment"] or {}).get("height", 0) > stopped_at
                    or bool(p["attested_hash"])
                )
            )
            or any(
                v["address"] == p1.address and v["voted"] and v["height"] > stopped_at
                for v in (p["challenge"] or {}).get("verifiers", [])
            )
        ]
        assert acted, f"provider1 did nothing on chain after height {stopped_at}"
