"""The crash storm's short version (benchmarks/chaos.py has the 100-perturbation run): a real
4-validator network under steady signed load, one perturbation of each kind (kill -9 of the
group, of the app only, of cometbft only, SIGSTOP, restart), a validator joining and one
unbonding meanwhile; then no divergence, no lost tx, balances equal the committed transfers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from node.local.manifest import load, nodes_of
from node.local.testnet import stop_node
from node.paths import PROJECT_ROOT

sys.path.insert(0, str(PROJECT_ROOT / "benchmarks"))
from chaos import KINDS, StormConfig, round_stats, run_storm

pytestmark = pytest.mark.integration


def test_crash_storm_short(tmp_path: Path) -> None:
    d = tmp_path / "net"
    try:
        # generous waits: on a loaded 2-core machine a join or a catch-up can take a minute or more
        res = run_storm(
            StormConfig(perturbations=len(KINDS), seed=11, senders=2, catch_up_timeout=180), d
        )
    finally:
        if (d / "testnet.json").exists():
            for n in nodes_of(load(d)):
                stop_node(n)
    s = res.summary()
    assert s["by_kind"] == dict.fromkeys(KINDS, 1), s
    assert res.joined and res.unbonded
    assert not res.divergent, f"app hashes differ at height {res.final_height}: {res.divergent}"
    assert not res.lost, f"{len(res.lost)} txs accepted by CheckTx are missing from a block store"
    assert res.accepted >= 20, f"too little load to mean anything ({res.accepted} txs)"
    assert res.balance_ok, "the recipient's balance is not the sum of the committed transfers"
    assert not res.sender_errors, res.sender_errors[:5]


def test_round_stats_tells_a_crash_from_a_wrong_verdict() -> None:
    """The storm with workers (``--providers``): an honest provider refuted only by unavailable
    votes (its worker was down through the deciding panel's window) is listed apart; one refuted
    by a vote that re-executed, or a re-executed vote slashed, is a wrong verdict."""

    def v(addr: str, panel: int, *, valid=False, voted=True, unavailable=False, slashed=0):
        return dict(address=addr, panel=panel, valid=valid, voted=voted, slashed=slashed,
                    unavailable=unavailable)  # fmt: skip

    def part(addr: str, outcome: str, verifiers: list) -> dict:
        return {"address": addr, "outcome": outcome, "slashed": 0,
                "challenge": {"verifiers": verifiers}}  # fmt: skip

    rounds = [
        {"round": 0, "phase": "finalized", "participants": [
            part("a", "rejected", [v("b", 0, unavailable=True), v("c", 0, unavailable=True)]),
        ]},
        {"round": 1, "phase": "finalized", "participants": [
            part("b", "rejected", [v("a", 0, unavailable=True), v("c", 0)]),
            part("c", "accepted", [v("a", 0, valid=True, slashed=5), v("b", 0, unavailable=True,
                                                                        slashed=7)]),
        ]},
    ]  # fmt: skip
    st = round_stats(rounds, {"a", "b", "c"})
    assert st["lost_to_unavailability"] == ["round 0: a rejected"]
    assert st["wrong_verdicts"] == [
        "round 1: b rejected",
        "round 1: honest verifier a slashed for an opened vote on c",
    ]
    assert st["unavailable_votes"] == 4 and st["slashed_for_missed_duties_uloco"] == 7
