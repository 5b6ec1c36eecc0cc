"""Measured speed never costs an honest provider (attacker review, issue 35, 3).

1. **Seated above its own claim.** A provider no work has measured yet was held at
   min(claimed, cap) against min(need, cap): with the cap at 1,000 tokens/s, an honest machine
   that truthfully claims 2,000 tokens/s was seated for a job needing 4,096 (or 17,067: every
   need above the cap looks the same), though its own claim says it trains the round in twice
   (8x) the time the job states. It misses the commit: `slash_fraction_liveness_bps` of its
   bond and `reputation_loss_missed_commit_bps` (the jobs README names that cost). Now an
   unmeasured provider is seated only where its claim reaches the need (a claim is believed
   downwards, never past what it says).
2. **Measured down to the cap.** The first sample of an unmeasured provider, when no panel
   verified it (95 % of commitments at the 5 % minimum challenge rate), counted at most at
   min(claim, cap): an honest provider that trained the round at 8,192 tokens/s for a job
   needing 4,096 was recorded at 1,000, and measured providers are held against the whole need,
   so the job that had just seated it never seated it again, nor any job needing more than
   1,000; with every job above the cap (the README's own example, 17,067) it stayed out for
   good (no seat, no sample, no way back). Now an unverified sample counts at most at the
   standing the draw already used (the claim before any measurement, the figure after): it
   lowers, it never raises.

Job 1 of the market kit trains 8 x 1024 = 8,192 tokens a round; the kit's blocks are 1 s apart."""

from __future__ import annotations

from abci_app.jobs.capacity import WAIT_SPEED
from abci_app.pb import providers_pb2
from abci_app.providers import keeper as pk
from abci_app.providers.params import DEFAULTS
from abci_app.store import CacheKV
from tests.kits.marketkit import (
    Market,
    actors_block,
    create_job_msg,
    events_of,
    new_market,
    register_msg,
    run_job,
)

TOKENS = 8 * 1024
CAP = DEFAULTS["unmeasured_throughput_cap"]
WINDOWS = {"commit_blocks": 6, "reveal_blocks": 4, "verdict_blocks": 3, "attest_blocks": 3}


def _market(claim: int) -> tuple[Market, bytes]:
    """One provider claiming ``claim`` tokens/s, and a judge that takes no job's slot."""
    m = new_market(n_providers=2, register=False)
    worker, judge = m.providers
    judge_reg = register_msg()
    judge_reg.register_provider.policy.CopyFrom(providers_pb2.JobPolicy(min_slot_reward=10**15))
    m.block([(worker, register_msg(throughput=claim)), (judge, judge_reg)])
    return m, worker.address


def test_an_unmeasured_provider_is_never_seated_for_a_speed_its_own_claim_does_not_reach() -> None:
    claim = 2 * CAP  # honest: 2,000 tokens/s, above the cap, below the job's 4,096
    m, _addr = _market(claim)
    assert m.send(m.owner, create_job_msg(rounds=1, compute_s_per_round=2, **WINDOWS)).code == 0
    waiting = events_of([m.chain.block([])], "round.waiting")
    assert waiting and waiting[0]["reason"] == WAIT_SPEED
    assert m.job(1).rounds_opened == 0
    p = pk.get_provider(m.store, _addr)
    assert p is not None
    for need in (claim + 1, 4_096, 17_067):
        assert not pk.compute_meets_throughput(p, need)
    for need in (1, CAP, claim):  # what it claims it can do, it is seated for
        assert pk.compute_meets_throughput(p, need)


def test_an_honest_provider_s_unverified_round_keeps_it_seated_for_the_speed_it_trained_at() -> (
    None
):
    m, addr = _market(50_000)
    store = CacheKV(m.store)
    # it trained the round's 8,192 tokens in 1 s; nobody challenged the commitment
    assert pk.record_throughput(store, addr, TOKENS, verified=False) == TOKENS
    p = pk.get_provider(store, addr)
    assert p is not None and p.measured_tokens_per_sec == TOKENS
    assert pk.meets_throughput(store, p, TOKENS // 2)  # the 4,096 job seats it again
    assert not pk.meets_throughput(store, p, TOKENS + 1)  # nothing it did not show


def test_an_unverified_sample_never_raises_the_standing_the_draw_used() -> None:
    m, addr = _market(3_000)
    store = CacheKV(m.store)
    # garbage committed early looks like 10^9 tokens/s: it counts at the claim, no more
    assert pk.record_throughput(store, addr, 10**9, verified=False) == 3_000
    assert pk.record_throughput(store, addr, 10**9, verified=False) == 3_000
    # a slower unverified sample lowers it (EMA, window 4)
    assert pk.record_throughput(store, addr, 1_000, verified=False) == (3 * 3_000 + 1_000) // 4
    # only a verified sample raises it
    assert pk.record_throughput(store, addr, 9_000, verified=True) == (3 * 2_500 + 9_000) // 4


def test_the_round_that_measures_a_new_provider_does_not_shut_it_out_of_the_job() -> None:
    """End to end: an honest new provider trains job 1's round in 1 s (8,192 tokens/s) for a job
    needing 4,096, at the minimum challenge rate; unchallenged, it is seated for job 2 (the same
    need) after the round that measured it."""
    m, addr = _market(50_000)
    m.create_job(rounds=1, compute_s_per_round=2, challenge_bps=500, **WINDOWS)
    m.until(m.height + 1)
    r = m.round(1, 0)
    assert [p.address for p in r.participants] == [addr]
    actors_block(m, 1)
    run_job(m, 1)
    done = m.round(1, 0)
    (part,) = done.participants
    assert not part.challenged  # the seeded draw left it unverified, as 95 % are
    assert part.commitment.time_ns - done.open_time_ns == 10**9
    p = m.provider(addr)
    assert p is not None and p.measured_tokens_per_sec == TOKENS
    m.create_job(rounds=1, compute_s_per_round=2, challenge_bps=500, **WINDOWS)
    m.until(m.height + 1)
    assert [q.address for q in m.round(2, 0).participants] == [addr]
