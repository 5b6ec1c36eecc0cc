from chainkit import assert_rejected
from marketkit import (
    h,
    job_in_phase,
    merkle_proof,
    non_participant,
    reveal_msg,
    trace_leaves,
    trace_states,
)

from abci_app.jobs.errors import (
    ErrBadProof,
    ErrDuplicate,
    ErrInvalidHash,
    ErrInvalidLocation,
    ErrNotChallenged,
    ErrNotSelected,
    ErrWrongPhase,
    ErrWrongSegment,
)
from abci_app.merkle import merkle_root
from abci_app.pb import jobs_pb2


def test_reveal_checks_proofs_on_chain():
    m, r = job_in_phase(jobs_pb2.PHASE_REVEAL)
    p = r.participants[0]
    assert p.challenged
    res = m.send(m.key(p.address), reveal_msg(p.address, 1, 0, p.segment))
    assert res.code == 0, res.log
    rv = m.round(1, 0).participants[0].reveal
    st = trace_states(p.address, 1, 0, 5)
    assert rv.start_state_hash == st[p.segment] and rv.end_state_hash == st[p.segment + 1]
    # the committed root is bound: leaf 0 is the provider's binding leaf, entry i is leaf i + 1
    assert merkle_root(trace_leaves(p.address, 1, 0)) == p.commitment.trace_root
    assert merkle_root(st) != p.commitment.trace_root


def test_invalid_bad_merkle_proof():
    m, r = job_in_phase(jobs_pb2.PHASE_REVEAL)
    p = r.participants[0]
    a, s = p.address, p.segment
    st = trace_states(a, 1, 0, 5)
    tl = trace_leaves(a, 1, 0)  # leaf i + 1 = entry i
    k = m.key(a)
    # a state that is not in the trace
    assert_rejected(m.chain, m.tx(k, reveal_msg(a, 1, 0, s, start_state_hash=h("forged"))), ErrBadProof)
    # the right hash with the proof of another entry
    other = (s + 2) % 5
    assert_rejected(m.chain, m.tx(k, reveal_msg(a, 1, 0, s, end_proof=merkle_proof(tl, other + 1))), ErrBadProof)
    # the old unbound layout (entry i = leaf i) no longer verifies
    assert_rejected(m.chain, m.tx(k, reveal_msg(a, 1, 0, s, start_proof=merkle_proof(st, s), end_proof=merkle_proof(st, s + 1))), ErrBadProof)
    # the binding leaf is not a state (leaf 0 is never a trace entry)
    if s == 0:
        assert_rejected(m.chain, m.tx(k, reveal_msg(a, 1, 0, s, start_state_hash=tl[0][:32], start_proof=merkle_proof(tl, 0))), ErrBadProof)
    # start and end swapped
    assert_rejected(m.chain, m.tx(k, reveal_msg(a, 1, 0, s, start_state_hash=st[s + 1], end_state_hash=st[s])), ErrBadProof)
    # truncated / padded proof
    assert_rejected(m.chain, m.tx(k, reveal_msg(a, 1, 0, s, start_proof=merkle_proof(tl, s + 1)[:-1])), ErrBadProof)
    assert_rejected(m.chain, m.tx(k, reveal_msg(a, 1, 0, s, start_proof=merkle_proof(tl, s + 1) + [b"\x00" * 32])), ErrBadProof)
    assert_rejected(m.chain, m.tx(k, reveal_msg(a, 1, 0, s, start_proof=[b"\x00" * 5])), ErrBadProof)


def test_invalid_wrong_segment_and_fields():
    m, r = job_in_phase(jobs_pb2.PHASE_REVEAL)
    p = r.participants[0]
    a = p.address
    assert_rejected(m.chain, m.tx(m.key(a), reveal_msg(a, 1, 0, (p.segment + 1) % 4)), ErrWrongSegment)
    assert_rejected(m.chain, m.tx(m.key(a), reveal_msg(a, 1, 0, p.segment, start_state_hash=b"\x00")), ErrInvalidHash)
    assert_rejected(m.chain, m.tx(m.key(a), reveal_msg(a, 1, 0, p.segment, end_location="file:///etc/passwd")), ErrInvalidLocation)


def test_invalid_not_participant_or_not_challenged():
    m, r = job_in_phase(jobs_pb2.PHASE_REVEAL)
    k = non_participant(m, r)
    assert_rejected(m.chain, m.tx(k, reveal_msg(k.address, 1, 0, 0)), ErrNotSelected)
    m2, r2 = job_in_phase(jobs_pb2.PHASE_REVEAL, challenge_bps=500)
    unch = [p for p in r2.participants if not p.challenged]
    assert unch, "precondition: with challenge_bps=500 at least one participant is unchallenged"
    assert_rejected(m2.chain, m2.tx(m2.key(unch[0].address), reveal_msg(unch[0].address, 1, 0, 0)), ErrNotChallenged)


def test_invalid_duplicate_and_wrong_phase():
    m, r = job_in_phase(jobs_pb2.PHASE_REVEAL)
    p = r.participants[0]
    assert m.send(m.key(p.address), reveal_msg(p.address, 1, 0, p.segment)).code == 0
    assert_rejected(m.chain, m.tx(m.key(p.address), reveal_msg(p.address, 1, 0, p.segment)), ErrDuplicate)
    m.until(r.reveal_end)
    q = r.participants[1]
    assert_rejected(m.chain, m.tx(m.key(q.address), reveal_msg(q.address, 1, 0, q.segment)), ErrWrongPhase)
