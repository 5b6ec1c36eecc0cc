from __future__ import annotations

from abci_app.bank.errors import ErrInsufficientFunds
from abci_app.errors import ErrInvalidAddress
from abci_app.staking import keeper as sk
from abci_app.staking.errors import (
    ErrInvalidStakeAmount,
    ErrValidatorNotFound,
    ErrValidatorTombstoned,
)
from abci_app.staking.keys import BONDED_POOL
from tests.kits.chainkit import assert_rejected
from tests.kits.stakekit import LOCO, bond_msg, new_staking_chain


def test_bond_adds_tokens_and_power() -> None:
    c = new_staking_chain([10 * LOCO])
    cons, d = c.vals[0].address, c.keys[1]
    resp = c.ok(d, [bond_msg(cons, 5 * LOCO + 999_999)])
    # 15.999999 LOCO -> power 15 (truncates)
    assert [u.power for u in resp.validator_updates] == [15]
    assert sk.get_bond(c.store, cons, d.address) == 5 * LOCO + 999_999
    assert c.validator(cons).tokens == 15 * LOCO + 999_999
    assert c.balance(BONDED_POOL) == 15 * LOCO + 999_999
    assert c.ok(d, [bond_msg(cons, 1)]).validator_updates[0].power == 16


def test_bond_below_a_power_unit_emits_no_update() -> None:
    c = new_staking_chain([10 * LOCO])
    assert list(c.ok(c.keys[1], [bond_msg(c.vals[0].address, 10)]).validator_updates) == []


def test_invalid_bond_unknown_validator() -> None:
    c = new_staking_chain([10 * LOCO])
    assert_rejected(c, c.tx(c.keys[1], [bond_msg(b"\x07" * 20, LOCO)]), ErrValidatorNotFound)


def test_invalid_bond_bad_address() -> None:
    c = new_staking_chain([10 * LOCO])
    assert_rejected(c, c.tx(c.keys[1], [bond_msg(b"\x07" * 19, LOCO)]), ErrInvalidAddress)


def test_invalid_bond_zero() -> None:
    c = new_staking_chain([10 * LOCO])
    assert_rejected(c, c.tx(c.keys[1], [bond_msg(c.vals[0].address, 0)]), ErrInvalidStakeAmount)


def test_invalid_bond_insufficient_funds() -> None:
    c = new_staking_chain([10 * LOCO])
    assert_rejected(
        c, c.tx(c.keys[1], [bond_msg(c.vals[0].address, 10**12 + 1)]), ErrInsufficientFunds
    )


def test_invalid_bond_to_tombstoned() -> None:
    c = new_staking_chain([10 * LOCO, 10 * LOCO])
    c.block([], evidence=[(c.vals[1].address, c.height)])
    assert c.validator(c.vals[1].address).tombstoned
    assert_rejected(c, c.tx(c.keys[1], [bond_msg(c.vals[1].address, LOCO)]), ErrValidatorTombstoned)
