"""At the defaults `tx job create` ships (5 % challenged, one segment), a provider faking any
fraction of its steps loses on average at least the collateral margin (2x) times what it saves,
with the bond the chain requires to draw it; and the round's verification stays within its half
of the 100x traffic budget (issue 29). The formulas are the chain's (audit, incentives)."""

from __future__ import annotations

import pytest

from abci_app.jobs.params import DEFAULTS
from benchmarks.deterrence import FAKES_BPS, costs, rows
from node.client.market_msgs import (
    DEFAULT_CHALLENGE_BPS,
    DEFAULT_SEGMENTS_PER_CHALLENGE,
    DEFAULT_VERIFIERS_PER_CHALLENGE,
    TRAFFIC_TARGET,
    VERIFICATION_SHARE_OF_BUDGET,
    VERIFIER_SHARE_TARGET_BPS,
)

C, S, V = DEFAULT_CHALLENGE_BPS, DEFAULT_SEGMENTS_PER_CHALLENGE, DEFAULT_VERIFIERS_PER_CHALLENGE


@pytest.mark.parametrize("n", [4, 100, 960, 3840])
@pytest.mark.parametrize("participants", [2, 4, 8, 20])
def test_faking_any_fraction_loses_twice_its_gain_at_the_defaults(n, participants):
    margin = DEFAULTS["collateral_margin_bps"] / 10_000
    for r in rows(C, S, n, participants):
        assert r["margin"] >= margin, r
        assert r["loss"] > r["gain"] > 0
    assert [r["f"] for r in rows(C, S, n, participants)] == list(FAKES_BPS)


def test_the_catch_rate_is_the_challenge_rate_times_the_faked_share():
    (one, ten, full) = rows(C, S, 100, 4)
    assert full["p1"] == pytest.approx(C / 10_000)
    assert ten["p1"] == pytest.approx(C / 10_000 * 0.1)
    assert one["p1"] == pytest.approx(C / 10_000 * 0.01)


@pytest.mark.parametrize("H", [100, 500, 960])
@pytest.mark.parametrize("participants", [4, 8, 20])
def test_verification_fits_its_share_of_the_traffic_budget(H, participants):
    x = costs(C, S, V, H, 1, participants)
    assert x["verification_share"] <= VERIFICATION_SHARE_OF_BUDGET / TRAFFIC_TARGET
    assert x["compute_bps"] <= VERIFIER_SHARE_TARGET_BPS
    if participants <= 4 or H >= 500:
        # the whole round too; at H = 100 with more participants the int8 payloads' all-gather
        # alone (2(W-1) B/param) passes 1/100 of AllReduce: a codec's or H's matter, not this one
        assert x["reduction"] >= TRAFFIC_TARGET


def test_the_old_defaults_broke_the_budget():
    x = costs(10_000, 15, V, 100, 1, 4)
    assert x["verification_share"] > 0.3 and x["reduction"] < 3
