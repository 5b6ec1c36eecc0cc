"""Verifier reputation is tied to pay (issue 11 audit): a verifier on the side of the final
verdict gains reputation once a round, scaled by its verifier pay of the round exactly as a
participant's gain is by its reward (incentives.compute_value_gain_bps): a job paying no verifier
share gives its verifiers no reputation."""

from __future__ import annotations

import pytest

from abci_app.jobs.incentives import compute_value_gain_bps
from abci_app.jobs.params import DEFAULTS
from abci_app.pb import jobs_pb2
from abci_app.reputation.rules import compute_gain
from tests.kits.marketkit import events_of, new_market, run_job

START = 5_000
GAIN, UNIT = DEFAULTS["reputation_gain_bps"], DEFAULTS["reputation_value_unit"]


def _one_verified_round(vreward: int, verifiers: int = 1):
    """One participant, every commitment challenged, ``verifiers`` honest verifiers, no audit."""
    m = new_market(n_providers=1 + verifiers, jobs_params={"audit_bps": 0})
    m.create_job(
        rounds=1,
        reward=1_000_000,
        vreward=vreward,
        participants_per_round=1,
        verifiers_per_challenge=verifiers,
    )
    resps = run_job(m, 1)
    (p,) = m.round(1, 0).participants
    assert p.challenged and p.outcome == jobs_pb2.OUTCOME_ACCEPTED and len(p.verifiers) == verifiers
    return m, p, resps


def test_unpaid_verifiers_gain_no_reputation():
    m, p, resps = _one_verified_round(vreward=0)
    r = m.round(1, 0)
    assert r.verifier_paid == 0 and not [x for x in r.payouts if x.kind == "verifier"]
    for v in p.verifiers:
        assert v.voted and v.valid and m.provider(v.address).reputation == START
    reasons = [e["reason"] for e in events_of(resps, "reputation.changed")]
    assert "verifier_majority" not in reasons
    # the participant was paid and verified: it still gains
    assert m.provider(p.address).reputation == compute_gain(START, GAIN)


@pytest.mark.parametrize("vreward", [1, 50_000, 100_000, 300_000])
def test_paid_verifier_gains_in_proportion_to_its_pay(vreward):
    m, p, _ = _one_verified_round(vreward=vreward)
    (v,) = p.verifiers
    paid = sum(x.amount for x in m.round(1, 0).payouts if x.kind == "verifier")
    assert paid == vreward
    want = compute_gain(START, GAIN * min(vreward, UNIT) // UNIT)
    assert want == compute_gain(START, compute_value_gain_bps(GAIN, vreward, UNIT))
    assert m.provider(v.address).reputation == want
    assert (vreward < UNIT) == (want < compute_gain(START, GAIN))  # full gain only at the unit


def test_verifier_share_split_among_a_panel_scales_each_gain():
    """Three verifiers share V = 100,000: each paid 33,333, a third of a full gain."""
    m, p, _ = _one_verified_round(vreward=100_000, verifiers=3)
    pay = {x.address: x.amount for x in m.round(1, 0).payouts if x.kind == "verifier"}
    assert sorted(pay.values()) == [33_333] * 3
    for v in p.verifiers:
        assert m.provider(v.address).reputation == compute_gain(START, GAIN * 33_333 // UNIT)
