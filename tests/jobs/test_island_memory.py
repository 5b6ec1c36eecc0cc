"""Jobs that need an island (issue 35, 2): a model larger than one device's memory is seated only
on providers whose registered devices together hold it (abci_app/jobs/README.md *Islands and
measured speed*), as participants and as verifiers."""

from __future__ import annotations

from abci_app.jobs.capacity import (
    BYTES_PER_PARAM,
    MIB,
    WAIT_MEMORY,
    compute_island_need_mib,
)
from abci_app.jobs.incentives import compute_model_params
from abci_app.pb import jobs_pb2
from tests.kits.marketkit import (
    BOND,
    Market,
    actors_block,
    create_job_msg,
    events_of,
    new_market,
    register_msg,
    run_job,
)

# 6.4 billion parameters: 24 bytes each is ~144 GiB, more than any single device below
BIG = jobs_pb2.ModelConfig(n_layers=32, n_heads=32, d_model=4096, context_len=64, vocab_size=256)
WINDOWS = {"commit_blocks": 4, "reveal_blocks": 3, "verdict_blocks": 3, "attest_blocks": 3}
ONE_L4 = [("L4", 1, 24_576)]
EIGHT_L4 = [("L4", 8, 24_576)]  # 192 GiB as one island, 24 GiB per device
EIGHT_H100 = [("H100", 8, 81_920)]


def test_the_island_need_is_the_training_state_of_the_model() -> None:
    need = compute_island_need_mib(jobs_pb2.JobSpec(model=BIG))
    params = compute_model_params(BIG)
    assert need == -(-params * BYTES_PER_PARAM // MIB)
    assert 24_576 < 81_920 < need < 8 * 24_576  # larger than any one device, held by 8 L4s


def market(*hardware: list[tuple[str, int, int]]) -> Market:
    m = new_market(n_providers=len(hardware), register=False)
    m.block(
        [(k, register_msg(BOND, hardware=hw)) for k, hw in zip(m.providers, hardware, strict=True)]
    )
    return m


def test_a_model_no_island_holds_waits_with_the_memory_reason() -> None:
    m = market(ONE_L4, ONE_L4, [("H100", 1, 81_920)])
    assert m.send(m.owner, create_job_msg(rounds=1, model=BIG, **WINDOWS)).code == 0
    resp = m.chain.block([])
    waiting = events_of([resp], "round.waiting")
    assert waiting and waiting[0]["reason"] == WAIT_MEMORY
    assert waiting[0]["memory_mib"] == str(compute_island_need_mib(jobs_pb2.JobSpec(model=BIG)))
    assert m.job(1).rounds_opened == 0


def test_the_draw_seats_only_islands_that_hold_the_model_as_participants_and_verifiers() -> None:
    """Eight L4s (no single device holds the model) and eight H100s are seated; the one-L4
    provider, whose bond and reputation weigh as much, is never drawn, neither into a round nor
    onto a panel."""
    m = market(EIGHT_L4, EIGHT_H100, ONE_L4)
    small = m.providers[2].address
    m.create_job(rounds=3, model=BIG, participants_per_round=1, **WINDOWS)
    run_job(m, 1)
    seen = set()
    for n in range(3):
        r = m.round(1, n)
        assert r.participants and all(
            p.outcome == jobs_pb2.OUTCOME_ACCEPTED for p in r.participants
        )
        for p in r.participants:
            seen.add(p.address)
            seen.update(v.address for v in p.verifiers)
    assert small not in seen
    assert seen == {m.providers[0].address, m.providers[1].address}


def test_claiming_an_island_it_lacks_costs_a_missed_commit() -> None:
    """A provider that claims eight H100s to be seated for a big model, then cannot train it,
    does not commit: it is slashed for the missed commit and loses reputation; it is paid
    nothing (declining instead costs its slot and pay, never a gain)."""
    m = market(EIGHT_H100, EIGHT_H100, EIGHT_H100)
    m.create_job(rounds=1, model=BIG, participants_per_round=2, **WINDOWS)
    m.until(m.height + 1)
    r = m.round(1, 0)
    liar = r.participants[0].address
    before = m.provider(liar)
    assert before is not None
    resps = []
    while m.job(1).status == jobs_pb2.JOB_STATUS_ACTIVE:
        resps.append(actors_block(m, 1, skip_commit=frozenset({liar})))
    p = next(q for q in m.round(1, 0).participants if q.address == liar)
    after = m.provider(liar)
    assert after is not None
    assert p.outcome == jobs_pb2.OUTCOME_MISSED_COMMIT and p.reward == 0
    assert after.bond < before.bond and after.reputation < before.reputation
    assert after.measured_tokens_per_sec == 0  # no accepted work, no measurement
    assert not [e for e in events_of(resps, "speed.measured") if e["provider"] == liar]
