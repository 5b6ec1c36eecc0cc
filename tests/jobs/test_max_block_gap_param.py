"""The chain-stall bound is a jobs param (``max_block_gap_ns``, genesis ``jobs.params``, query
``/market_params``; jobs README *Params*): a commitment taken after its round's blocks came more
than that many ns apart on average gives no measured-speed sample (``capacity.is_chain_live``).
Default 30 s (``capacity.MAX_BLOCK_GAP_NS``); genesis refuses 0, which would treat every round as
a stall and never measure anyone; a chain's params stored before the param (0) read as 30 s."""

from __future__ import annotations

import json
from typing import Any

import pytest

from abci_app.jobs.capacity import MAX_BLOCK_GAP_NS, is_chain_live
from abci_app.jobs.params import params_from_json, params_to_json
from abci_app.pb import abci, providers_pb2
from tests.kits.marketkit import Market, actors_block, new_market, register_msg, run_job

TOKENS = 8 * 1024
STALL_S = 600
WINDOWS = {"commit_blocks": 6, "reveal_blocks": 4, "verdict_blocks": 3, "attest_blocks": 3}


def test_default_is_30_s_and_round_trips() -> None:
    p = params_from_json({})
    assert p.max_block_gap_ns == MAX_BLOCK_GAP_NS == 30 * 10**9
    assert params_to_json(p)["max_block_gap_ns"] == MAX_BLOCK_GAP_NS
    assert params_from_json(params_to_json(p)) == p
    assert params_from_json({"max_block_gap_ns": "1000000000"}).max_block_gap_ns == 10**9


def test_genesis_refuses_zero() -> None:
    with pytest.raises(ValueError, match="max_block_gap_ns"):
        params_from_json({"max_block_gap_ns": 0})


def test_zero_in_stored_params_reads_as_the_default() -> None:
    # 30 s a block on average is live, 30 s + 1 ns is a stall, with 0 exactly as with the default
    for gap in (0, MAX_BLOCK_GAP_NS):
        assert is_chain_live(10, 0, 12, 2 * MAX_BLOCK_GAP_NS, gap)
        assert not is_chain_live(10, 0, 12, 2 * MAX_BLOCK_GAP_NS + 1, gap)
    assert not is_chain_live(10, 0, 12, 2 * MAX_BLOCK_GAP_NS, MAX_BLOCK_GAP_NS - 1)


def _stalled_round(jobs_params: dict[str, int] | None) -> Market:
    """One round of a job needing 4,096 tokens/s, the chain halted 10 minutes right after its
    open block; the provider (8,192 tokens in 1 s of its own) commits in the first block after."""
    m = new_market(n_providers=2, register=False, jobs_params=jobs_params)
    worker, judge = m.providers
    judge_reg = register_msg()
    judge_reg.register_provider.policy.CopyFrom(providers_pb2.JobPolicy(min_slot_reward=10**15))
    m.block([(worker, register_msg(throughput=50_000)), (judge, judge_reg)])
    m.create_job(rounds=1, compute_s_per_round=2, **WINDOWS)
    m.until(m.height + 1)
    assert [p.address for p in m.round(1, 0).participants] == [worker.address]
    orig = m.chain.request
    stalled_from = m.height + 1

    def request(txs: list[bytes]) -> Any:
        req = orig(txs)
        if req.height >= stalled_from:
            req.time.seconds += STALL_S
        return req

    m.chain.request = request  # type: ignore[method-assign]
    actors_block(m, 1)
    run_job(m, 1)
    return m


def test_a_genesis_with_a_longer_gap_takes_the_stalled_sample() -> None:
    """Default: the stalled round gives no sample. With ``max_block_gap_ns`` = 1,000 s the same
    round is a sample (8,192 tokens over 601 s: 13 tokens/s), so the value is the chain's."""
    default = _stalled_round(None)
    worker = default.providers[0].address
    assert default.provider(worker).measured_tokens_per_sec == 0  # type: ignore[union-attr]

    gap = 1_000 * 10**9
    longer = _stalled_round({"max_block_gap_ns": gap})
    figure = longer.provider(worker).measured_tokens_per_sec  # type: ignore[union-attr]
    assert figure == TOKENS // (STALL_S + 1)
    res = longer.chain.app.query(abci.RequestQuery(path="/market_params"))
    assert json.loads(res.value)["jobs"]["max_block_gap_ns"] == gap
