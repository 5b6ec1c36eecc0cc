from __future__ import annotations

import pytest

from abci_app.bank.errors import ErrInsufficientFunds
from abci_app.pb import staking_pb2, tx_pb2
from abci_app.staking.errors import (
    ErrInvalidConsensusKey,
    ErrInvalidMoniker,
    ErrSelfBondTooLow,
    ErrValidatorExists,
)
from abci_app.staking.keys import BONDED_POOL
from tests.kits.chainkit import assert_rejected, signer
from tests.kits.stakekit import LOCO, StakeChain, create_validator_msg, new_staking_chain


@pytest.fixture
def c() -> StakeChain:
    return new_staking_chain([100 * LOCO])


def test_create_validator_bonds_and_updates_the_set(c: StakeChain) -> None:
    newk, op = signer(5000), c.keys[0]
    pool = c.balance(BONDED_POOL)
    resp = c.ok(op, [create_validator_msg(newk, 30 * LOCO, "carol")])
    assert [(u.pub_key.ed25519, u.power) for u in resp.validator_updates] == [
        (newk.public_bytes(), 30)
    ]
    v = c.validator(newk.address)
    assert (v.operator, v.tokens, v.power, v.moniker, v.created_height) == (
        op.address,
        30 * LOCO,
        30,
        "carol",
        c.height,
    )
    assert c.balance(BONDED_POOL) == pool + 30 * LOCO
    assert any(e.type == "validator.created" for e in resp.tx_results[0].events)
    c.blocks(2)  # H+2: CometBFT's set now has it, and it is in the decided last commit from then on
    assert newk.address in c.comet_set(c.height)


def test_invalid_existing_key(c: StakeChain) -> None:
    assert_rejected(
        c, c.tx(c.keys[0], [create_validator_msg(c.vals[0], 5 * LOCO)]), ErrValidatorExists
    )


def test_invalid_self_bond_below_min(c: StakeChain) -> None:
    assert_rejected(
        c,
        c.tx(c.keys[0], [create_validator_msg(signer(5001), LOCO - 1)]),
        ErrSelfBondTooLow,
    )


def test_invalid_consensus_key_length(c: StakeChain) -> None:
    msg = tx_pb2.Msg(
        create_validator=staking_pb2.MsgCreateValidator(
            pub_key=b"\x01" * 31, self_bond=5 * LOCO, moniker="x"
        )
    )
    assert_rejected(c, c.tx(c.keys[0], [msg]), ErrInvalidConsensusKey)


def test_invalid_moniker(c: StakeChain) -> None:
    assert_rejected(
        c,
        c.tx(c.keys[0], [create_validator_msg(signer(5002), 5 * LOCO, "")]),
        ErrInvalidMoniker,
    )
    assert_rejected(
        c,
        c.tx(c.keys[0], [create_validator_msg(signer(5002), 5 * LOCO, "x" * 65)]),
        ErrInvalidMoniker,
    )


def test_invalid_insufficient_funds(c: StakeChain) -> None:
    assert_rejected(
        c,
        c.tx(c.keys[0], [create_validator_msg(signer(5003), 10**12 + 1)]),
        ErrInsufficientFunds,
    )
