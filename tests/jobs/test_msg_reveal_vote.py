"""MsgRevealVote: opens a vote committed with MsgVerdict, in the window after the vote."""

from abci_app.jobs.errors import (
    ErrBadEvidence,
    ErrBadProbe,
    ErrDuplicate,
    ErrInvalidQuality,
    ErrVoteMismatch,
    ErrWrongPhase,
)
from abci_app.jobs.incentives import compute_blind_vote_hash
from abci_app.jobs.probe import PROBE_DIM, compute_probe_evidence
from abci_app.pb import jobs_pb2
from tests.kits.chainkit import assert_rejected
from tests.kits.marketkit import (
    EXACT,
    job_in_phase,
    reached_probes,
    reveal_vote_msg,
    verdict_msg,
    vote_evidence,
    vote_msgs,
    vote_salt,
)


def _committed(valid: bool = True, exact: bool = True):
    m, r = job_in_phase(jobs_pb2.PHASE_VERDICT, **(EXACT if exact else {}))
    p = r.participants[0]
    v = m.key(p.verifiers[0].address)
    commit, open_ = vote_msgs(r, p.address, v.address, valid, 7_000, tolerance=not exact)
    assert m.send(v, commit).code == 0
    m.until(r.verdict_end)
    return m, m.round(1, 0), p, v, open_


def test_reveal_vote_opens_the_commitment():
    m, r, p, v, open_ = _committed()
    assert r.phase == jobs_pb2.PHASE_VOTE_REVEAL
    res = m.send(v, open_)
    assert res.code == 0, res.log
    vv = m.round(1, 0).participants[0].verifiers[0]
    assert vv.voted and vv.valid and vv.quality == 7_000 and vv.evidence == vote_evidence(p, True)


def test_tolerance_vote_is_blind_and_carries_probes():
    """Tolerance mode: the committed hash binds only the probes' evidence and the salt
    (compute_blind_vote_hash); valid and quality are given when it is opened (the verifier
    judges the full end state once MsgOpenEnd has opened it); the probes are stored."""
    m, r, p, v, open_ = _committed(exact=False)
    o = open_.reveal_vote
    probes = reached_probes(r, p)
    assert list(o.probes) == probes and o.evidence == compute_probe_evidence(probes)
    assert r.participants[0].verifiers[0].vote_hash == compute_blind_vote_hash(
        1, 0, p.address, v.address, o.evidence, o.salt
    )
    # another salt or other probes do not open it
    other = [x + 1 for x in probes]
    bad = reveal_vote_msg(1, 0, p.address, True, 7_000, compute_probe_evidence(other), o.salt)
    bad.reveal_vote.probes.extend(other)
    assert_rejected(m.chain, m.tx(v, bad), ErrVoteMismatch)
    salted = reveal_vote_msg(1, 0, p.address, True, 7_000, o.evidence, b"\x02" * 32)
    salted.reveal_vote.probes.extend(probes)
    assert_rejected(m.chain, m.tx(v, salted), ErrVoteMismatch)
    # opened with another quality than the one it was built with: fine, it was never committed
    free = reveal_vote_msg(1, 0, p.address, True, 6_500, o.evidence, o.salt)
    free.reveal_vote.probes.extend(probes)
    res = m.send(v, free)
    assert res.code == 0, res.log
    vv = m.round(1, 0).participants[0].verifiers[0]
    assert vv.voted and vv.valid and vv.quality == 6_500 and list(vv.probes) == probes


def _try_tolerance_opening(probes, ev=None, reached=(), err=ErrBadProbe):
    """Commit a blind vote over ``ev`` (default: the probes' evidence), then open it with
    ``probes``: refused with ``err`` (and nothing changes)."""
    m, r = job_in_phase(jobs_pb2.PHASE_VERDICT)
    p = r.participants[0]
    v = m.key(p.verifiers[0].address)
    salt = vote_salt(v.address, 1, 0, p.address)
    ev = compute_probe_evidence(probes) if ev is None else ev
    hsh = compute_blind_vote_hash(1, 0, p.address, v.address, ev, salt)
    assert m.send(v, verdict_msg(1, 0, p.address, hsh)).code == 0
    m.until(r.verdict_end)
    msg = reveal_vote_msg(1, 0, p.address, True, 7_000, ev, salt, list(reached))
    msg.reveal_vote.probes.extend(probes)
    assert_rejected(m.chain, m.tx(v, msg), err)
    return r, p


def test_invalid_tolerance_vote_probes():
    """A tolerance-mode opening with probes of the wrong size or out of range (534), not its
    evidence (531), or with reached state hashes besides (534) is refused even when it opens
    the committed hash."""
    _try_tolerance_opening([7] * (PROBE_DIM - 1))
    _try_tolerance_opening([7] * (PROBE_DIM + 1))
    _try_tolerance_opening([1 << 62] + [0] * (PROBE_DIM - 1))
    r, p = _try_tolerance_opening([3] * PROBE_DIM, ev=b"\x05" * 32, err=ErrBadEvidence)
    _try_tolerance_opening(reached_probes(r, p), reached=[b"\x01" * 32])


def test_invalid_reveal_vote_mismatch():
    """Another vote than the committed one (other quality, other side, other salt) is refused."""
    m, r, p, v, open_ = _committed()
    o = open_.reveal_vote
    ev, salt = o.evidence, o.salt
    assert_rejected(
        m.chain, m.tx(v, reveal_vote_msg(1, 0, p.address, True, 7_001, ev, salt)), ErrVoteMismatch
    )
    assert_rejected(
        m.chain,
        m.tx(v, reveal_vote_msg(1, 0, p.address, True, 7_000, ev, b"\x02" * 32)),
        ErrVoteMismatch,
    )
    assert_rejected(
        m.chain,
        m.tx(v, reveal_vote_msg(1, 0, p.address, False, 0, vote_evidence(p, False), salt)),
        ErrVoteMismatch,
    )


def test_invalid_reveal_vote_bad_evidence():
    """A valid vote whose evidence is not the revealed end state contradicts itself (and an
    invalid vote that claims the revealed end state): refused even when it opens the hash."""
    from abci_app.jobs.incentives import compute_vote_hash
    from tests.kits.marketkit import verdict_msg

    m, r = job_in_phase(jobs_pb2.PHASE_VERDICT, **EXACT)
    p = r.participants[0]
    v = m.key(p.verifiers[0].address)
    salt = vote_salt(v.address, 1, 0, p.address)
    wrong = b"\x05" * 32
    assert (
        m.send(
            v,
            verdict_msg(
                1,
                0,
                p.address,
                compute_vote_hash(1, 0, p.address, v.address, True, 7_000, wrong, salt),
            ),
        ).code
        == 0
    )
    m.until(r.verdict_end)
    assert_rejected(
        m.chain, m.tx(v, reveal_vote_msg(1, 0, p.address, True, 7_000, wrong, salt)), ErrBadEvidence
    )


def test_invalid_reveal_vote_not_committed_duplicate_quality_phase():
    m, r, p, v, open_ = _committed()
    q = r.participants[1]
    qv = m.key(q.verifiers[0].address)
    # never committed
    assert_rejected(
        m.chain, m.tx(qv, vote_msgs(r, q.address, qv.address, tolerance=False)[1]), ErrVoteMismatch
    )
    o = open_.reveal_vote
    assert_rejected(
        m.chain,
        m.tx(v, reveal_vote_msg(1, 0, p.address, True, 10_001, o.evidence, o.salt)),
        ErrInvalidQuality,
    )
    # the only committed vote: its opening is the last message the vote-reveal phase waits for,
    # so the phase ends at the next height (early close); the duplicate goes in the same block
    first, again = m.tx_pair(v, open_, open_)
    assert_rejected(m.chain, again, ErrDuplicate, before=[first])
    assert next(x for x in m.round(1, 0).participants[0].verifiers if x.address == v.address).voted
    m.until(m.round(1, 0).vote_reveal_end)
    assert_rejected(
        m.chain, m.tx(qv, vote_msgs(r, q.address, qv.address, tolerance=False)[1]), ErrWrongPhase
    )


def test_invalid_reveal_vote_in_the_voting_window():
    m, r = job_in_phase(jobs_pb2.PHASE_VERDICT)
    p = r.participants[0]
    v = m.key(p.verifiers[0].address)
    commit, open_ = vote_msgs(r, p.address, v.address)
    assert m.send(v, commit).code == 0
    assert_rejected(m.chain, m.tx(v, open_), ErrWrongPhase)


def test_lazy_verifier_cannot_open_a_valid_vote_on_a_run():
    """Exact mode, all four segments opened (one run ending at H/k: before the run-start rule
    nothing was secret and an always-valid vote opened for free). From everything public (the
    run's start, entry H/k, the trace list the first opening carried, the openings' leaf
    hashes) a lazy verifier cannot name the ends: its valid vote is refused (531). Only after
    re-executing segments 0..2 does it know every end but entry H/k's, which is public: the
    bound is one skipped segment, the one ending at H/k."""
    from abci_app.jobs.incentives import compute_evidence, compute_hidden_entries, mask_trace
    from abci_app.merkle import hash_leaf
    from tests.kits.marketkit import trace_states

    m, r = job_in_phase(jobs_pb2.PHASE_VERDICT, segments_per_challenge=4, **EXACT)
    p = r.participants[0]
    assert sorted(o.segment for o in p.reveals) == [0, 1, 2, 3]
    st = trace_states(p.address, 1, 0, 5)
    listed = mask_trace(st, compute_hidden_entries(list(p.segments), 4))
    public = {o.start_state_hash for o in p.reveals} | set(listed)
    v = m.key(p.verifiers[0].address)
    salt = vote_salt(v.address, 1, 0, p.address)

    def commit_and_open(reached):
        from abci_app.jobs.incentives import compute_vote_hash

        ev = compute_evidence(reached)
        hsh = compute_vote_hash(1, 0, p.address, v.address, True, 7_000, ev, salt)
        return verdict_msg(1, 0, p.address, hsh), reveal_vote_msg(
            1, 0, p.address, True, 7_000, ev, salt, reached
        )

    # the lazy verifier's best: the list's entry at each end (a leaf hash, or H/k in the clear)
    lazy = [listed[s + 1] for s in range(4)]
    ends = [o.end_leaf_hash for o in sorted(p.reveals, key=lambda o: o.segment)]
    known = [x in public and hash_leaf(x) == e for x, e in zip(lazy, ends, strict=True)]
    assert known == [False, False, False, True]
    commit, open_ = commit_and_open(lazy)
    assert m.send(v, commit).code == 0
    m.until(r.verdict_end)
    assert_rejected(m.chain, m.tx(v, open_), ErrBadEvidence)
    # re-executing 0..2 yields entries 1..3; entry 4 is public: that vote opens (same market,
    # replayed: the runs are deterministic)
    m2, r2 = job_in_phase(jobs_pb2.PHASE_VERDICT, segments_per_challenge=4, **EXACT)
    p2 = r2.participants[0]
    v2 = m2.key(p2.verifiers[0].address)
    assert (p2.address, v2.address) == (p.address, v.address)
    commit, open_ = commit_and_open([st[1], st[2], st[3], listed[4]])
    assert m2.send(v2, commit).code == 0
    m2.until(r2.verdict_end)
    res = m2.send(v2, open_)
    assert res.code == 0, res.log
