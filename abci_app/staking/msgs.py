"""Staking message handlers: validate, then call the keeper. A raised error discards the tx's
writes (the app runs every tx in a child cache), so a rejected message changes nothing."""

from __future__ import annotations

from abci_app.codec.address import address_from_pubkey, check_address
from abci_app.context import Ctx
from abci_app.encoding import MAX_U64
from abci_app.pb import staking_pb2
from abci_app.staking import events, keeper
from abci_app.staking.errors import (
    ErrInvalidConsensusKey,
    ErrInvalidMoniker,
    ErrInvalidStakeAmount,
    ErrLastValidator,
    ErrNotJailed,
    ErrNotOperator,
    ErrSelfBondTooLow,
    ErrStakeTooLarge,
    ErrStillJailed,
    ErrValidatorExists,
    ErrValidatorNotFound,
    ErrValidatorTombstoned,
)
from abci_app.staking.expected_keepers import SettlementKeys
from abci_app.staking.params import get_params

MAX_MONIKER = 64
# CometBFT's types.MaxTotalVotingPower (MaxInt64 / 8): a validator set whose powers sum past it is
# refused by CometBFT (the node halts), and a power past int64 cannot even be put in a
# ValidatorUpdate
MAX_TOTAL_POWER = (2**63 - 1) // 8


def validate_moniker(m: str) -> None:
    if not 1 <= len(m) <= MAX_MONIKER or not m.isprintable():
        raise ErrInvalidMoniker(f"moniker must be 1..{MAX_MONIKER} printable characters, got {m!r}")


def validate_stake_amount(amount: int, what: str = "amount") -> None:
    if amount <= 0 or amount > MAX_U64:
        raise ErrInvalidStakeAmount(f"{what} must be between 1 and 2^64-1 uloco, got {amount}")


def check_stake_fits(ctx: Ctx, cons: bytes, tokens: int, amount: int) -> None:
    """Bonding ``amount`` more to validator ``cons`` (holding ``tokens``) keeps its tokens a u64 and
    the power of every validator (jailed and out of the set too: they can come back) summed at
    most MAX_TOTAL_POWER, so no later block can produce a set CometBFT refuses."""
    if tokens + amount > MAX_U64:
        raise ErrStakeTooLarge(
            f"validator {cons.hex().upper()} would hold {tokens + amount}uloco; the limit is 2^64-1"
        )
    pr = get_params(ctx.store).power_reduction
    total = keeper.compute_power(tokens + amount, pr) + sum(
        keeper.compute_power(v.tokens, pr)
        for c, v in keeper.iterate_validators(ctx.store)
        if c != cons
    )
    if total > MAX_TOTAL_POWER:
        raise ErrStakeTooLarge(
            f"total voting power would be {total}; CometBFT's limit is {MAX_TOTAL_POWER}"
        )


def _validator(ctx: Ctx, raw: bytes) -> tuple[bytes, staking_pb2.Validator]:
    cons = check_address(raw, "validator")
    v = keeper.get_validator(ctx.store, cons)
    if v is None:
        raise ErrValidatorNotFound(f"no validator with consensus address {cons.hex().upper()}")
    return cons, v


def _note_if_keyless(ctx: Ctx, cons: bytes, keys: SettlementKeys | None) -> None:
    """Say so when a validator that has the stake stays out of the set for want of a
    settlement key (it enters at the end-block after its key is registered)."""
    v = keeper.get_validator(ctx.store, cons)
    if v is None or v.jailed or not keeper.lacks_settlement_key(ctx.store, cons, keys):
        return
    power = keeper.compute_power(v.tokens, get_params(ctx.store).power_reduction)
    if power > 0:
        ctx.emit(events.awaiting_settlement_key_event(cons, power))


def process_msg_create_validator(
    ctx: Ctx,
    signer: bytes,
    msg: staking_pb2.MsgCreateValidator,
    keys: SettlementKeys | None = None,
) -> None:
    """Pre: the consensus key is new; self_bond >= min_self_bond and the signer can pay it."""
    if len(msg.pub_key) != 32:
        raise ErrInvalidConsensusKey(
            f"consensus key must be a 32-byte ed25519 public key, got {len(msg.pub_key)} bytes"
        )
    validate_moniker(msg.moniker)
    validate_stake_amount(msg.self_bond, "self_bond")
    params = get_params(ctx.store)
    if msg.self_bond < params.min_self_bond:
        raise ErrSelfBondTooLow(
            f"self bond {msg.self_bond}uloco is below the minimum {params.min_self_bond}uloco"
        )
    cons = address_from_pubkey(msg.pub_key)
    if keeper.get_validator(ctx.store, cons) is not None:
        raise ErrValidatorExists(
            f"a validator with consensus address {cons.hex().upper()} already exists"
        )
    check_stake_fits(ctx, cons, 0, msg.self_bond)
    keeper.set_validator(
        ctx.store,
        cons,
        staking_pb2.Validator(
            pub_key=msg.pub_key,
            operator=signer,
            moniker=msg.moniker,
            created_height=ctx.block.height,
        ),
    )
    keeper.increase_bond(ctx.store, cons, signer, msg.self_bond)
    ctx.emit(events.validator_created_event(cons, signer, msg.moniker, msg.self_bond))
    _note_if_keyless(ctx, cons, keys)


def process_msg_bond(
    ctx: Ctx, signer: bytes, msg: staking_pb2.MsgBond, keys: SettlementKeys | None = None
) -> None:
    """Pre: the validator exists and is not tombstoned; the signer can pay ``amount``."""
    validate_stake_amount(msg.amount)
    cons, v = _validator(ctx, msg.validator)
    if v.tombstoned:
        raise ErrValidatorTombstoned(
            f"validator {cons.hex().upper()} is tombstoned (double sign): it cannot take new stake"
        )
    check_stake_fits(ctx, cons, v.tokens, msg.amount)
    keeper.increase_bond(ctx.store, cons, signer, msg.amount)
    ctx.emit(events.bonded_event(cons, signer, msg.amount))
    _note_if_keyless(ctx, cons, keys)


def process_msg_unbond(
    ctx: Ctx, signer: bytes, msg: staking_pb2.MsgUnbond, keys: SettlementKeys | None = None
) -> None:
    """Pre: the signer's bond with the validator >= amount; fewer than max_unbonding_entries
    wait; the chain keeps at least one validator with power. An operator whose self bond drops
    below min_self_bond jails its validator."""
    validate_stake_amount(msg.amount)
    cons, v = _validator(ctx, msg.validator)
    e = keeper.decrease_bond(ctx.store, cons, signer, msg.amount, ctx.block.height)
    ctx.emit(events.unbonding_event(cons, signer, msg.amount, e.completion_height))
    below_min = keeper.get_bond(ctx.store, cons, signer) < get_params(ctx.store).min_self_bond
    if signer == v.operator and not v.jailed and below_min:
        keeper.jail(ctx, cons, ctx.block.height, "self_bond_below_min")
    if not keeper.compute_active_set(ctx.store, keys):
        # CometBFT halts on an empty validator set: the last validator cannot leave
        raise ErrLastValidator("this unbond would leave the chain without any validator with power")


def process_msg_unjail(
    ctx: Ctx, signer: bytes, msg: staking_pb2.MsgUnjail, keys: SettlementKeys | None = None
) -> None:
    """Pre: signer is the operator; the validator is jailed, not tombstoned, its jail period
    is over and its self bond >= min_self_bond."""
    cons, v = _validator(ctx, msg.validator)
    if signer != v.operator:
        raise ErrNotOperator(f"only the operator of validator {cons.hex().upper()} can unjail it")
    if v.tombstoned:
        raise ErrValidatorTombstoned(
            f"validator {cons.hex().upper()} is tombstoned (double sign) and can never be unjailed"
        )
    if not v.jailed:
        raise ErrNotJailed(f"validator {cons.hex().upper()} is not jailed")
    if ctx.block.height < v.jailed_until:
        raise ErrStillJailed(
            f"validator {cons.hex().upper()} is jailed until height {v.jailed_until} (now "
            f"{ctx.block.height})"
        )
    min_self = get_params(ctx.store).min_self_bond
    if keeper.get_bond(ctx.store, cons, signer) < min_self:
        raise ErrSelfBondTooLow(
            f"self bond is below the minimum {min_self}uloco: bond more before unjailing"
        )
    v.jailed = False
    keeper.set_validator(ctx.store, cons, v)
    ctx.emit(events.unjailed_event(cons))
    _note_if_keyless(ctx, cons, keys)
