"""A tolerance-mode job on the living network (4 validators, 4 provider workers, 1 of them a
random-root cheater) over real cometbft, HTTP blob servers and processes: the workers commit the
probes of their traces (bound probe root), reveal the challenged ends as leaf hashes, open the
ends and their probes after the first panel voted (MsgOpenEnd), and verifiers commit blind votes
on the probes of their re-executions (docs/threat-model.md *Evidence only re-execution
yields*). Checked from the chain: every honest commitment is accepted and paid, every end was
opened with its probe, no honest verifier's probe disagreed (nobody honest slashed), and the
cheater's challenged rounds end in fraud or a missed reveal, slashed."""

from __future__ import annotations

from pathlib import Path

import pytest

from node.local.manifest import load, workers_of
from tests.kits.tnkit import network, query, wait_for

pytestmark = pytest.mark.integration
ROUNDS = 3


def test_tolerance_job_runs_with_probes_end_to_end(tmp_path: Path) -> None:
    extra = (
        "--providers",
        "4",
        "--cheaters",
        "random-root:1",
        "--rounds",
        str(ROUNDS),
        "--determinism",
        "tolerance",
    )
    with network(tmp_path, extra=extra) as (d, nodes):
        m = load(d)
        job_id = m["job_id"]
        workers = workers_of(m)
        honest = {w.address for w in workers if w.behaviour == "honest"}
        (cheater,) = [w.address for w in workers if w.behaviour == "random-root"]
        n0 = nodes[0]
        job = wait_for(
            "the job to complete",
            lambda: (j := query(n0, f"/job/{job_id}"))["status"] == "completed" and j,
            timeout=500,
            every=1.0,
        )
        assert job["spec"]["determinism_mode"] == "tolerance"
        rounds = query(n0, f"/rounds/{job_id}")["rounds"]
        assert len(rounds) == ROUNDS
        caught = []
        for r in rounds:
            for s in r["slashes"]:
                assert s["address"] == cheater, (r["round"], s)  # nobody honest slashed
            for p in r["participants"]:
                ch = p["challenge"]
                assert p["commitment"]["probe_root"], p
                if p["address"] in honest:
                    assert p["outcome"] == "accepted" and p["reward"] > 0, (r["round"], p)
                    assert all(o["end_opened_height"] and o["end_probe"] for o in ch["reveals"])
                    assert all(
                        v["voted"] and v["valid"] and not v["probe_mismatch"]
                        for v in ch["verifiers"]
                    ), (r["round"], p)
                else:
                    assert p["outcome"] in ("fraud", "missed_reveal"), (r["round"], p)
                    assert p["slashed"] > 0 and p["reward"] == 0
                    caught.append(r["round"])
        assert caught, "the cheater was never drawn"
