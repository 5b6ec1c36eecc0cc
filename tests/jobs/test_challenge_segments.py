"""Enough segments: a challenge draws segments_per_challenge distinct segments after the commit
deadline, the reveal is complete only when all are open, and the catch-rate formula of
abci_app/jobs/audit.py holds exactly (against a float reference) and in draws."""

from fractions import Fraction
from math import comb

import pytest

from abci_app.jobs.audit import compute_catch_bps, compute_verifier_compute_bps, draw_segments
from abci_app.jobs.errors import ErrDuplicate, ErrInvalidJobSpec, ErrWrongSegment
from abci_app.jobs.params import params_from_json
from abci_app.jobs.sampler import Sampler
from abci_app.pb import jobs_pb2
from tests.kits.chainkit import assert_rejected
from tests.kits.marketkit import actors_block, create_job_msg, job_in_phase, new_market, reveal_msg

N = 4  # marketkit's job: H = 8, k = 2


def test_challenge_draws_distinct_segments_from_the_deadline_seed():
    m, r = job_in_phase(jobs_pb2.PHASE_REVEAL, segments_per_challenge=3)
    s = Sampler(r.challenge_seed)
    for p in r.participants:  # address order, the chain's consumption order
        assert p.challenged and s.below(10_000) < 10_000
        want = draw_segments(s, N, 3)
        assert list(p.segments) == want and len(set(want)) == 3 and want == sorted(want)
        assert p.segment == want[0] and all(0 <= x < N for x in want)


def test_more_segments_than_the_trace_has_draws_all_of_them():
    m, r = job_in_phase(jobs_pb2.PHASE_REVEAL, segments_per_challenge=50)
    assert all(list(p.segments) == list(range(N)) for p in r.participants)


def test_reveal_is_complete_only_when_every_drawn_segment_is_open():
    m, r = job_in_phase(jobs_pb2.PHASE_REVEAL, segments_per_challenge=2)
    p = r.participants[0]
    a, k = p.address, m.key(p.address)
    first, second = p.segments
    other = next(x for x in range(N) if x not in p.segments)
    assert_rejected(m.chain, m.tx(k, reveal_msg(a, 1, 0, other)), ErrWrongSegment)
    assert m.send(k, reveal_msg(a, 1, 0, second, segments=list(p.segments))).code == 0
    got = m.round(1, 0).participants[0]
    assert [o.segment for o in got.reveals] == [second] and not got.HasField("reveal")
    assert_rejected(
        m.chain, m.tx(k, reveal_msg(a, 1, 0, second, segments=list(p.segments))), ErrDuplicate
    )
    assert m.send(k, reveal_msg(a, 1, 0, first, segments=list(p.segments))).code == 0
    got = m.round(1, 0).participants[0]
    assert got.HasField("reveal") and sorted(o.segment for o in got.reveals) == [first, second]
    assert_rejected(
        m.chain, m.tx(k, reveal_msg(a, 1, 0, first, segments=list(p.segments))), ErrDuplicate
    )


def test_half_revealed_challenge_is_a_missed_reveal_and_cannot_be_judged():
    m, r = job_in_phase(jobs_pb2.PHASE_REVEAL, segments_per_challenge=2)
    p = r.participants[0]
    assert (
        m.send(
            m.key(p.address), reveal_msg(p.address, 1, 0, p.segments[0], segments=list(p.segments))
        ).code
        == 0
    )
    actors_block(m, 1, skip_reveal=frozenset({p.address}))
    m.until(r.reveal_end)
    got = next(q for q in m.round(1, 0).participants if q.address == p.address)
    assert got.outcome == jobs_pb2.OUTCOME_MISSED_REVEAL
    others = [q for q in m.round(1, 0).participants if q.address != p.address]
    assert all(q.HasField("reveal") and len(q.reveals) == 2 for q in others)


@pytest.mark.parametrize(
    "spec, why",
    [
        (dict(segments_per_challenge=0), "segments_per_challenge"),
        (dict(determinism_mode=jobs_pb2.DETERMINISM_MODE_UNSPECIFIED), "determinism_mode"),
        (dict(determinism_mode=jobs_pb2.DETERMINISM_MODE_EXACT, tolerance_ppm=0), "stack"),
        (
            dict(
                determinism_mode=jobs_pb2.DETERMINISM_MODE_EXACT,
                tolerance_ppm=5,
                stack="torch=2;device=cpu",
            ),
            "tolerance_ppm",
        ),
        (dict(tolerance_ppm=0), "tolerance_ppm"),
        (dict(tolerance_ppm=1_000_001), "tolerance_ppm"),
        (dict(stack="x" * 129), "stack"),
        (dict(stack="caf\u00e9"), "stack"),
    ],
)
def test_invalid_audit_spec(spec, why):
    m = new_market()
    res = assert_rejected(m.chain, m.tx(m.owner, create_job_msg(**spec)), ErrInvalidJobSpec)
    assert why in res.log


def test_exact_mode_spec_and_chain_minimum():
    m = new_market()
    ok = create_job_msg(
        determinism_mode=jobs_pb2.DETERMINISM_MODE_EXACT,
        tolerance_ppm=0,
        stack="torch=2.15.0;device=cpu;dtype=float32;tf32=off",
        segments_per_challenge=4,
    )
    assert m.send(m.owner, ok).code == 0
    with pytest.raises(ValueError, match="min_segments_per_challenge"):
        params_from_json({"min_segments_per_challenge": 0})


def test_catch_formula_is_exact():
    for n, s, c, f, rounds in [
        (320, 15, 10_000, 1_000, 3),
        (320, 15, 10_000, 100, 1),
        (4, 1, 500, 5_000, 3),
        (100, 100, 7_000, 1, 2),
        (320, 16, 9_500, 1_000, 3),
    ]:
        m = max(1, -(-n * f // 10_000))
        p_round = Fraction(c, 10_000) * (1 - Fraction(comb(n - m, min(s, n)), comb(n, min(s, n))))
        want = (1 - (1 - p_round) ** rounds) * 10_000
        assert compute_catch_bps(n, s, c, f, rounds) == int(want)  # floor
    # the defaults of the jobs README (n = 480, s = 15, every commitment challenged): >= 99 % within
    # 3 rounds at f = 10 %, 3.1 % of the steps re-executed
    assert compute_catch_bps(480, 15, 10_000, 1_000, 3) == 9_918
    assert compute_verifier_compute_bps(480, 15, 10_000) == 312
    # the old 5 %-challenge, 1-segment world is weak
    assert compute_catch_bps(320, 15, 500, 1_000, 3) < 2_500


def test_draws_are_uniform_and_extend_the_single_draw():
    n, s, trials = 20, 5, 4_000
    counts = [0] * n
    for t in range(trials):
        seed = t.to_bytes(8, "big")
        got = draw_segments(Sampler(seed), n, s)
        assert len(set(got)) == s
        assert Sampler(seed).below(n) in got  # the first pick is the single-segment draw
        for x in got:
            counts[x] += 1
    mean = trials * s / n  # 1000, sd = sqrt(trials * p * (1 - p)) ~ 27
    assert all(abs(c - mean) < 5 * 27.4 for c in counts), counts
