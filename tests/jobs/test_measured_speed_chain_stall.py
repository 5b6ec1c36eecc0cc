"""A chain stall is not a slow provider (attacker review, issue 35, 3).

A speed sample is ``tokens x 10^9 // (commit block time - open block time)``: the header times
include any time the chain itself did not make blocks. A 10-minute halt (an upgrade, an outage,
or validators holding more than 1/3 of the power withholding their votes, which costs them
nothing) between a round's open and its commits turned an honest provider that trained job 1's
8,192 tokens in 1 s into a 13 tokens/s sample; a new provider's first sample is its figure, so
it was shut out of every job needing more, for good. A commitment taken after the chain's blocks
came more than ``capacity.MAX_BLOCK_GAP_NS`` apart on average gives no sample now."""

from __future__ import annotations

from typing import Any

from abci_app.pb import providers_pb2
from tests.kits.marketkit import actors_block, new_market, register_msg, run_job

TOKENS = 8 * 1024
STALL_S = 600
WINDOWS = {"commit_blocks": 6, "reveal_blocks": 4, "verdict_blocks": 3, "attest_blocks": 3}


def test_a_chain_stall_during_a_round_does_not_shut_an_honest_provider_out() -> None:
    m = new_market(n_providers=2, register=False)
    worker, judge = m.providers
    judge_reg = register_msg()
    judge_reg.register_provider.policy.CopyFrom(providers_pb2.JobPolicy(min_slot_reward=10**15))
    m.block([(worker, register_msg(throughput=50_000)), (judge, judge_reg)])
    m.create_job(rounds=1, compute_s_per_round=2, **WINDOWS)  # needs 4,096 tokens/s
    m.until(m.height + 1)
    r = m.round(1, 0)
    assert [p.address for p in r.participants] == [worker.address]

    # the chain halts for 10 minutes right after the open block; then blocks resume 1 s apart
    orig = m.chain.request
    stalled_from = m.height + 1

    def request(txs: list[bytes]) -> Any:
        req = orig(txs)
        if req.height >= stalled_from:
            req.time.seconds += STALL_S
        return req

    m.chain.request = request  # type: ignore[method-assign]
    actors_block(m, 1)  # the provider's commitment is in the first block after the halt
    run_job(m, 1)
    done = m.round(1, 0)
    assert done.participants[0].commitment.time_ns - done.open_time_ns == (STALL_S + 1) * 10**9

    m.create_job(rounds=1, compute_s_per_round=2, **WINDOWS)
    m.until(m.height + 1)
    assert [p.address for p in m.round(2, 0).participants] == [worker.address]
