"""Running slash totals are uint64 proto fields written in begin/end block, where an exception
halts the chain (red-team regression): with u128 genesis balances a validator or provider can be
slashed more than 2^64-1 uloco over its life, and ``+=`` past the field's range raised ValueError.
The totals now saturate at 2^64-1; the slash itself (the burn) is exact."""

from __future__ import annotations

from abci_app.bank import keeper as bank
from abci_app.context import Ctx
from abci_app.encoding import MAX_U64
from abci_app.providers import keeper as pk
from abci_app.staking import keeper as sk
from abci_app.store import CacheKV
from tests.kits.marketkit import new_market
from tests.kits.stakekit import LOCO, new_staking_chain


def test_invalid_validator_slashed_total_past_u64_saturates() -> None:
    c = new_staking_chain([100 * LOCO])
    cons = c.vals[0].address
    store = CacheKV(c.store)
    v = sk.get_validator(store, cons)
    assert v is not None
    v.slashed = MAX_U64 - 1
    sk.set_validator(store, cons, v)
    supply = bank.get_supply(store)
    burned = sk.slash(Ctx(c.app._check_ctx().block, store), cons, 1, 500, "test")
    assert burned == 5 * LOCO and bank.get_supply(store) == supply - burned
    assert (v := sk.get_validator(store, cons)) is not None and v.slashed == MAX_U64


def test_invalid_provider_slashed_total_past_u64_saturates() -> None:
    m = new_market(n_providers=1)
    addr = m.providers[0].address
    store = CacheKV(m.store)
    p = pk.get_provider(store, addr)
    assert p is not None
    p.slashed_total = MAX_U64 - 1
    pk.set_provider(store, p)
    res = pk.slash(
        Ctx(m.chain.app._check_ctx().block, store), addr, 1000, reason="test", job_id=1, round_=0
    )
    assert res.amount > 0
    assert (p := pk.get_provider(store, addr)) is not None and p.slashed_total == MAX_U64
