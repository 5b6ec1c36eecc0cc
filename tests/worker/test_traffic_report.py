"""benchmarks/traffic.py's arithmetic on a tiny saved run: the AllReduce bytes per worker per
round (2(N-1)/N x 4 B x P x H each way), the bytes by kind per worker-round, the three ratios,
the roles, the node link, and --from-saved printing it (no network)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.traffic import allreduce_round_bytes, main, ring_factor, summarize

P, H = 1_000, 10
A, B, C = "loco1a", "loco1b", "loco1c"


def rnd(n: int, participants: list[str], verifier: str | None) -> dict[str, Any]:
    ps: list[dict[str, Any]] = [
        {"address": a, "outcome": "accepted", "challenge": None, "commitment": {}}
        for a in participants
    ]
    if verifier:
        ps[0]["challenge"] = {"verifiers": [{"address": verifier, "panel": 0}]}
    return {"job_id": 1, "round": n, "participants": ps}


def saved() -> dict[str, Any]:
    final = {"finalized": 1.0}
    stats = {
        # round 0: A and B train, C verifies A; round 1: A and C train, B idle
        A: {
            "rounds": {
                "1/0": {
                    **final,
                    "bytes_out.update": 100,
                    "bytes_out.state": 1_000,
                    "bytes_in.update": 100,
                    "tx_bytes": 50,
                },
                "1/1": {**final, "bytes_out.update": 100, "bytes_in.update": 200, "tx_bytes": 50},
                "1/2": {"bytes_in.model": 9_999},  # the job's last round: not final, not reported
            },
            "traffic": {"rpc_out": 300, "rpc_in": 500, "ws_in": 1_200},
        },
        B: {
            "rounds": {
                "1/0": {
                    **final,
                    "bytes_out.update": 100,
                    "bytes_in.update": 100,
                    "bytes_in.model": 400,
                    "tx_bytes": 50,
                },
                "1/1": {**final, "bytes_in.http": 10},
            },
            "traffic": {"rpc_out": 0, "rpc_in": 0, "ws_in": 0},
        },
        C: {
            "rounds": {
                "1/0": {**final, "bytes_in.state": 1_000, "bytes_in.update": 100, "tx_bytes": 40},
                "1/1": {**final, "bytes_out.update": 100, "bytes_in.update": 100},
                "-": {"bytes_out.model": 77},
            },
        },
    }
    return {
        "job_id": 1,
        "job": {"inner_steps": H, "trace_interval": 5, "participants_per_round": 2},
        "n_params": P,
        "workers": [
            {"name": "pa", "address": A},
            {"name": "pb", "address": B},
            {"name": "pc", "address": C},
        ],
        "rounds": [rnd(0, [A, B], C), rnd(1, [A, C], None), rnd(2, [B, C], None)],
        "stats": stats,
    }


def test_allreduce_bytes() -> None:
    assert ring_factor(2) == 1.0 and ring_factor(4) == 1.5 and ring_factor(1) == 0.0
    ar = allreduce_round_bytes(P, 2, H)
    assert ar == {"sent": 40_000.0, "received": 40_000.0, "total": 80_000.0}
    assert allreduce_round_bytes(P, 4, H)["total"] == 2 * 1.5 * 4 * P * H == 120_000


def test_summary_of_a_tiny_run() -> None:
    s = summarize(saved())
    assert s["rounds"] == [0, 1]  # round 2 is not final everywhere
    rows = {(x["worker"], x["round"]): x for x in s["rows"]}
    assert len(rows) == 6
    a0 = rows[("pa", 0)]
    assert a0["sent"]["update"] == 100 and a0["sent"]["state"] == 1_000 and a0["sent"]["tx"] == 50
    assert a0["sent_total"] == 1_150 and a0["received_total"] == 100 and a0["total"] == 1_250
    assert rows[("pc", 0)]["role"] == "verifier" and rows[("pb", 1)]["role"] == "idle"
    assert rows[("pb", 1)]["total"] == 10
    totals = [x["total"] for x in s["rows"]]
    assert sorted(totals) == [10, 200, 350, 650, 1_140, 1_250]
    mean = sum(totals) / 6
    assert mean == 600
    assert s["totals"]["total"]["mean"] == pytest.approx(mean)
    assert s["totals"]["total"]["max"] == 1_250
    assert s["kinds"]["sent"]["update"]["max"] == 100
    assert s["kinds"]["received"]["state"]["mean"] == pytest.approx(1_000 / 6)
    assert s["allreduce_mean"] == 80_000
    assert s["ratio_mean"] == pytest.approx(80_000 / mean)
    assert s["ratio_max"] == pytest.approx(80_000 / 1_250)
    # round 0 moved 1,250 + 650 + 1,140 = 3,040 B, round 1 350 + 10 + 200 = 560 B, N = 2 each
    assert [p["total"] for p in s["per_round"]] == [3_040, 560]
    assert s["per_round"][0]["ratio_charged"] == pytest.approx(80_000 / 1_520)
    assert s["ratio_charged"] == pytest.approx(160_000 / (3_040 / 2 + 560 / 2))
    assert s["roles"]["participant"]["count"] == 4 and s["roles"]["verifier"]["count"] == 1
    # the node link: A's 2,000 B over its 2 final rounds; B's and C's none
    link = {x["worker"]: x for x in s["link"]}
    assert link["pa"]["out"] == 150 and link["pa"]["in"] == 850
    assert s["link_mean"] == pytest.approx(1_000 / 3)
    assert s["ratio_with_link"] == pytest.approx(80_000 / (600 + 1_000 / 3))
    assert s["unattributed"]["pc"] == 77


def test_from_saved_prints_the_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "run.json"
    f.write_text(json.dumps(saved()))
    assert main(["--from-saved", str(f)]) == 0
    out = capsys.readouterr().out
    assert "N (participants per round) = 2" in out
    assert "= 80,000 B" in out  # AllReduce per worker per round, sent + received
    assert "**133x** (mean worker-round)" in out  # 80,000 / 600
    assert "| participant | 4 |" in out
