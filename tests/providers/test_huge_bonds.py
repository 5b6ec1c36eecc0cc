"""Providers whose bonds sum past 2^64-1 (red-team regression): genesis balances are u128, each
bond is at most 2^64-1, but the attested stake of a round is a sum of bonds written to a uint64
field in end-block; three providers bonded 2^63 each raised ValueError there and halted the
chain. The recorded sum now saturates, and the round finishes and pays as usual."""

from __future__ import annotations

from abci_app.encoding import MAX_U64
from abci_app.pb import jobs_pb2
from tests.kits.chainkit import new_chain
from tests.kits.marketkit import Market, agg_hash, register_msg, run_job


def test_invalid_attested_stake_past_u64_does_not_halt_the_chain() -> None:
    c = new_chain(n_keys=8, funds=2**66)
    m = Market(c, c.keys[0], list(c.keys[1:4]))
    m.block([(k, register_msg(2**63)) for k in m.providers])
    m.create_job(rounds=1)
    run_job(m, 1)  # every block checks the invariants
    r = m.round(1, 0)
    assert r.attested_model_hash == agg_hash(1, 0) and r.attest_stake == MAX_U64
    assert m.job(1).status == jobs_pb2.JOB_STATUS_COMPLETED and r.reward_paid > 0
