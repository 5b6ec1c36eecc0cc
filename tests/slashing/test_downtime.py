"""Downtime: missed blocks over signed_blocks_window -> slash, jail, removal; unjail -> back."""

from __future__ import annotations

from abci_app.bank import keeper as bank
from abci_app.slashing.keeper import get_signing_info
from abci_app.staking.keys import BONDED_POOL
from tests.kits.stakekit import LOCO, new_staking_chain, unjail_msg

SLASHING = {
    "signed_blocks_window": 10,
    "min_signed_per_window_bps": 5000,
    "downtime_jail_blocks": 5,
    "slash_fraction_downtime_bps": 100,
}


def test_validator_down_past_the_window_is_slashed_jailed_and_removed() -> None:
    c = new_staking_chain([10 * LOCO, 10 * LOCO, 10 * LOCO + 1], slashing=SLASHING)
    down = c.vals[2].address
    c.blocks(3)
    supply = bank.get_supply(c.store)
    missed = 0
    while not c.validator(down).jailed:
        c.block([], absent={down})
        missed += 1
        assert missed <= 12, "never jailed"
    # counted from block 2: 3 signed, then misses; jailed when the window is full (offset >= 10)
    # and missed > 10 - 5
    assert missed == 7
    jail_height = c.height
    v = c.validator(down)
    penalty = (10 * LOCO + 1) // 100 + 1  # 1 %, rounded up
    assert v.tokens == 10 * LOCO + 1 - penalty and v.slashed == penalty
    assert (v.power, v.jailed_until) == (0, jail_height + 5)
    assert (
        bank.get_supply(c.store) == supply - penalty
        and c.balance(BONDED_POOL) == 30 * LOCO + 1 - penalty
    )
    assert [u.power for u in c.last.validator_updates] == [0]  # type: ignore[union-attr]
    assert {e.type for e in c.last.events} >= {"validator.slashed", "validator.jailed"}  # type: ignore[union-attr]
    assert get_signing_info(c.store, down) is None
    c.blocks(2, absent={down})
    assert down not in c.comet_set(c.height + 1)  # gone from CometBFT's set at H+2
    assert c.validator(down).slashed == penalty  # absent votes while jailed are not counted again


def test_unjailed_validator_signs_again_with_a_fresh_window() -> None:
    c = new_staking_chain([10 * LOCO, 10 * LOCO, 10 * LOCO], slashing=SLASHING)
    op = c.vals[2]
    while not c.validator(op.address).jailed:
        c.block([], absent={op.address})
    until = c.validator(op.address).jailed_until
    while c.height + 1 < until:
        c.block([], absent={op.address})
    c.ok(op, [unjail_msg(op.address)])
    c.blocks(3)
    assert op.address in c.comet_set(c.height)
    info = get_signing_info(c.store, op.address)
    assert info is not None and info.missed_blocks_counter == 0 and info.start_height > until - 1
    c.blocks(25)
    assert not c.validator(op.address).jailed and c.validator(op.address).slashed == LOCO // 10


def test_sparse_misses_within_the_allowance_are_not_punished() -> None:
    c = new_staking_chain([10 * LOCO, 10 * LOCO, 10 * LOCO], slashing=SLASHING)
    flaky = c.vals[1].address
    for i in range(40):
        c.block([], absent={flaky} if i % 2 == 0 else set())
    v = c.validator(flaky)
    assert not v.jailed and v.slashed == 0
    info = get_signing_info(c.store, flaky)
    assert info is not None and info.missed_blocks_counter == 5  # exactly the allowance
