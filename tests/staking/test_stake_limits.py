"""Stake that would overflow what FinalizeBlock can encode (red-team regressions): a validator's
tokens past 2^64-1 (a uint64 field) or a total voting power past CometBFT's MaxTotalVotingPower
(int64 / 8) used to pass CheckTx and then raise in FinalizeBlock (ValueError from protobuf: the
node halts). Both are now refused in the message, with staking code 214."""

from __future__ import annotations

from abci_app.encoding import MAX_U64
from abci_app.staking.errors import ErrStakeTooLarge
from abci_app.staking.msgs import MAX_TOTAL_POWER
from tests.kits.chainkit import assert_rejected, signer
from tests.kits.stakekit import LOCO, bond_msg, create_validator_msg, new_staking_chain

RICH = 2**70  # genesis balances are u128: a chain may hold more than 2^64 uloco


def test_invalid_bond_past_total_voting_power() -> None:
    c = new_staking_chain([100 * LOCO], funds=RICH, staking={"power_reduction": "1"})
    cons = c.vals[0].address
    room = MAX_TOTAL_POWER - c.validator(cons).tokens
    res = assert_rejected(c, c.tx(c.keys[0], [bond_msg(cons, room + 1)]), ErrStakeTooLarge)
    assert "total voting power" in res.log
    resp = c.ok(c.keys[0], [bond_msg(cons, room)])  # exactly at the limit: fine, and encodable
    assert [u.power for u in resp.validator_updates] == [MAX_TOTAL_POWER]
    assert_rejected(c, c.tx(c.keys[0], [bond_msg(cons, 1)]), ErrStakeTooLarge)


def test_invalid_bond_of_2_pow_63_does_not_halt_the_chain() -> None:
    c = new_staking_chain([100 * LOCO], funds=RICH, staking={"power_reduction": "1"})
    assert_rejected(c, c.tx(c.keys[0], [bond_msg(c.vals[0].address, 2**63)]), ErrStakeTooLarge)


def test_invalid_bond_tokens_past_u64() -> None:
    c = new_staking_chain([100 * LOCO], funds=RICH)
    res = assert_rejected(
        c, c.tx(c.keys[0], [bond_msg(c.vals[0].address, MAX_U64)]), ErrStakeTooLarge
    )
    assert "2^64-1" in res.log


def test_invalid_create_validator_past_total_voting_power() -> None:
    c = new_staking_chain([100 * LOCO], funds=RICH, staking={"power_reduction": "1"})
    new = signer(4242)
    assert_rejected(
        c, c.tx(c.keys[1], [create_validator_msg(new, MAX_TOTAL_POWER)]), ErrStakeTooLarge
    )
