"""A training job under the chain's default minimum fee (the other market tests run without a
floor, to assert payouts to the uloco): every actor pays the minimum for each tx it sends, the
fees are the only difference from the same job without a floor, and honest providers still end
the job richer than they started."""

from __future__ import annotations

from collections import Counter

from abci_app.bank import keeper as bank
from abci_app.codec.address import to_bech32
from abci_app.pb import jobs_pb2
from tests.kits.marketkit import create_job_msg, events_of, new_market, run_job


def run(fee_floor: bool) -> tuple[dict[bytes, int], Counter[str]]:
    m = new_market(n_providers=3, fee_floor=fee_floor)
    actors = [m.owner.address] + [k.address for k in m.providers]
    before = {a: bank.get_balance(m.store, a) for a in actors}
    job = create_job_msg(rounds=3, reward=1_000_000, vreward=90_000, commit_blocks=8)
    created = m.chain.block([m.chain.tx(m.owner, [job])])
    assert created.tx_results[0].code == 0, created.tx_results[0].log
    resps = [created, *run_job(m, 1)]
    assert m.job(1).status == jobs_pb2.JOB_STATUS_COMPLETED
    fees: Counter[str] = Counter()
    for e in events_of(resps, "tx"):
        fees[e["signer"]] += int(e["fee"])
    return {a: bank.get_balance(m.store, a) - before[a] for a in actors}, fees


def test_honest_job_under_the_default_fee_floor():
    gain, fees = run(fee_floor=True)
    free_gain, free_fees = run(fee_floor=False)
    assert sum(free_fees.values()) == 0
    owner, *providers = gain
    for a in gain:
        paid = fees[to_bech32(a)]
        assert paid > 0, "every actor sent txs and paid for them"
        # the same draws, verdicts and payouts: the fees are the only difference
        assert gain[a] + paid == free_gain[a]
    for a in providers:
        # a round's txs cost a provider a small part of what the round pays it
        assert gain[a] > 0 and fees[to_bech32(a)] * 5 < free_gain[a]
