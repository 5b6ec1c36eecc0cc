"""Block rewards and fees go to the validators by power, integer shares, dust accounted."""

from __future__ import annotations

from abci_app.bank import keeper as bank
from abci_app.bank.keys import FEE_COLLECTOR
from tests.kits.chainkit import send_msg
from tests.kits.stakekit import LOCO, new_staking_chain


def test_block_reward_and_fees_split_by_power() -> None:
    c = new_staking_chain([1 * LOCO, 2 * LOCO, 7 * LOCO], staking={"block_reward": 1000})
    before = [c.balance(v.address) for v in c.vals]
    supply = bank.get_supply(c.store)
    resp = c.block([c.tx(c.keys[0], [send_msg(c.keys[1].address, 1)], fee=9_001)])
    got = [c.balance(v.address) - b for v, b in zip(c.vals, before, strict=True)]
    # 10,001 by 1:2:7; floor shares, the dust to the largest power
    assert got == [1_000, 2_000, 7_001]
    assert sum(got) == 10_001
    assert bank.get_supply(c.store) == supply + 1000  # minted reward; the fee moved
    assert c.balance(FEE_COLLECTOR) == 0
    assert any(e.type == "block_reward.minted" for e in resp.events)


def test_reward_each_block_grows_supply_by_exactly_the_param() -> None:
    c = new_staking_chain([3 * LOCO, 3 * LOCO, 3 * LOCO], staking={"block_reward": 10})
    supply = bank.get_supply(c.store)
    c.blocks(5)
    assert bank.get_supply(c.store) == supply + 50
    # 6 blocks (genesis block 1 too) of 10 uloco over equal powers: 3 each, the dust uloco to the
    # lowest address (bank.split_pro_rata's tie-break), every block
    paid = {v.address: c.balance(v.address) - (10**12 - 3 * LOCO) for v in c.vals}
    low = min(paid)
    assert paid == {a: 24 if a == low else 18 for a in paid}


def test_no_reward_by_default() -> None:
    c = new_staking_chain([3 * LOCO])
    supply = bank.get_supply(c.store)
    c.blocks(3)
    assert bank.get_supply(c.store) == supply


def test_validator_absent_from_last_commit_earns_nothing() -> None:
    """Rewards follow the decided last commit: a validator whose vote is missing gets no share
    of that block's reward and fees; the signers split it by the power they signed with."""
    c = new_staking_chain([2 * LOCO, 2 * LOCO, 4 * LOCO], staking={"block_reward": 800})
    c.blocks(2)
    before = [c.balance(v.address) for v in c.vals]
    c.block([], absent={c.vals[1].address})
    got = [c.balance(v.address) - b for v, b in zip(c.vals, before, strict=True)]
    assert got == [266, 0, 534]  # 800 by 2:4 between the signers; floor shares, dust to the largest
