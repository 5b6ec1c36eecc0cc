import hashlib

import pytest

from abci_app.jobs.errors import (
    ErrBadProof,
    ErrBadTraceList,
    ErrDuplicate,
    ErrInvalidHash,
    ErrInvalidLocation,
    ErrNotChallenged,
    ErrNotSelected,
    ErrWrongPhase,
    ErrWrongSegment,
)
from abci_app.jobs.incentives import compute_hidden_entries, compute_masked_entries, mask_trace
from abci_app.merkle import hash_leaf, merkle_root
from abci_app.pb import jobs_pb2
from tests.kits.chainkit import assert_rejected
from tests.kits.marketkit import (
    h,
    job_in_phase,
    merkle_proof,
    non_participant,
    reveal_msg,
    trace_leaves,
    trace_states,
)


def test_reveal_checks_proofs_on_chain():
    m, r = job_in_phase(jobs_pb2.PHASE_REVEAL)
    p = r.participants[0]
    assert p.challenged
    res = m.send(m.key(p.address), reveal_msg(p.address, 1, 0, p.segment))
    assert res.code == 0, res.log
    rv = m.round(1, 0).participants[0].reveal
    st = trace_states(p.address, 1, 0, 5)
    # the end is opened by its leaf hash only (both modes): its state hash stays secret
    assert rv.start_state_hash == st[p.segment] and not rv.end_state_hash
    assert rv.end_leaf_hash == hash_leaf(st[p.segment + 1])
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
    assert_rejected(
        m.chain, m.tx(k, reveal_msg(a, 1, 0, s, start_state_hash=h("forged"))), ErrBadProof
    )
    # the right hash with the proof of another entry
    other = (s + 2) % 5
    assert_rejected(
        m.chain, m.tx(k, reveal_msg(a, 1, 0, s, end_proof=merkle_proof(tl, other + 1))), ErrBadProof
    )
    # the old unbound layout (entry i = leaf i) no longer verifies
    assert_rejected(
        m.chain,
        m.tx(
            k,
            reveal_msg(
                a, 1, 0, s, start_proof=merkle_proof(st, s), end_proof=merkle_proof(st, s + 1)
            ),
        ),
        ErrBadProof,
    )
    # the binding leaf is not a state (leaf 0 is never a trace entry)
    if s == 0:
        assert_rejected(
            m.chain,
            m.tx(
                k,
                reveal_msg(
                    a, 1, 0, s, start_state_hash=tl[0][:32], start_proof=merkle_proof(tl, 0)
                ),
            ),
            ErrBadProof,
        )
    # start and end swapped
    assert_rejected(
        m.chain,
        m.tx(k, reveal_msg(a, 1, 0, s, start_state_hash=st[s + 1], end_leaf_hash=hash_leaf(st[s]))),
        ErrBadProof,
    )
    # truncated / padded proof
    assert_rejected(
        m.chain,
        m.tx(k, reveal_msg(a, 1, 0, s, start_proof=merkle_proof(tl, s + 1)[:-1])),
        ErrBadProof,
    )
    assert_rejected(
        m.chain,
        m.tx(k, reveal_msg(a, 1, 0, s, start_proof=merkle_proof(tl, s + 1) + [b"\x00" * 32])),
        ErrBadProof,
    )
    assert_rejected(
        m.chain, m.tx(k, reveal_msg(a, 1, 0, s, start_proof=[b"\x00" * 5])), ErrBadProof
    )


def test_invalid_wrong_segment_and_fields():
    m, r = job_in_phase(jobs_pb2.PHASE_REVEAL)
    p = r.participants[0]
    a = p.address
    assert_rejected(
        m.chain, m.tx(m.key(a), reveal_msg(a, 1, 0, (p.segment + 1) % 4)), ErrWrongSegment
    )
    assert_rejected(
        m.chain,
        m.tx(m.key(a), reveal_msg(a, 1, 0, p.segment, start_state_hash=b"\x00")),
        ErrInvalidHash,
    )
    assert_rejected(
        m.chain,
        m.tx(m.key(a), reveal_msg(a, 1, 0, p.segment, start_location="file:///etc/passwd")),
        ErrInvalidLocation,
    )


def test_invalid_not_participant_or_not_challenged():
    m, r = job_in_phase(jobs_pb2.PHASE_REVEAL)
    k = non_participant(m, r)
    assert_rejected(m.chain, m.tx(k, reveal_msg(k.address, 1, 0, 0)), ErrNotSelected)
    m2, r2 = job_in_phase(jobs_pb2.PHASE_REVEAL, challenge_bps=500)
    unch = [p for p in r2.participants if not p.challenged]
    assert unch, "precondition: with challenge_bps=500 at least one participant is unchallenged"
    assert_rejected(
        m2.chain,
        m2.tx(m2.key(unch[0].address), reveal_msg(unch[0].address, 1, 0, 0)),
        ErrNotChallenged,
    )


def test_invalid_duplicate_and_wrong_phase():
    m, r = job_in_phase(jobs_pb2.PHASE_REVEAL)
    p = r.participants[0]
    assert m.send(m.key(p.address), reveal_msg(p.address, 1, 0, p.segment)).code == 0
    assert_rejected(
        m.chain, m.tx(m.key(p.address), reveal_msg(p.address, 1, 0, p.segment)), ErrDuplicate
    )
    m.until(r.reveal_end)
    q = r.participants[1]
    assert_rejected(
        m.chain, m.tx(m.key(q.address), reveal_msg(q.address, 1, 0, q.segment)), ErrWrongPhase
    )


def test_reveal_commits_the_trace_list_bound_to_the_trace_root():
    """The first opening carries the trace list; the chain proves it against the committed trace
    root and stores its hash with the opening, so a verifier reads which list to fetch from the
    chain. A later opening may name the hash alone."""
    m, r = job_in_phase(jobs_pb2.PHASE_REVEAL, segments_per_challenge=2)
    p = r.participants[0]
    a, (first, second) = p.address, sorted(p.segments)
    k = m.key(a)
    segs = list(p.segments)
    listed = b"".join(mask_trace(trace_states(a, 1, 0, 5), compute_masked_entries(segs, 4)))
    assert m.send(k, reveal_msg(a, 1, 0, first, segments=segs)).code == 0
    assert m.send(k, reveal_msg(a, 1, 0, second, trace_list=b"", segments=segs)).code == 0
    q = m.round(1, 0).participants[0]
    assert [o.trace_list_hash for o in q.reveals] == [hashlib.sha256(listed).digest()] * 2
    assert q.reveal.trace_list_hash == hashlib.sha256(listed).digest()


def test_invalid_trace_list_hash_not_32_bytes():
    m, r = job_in_phase(jobs_pb2.PHASE_REVEAL)
    p = r.participants[0]
    a, k = p.address, m.key(p.address)
    for bad in (b"", b"\x01" * 31, b"\x01" * 33):
        assert_rejected(
            m.chain, m.tx(k, reveal_msg(a, 1, 0, p.segment, trace_list_hash=bad)), ErrInvalidHash
        )


def test_invalid_trace_list_not_the_committed_trace():
    m, r = job_in_phase(jobs_pb2.PHASE_REVEAL)
    p, other = r.participants[0], r.participants[1]
    a, s, k = p.address, p.segment, m.key(p.address)
    st = trace_states(a, 1, 0, 5)

    def with_list(entries, **kw):
        lst = b"".join(entries)
        d = {"trace_list": lst, "trace_list_hash": hashlib.sha256(lst).digest(), **kw}
        return m.tx(k, reveal_msg(a, 1, 0, s, **d))

    # the first opening without the list: nothing binds the hash to the commitment
    assert_rejected(m.chain, m.tx(k, reveal_msg(a, 1, 0, s, trace_list=b"")), ErrBadTraceList)
    # a hash that is not the list's
    assert_rejected(m.chain, with_list(st, trace_list_hash=h("another list")), ErrBadTraceList)
    # one entry short, or one too many (H/k + 1 = 5 entries)
    assert_rejected(m.chain, with_list(st[:-1]), ErrBadTraceList)
    assert_rejected(m.chain, with_list([*st, h("extra")]), ErrBadTraceList)
    # another order of the same states, a forged last entry (the payload check's end state)
    assert_rejected(m.chain, with_list(st[::-1]), ErrBadTraceList)
    assert_rejected(m.chain, with_list([*st[:-1], h("forged end")]), ErrBadTraceList)
    # a peer's committed trace list: bound to the peer, not to the signer
    assert_rejected(m.chain, with_list(trace_states(other.address, 1, 0, 5)), ErrBadTraceList)
    # not a whole number of hashes
    assert_rejected(m.chain, with_list([b"".join(st)[:-1]]), ErrBadTraceList)


def test_invalid_later_opening_names_another_trace_list():
    m, r = job_in_phase(jobs_pb2.PHASE_REVEAL, segments_per_challenge=2)
    p = r.participants[0]
    a, (first, second) = p.address, sorted(p.segments)
    k = m.key(a)
    segs = list(p.segments)
    assert m.send(k, reveal_msg(a, 1, 0, first, segments=segs)).code == 0
    assert_rejected(
        m.chain,
        m.tx(
            k,
            reveal_msg(a, 1, 0, second, trace_list=b"", trace_list_hash=h("other"), segments=segs),
        ),
        ErrBadTraceList,
    )


@pytest.mark.parametrize("mode", ["exact", "tolerance"])
def test_the_end_is_opened_by_its_leaf_hash_only(mode):
    """Both modes: the end state of an opened segment stays secret (docs/threat-model.md *Evidence
    only re-execution yields*): the reveal carries its Merkle leaf hash, proven at leaf-hash level,
    and no end state hash or location (tolerance mode opens them later with MsgOpenEnd, after
    the first panel has committed its votes)."""
    from tests.kits.marketkit import EXACT

    m, r = job_in_phase(jobs_pb2.PHASE_REVEAL, **(EXACT if mode == "exact" else {}))
    p = r.participants[0]
    a, s, k = p.address, p.segment, m.key(p.address)
    st = trace_states(a, 1, 0, 5)
    # the end state hash or location in the clear is refused
    assert_rejected(
        m.chain, m.tx(k, reveal_msg(a, 1, 0, s, end_state_hash=st[s + 1])), ErrInvalidHash
    )
    assert_rejected(
        m.chain, m.tx(k, reveal_msg(a, 1, 0, s, end_location="http://10.0.0.1/e")), ErrInvalidHash
    )
    # no leaf hash, or one that is not the committed one
    assert_rejected(m.chain, m.tx(k, reveal_msg(a, 1, 0, s, end_leaf_hash=b"")), ErrInvalidHash)
    assert_rejected(m.chain, m.tx(k, reveal_msg(a, 1, 0, s, end_leaf_hash=h("x"))), ErrBadProof)
    # the state hash itself in place of its leaf hash does not verify either
    assert_rejected(m.chain, m.tx(k, reveal_msg(a, 1, 0, s, end_leaf_hash=st[s + 1])), ErrBadProof)
    res = m.send(k, reveal_msg(a, 1, 0, s))
    assert res.code == 0, res.log
    o = m.round(1, 0).participants[0].reveals[0]
    assert o.end_leaf_hash == hash_leaf(st[s + 1]) and not o.end_state_hash and not o.end_location


def _all_segments_in_phase(mode: str):
    """A job whose challenge opens all four segments of its trace (one run ending at H/k: before
    the run-start rule, every end was public as the next segment's start or as entry H/k)."""
    from tests.kits.marketkit import EXACT

    m, r = job_in_phase(
        jobs_pb2.PHASE_REVEAL, segments_per_challenge=4, **(EXACT if mode == "exact" else {})
    )
    p = r.participants[0]
    assert sorted(p.segments) == [0, 1, 2, 3]
    return m, p


@pytest.mark.parametrize("mode", ["exact", "tolerance"])
def test_adjacent_opened_segments_keep_every_end_secret(mode):
    """Only the start of a run of adjacent opened segments is public: segment s whose
    predecessor is opened gives its start (the previous segment's end) as a leaf hash only
    (``start_leaf_hash``, proven at leaf-hash level), and the trace list masks it, so every end
    in the run but entry H/k stays secret (docs/threat-model.md *Evidence only re-execution
    yields*)."""
    m, p = _all_segments_in_phase(mode)
    a, k, segs = p.address, m.key(p.address), list(p.segments)
    st = trace_states(a, 1, 0, 5)
    assert compute_hidden_entries(segs, 4) == {1, 2, 3}
    res = m.send(k, *[reveal_msg(a, 1, 0, s, segments=segs) for s in segs])
    assert res.code == 0, res.log
    q = m.round(1, 0).participants[0]
    assert q.HasField("reveal")
    by = {o.segment: o for o in q.reveals}
    assert by[0].start_state_hash == st[0] and by[0].start_location and not by[0].start_leaf_hash
    for s in (1, 2, 3):  # the start is the previous segment's secret end: a leaf hash only
        o = by[s]
        assert not o.start_state_hash and not o.start_location
        assert o.start_leaf_hash == hash_leaf(st[s]) == by[s - 1].end_leaf_hash
    # the list the first opening carried: entries 0 and H/k in the clear, every other a leaf
    listed = mask_trace(st, {1, 2, 3})
    assert by[0].trace_list_hash == hashlib.sha256(b"".join(listed)).digest()
    public = {i for i, e in enumerate(listed) if e == st[i]}
    assert public == {0, 4}
    # what is public on chain and in the list names no end but entry H/k (segment 3's)
    opened = {o.start_state_hash for o in q.reveals} | {o.end_state_hash for o in q.reveals}
    assert {st[s + 1] for s in segs} & (opened | set(listed)) == {st[4]}


def test_invalid_non_run_start_opening_gives_a_plain_start_hash():
    """A segment whose predecessor is challenged too must open its start by its leaf hash only:
    a plain start hash (with or without the leaf hash), a location, no leaf hash (507), a leaf
    hash that is not the committed one or the state hash in its place (512) are refused, and
    nothing changes; a run's start giving a leaf hash instead of its state is refused too."""
    m, p = _all_segments_in_phase("exact")
    a, k, segs = p.address, m.key(p.address), list(p.segments)
    st = trace_states(a, 1, 0, 5)
    tx = m.tx

    def rv(s, **kw):
        return reveal_msg(a, 1, 0, s, segments=segs, **kw)

    plain = {"start_leaf_hash": b"", "start_state_hash": st[1]}
    assert_rejected(m.chain, tx(k, rv(1, **plain)), ErrInvalidHash)
    assert_rejected(
        m.chain, tx(k, rv(1, **plain, start_location="http://10.0.0.1/s")), ErrInvalidHash
    )
    assert_rejected(m.chain, tx(k, rv(1, start_state_hash=st[1])), ErrInvalidHash)
    assert_rejected(m.chain, tx(k, rv(1, start_location="http://10.0.0.1/s")), ErrInvalidHash)
    assert_rejected(m.chain, tx(k, rv(1, start_leaf_hash=b"")), ErrInvalidHash)
    assert_rejected(m.chain, tx(k, rv(1, start_leaf_hash=h("x"))), ErrBadProof)
    assert_rejected(m.chain, tx(k, rv(1, start_leaf_hash=st[1])), ErrBadProof)
    # segment 0 starts the run: its start is opened as the state, never as a leaf hash
    assert_rejected(m.chain, tx(k, rv(0, start_leaf_hash=hash_leaf(st[0]))), ErrInvalidHash)
    # the same openings in the right form are taken
    res = m.send(k, rv(0), rv(1, trace_list=b""))
    assert res.code == 0, res.log


def test_hidden_entries_leave_a_lazy_verifier_at_most_the_segment_ending_at_h_over_k():
    """For every set of opened segments of a 6-segment trace: every start but a run's is
    secret, and the only opened segment whose end is public is the one ending at H/k (the
    payload check needs entry H/k): a lazy verifier skips at most that one re-execution."""
    from itertools import combinations

    from abci_app.jobs.incentives import compute_runs, is_run_start

    n = 6
    for size in range(1, n + 1):
        for segs in combinations(range(n), size):
            hidden = compute_hidden_entries(list(segs), n)
            assert {s for s in segs if s + 1 not in hidden} <= {n - 1}
            assert all((s in hidden) != is_run_start(s, list(segs)) for s in segs)
            runs = compute_runs(list(segs))
            assert [s for run in runs for s in run] == sorted(segs)
            assert all(run == list(range(run[0], run[-1] + 1)) for run in runs)
            assert all(not is_run_start(s, list(segs)) for run in runs for s in run[1:])
