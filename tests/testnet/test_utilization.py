"""A trainer's utilization (node/local/testnet_market.py ``trainer_utilization``, printed by the
demo and benchmarks/round_overhead.py): training seconds over the wall time from its first
training's
start to its last training's end, from the spans a worker writes to stats.json."""

from __future__ import annotations

import pytest

from node.local.testnet_market import trainer_utilization


def span(start: float, end: float, **extra: float) -> dict[str, float]:
    return {"train_start": start, "train_end": end, "train_s": end - start, **extra}


def test_back_to_back_rounds_are_fully_busy_and_gaps_are_waiting():
    assert trainer_utilization({"1/0": span(0, 30), "1/1": span(30, 60)}) == {
        "train_s": 60,
        "wall_s": 60,
        "utilization": 1.0,
        "rounds": 2.0,
    }
    u = trainer_utilization({"1/0": span(0, 30), "1/1": span(40, 70), "1/2": span(80, 110)})
    assert u is not None and u["utilization"] == pytest.approx(90 / 110)


def test_rounds_without_a_training_span_do_not_count_and_one_round_is_no_figure():
    rounds = {"1/0": span(0, 30), "1/1": {"verify_s": 5.0, "seen": 3.0}, "-": {"bytes_in.http": 9}}
    assert trainer_utilization(rounds) is None  # one training: no wait between rounds to see
    rounds["1/2"] = span(35, 65)
    u = trainer_utilization(rounds)
    assert u is not None and u["rounds"] == 2 and u["utilization"] == pytest.approx(60 / 65)
    assert trainer_utilization({}) is None
