"""MsgRevealVote: opens a vote committed with MsgVerdict, in the window after the vote."""

from chainkit import assert_rejected
from marketkit import job_in_phase, reveal_vote_msg, vote_evidence, vote_msgs, vote_salt

from abci_app.jobs.errors import ErrBadEvidence, ErrDuplicate, ErrInvalidQuality, ErrVoteMismatch, ErrWrongPhase
from abci_app.jobs.incentives import compute_expected_evidence
from abci_app.pb import jobs_pb2


def _committed(valid: bool = True):
    m, r = job_in_phase(jobs_pb2.PHASE_VERDICT)
    p = r.participants[0]
    v = m.key(p.verifiers[0].address)
    commit, open_ = vote_msgs(r, p.address, v.address, valid, 7_000)
    assert m.send(v, commit).code == 0
    m.until(r.verdict_end)
    return m, m.round(1, 0), p, v, open_


def test_reveal_vote_opens_the_commitment():
    m, r, p, v, open_ = _committed()
    assert r.phase == jobs_pb2.PHASE_VOTE_REVEAL
    res = m.send(v, open_)
    assert res.code == 0, res.log
    vv = m.round(1, 0).participants[0].verifiers[0]
    assert vv.voted and vv.valid and vv.quality == 7_000 and vv.evidence == compute_expected_evidence(p)


def test_invalid_reveal_vote_mismatch():
    """Another vote than the committed one (other quality, other side, other salt) is refused."""
    m, r, p, v, open_ = _committed()
    o = open_.reveal_vote
    ev, salt = o.evidence, o.salt
    assert_rejected(m.chain, m.tx(v, reveal_vote_msg(1, 0, p.address, True, 7_001, ev, salt)), ErrVoteMismatch)
    assert_rejected(m.chain, m.tx(v, reveal_vote_msg(1, 0, p.address, True, 7_000, ev, b"\x02" * 32)), ErrVoteMismatch)
    assert_rejected(m.chain, m.tx(v, reveal_vote_msg(1, 0, p.address, False, 0, vote_evidence(p, False), salt)), ErrVoteMismatch)


def test_invalid_reveal_vote_bad_evidence():
    """A valid vote whose evidence is not the revealed end state contradicts itself (and an
    invalid vote that claims the revealed end state): refused even when it opens the hash."""
    from abci_app.jobs.incentives import compute_vote_hash
    from marketkit import verdict_msg

    m, r = job_in_phase(jobs_pb2.PHASE_VERDICT)
    p = r.participants[0]
    v = m.key(p.verifiers[0].address)
    salt = vote_salt(v.address, 1, 0, p.address)
    wrong = b"\x05" * 32
    assert m.send(v, verdict_msg(1, 0, p.address, compute_vote_hash(1, 0, p.address, v.address, True, 7_000, wrong, salt))).code == 0
    m.until(r.verdict_end)
    assert_rejected(m.chain, m.tx(v, reveal_vote_msg(1, 0, p.address, True, 7_000, wrong, salt)), ErrBadEvidence)


def test_invalid_reveal_vote_not_committed_duplicate_quality_phase():
    m, r, p, v, open_ = _committed()
    q = r.participants[1]
    qv = m.key(q.verifiers[0].address)
    assert_rejected(m.chain, m.tx(qv, vote_msgs(r, q.address, qv.address)[1]), ErrVoteMismatch)  # never committed
    o = open_.reveal_vote
    assert_rejected(m.chain, m.tx(v, reveal_vote_msg(1, 0, p.address, True, 10_001, o.evidence, o.salt)), ErrInvalidQuality)
    assert m.send(v, open_).code == 0
    assert_rejected(m.chain, m.tx(v, open_), ErrDuplicate)
    m.until(r.vote_reveal_end)
    assert_rejected(m.chain, m.tx(qv, vote_msgs(r, q.address, qv.address)[1]), ErrWrongPhase)


def test_invalid_reveal_vote_in_the_voting_window():
    m, r = job_in_phase(jobs_pb2.PHASE_VERDICT)
    p = r.participants[0]
    v = m.key(p.verifiers[0].address)
    commit, open_ = vote_msgs(r, p.address, v.address)
    assert m.send(v, commit).code == 0
    assert_rejected(m.chain, m.tx(v, open_), ErrWrongPhase)
