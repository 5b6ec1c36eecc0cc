"""Unbonding: stake returns only after unbonding_blocks; it stays slashable meanwhile."""

from __future__ import annotations

from abci_app.bank import keeper as bank
from abci_app.staking import keeper as sk
from abci_app.staking.errors import ErrInsufficientBond, ErrTooManyUnbondingEntries
from abci_app.staking.keys import BONDED_POOL, UNBONDING_POOL
from tests.kits.chainkit import assert_rejected, tx_fee
from tests.kits.stakekit import LOCO, bond_msg, new_staking_chain, unbond_msg


def test_unbond_pays_out_exactly_after_unbonding_blocks() -> None:
    c = new_staking_chain([10 * LOCO], staking={"unbonding_blocks": 5})
    cons, d = c.vals[0].address, c.keys[1]
    c.ok(d, [bond_msg(cons, 4 * LOCO)])
    bal = c.balance(d.address)
    resp = c.ok(d, [unbond_msg(cons, 3 * LOCO)])
    bal -= tx_fee(resp)
    h0 = c.height
    assert [u.power for u in resp.validator_updates] == [11]
    assert c.balance(UNBONDING_POOL) == 3 * LOCO and c.balance(d.address) == bal
    [e] = sk.iterate_unbondings(c.store, cons)
    assert (e.creation_height, e.completion_height, e.amount) == (h0, h0 + 5, 3 * LOCO)
    while c.height < h0 + 4:
        c.block([])
        assert c.balance(d.address) == bal, f"paid early at height {c.height}"
    resp = c.block([])  # height h0 + 5
    assert c.balance(d.address) == bal + 3 * LOCO
    assert c.balance(UNBONDING_POOL) == 0 and sk.iterate_unbondings(c.store) == []
    assert any(ev.type == "stake.unbonded" for ev in resp.events)


def test_stake_slashed_while_unbonding_is_reduced() -> None:
    c = new_staking_chain(
        [10 * LOCO, 10 * LOCO],
        staking={"unbonding_blocks": 20},
        slashing={"slash_fraction_double_sign_bps": 1000},
    )
    cons, d = c.vals[1].address, c.keys[1]
    c.ok(d, [bond_msg(cons, 5 * LOCO)])
    c.ok(d, [unbond_msg(cons, LOCO)])  # created before the infraction: not slashed
    infraction = c.height + 1
    c.block([])
    # created after the infraction: slashed 10 %, rounded up
    c.ok(d, [unbond_msg(cons, 3 * LOCO + 1)])
    supply = bank.get_supply(c.store)
    c.block([], evidence=[(cons, infraction)])
    amounts = sorted(e.amount for e in sk.iterate_unbondings(c.store, cons))
    assert amounts == [LOCO, 3 * LOCO + 1 - 300_001]  # ceil((3e6+1)/10) = 300001
    v = c.validator(cons)
    # bonds left: operator 10 LOCO, delegator 5 - 1 - 3 LOCO - 1 uloco; each penalty rounds up
    burned_bonds = 1_000_000 + 100_000  # ceil(10e6/10), ceil(999999/10)
    assert v.tokens == 10 * LOCO + LOCO - 1 - burned_bonds
    assert v.slashed == burned_bonds + 300_001
    assert bank.get_supply(c.store) == supply - v.slashed
    bal = c.balance(d.address)
    c.blocks(21)
    assert c.balance(d.address) == bal + LOCO + 3 * LOCO + 1 - 300_001


def test_full_unbond_removes_the_validator_from_the_set() -> None:
    c = new_staking_chain([10 * LOCO, 10 * LOCO])
    op = c.vals[1]
    resp = c.ok(op, [unbond_msg(op.address, 10 * LOCO)])
    assert [(u.pub_key.ed25519, u.power) for u in resp.validator_updates] == [
        (op.public_bytes(), 0)
    ]
    assert c.validator(op.address).jailed  # self bond below the minimum jails it


def test_operator_below_min_self_bond_is_jailed() -> None:
    c = new_staking_chain([10 * LOCO, 10 * LOCO], staking={"min_self_bond": 5 * LOCO})
    op = c.vals[1]
    c.ok(op, [unbond_msg(op.address, 5 * LOCO)])
    assert not c.validator(op.address).jailed
    resp = c.ok(op, [unbond_msg(op.address, 1)])
    assert c.validator(op.address).jailed
    assert [u.power for u in resp.validator_updates] == [0]
    assert c.balance(BONDED_POOL) == 15 * LOCO - 1


def test_invalid_unbond_more_than_bonded() -> None:
    c = new_staking_chain([10 * LOCO])
    assert_rejected(c, c.tx(c.keys[1], [unbond_msg(c.vals[0].address, 1)]), ErrInsufficientBond)
    assert_rejected(
        c,
        c.tx(c.vals[0], [unbond_msg(c.vals[0].address, 10 * LOCO + 1)]),
        ErrInsufficientBond,
    )


def test_invalid_too_many_unbonding_entries() -> None:
    c = new_staking_chain([10 * LOCO], staking={"max_unbonding_entries": 2})
    cons, d = c.vals[0].address, c.keys[1]
    c.ok(d, [bond_msg(cons, 5 * LOCO)])
    c.ok(d, [unbond_msg(cons, 1)])
    c.ok(d, [unbond_msg(cons, 1)])
    assert_rejected(c, c.tx(d, [unbond_msg(cons, 1)]), ErrTooManyUnbondingEntries)


def test_invalid_unbond_of_the_last_validator() -> None:
    from abci_app.staking.errors import ErrLastValidator

    c = new_staking_chain([10 * LOCO])
    assert_rejected(
        c, c.tx(c.vals[0], [unbond_msg(c.vals[0].address, 10 * LOCO)]), ErrLastValidator
    )
    c.ok(c.vals[0], [unbond_msg(c.vals[0].address, 9 * LOCO)])  # power 1 is still a validator


def test_invalid_unbond_more_than_bonded_names_the_delegator_in_bech32() -> None:
    # the log showed the delegator as raw hex (c7c7de34...): a user knows their loco1... address
    from abci_app.codec.address import to_bech32
    from abci_app.pb import abci

    c = new_staking_chain([10 * LOCO])
    d = c.keys[1]
    res = c.app.check_tx(abci.RequestCheckTx(tx=c.tx(d, [unbond_msg(c.vals[0].address, 1)])))
    assert res.code == ErrInsufficientBond.code, res.log
    assert f"bond of {to_bech32(d.address)} with validator" in res.log, res.log
