"""Panel audits (issue 11, jobs README *Panel audits*): a challenge is audited with probability
``audit_bps``, drawn from the seed of the commit-deadline block D (after the commitment); its
first panel then gets ``audit_verifiers`` more seats, drawn with it, voting with it (secret
votes, secret-end evidence) and paid with it. One test per strategy, on the real app (every block
commits and checks every invariant): balances and reputations before and after."""

import hashlib

import pytest

from abci_app.jobs.incentives import compute_audit_seed, is_audited
from abci_app.jobs.params import params_from_json
from abci_app.jobs.rounds import compute_appeal_seed
from abci_app.pb import jobs_pb2, providers_pb2
from tests.jobs.test_incentives import one_slot_job, wealth
from tests.kits.marketkit import (
    BOND,
    EXACT,
    actors_block,
    new_market,
    register_msg,
    run_job,
)

ALWAYS = {"audit_bps": 10_000}
NEVER = {"audit_bps": 0}


def _panels(p: jobs_pb2.Participant) -> dict[int, set[bytes]]:
    """panel -> the addresses that sat in it (0 first, 1 appeal, 2 final) for ``p``'s challenge."""
    out: dict[int, set[bytes]] = {}
    for v in p.verifiers:
        out.setdefault(v.panel, set()).add(v.address)
    return out


def _one_challenge(jobs_params: dict[str, int], **kw):
    """Job 1, one participant, always challenged, one first-panel verifier (the coalition's seat:
    without an audit a coalition holding it holds the whole first panel), one more when audited;
    the other providers for the appeal."""
    m = new_market(n_providers=8, jobs_params=jobs_params)
    m.create_job(
        rounds=1, participants_per_round=1, verifiers_per_challenge=1, challenge_bps=10_000, **kw
    )
    m.until(m.height + 1)
    return m, m.round(1, 0).participants[0].address


def _cover_for_cheater(m):
    """The coalition holds the job's one first-panel seat (of an audited challenge's two seats,
    the lower address: the other is the audit's) and waves the cheater through (valid); every
    other verifier re-executes and sees the faked steps (invalid)."""
    coalition: set[bytes] = set()

    def vote(v, t):
        if not coalition:
            (p,) = m.round(1, 0).participants
            coalition.add(min(a.address for a in p.verifiers if a.panel == 0))
        return (True, 9_000) if v in coalition else (False, 0)

    return coalition, vote


@pytest.mark.parametrize("mode", ["exact", "tolerance"])
def test_coalition_holding_every_first_panel_seat_waves_a_cheater_through_is_caught_when_audited(
    mode,
):
    """Without an audit a unanimous first panel is final: the coalition's cheater is accepted and
    paid. Audited, the first panel holds one more seat, honest here: its invalid vote is a
    dispute, the appeal panel convicts, the final panel confirms: the cheater loses half its bond
    and is jailed, the coalition's valid votes are against the final verdict and slashed on every
    seat, the honest verifiers earn bounties."""
    kw = {} if mode == "tolerance" else EXACT
    # the counterfactual: never audited, the cheat pays
    m0, cheater0 = _one_challenge(NEVER, **kw)
    coalition0, vote0 = _cover_for_cheater(m0)
    before0 = wealth(m0, cheater0)
    run_job(m0, 1, vote=vote0)
    (p0,) = m0.round(1, 0).participants
    assert not p0.escalated and not p0.audited and p0.outcome == jobs_pb2.OUTCOME_ACCEPTED
    assert wealth(m0, cheater0) - before0 == 1_000_000
    # audited: caught
    m, cheater = _one_challenge(ALWAYS, **kw)
    coalition, vote = _cover_for_cheater(m)
    before = {k.address: wealth(m, k.address) for k in m.providers}
    run_job(m, 1, vote=vote)
    (p,) = m.round(1, 0).participants
    assert len(coalition) == 1 and p.audited and p.escalated and p.final_tier
    # the audit drew audit_verifiers (1) more seat into the first panel, at the challenge: one
    # honest re-execution breaks the unanimity, and the dispute goes the usual way
    assert len([v for v in p.verifiers if v.panel == 0]) == 2
    assert len([v for v in p.verifiers if v.panel == 1]) >= 3
    assert p.outcome == jobs_pb2.OUTCOME_FRAUD and p.slashed == BOND // 2 and p.reward == 0
    assert before[cheater] - wealth(m, cheater) == BOND // 2
    assert m.provider(cheater).status == providers_pb2.PROVIDER_STATUS_JAILED
    (c,) = coalition
    seats = [v for v in p.verifiers if v.address == c]
    assert {v.panel for v in seats} == {0, 2} and all(v.voted and v.valid for v in seats)
    assert all(v.slashed > 0 for v in seats)
    assert before[c] - wealth(m, c) >= 2 * (BOND // 10) - BOND // 100  # two wrong-vote slashes
    assert m.provider(c).reputation < 5000
    honest = {v.address for v in p.verifiers if v.address not in coalition | {cheater}}
    assert honest and all(wealth(m, a) > before[a] for a in honest)  # bounties
    assert {x.kind for x in m.round(1, 0).payouts} >= {"bounty"}


def _honest_run(jobs_params: dict[str, int]):
    m, target = _one_challenge(jobs_params)
    before = {k.address: wealth(m, k.address) for k in m.providers}
    reps = {k.address: m.provider(k.address).reputation for k in m.providers}
    run_job(m, 1)
    (p,) = m.round(1, 0).participants
    first = {v.address for v in p.verifiers if v.panel == 0}
    delta = {a: wealth(m, a) - before[a] for a in before}
    rep = {a: m.provider(a).reputation - reps[a] for a in reps}
    return m, p, target, first, delta, rep


def test_honest_unanimous_panel_that_is_audited_loses_nothing_and_is_paid_as_usual():
    """An honest provider and an honest first panel, audited: the audit's seat votes valid with
    the job's seat, the unanimous first panel is final (no escalation, no later windows),
    nobody is slashed, and the provider is paid and gains reputation exactly as in the same round
    without the audit (same quality). V, the owner's verification budget, is split over the two
    seats' units instead of one: the same total, each seat paid and gaining reputation by its
    pay."""
    m0, p0, target0, first0, delta0, rep0 = _honest_run(NEVER)
    m, p, target, first, delta, rep = _honest_run(ALWAYS)
    assert not p0.audited and p.audited and not p.escalated and not p.final_tier
    assert target == target0 and len(first0) == 1 and len(first) == 2
    assert p.outcome == p0.outcome == jobs_pb2.OUTCOME_ACCEPTED and p.quality == p0.quality
    assert not m.round(1, 0).slashes and all(v.slashed == 0 for v in p.verifiers)
    assert delta[target] == delta0[target] > 0 and rep[target] == rep0[target] > 0
    assert m.round(1, 0).verifier_paid == m0.round(1, 0).verifier_paid > 0
    assert sum(delta[a] for a in first) == sum(delta0[a] for a in first0)
    assert all(delta[a] > 0 and rep[a] > 0 for a in first)
    assert m.round(1, 0).vote_reveal_end == m0.round(1, 0).vote_reveal_end
    assert m.round(1, 0).appeal_end == 0


def test_audit_rate_over_many_seeds_matches_audit_bps():
    """``is_audited`` over 20,000 seeds (a different block seed, job and round each time) hits
    audit_bps / 10000 within 4.5 binomial standard deviations, for several rates; 0 never audits,
    10000 always does. A property of the draw, not a timing."""
    n = 20_000
    target = hashlib.sha256(b"target").digest()[:20]
    for bps in (1, 500, 2_500, 9_000):
        hits = 0
        for i in range(n):
            seed = compute_audit_seed(hashlib.sha256(i.to_bytes(8, "big")).digest(), i % 7, i)
            hits += is_audited(seed, target, bps)
        # |hits - n p| <= 4.5 sqrt(n p (1 - p)), squared and in integers (p = bps / 10^4)
        dev = hits * 10_000 - n * bps
        assert dev * dev <= (45 * 45 // 100) * n * bps * (10_000 - bps), (bps, hits)
    seeds = [compute_audit_seed(bytes([i]) * 32, 1, 0) for i in range(200)]
    assert not any(is_audited(s, target, 0) for s in seeds)
    assert all(is_audited(s, target, 10_000) for s in seeds)


def test_audit_draw_is_per_target_and_per_block():
    """The audit of one target is independent of another's, and of the appeal panel's seed: the
    same block seed audits different targets differently, and another block's seed changes it."""
    seeds = [
        compute_audit_seed(hashlib.sha256(i.to_bytes(2, "big")).digest(), 1, 0) for i in range(400)
    ]
    a, b = b"\x01" * 20, b"\x02" * 20
    pa = [is_audited(s, a, 5_000) for s in seeds]
    pb = [is_audited(s, b, 5_000) for s in seeds]
    assert pa != pb and 150 < sum(pa) < 250
    assert compute_audit_seed(b"\x00" * 32, 1, 0) != compute_audit_seed(b"\x00" * 32, 1, 1)
    assert compute_audit_seed(b"\x00" * 32, 1, 0) != compute_appeal_seed(b"\x00" * 32, 1, 0)


def test_invalid_audit_bps_is_refused():
    assert params_from_json({}).audit_bps == 4_000
    assert params_from_json({}).audit_verifiers == 1
    assert params_from_json({"audit_verifiers": 7}).audit_verifiers == 7
    for bad in (0, 8):  # 1..max_verifiers (7)
        with pytest.raises(ValueError, match="audit_verifiers"):
            params_from_json({"audit_verifiers": bad})
    assert params_from_json({"audit_bps": 10_000}).audit_bps == 10_000
    with pytest.raises(ValueError, match="audit_bps"):
        params_from_json({"audit_bps": 10_001})
    with pytest.raises(ValueError, match="audit_bps"):
        params_from_json({"audit_bps": -1})


def test_coalition_holding_two_thirds_of_an_appeal_panel_cannot_slash_its_honest_minority():
    """A coalition that holds the job's first-panel seat and ⅔ of the appeal panel's stake covers
    a cheater (valid) against the honest audit seat and the appeal panel's honest member
    (invalid). An accepting appeal is final only when unanimous: the dissent sends the challenge
    to the final panel, where the coalition holds less than ⅓; the cheater is convicted, the
    honest appeal voter is on the winning side (paid a bounty, never slashed) and every covering
    vote is slashed. (Before, the ⅔ acceptance was final and the honest minority was slashed as a
    wrong vote.)"""
    # the audit's honest seat is only the way in here: its invalid vote is the dispute
    m, cheater = one_slot_job(11, ALWAYS)
    first, appeal_c, honest_a, late, honest_f = (
        m.chain.keys[2],
        m.chain.keys[3:5],
        m.chain.keys[5],
        m.chain.keys[6:10],
        m.chain.keys[10],
    )
    # the only two possible first-panel verifiers: the job's seat and the audit's
    m.block([(first, register_msg(BOND)), (honest_f, register_msg(BOND))])
    coalition = {first.address} | {k.address for k in appeal_c}

    def vote(v, t):
        return (True, 9_000) if v in coalition else (False, 0)

    before: dict[bytes, int] = {}
    for _ in range(500):
        if m.job(1).status == jobs_pb2.JOB_STATUS_COMPLETED:
            break
        r = m.round(1, 0)
        if r.phase == jobs_pb2.PHASE_VERDICT and not before:  # joins after the first draw
            m.block([(k, register_msg(BOND)) for k in [*appeal_c, honest_a]])
            before = {a: wealth(m, a) for a in coalition | {honest_a.address, cheater}}
        elif r.phase == jobs_pb2.PHASE_APPEAL and late[0].address not in before:
            m.block([(k, register_msg(BOND * 2)) for k in late])  # the final panel only
            before |= {k.address: wealth(m, k.address) for k in late}
        actors_block(m, 1, vote=vote)
    (p,) = m.round(1, 0).participants
    panels = _panels(p)
    assert panels[0] == {first.address, honest_f.address} and p.audited
    assert panels[1] == {k.address for k in appeal_c} | {honest_a.address}
    # the appeal panel accepted by ⅔ of its stake, not unanimously: on to the final panel
    assert p.final_tier and p.outcome == jobs_pb2.OUTCOME_FRAUD and p.slashed == BOND // 2
    mine = [v for v in p.verifiers if v.address == honest_a.address]
    assert mine and all(v.voted and not v.valid and v.slashed == 0 for v in mine)
    assert wealth(m, honest_a.address) > before[honest_a.address]  # bounties
    for a in coalition:
        assert wealth(m, a) < before[a] - BOND // 10


def test_half_stake_coalition_covering_a_cheater_is_unpaid_when_the_one_audit_seat_is_honest():
    """Above ⅓ of the final panel's stake a coalition cannot be convicted (the BFT bound), so what
    the audit can take from it is the pay. A coalition holds the job's first-panel seat and half
    of the later panels' stake, and waves its cheater through; the audit's one seat
    (`audit_verifiers` 1), honest here, votes invalid: a dispute; the appeal panel splits (a
    coalition key valid, an honest key invalid), and so does the final panel: `undecided`: the
    cheater is paid nothing, nobody is slashed, the honest verifiers lose nothing."""
    m, cheater = one_slot_job(8, ALWAYS)
    first, honest_a, honest_late, late = (
        m.chain.keys[2],
        m.chain.keys[3],
        m.chain.keys[4],
        m.chain.keys[5],
    )
    # the only two possible first-panel verifiers: the job's seat and the audit's
    m.block([(first, register_msg(BOND)), (honest_a, register_msg(BOND))])
    coalition = {first.address, late.address}

    def vote(v, t):
        return (True, 9_000) if v in coalition else (False, 0)

    before: dict[bytes, int] = {}
    for _ in range(500):
        if m.job(1).status == jobs_pb2.JOB_STATUS_COMPLETED:
            break
        r = m.round(1, 0)
        if r.phase == jobs_pb2.PHASE_VERDICT and not before:
            # the appeal pool, after the first panel's draw: coalition 2 BOND, honest 2 BOND
            m.block([(late, register_msg(BOND * 2)), (honest_late, register_msg(BOND * 2))])
            before = {
                a: wealth(m, a)
                for a in coalition | {honest_a.address, honest_late.address, cheater}
            }
        actors_block(m, 1, vote=vote)
    assert m.job(1).status == jobs_pb2.JOB_STATUS_COMPLETED
    (p,) = m.round(1, 0).participants
    panels = _panels(p)
    assert panels[0] == {first.address, honest_a.address} and p.audited
    assert panels[1] == {late.address, honest_late.address}
    assert p.final_tier and panels[2] >= coalition | {honest_a.address, honest_late.address}
    assert p.outcome == jobs_pb2.OUTCOME_UNDECIDED and p.reward == 0 and p.slashed == 0
    assert wealth(m, cheater) == before[cheater]  # the stolen slot is not paid
    assert not m.round(1, 0).slashes
    for a in (honest_a.address, honest_late.address):
        assert wealth(m, a) >= before[a]
