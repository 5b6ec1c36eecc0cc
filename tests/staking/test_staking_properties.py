"""Property: random staking/slashing histories keep every invariant after every block (the kit
checks them) and two fresh apps fed the same blocks reach the same app hash."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.kits.chainkit import signer
from tests.kits.stakekit import (
    LOCO,
    StakeChain,
    bond_msg,
    create_validator_msg,
    new_staking_chain,
    unbond_msg,
    unjail_msg,
)

OP = st.one_of(
    st.tuples(st.just("bond"), st.integers(0, 2), st.integers(0, 3), st.integers(1, 5 * LOCO)),
    st.tuples(st.just("unbond"), st.integers(0, 2), st.integers(0, 3), st.integers(1, 5 * LOCO)),
    st.tuples(st.just("self_unbond"), st.integers(0, 3), st.integers(1, 12 * LOCO)),
    st.tuples(st.just("create"), st.integers(0, 2), st.integers(0, 3), st.integers(LOCO, 8 * LOCO)),
    st.tuples(st.just("unjail"), st.integers(0, 3)),
    st.tuples(st.just("down"), st.integers(0, 3), st.integers(1, 8)),
    st.tuples(st.just("evidence"), st.integers(0, 3)),
    st.tuples(st.just("wait"), st.integers(1, 6)),
)

PARAMS = dict(
    staking={
        "unbonding_blocks": 4,
        "max_validators": 3,
        "block_reward": 7,
        "max_unbonding_entries": 3,
    },
    slashing={
        "signed_blocks_window": 4,
        "downtime_jail_blocks": 2,
        "slash_fraction_downtime_bps": 333,
        "slash_fraction_double_sign_bps": 1234,
    },
)


def play(ops: list[tuple]) -> StakeChain:
    c = new_staking_chain([10 * LOCO, 10 * LOCO, 10 * LOCO], **PARAMS)  # type: ignore[arg-type]
    extra = [signer(9000 + i) for i in range(4)]
    vals = c.vals + extra[:1]
    for op in ops:
        kind = op[0]
        if kind == "bond":
            c.block([c.tx(c.keys[op[1]], [bond_msg(vals[op[2]].address, op[3])])])
        elif kind == "unbond":
            c.block([c.tx(c.keys[op[1]], [unbond_msg(vals[op[2]].address, op[3])])])
        elif kind == "self_unbond":
            v = vals[op[1]]
            c.block([c.tx(v, [unbond_msg(v.address, op[2])])] if op[1] < 3 else [])
        elif kind == "create":
            c.block([c.tx(c.keys[op[1]], [create_validator_msg(extra[op[2]], op[3])])])
        elif kind == "unjail":
            v = vals[op[1]]
            c.block([c.tx(v, [unjail_msg(v.address)])] if op[1] < 3 else [])
        elif kind == "down":
            c.blocks(op[2], absent={vals[op[1]].address})
        elif kind == "evidence":
            c.block([], evidence=[(vals[op[1]].address, max(1, c.height - 1))])
        else:
            c.blocks(op[1])
    return c


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OP, min_size=1, max_size=12))
def test_random_histories_keep_invariants_and_are_deterministic(ops: list[tuple]) -> None:
    a, b = play(ops), play(ops)
    assert a.store.app_hash == b.store.app_hash
    assert a.store.height == b.store.height > len(ops)
