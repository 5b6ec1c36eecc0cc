"""Measured speed (issue 35, 3): what the draw takes for a provider's speed comes from its own
accepted work, not its claim (abci_app/jobs/README.md *Islands and measured speed*).

The kit's blocks are one second apart (chainkit: header time 1,700,000,000 + height), so a
provider that commits n blocks after its round opened trained the job's tokens in n seconds.
Job 1's rounds train 8 x 1024 = 8,192 tokens."""

from __future__ import annotations

from abci_app.jobs.capacity import WAIT_SPEED, compute_speed_sample
from abci_app.pb import jobs_pb2, providers_pb2, tx_pb2
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

TOKENS = 8 * 1024  # inner_steps x tokens_per_step of the kit's job
CAP = DEFAULTS["unmeasured_throughput_cap"]
WINDOWS = {"commit_blocks": 6, "reveal_blocks": 4, "verdict_blocks": 3, "attest_blocks": 3}


def judge_msg() -> tx_pb2.Msg:
    """A provider that takes no job's slot (policy) but judges: every panel draws from all."""
    msg = register_msg()
    msg.register_provider.policy.CopyFrom(providers_pb2.JobPolicy(min_slot_reward=10**15))
    return msg


def market(liar_claim: int) -> tuple[Market, bytes, bytes]:
    """Providers: a liar claiming ``liar_claim`` tokens/s, an honest one claiming 50,000, and a
    judge. Returns (market, liar, honest)."""
    m = new_market(n_providers=3, register=False)
    liar, honest, judge = m.providers
    m.block(
        [
            (liar, register_msg(throughput=liar_claim)),
            (honest, register_msg()),
            (judge, judge_msg()),
        ]
    )
    return m, liar.address, honest.address


def test_a_provider_claiming_ten_times_its_speed_is_recorded_at_its_measured_speed() -> None:
    real = TOKENS // 4  # it needs 4 s for the round's 8,192 tokens: 2,048 tokens/s
    m, liar, honest = market(liar_claim=10 * real)
    m.create_job(rounds=1, **WINDOWS)
    m.until(m.height + 1)
    r = m.round(1, 0)
    assert {p.address for p in r.participants} == {liar, honest}
    # the honest provider commits 1 block after the open, the liar 4 blocks after
    actors_block(m, 1, skip_commit=frozenset({liar}))
    m.until(r.open_height + 3)
    resps = run_job(m, 1)
    done = m.round(1, 0)
    by = {p.address: p for p in done.participants}
    assert by[liar].outcome == by[honest].outcome == jobs_pb2.OUTCOME_ACCEPTED
    assert by[liar].commitment.time_ns - done.open_time_ns == 4 * 10**9
    lp, hp = m.provider(liar), m.provider(honest)
    assert lp is not None and hp is not None
    assert lp.throughput_tokens_per_sec == 10 * real  # the claim stays on record...
    assert lp.measured_tokens_per_sec == real  # ... the measurement is what it did
    assert hp.measured_tokens_per_sec == TOKENS  # 1 s
    assert pk.get_effective_throughput(m.store, lp) == real
    ev = {e["provider"]: e for e in events_of(resps, "speed.measured")}
    assert len(ev) == 2
    assert all(e["verified"] == "1" for e in ev.values())  # the kit challenges every commitment


def test_the_draw_for_a_stated_speed_follows_the_measurement_not_the_claim() -> None:
    """A job that states its training time needs 8,192 / 2 = 4,096 tokens/s. Before any work
    measured them, the liar (claiming 81,920) and the honest provider (50,000) are held at their
    claims, both above the need: both get the round that measures them, and no more. Measured
    (the liar took 4 s: 2,048 tokens/s), only the provider whose work reached the speed is seated
    again, whatever the liar claims."""
    m, liar, honest = market(liar_claim=10 * TOKENS)
    lp = m.provider(liar)
    assert lp is not None and pk.get_effective_throughput(m.store, lp) == CAP
    m.create_job(rounds=1, compute_s_per_round=2, **WINDOWS)
    m.until(m.height + 1)
    r = m.round(1, 0)
    assert {p.address for p in r.participants} == {liar, honest}
    actors_block(m, 1, skip_commit=frozenset({liar}))
    m.until(r.open_height + 3)
    run_job(m, 1)
    assert m.provider(liar).measured_tokens_per_sec == TOKENS // 4  # type: ignore[union-attr]
    assert m.provider(honest).measured_tokens_per_sec == TOKENS  # type: ignore[union-attr]

    # job 2 states the 4,096 tokens/s again, for two participants: only one provider reaches it
    m.create_job(rounds=1, compute_s_per_round=2, **WINDOWS)
    m.until(m.height + 1)
    assert [p.address for p in m.round(2, 0).participants] == [honest]


def test_a_job_nobody_is_fast_enough_for_waits_with_the_speed_reason() -> None:
    """Providers that claim less than both the need and the cap are not seated for a job that
    needs more (the claim can lower what the chain assumes, never raise it past the cap)."""
    m, _liar, _honest = market(liar_claim=CAP // 2)
    m.send(
        m.providers[1],
        tx_pb2.Msg(
            update_provider=providers_pb2.MsgUpdateProvider(throughput_tokens_per_sec=CAP // 2)
        ),
    )
    assert m.send(m.owner, create_job_msg(rounds=1, compute_s_per_round=2, **WINDOWS)).code == 0
    resp = m.chain.block([])
    waiting = events_of([resp], "round.waiting")
    assert waiting and waiting[0]["reason"] == WAIT_SPEED
    assert waiting[0]["tokens_per_sec"] == str(TOKENS // 2)
    assert m.job(1).rounds_opened == 0


def test_an_unverified_commitment_can_lower_the_figure_but_never_raise_it() -> None:
    """Nobody re-executed an unchallenged commitment (it may be garbage sent early to look
    fast): its sample counts at most at the standing the draw already used (the claim before any
    measurement, the figure after; tests/providers/test_measured_speed_honest_providers.py). A
    panel-verified one moves the EMA (window 4) freely."""
    m = new_market(n_providers=1)
    addr = m.providers[0].address
    store = CacheKV(m.store)
    # no measurement yet: an unverified sample counts at most at the claim (50,000)
    assert pk.record_throughput(store, addr, 10**9, verified=False) == 50_000
    # verified: (50,000 x 3 + 8,192) // 4
    assert pk.record_throughput(store, addr, TOKENS, verified=True) == (3 * 50_000 + TOKENS) // 4
    fig = (3 * 50_000 + TOKENS) // 4
    assert pk.record_throughput(store, addr, 10**9, verified=False) == fig  # no raise
    assert pk.record_throughput(store, addr, 100, verified=False) == (3 * fig + 100) // 4
    p = pk.get_provider(store, addr)
    assert p is not None and p.measured_samples == 4


def test_the_sample_is_tokens_over_the_time_from_open_to_commit() -> None:
    assert compute_speed_sample(TOKENS, 5 * 10**9, 9 * 10**9) == TOKENS // 4
    assert compute_speed_sample(TOKENS, 5 * 10**9, 5 * 10**9) == TOKENS * 10**9  # floor 1 ns
    assert compute_speed_sample(7, 0, 3 * 10**9) == 2  # integers, truncated


def test_the_sla_record_keeps_each_round_s_speed_sample() -> None:
    from abci_app.jobs import sla

    m, liar, honest = market(liar_claim=50_000)
    m.create_job(rounds=1, **WINDOWS)
    m.until(m.height + 1)
    run_job(m, 1)
    s = sla.get_sla(m.store, honest)
    assert s.speed_samples == 1 and s.last_tokens_per_sec == TOKENS
    assert sla.decode_sla(sla.encode_sla(s)[: 8 * sla.N_FIELDS_V1]).speed_samples == 0
