"""The crash storm's short version (benchmarks/chaos.py has the 100-perturbation run): a real
4-validator network under steady signed load, one perturbation of each kind (kill -9 of the
group, of the app only, of cometbft only, SIGSTOP, restart), a validator joining and one
unbonding meanwhile; then no divergence, no lost tx, balances equal the committed transfers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from node.paths import PROJECT_ROOT
from node.testnet import load, nodes_of, stop_node

sys.path.insert(0, str(PROJECT_ROOT / "benchmarks"))
from chaos import KINDS, StormConfig, run_storm

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
