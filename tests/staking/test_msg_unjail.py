from __future__ import annotations

from abci_app.staking.errors import (
    ErrNotJailed,
    ErrNotOperator,
    ErrSelfBondTooLow,
    ErrStillJailed,
    ErrValidatorTombstoned,
)
from tests.kits.chainkit import assert_rejected
from tests.kits.stakekit import (
    LOCO,
    StakeChain,
    bond_msg,
    new_staking_chain,
    unbond_msg,
    unjail_msg,
)

SLASHING = {
    "signed_blocks_window": 4,
    "min_signed_per_window_bps": 5000,
    "downtime_jail_blocks": 6,
    "slash_fraction_downtime_bps": 100,
}


def _jailed_chain() -> tuple[StakeChain, int]:
    c = new_staking_chain([10 * LOCO, 10 * LOCO, 10 * LOCO], slashing=SLASHING)
    down = c.vals[2].address
    while not c.validator(down).jailed:
        c.block([], absent={down})
    return c, c.validator(down).jailed_until


def test_unjail_after_jail_period_restores_power() -> None:
    c, until = _jailed_chain()
    op = c.vals[2]
    while c.height + 1 < until:
        c.block([])
    resp = c.ok(op, [unjail_msg(op.address)])
    assert not c.validator(op.address).jailed
    # 1 % slashed
    assert [(u.pub_key.ed25519, u.power) for u in resp.validator_updates] == [
        (op.public_bytes(), 9)
    ]


def test_invalid_unjail_during_jail_period() -> None:
    c, until = _jailed_chain()
    assert c.height + 1 < until
    assert_rejected(c, c.tx(c.vals[2], [unjail_msg(c.vals[2].address)]), ErrStillJailed)


def test_invalid_unjail_by_someone_else() -> None:
    c, until = _jailed_chain()
    c.blocks(until)
    assert_rejected(c, c.tx(c.keys[0], [unjail_msg(c.vals[2].address)]), ErrNotOperator)


def test_invalid_unjail_not_jailed() -> None:
    c = new_staking_chain([10 * LOCO])
    assert_rejected(c, c.tx(c.vals[0], [unjail_msg(c.vals[0].address)]), ErrNotJailed)


def test_invalid_unjail_tombstoned() -> None:
    c = new_staking_chain([10 * LOCO, 10 * LOCO])
    c.block([], evidence=[(c.vals[1].address, c.height)])
    c.blocks(3)
    assert_rejected(c, c.tx(c.vals[1], [unjail_msg(c.vals[1].address)]), ErrValidatorTombstoned)


def test_invalid_unjail_self_bond_below_min_then_bond_and_unjail() -> None:
    c = new_staking_chain([10 * LOCO, 3 * LOCO], staking={"min_self_bond": 3 * LOCO})
    op = c.vals[1]
    c.ok(op, [unbond_msg(op.address, LOCO)])  # below the minimum: jailed
    assert c.validator(op.address).jailed
    assert_rejected(c, c.tx(op, [unjail_msg(op.address)]), ErrSelfBondTooLow)
    c.ok(op, [bond_msg(op.address, LOCO)])
    resp = c.ok(op, [unjail_msg(op.address)])
    assert [u.power for u in resp.validator_updates] == [3]
