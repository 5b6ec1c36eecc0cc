"""Commit or decline in the seed block (issue 11 audit): the challenges of a round are drawn in
the end-block of its commit deadline D from block D's seed (its beacon, built from the vote
extensions over D - 1, so public before D's txs are fixed). A commitment or a decline landing in
D could be chosen knowing the draw (commit garbage when unchallenged, decline for free when
challenged), so both are accepted up to height D - 1 only; and commit_blocks >= 3 keeps two
blocks for them."""

from __future__ import annotations

from abci_app.jobs.errors import ErrWrongPhase
from abci_app.jobs.msgs import MIN_COMMIT_BLOCKS, MIN_WINDOW_BLOCKS
from abci_app.pb import jobs_pb2, tx_pb2
from tests.kits.chainkit import assert_rejected
from tests.kits.marketkit import create_job_msg, job_in_commit, new_market, submit_msg


def decline_msg(job_id: int, round_: int) -> tx_pb2.Msg:
    return tx_pb2.Msg(decline_round=jobs_pb2.MsgDeclineRound(job_id=job_id, round=round_))


def test_commit_and_decline_landing_in_the_seed_block_are_rejected():
    m, r = job_in_commit()
    a, b = (p.address for p in r.participants)
    d = r.commit_deadline
    m.until(d - 1)  # the next block is D
    res = assert_rejected(m.chain, m.tx(m.key(a), submit_msg(a, 1, 0)), ErrWrongPhase)
    assert m.height == d
    assert f"accepted up to height {d - 1}" in res.log and f"seed of block {d}" in res.log
    assert m.round(1, 0).phase == jobs_pb2.PHASE_REVEAL  # D's end-block drew the challenges
    p = next(p for p in m.round(1, 0).participants if p.address == a)
    assert not p.HasField("commitment") and p.outcome == jobs_pb2.OUTCOME_MISSED_COMMIT

    m, r = job_in_commit()
    b = r.participants[1].address
    m.until(r.commit_deadline - 1)
    res = assert_rejected(m.chain, m.tx(m.key(b), decline_msg(1, 0)), ErrWrongPhase)
    assert f"MsgDeclineRound is accepted up to height {r.commit_deadline - 1}" in res.log
    p = next(p for p in m.round(1, 0).participants if p.address == b)
    assert p.outcome == jobs_pb2.OUTCOME_MISSED_COMMIT  # not declined: the deadline passed


def test_commit_and_decline_landing_the_block_before_are_accepted():
    m, r = job_in_commit()
    a, b = (p.address for p in r.participants)
    d = r.commit_deadline
    m.until(d - 2)  # the next block is D - 1
    resp = m.block([(m.key(a), submit_msg(a, 1, 0)), (m.key(b), decline_msg(1, 0))])
    assert m.height == d - 1
    assert [t.code for t in resp.tx_results] == [0, 0], [t.log for t in resp.tx_results]
    parts = {p.address: p for p in m.round(1, 0).participants}
    assert parts[a].commitment.height == d - 1
    assert parts[b].outcome == jobs_pb2.OUTCOME_DECLINED
    m.until(d)
    parts = {p.address: p for p in m.round(1, 0).participants}
    assert parts[a].outcome != jobs_pb2.OUTCOME_MISSED_COMMIT  # challenged or accepted
    assert parts[b].outcome == jobs_pb2.OUTCOME_DECLINED


def test_commit_window_keeps_two_blocks_for_commitments():
    """commit_blocks 2 would leave one block (O+1) for commitments, which its proposer alone could
    censor into a missed commit: refused; 3 is the least."""
    assert MIN_COMMIT_BLOCKS == MIN_WINDOW_BLOCKS + 1 == 3
    m = new_market(n_providers=1)
    res = m.send(m.owner, create_job_msg(rounds=1, participants_per_round=1, commit_blocks=2))
    assert res.code == 517 and "commit_blocks must be 3.." in res.log
    res = m.send(m.owner, create_job_msg(rounds=1, participants_per_round=1, commit_blocks=3))
    assert res.code == 0, res.log
