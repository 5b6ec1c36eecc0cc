from abci_app.errors import ErrInvalidAddress
from abci_app.jobs.errors import (
    ErrDuplicate,
    ErrInvalidHash,
    ErrNotChallenged,
    ErrNotRevealed,
    ErrNotVerifier,
    ErrWrongPhase,
)
from abci_app.pb import jobs_pb2
from tests.kits.chainkit import assert_rejected
from tests.kits.marketkit import job_in_phase, verdict_msg, vote_msgs


def test_verdict_commits_a_secret_vote():
    m, r = job_in_phase(jobs_pb2.PHASE_VERDICT)
    p = r.participants[0]
    v = p.verifiers[0].address
    assert v != p.address  # never the target itself
    commit, _ = vote_msgs(r, p.address, v, True, 9_000)
    res = m.send(m.key(v), commit)
    assert res.code == 0, res.log
    vv = m.round(1, 0).participants[0].verifiers[0]
    # nothing public yet
    assert vv.vote_hash == commit.verdict.vote_hash and not vv.voted and vv.quality == 0


def test_invalid_not_verifier():
    m, r = job_in_phase(jobs_pb2.PHASE_VERDICT)
    p = r.participants[0]
    assigned = {v.address for v in p.verifiers}
    other = next(k for k in m.providers if k.address not in assigned)
    assert_rejected(m.chain, m.tx(other, vote_msgs(r, p.address, other.address)[0]), ErrNotVerifier)


def test_invalid_duplicate_hash_target_phase():
    m, r = job_in_phase(jobs_pb2.PHASE_VERDICT)
    p = r.participants[0]
    v = m.key(p.verifiers[0].address)
    assert_rejected(m.chain, m.tx(v, verdict_msg(1, 0, p.address, b"\x01" * 31)), ErrInvalidHash)
    assert_rejected(
        m.chain, m.tx(v, verdict_msg(1, 0, m.owner.address, b"\x01" * 32)), ErrNotChallenged
    )
    assert_rejected(
        m.chain, m.tx(v, verdict_msg(1, 0, b"\x01" * 5, b"\x01" * 32)), ErrInvalidAddress
    )
    assert m.send(v, vote_msgs(r, p.address, v.address)[0]).code == 0
    assert_rejected(m.chain, m.tx(v, vote_msgs(r, p.address, v.address, False)[0]), ErrDuplicate)
    m.until(r.verdict_end)
    q = r.participants[1]
    assert_rejected(
        m.chain,
        m.tx(m.key(q.verifiers[0].address), vote_msgs(r, q.address, q.verifiers[0].address)[0]),
        ErrWrongPhase,
    )


def test_invalid_target_did_not_reveal():
    from tests.kits.marketkit import actors_block, job_in_commit

    m, r = job_in_commit()
    lazy = r.participants[0].address
    actors_block(m, 1)
    m.until(r.commit_deadline)
    actors_block(m, 1, skip_reveal=frozenset({lazy}))
    m.until(r.reveal_end)
    p = m.round(1, 0).participants[0]
    assert_rejected(
        m.chain,
        m.tx(m.key(p.verifiers[0].address), verdict_msg(1, 0, lazy, b"\x01" * 32)),
        ErrNotRevealed,
    )
