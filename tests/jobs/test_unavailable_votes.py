"""Unavailable votes (docs/threat-model.md *Unavailable votes*): a verifier that cannot fetch a
challenged provider's revealed states says so with MsgRevealVote.unavailable, committed as such. It
counts as invalid in the tally (a provider that serves nobody is convicted), claims no bounty and is
paid nothing; when the final verdict accepts, it costs what silence costs (the liveness slash),
never a wrong vote's 10 %. So a provider that serves every verifier but one (the chain cannot
tell who is lying about availability) can cost that one the liveness slash only, and a verifier
that cannot fetch no longer has to choose between a 10 % risk and silence."""

import pytest

from abci_app.jobs.errors import ErrBadEvidence, ErrDuplicate, ErrVoteMismatch
from abci_app.jobs.incentives import (
    UNAVAILABLE_EVIDENCE,
    compute_blind_vote_hash,
    compute_evidence,
    compute_vote_hash,
)
from abci_app.pb import jobs_pb2
from tests.jobs.test_incentives_third_audit import _first_panel, _one_challenge, wealth
from tests.kits.chainkit import assert_rejected
from tests.kits.marketkit import (
    BOND,
    EXACT,
    UNAVAILABLE,
    job_in_phase,
    reveal_vote_msg,
    run_job,
    unavailable_vote_msgs,
    verdict_msg,
    vote_msgs,
    vote_salt,
)


def _one_first_panel_verifier_says(m, answer):
    """A ``vote`` for run_job: the first first-panel verifier asked answers ``answer`` on every
    seat it holds, everyone else votes valid; the list names that verifier once asked."""
    chosen: list[bytes] = []

    def vote(v, t):
        if not chosen and v in set(_first_panel(m)):
            chosen.append(v)
        return answer if chosen and v == chosen[0] else (True, 8_000)

    return vote, chosen


def _in_verdict(exact: bool):
    m, r = job_in_phase(jobs_pb2.PHASE_VERDICT, **(EXACT if exact else {}))
    p = r.participants[0]
    v = m.key(p.verifiers[0].address)
    return m, r, p, v


@pytest.mark.parametrize("exact", [True, False])
def test_an_unavailable_vote_opens_in_either_mode(exact):
    m, r, p, v = _in_verdict(exact)
    commit, open_ = unavailable_vote_msgs(r, p.address, v.address)
    assert m.send(v, commit).code == 0
    # another committed vote, left unopened: the vote-reveal phase still waits for it after this
    # opening (else, in exact mode where no end is due, the opening would end it early)
    q = r.participants[1]
    qv = q.verifiers[0].address
    assert m.send(m.key(qv), vote_msgs(r, q.address, qv, tolerance=not exact)[0]).code == 0
    m.until(m.round(1, 0).verdict_end)
    res = m.send(v, open_)
    assert res.code == 0, res.log
    vv = m.round(1, 0).participants[0].verifiers[0]
    assert vv.voted and vv.unavailable and not vv.valid and vv.quality == 0
    assert vv.evidence == UNAVAILABLE_EVIDENCE == compute_evidence([])
    ev = [e for e in res.events if e.type == "verdict.posted"]
    assert ev and {a.key: a.value for a in ev[0].attributes}["unavailable"] == "true"
    assert m.round(1, 0).phase == jobs_pb2.PHASE_VOTE_REVEAL
    assert_rejected(m.chain, m.tx(v, open_), ErrDuplicate)


@pytest.mark.parametrize("exact", [True, False])
def test_an_invalid_vote_cannot_be_reopened_as_unavailable_nor_the_reverse(exact):
    """The kind of the vote is inside the committed hash: a verifier that voted invalid cannot
    switch to "unavailable" once it sees the others' openings (to pay 1 % instead of 10 %), and an
    unavailable vote cannot become a valid or invalid one."""
    m, r, p, v = _in_verdict(exact)
    commit, _ = vote_msgs(r, p.address, v.address, False, 0, tolerance=not exact)
    assert m.send(v, commit).code == 0
    m.until(r.verdict_end)
    _, as_unavailable = unavailable_vote_msgs(r, p.address, v.address)
    assert_rejected(m.chain, m.tx(v, as_unavailable), ErrVoteMismatch)

    m, r, p, v = _in_verdict(exact)
    commit, _ = unavailable_vote_msgs(r, p.address, v.address)
    assert m.send(v, commit).code == 0
    m.until(r.verdict_end)
    salt = vote_salt(v.address, 1, 0, p.address)
    for valid in (False, True):
        plain = reveal_vote_msg(1, 0, p.address, valid, 0, UNAVAILABLE_EVIDENCE, salt)
        assert_rejected(m.chain, m.tx(v, plain), ErrVoteMismatch)
    assert not m.round(1, 0).participants[0].verifiers[0].voted


def test_an_unavailable_opening_must_carry_nothing():
    """Valid, a quality, reached states, probes or other evidence beside ``unavailable`` are
    refused (531), whatever hash was committed."""
    m, r, p, v = _in_verdict(True)
    salt = vote_salt(v.address, 1, 0, p.address)
    h = compute_vote_hash(1, 0, p.address, v.address, False, 0, UNAVAILABLE_EVIDENCE, salt, True)
    assert m.send(v, verdict_msg(1, 0, p.address, h)).code == 0
    m.until(r.verdict_end)

    def opening(**kw):
        msg = reveal_vote_msg(1, 0, p.address, False, 0, UNAVAILABLE_EVIDENCE, salt)
        msg.reveal_vote.unavailable = True
        for k, val in kw.items():
            if k in ("reached", "probes"):
                getattr(msg.reveal_vote, k).extend(val)
            else:
                setattr(msg.reveal_vote, k, val)
        return msg

    for bad in (
        {"valid": True},
        {"quality": 1},
        {"reached": [b"\x01" * 32]},
        {"probes": [1, 2, 3]},
        {"evidence": b"\x07" * 32},
    ):
        assert_rejected(m.chain, m.tx(v, opening(**bad)), ErrBadEvidence)
    assert m.send(v, opening()).code == 0


def test_compute_vote_hash_refuses_a_valid_unavailable_vote():
    with pytest.raises(ValueError):
        compute_vote_hash(
            1, 0, b"\x01" * 20, b"\x02" * 20, True, 0, b"\x00" * 32, b"\x00" * 32, True
        )
    # the blind (tolerance) hash and the plain invalid hash are not the unavailable one
    args = (1, 0, b"\x01" * 20, b"\x02" * 20)
    ev, salt = UNAVAILABLE_EVIDENCE, b"\x03" * 32
    u = compute_vote_hash(*args, False, 0, ev, salt, True)
    assert u != compute_vote_hash(*args, False, 0, ev, salt)
    assert u != compute_blind_vote_hash(*args, ev, salt)


def test_selective_serving_costs_the_framed_verifier_the_liveness_slash_only():
    """A provider serves its revealed states to every verifier but one. The one it starves says
    so (unavailable, as node/worker does): the challenge escalates, the appeal panel accepts, the
    provider is paid its slot, and the framed verifier loses what silence costs (1 % of its bond)
    instead of a wrong vote's 10 % plus the bounty it would have claimed (-200,000,001 uloco when
    it votes invalid: test_incentives_third_audit). It is paid no verifier share."""
    m, target = _one_challenge()
    before = {k.address: wealth(m, k.address) for k in m.providers}
    vote, victim = _one_first_panel_verifier_says(m, UNAVAILABLE)
    run_job(m, 1, vote=vote)
    r = m.round(1, 0)
    (p,) = r.participants
    assert p.escalated and p.outcome == jobs_pb2.OUTCOME_ACCEPTED
    assert wealth(m, target) - before[target] == 1_000_000  # paid, not one uloco more
    (vv,) = [v for v in p.verifiers if v.address == victim[0]]
    assert vv.unavailable and vv.slashed == BOND // 100
    assert before[victim[0]] - wealth(m, victim[0]) == BOND // 100
    assert all(x.address != victim[0] for x in r.payouts)  # no verifier share, no bounty
    assert any(s.reason == "verifier_unavailable" for s in r.slashes)
    honest = [v for v in p.verifiers if v.address != victim[0]]
    assert all(v.slashed == 0 for v in honest)


def test_withholding_is_fraud_when_the_verifiers_say_unavailable():
    """A provider that reveals on chain and serves nobody: every verifier of every panel votes
    unavailable; that is ⅔ invalid, so the withholder is convicted (half its bond) as when they
    vote invalid, while none of them is slashed, paid a share or a bounty (they proved nothing:
    the bounty is burned with the rest of the slash)."""
    m, target = _one_challenge()
    before = {k.address: wealth(m, k.address) for k in m.providers}
    run_job(m, 1, vote=lambda v, t: UNAVAILABLE)
    r = m.round(1, 0)
    (p,) = r.participants
    assert p.outcome == jobs_pb2.OUTCOME_FRAUD and p.slashed == BOND // 2
    assert before[target] - wealth(m, target) == BOND // 2
    assert all(v.voted and v.unavailable and v.slashed == 0 for v in p.verifiers)
    others = {k.address for k in m.providers} - {target}
    assert all(wealth(m, a) == before[a] for a in others)
    assert not [x for x in r.payouts if x.kind in ("verifier", "bounty")]


def test_always_unavailable_lazy_verifier_loses_against_honest_verification():
    """A verifier that never fetches nor re-executes and always answers "unavailable": on honest
    work the final verdict accepts, so each of its seats costs it the liveness slash and
    reputation, and it is paid nothing; the honest verifiers beside it are paid and slashed
    nothing. (On a cheater it would lose nothing and win nothing.)"""
    m, target = _one_challenge()
    before = {k.address: wealth(m, k.address) for k in m.providers}
    rep0 = {k.address: m.provider(k.address).reputation for k in m.providers}
    vote, lazy = _one_first_panel_verifier_says(m, UNAVAILABLE)
    run_job(m, 1, vote=vote)
    (p,) = m.round(1, 0).participants
    assert p.outcome == jobs_pb2.OUTCOME_ACCEPTED
    lz = lazy[0]
    assert wealth(m, lz) < before[lz] and m.provider(lz).reputation < rep0[lz]
    honest = {v.address for v in p.verifiers} - {lz}
    assert honest and all(wealth(m, a) >= before[a] for a in honest)


@pytest.mark.parametrize("exact", [True, False])
def test_the_workers_message_builders_open_an_unavailable_vote(exact):
    """node.client.market_msgs, what node/worker sends: build_verdict(unavailable=True) commits a
    vote that build_reveal_vote(unavailable=True) opens, in either mode (the worker's valid, quality
    and evidence arguments are ignored for such a vote)."""
    from node.client.market_msgs import build_reveal_vote, build_verdict

    m, r, p, v = _in_verdict(exact)
    commit = build_verdict(v, 1, 0, p.address, True, 9_000, b"\x09" * 32, unavailable=True)
    assert m.send(v, commit).code == 0
    m.until(r.verdict_end)
    res = m.send(v, build_reveal_vote(v, 1, 0, p.address, False, 0, [], unavailable=True))
    assert res.code == 0, res.log
    vv = m.round(1, 0).participants[0].verifiers[0]
    assert vv.voted and vv.unavailable and not vv.valid


def test_an_undecided_verdict_costs_the_unavailable_voters_nothing():
    """A provider serves its states to 3 friends of 7 (between a third and two thirds of every
    panel's stake), who vote valid; the 4 it starves vote unavailable. Nobody reaches two thirds:
    ``undecided``, the provider forgoes its slot. The starved verifiers lose nothing, as with
    invalid votes (attacker-review finding: slashing them as silence here cost honest verifiers
    159,200,000 uloco over 8 seats and deterred nothing, since a coalition pushes honest work to
    undecided with invalid votes for free)."""
    m, target = _one_challenge()
    others = sorted(k.address for k in m.providers if k.address != target)
    friends = set(others[:3])
    before = {a: wealth(m, a) for a in others + [target]}
    run_job(m, 1, vote=lambda v, t: (True, 8_000) if v in friends else UNAVAILABLE)
    (p,) = m.round(1, 0).participants
    assert p.outcome == jobs_pb2.OUTCOME_UNDECIDED and p.reward == 0
    starved = [v for v in p.verifiers if v.address not in friends]
    assert starved and all(v.voted and v.unavailable and v.slashed == 0 for v in starved)
    assert all(wealth(m, a) == before[a] for a in others)


def test_sla_counts_an_unavailable_vote_on_accepted_work_as_a_missed_duty():
    """The SLA figures (abci_app/jobs/sla.py) follow the slash: an unavailable vote is a kept
    verifier duty unless the verdict accepted the work (then it was slashed as silence)."""
    from abci_app.jobs.sla import get_sla

    def voted(m, addr):
        return get_sla(m.store, addr).verifier_voted

    m, target = _one_challenge()
    vote, victim = _one_first_panel_verifier_says(m, UNAVAILABLE)
    run_job(m, 1, vote=vote)
    (p,) = m.round(1, 0).participants
    assert p.outcome == jobs_pb2.OUTCOME_ACCEPTED
    seats = sum(1 for v in p.verifiers if v.address == victim[0])
    assert seats >= 1 and voted(m, victim[0]) == 0
    honest = next(v.address for v in p.verifiers if v.address != victim[0])
    assert voted(m, honest) >= 1

    m, target = _one_challenge()
    run_job(m, 1, vote=lambda v, t: UNAVAILABLE)  # a withholder convicted: every duty kept
    (p,) = m.round(1, 0).participants
    assert p.outcome == jobs_pb2.OUTCOME_FRAUD
    assert all(voted(m, v.address) >= 1 for v in p.verifiers)


def test_the_vote_salt_differs_by_panel():
    """node.client.market_msgs.vote_salt puts the panel in the salt (panel 0 unchanged): a verifier
    seated on one target in two panels opens its first vote, salt included, before it commits
    the later one, whose hash would otherwise be computable from that salt (an unavailable
    vote's exactly: its evidence is a constant)."""
    from node.client.market_msgs import build_verdict, vote_salt

    m, r, p, v = _in_verdict(True)
    salts = [vote_salt(v, 1, 0, p.address, panel) for panel in (0, 1, 2)]
    assert len(set(salts)) == 3 and salts[0] == vote_salt(v, 1, 0, p.address)
    hashes = {
        build_verdict(
            v, 1, 0, p.address, False, 0, b"", unavailable=True, panel=k
        ).verdict.vote_hash
        for k in (0, 1, 2)
    }
    assert len(hashes) == 3
