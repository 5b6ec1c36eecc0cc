"""Open votes or ends in the audit's seed block (issue 11 audit): the panel audits and the appeal
panel are drawn in the end-block of Vr (``vote_reveal_end``) from block Vr's seed, its beacon over
Vr - 1's vote extensions, public before Vr's txs are fixed. A first-panel opening (MsgRevealVote)
or a provider's MsgOpenEnd landing in Vr could be chosen knowing whether the verdict is audited
(a covering verifier stays silent or opens the winning side; a cheater leaves its ends unopened):
so they are accepted up to Vr - 1, where the window keeps two blocks for them (verdict_blocks >=
3, the chain's floor: a 2-block window is refused)."""

from __future__ import annotations

from abci_app.jobs.errors import ErrWrongPhase
from abci_app.jobs.msgs import MIN_SEALED_VOTE_REVEAL_BLOCKS, MIN_WINDOW_BLOCKS
from abci_app.pb import jobs_pb2
from tests.kits.chainkit import assert_rejected
from tests.kits.marketkit import EXACT, Market, job_in_phase, open_end_msg

WINDOWS3 = {"commit_blocks": 3, "reveal_blocks": 2, "verdict_blocks": 3, "attest_blocks": 2}


def _challenged(r: jobs_pb2.Round) -> jobs_pb2.Participant:
    return next(p for p in r.participants if p.challenged and p.HasField("reveal"))


def _opening(m: Market, r: jobs_pb2.Round, t: jobs_pb2.Participant):
    """(verifier key, its pending MsgRevealVote) for a first-panel verifier of ``t``."""
    v = next(v for v in t.verifiers if v.panel == 0)
    return m.key(v.address), m.pending_votes[(1, r.round, t.address, v.address)]


def test_openings_landing_in_the_audit_seed_block_are_rejected():
    assert MIN_SEALED_VOTE_REVEAL_BLOCKS == MIN_WINDOW_BLOCKS + 1 == 3
    # tolerance mode: the provider's end opening
    m, r = job_in_phase(jobs_pb2.PHASE_VOTE_REVEAL, **WINDOWS3)
    vr = r.vote_reveal_end
    t = _challenged(r)
    m.until(vr - 1)  # the next block is Vr
    msg = open_end_msg(t.address, 1, 0, t.reveals[0].segment, base=r.base_model_hash)
    res = assert_rejected(m.chain, m.tx(m.key(t.address), msg), ErrWrongPhase)
    assert m.height == vr
    assert f"MsgOpenEnd is accepted up to height {vr - 1}" in res.log
    assert f"seed of block {vr}" in res.log
    me = next(p for p in m.round(1, 0).participants if p.address == t.address)
    assert me.outcome == jobs_pb2.OUTCOME_MISSED_REVEAL  # the end stayed unopened
    # the first panel's vote opening, tolerance and exact mode
    for mode in ({}, EXACT):
        m, r = job_in_phase(jobs_pb2.PHASE_VOTE_REVEAL, **WINDOWS3, **mode)
        t = _challenged(r)
        m.until(r.vote_reveal_end - 1)
        k, vote = _opening(m, r, t)
        res = assert_rejected(m.chain, m.tx(k, vote), ErrWrongPhase)
        assert f"MsgRevealVote is accepted up to height {r.vote_reveal_end - 1}" in res.log
        v = next(v for v in m.round(1, 0).participants if v.address == t.address).verifiers
        assert not next(x for x in v if x.address == k.address and x.panel == 0).voted


def test_openings_landing_the_block_before_are_accepted():
    m, r = job_in_phase(jobs_pb2.PHASE_VOTE_REVEAL, **WINDOWS3)
    vr = r.vote_reveal_end
    t = _challenged(r)
    ends = [
        (m.key(t.address), open_end_msg(t.address, 1, 0, o.segment, base=r.base_model_hash))
        for o in t.reveals
    ]
    m.until(vr - 3)
    resp = m.block(ends)  # Vr - 2: the ends
    assert [x.code for x in resp.tx_results] == [0] * len(ends)
    resp = m.block([_opening(m, r, t)])  # Vr - 1: the vote, after the ends
    assert m.height == vr - 1 and resp.tx_results[0].code == 0, resp.tx_results[0].log
    m.until(vr)
    me = next(p for p in m.round(1, 0).participants if p.address == t.address)
    assert me.outcome != jobs_pb2.OUTCOME_MISSED_REVEAL
    assert next(v for v in me.verifiers if v.panel == 0).voted


def test_two_block_vote_windows_are_refused():
    """verdict_blocks 2 would leave the first panel's openings either one block before Vr (which
    its proposer alone could censor into a missed reveal) or Vr itself (whose seed is public
    before its txs are chosen: the audit foreseeable). A job must give the vote windows >= 3
    blocks (517, no state change); a job created before that floor keeps its openings up to Vr."""
    from abci_app.jobs.errors import ErrInvalidJobSpec
    from abci_app.jobs.msgs import MIN_VERDICT_BLOCKS, compute_last_opening_height
    from tests.kits.marketkit import create_job_msg, new_market

    assert MIN_VERDICT_BLOCKS == MIN_SEALED_VOTE_REVEAL_BLOCKS == 3
    m = new_market(n_providers=2)
    msg = create_job_msg(rounds=1, verdict_blocks=2)
    res = assert_rejected(m.chain, m.tx(m.owner, msg), ErrInvalidJobSpec)
    assert "verdict_blocks must be 3.." in res.log and "seed draws the audits" in res.log
    assert m.send(m.owner, create_job_msg(rounds=1, verdict_blocks=3)).code == 0
    r = jobs_pb2.Round(vote_reveal_end=40)
    for blocks, last in ((2, 40), (3, 39), (7, 39)):
        job = jobs_pb2.Job(spec=jobs_pb2.JobSpec(verdict_blocks=blocks))
        assert compute_last_opening_height(job, r) == last
