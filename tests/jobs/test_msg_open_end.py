"""MsgOpenEnd (tolerance mode): after the first panel committed its votes, the challenged
provider opens the end of each opened segment: its state hash under the opened leaf hash, its
location, and its probe, proven against the probe root it committed before the challenge."""

from abci_app.jobs.errors import (
    ErrBadProbe,
    ErrBadProof,
    ErrDuplicate,
    ErrInvalidHash,
    ErrInvalidLocation,
    ErrNotSelected,
    ErrWrongPhase,
    ErrWrongSegment,
)
from abci_app.jobs.probe import PROBE_DIM
from abci_app.pb import jobs_pb2
from tests.kits.chainkit import assert_rejected
from tests.kits.marketkit import (
    EXACT,
    h,
    honest_probe,
    job_in_phase,
    merkle_proof,
    non_participant,
    open_end_msg,
    probe_leaves,
    trace_states,
)


def test_open_end_stores_the_end_and_its_probe():
    m, r = job_in_phase(jobs_pb2.PHASE_VOTE_REVEAL)
    p = r.participants[0]
    s = p.segment
    res = m.send(m.key(p.address), open_end_msg(p.address, 1, 0, s))
    assert res.code == 0, res.log
    o = m.round(1, 0).participants[0].reveals[0]
    assert o.end_state_hash == trace_states(p.address, 1, 0, 5)[s + 1]
    assert list(o.end_probe) == honest_probe(p.address, 1, 0, s + 1)
    assert o.end_opened_height == m.height and o.end_location


def test_invalid_open_end():
    m, r = job_in_phase(jobs_pb2.PHASE_VOTE_REVEAL)
    p = r.participants[0]
    a, s, k = p.address, p.segment, m.key(p.address)
    pl = probe_leaves(a, 1, 0)

    def bad(err, seg=s, **kw):
        assert_rejected(m.chain, m.tx(k, open_end_msg(a, 1, 0, seg, **kw)), err)

    bad(ErrWrongSegment, seg=(s + 1) % 4)
    bad(ErrInvalidHash, end_state_hash=b"\x01" * 31)
    # not the state under the opened leaf (another entry's hash, a made-up one)
    bad(ErrBadProof, end_state_hash=trace_states(a, 1, 0, 5)[s])
    bad(ErrBadProof, end_state_hash=h("made up"))
    bad(ErrInvalidLocation, end_location="ftp://x")
    # a probe of the wrong size or out of range
    bad(ErrBadProbe, probe=[1] * (PROBE_DIM - 1))
    bad(ErrBadProbe, probe=[1 << 62] * PROBE_DIM)
    # a probe other than the committed one (a re-execution after the challenge, a frame): the
    # proof cannot hold; nor the committed probe of another entry
    bad(ErrBadProof, probe=[x + 1 for x in honest_probe(a, 1, 0, s + 1)])
    bad(ErrBadProof, probe=honest_probe(a, 1, 0, s), probe_proof=merkle_proof(pl, s + 1))
    # someone else
    q = non_participant(m, r)
    assert_rejected(m.chain, m.tx(q, open_end_msg(q.address, 1, 0, s)), ErrNotSelected)
    assert m.send(k, open_end_msg(a, 1, 0, s)).code == 0
    bad(ErrDuplicate)


def test_invalid_open_end_before_the_votes_are_committed():
    """In the reveal or verdict window the end would let a lazy verifier copy it: refused."""
    for phase in (jobs_pb2.PHASE_REVEAL, jobs_pb2.PHASE_VERDICT):
        m, r = job_in_phase(phase)
        p = r.participants[0]
        assert_rejected(
            m.chain, m.tx(m.key(p.address), open_end_msg(p.address, 1, 0, p.segment)), ErrWrongPhase
        )


def test_invalid_open_end_in_exact_mode():
    m, r = job_in_phase(jobs_pb2.PHASE_VOTE_REVEAL, **EXACT)
    p = r.participants[0]
    assert_rejected(
        m.chain, m.tx(m.key(p.address), open_end_msg(p.address, 1, 0, p.segment)), ErrBadProbe
    )
