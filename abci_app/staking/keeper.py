"""Validators, bonds and the unbonding queue (the logic; handlers in msgs.py stay thin).

Books (checked by ``check_invariants``):
- every bond is a positive u128 under 0x11; ``validator.tokens == sum(its bonds)``;
- ``balance(BONDED_POOL) == sum(validator.tokens)``;
- ``balance(UNBONDING_POOL) == sum(entry.amount)``; each entry has exactly one queue index;
- ``validator.power`` (what CometBFT was last told) == ``compute_active_set`` after each block.

Voting power = tokens // power_reduction for validators that are not jailed and, where
settlement requires it, have a settlement key (``SettlementKeys``, read-only), limited to the
``max_validators`` largest by (power desc, consensus address asc). Changes leave end-block as
validator updates (power 0 removes), which CometBFT applies at height H+2.

Slashing (``slash``) burns ceil(amount * bps / 10000) of every bond of the validator and of
every unbonding entry created at or after the infraction height (penalties round up, per
entry); the tokens leave the pools through ``bank.burn``, so the supply shrinks with them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from abci_app.bank import keeper as bank
from abci_app.bank.events import fee_paid_event
from abci_app.bank.keys import FEE_COLLECTOR
from abci_app.codec.address import to_bech32
from abci_app.encoding import (
    MAX_U64,
    decode_amount,
    decode_lp,
    decode_msg,
    encode_amount,
    encode_msg,
    lp,
    prefix_end,
    u64_key,
)
from abci_app.errors import InvariantBroken
from abci_app.pb import abci, keys_pb2, staking_pb2
from abci_app.staking import events
from abci_app.staking.errors import ErrInsufficientBond, ErrTooManyUnbondingEntries
from abci_app.staking.keys import (
    BOND_PREFIX,
    BONDED_POOL,
    NEXT_UNBONDING_ID_KEY,
    UNBONDING_POOL,
    UNBONDING_PREFIX,
    UNBONDING_QUEUE_PREFIX,
    VALIDATOR_PREFIX,
    bond_key,
    bonds_prefix,
    parse_bond_key,
    parse_queue_key,
    parse_validator_key,
    queue_key,
    unbonding_key,
    unbondings_prefix,
    validator_key,
)
from abci_app.staking.params import get_params
from abci_app.store import CacheKV, KVReader

if TYPE_CHECKING:
    from abci_app.context import Ctx
    from abci_app.staking.expected_keepers import SettlementKeys

BPS = 10_000


# ------------------------------------------------------------------------------ pure maths


def compute_power(tokens: int, power_reduction: int) -> int:
    return tokens // power_reduction


def compute_penalty(amount: int, fraction_bps: int) -> int:
    """ceil(amount * bps / 10000), at most ``amount`` (penalties round up)."""
    return min(amount, (amount * fraction_bps + BPS - 1) // BPS)


# ------------------------------------------------------------------------------ validators


def get_validator(store: KVReader, cons: bytes) -> staking_pb2.Validator | None:
    raw = store.get(validator_key(cons))
    return None if raw is None else decode_msg(staking_pb2.Validator, raw)


def set_validator(store: CacheKV, cons: bytes, v: staking_pb2.Validator) -> None:
    store.set(validator_key(cons), encode_msg(v))


def iterate_validators(store: KVReader) -> Iterator[tuple[bytes, staking_pb2.Validator]]:
    """All validators (active, jailed, out of the set) in consensus-address order."""
    for k, v in list(store.iterate(VALIDATOR_PREFIX, prefix_end(VALIDATOR_PREFIX))):
        yield parse_validator_key(k), decode_msg(staking_pb2.Validator, v)


def is_active(v: staking_pb2.Validator) -> bool:
    return v.power > 0


# ------------------------------------------------------------------------------ bonds


def get_bond(store: KVReader, cons: bytes, delegator: bytes) -> int:
    return decode_amount(store.get(bond_key(cons, delegator)))


def _set_bond(store: CacheKV, cons: bytes, delegator: bytes, amount: int) -> None:
    if amount == 0:
        store.delete(bond_key(cons, delegator))
    else:
        store.set(bond_key(cons, delegator), encode_amount(amount))


def iterate_bonds(store: KVReader, cons: bytes) -> list[tuple[bytes, int]]:
    """(delegator, amount) of one validator, in delegator order."""
    p = bonds_prefix(cons)
    out = []
    for k, v in store.iterate(p, prefix_end(p)):
        rest = k[len(p) :]
        out.append((rest[1 : 1 + rest[0]], decode_amount(v)))
    return out


def increase_bond(store: CacheKV, cons: bytes, delegator: bytes, amount: int) -> None:
    """Move ``amount`` from the delegator's balance into the bonded pool.
    Pre: the validator exists (raises bank's ErrInsufficientFunds if the balance is short)."""
    v = get_validator(store, cons)
    assert v is not None
    bank.send(store, delegator, BONDED_POOL, amount)
    _set_bond(store, cons, delegator, get_bond(store, cons, delegator) + amount)
    v.tokens += amount
    set_validator(store, cons, v)


def _next_unbonding_id(store: CacheKV) -> int:
    raw = store.get(NEXT_UNBONDING_ID_KEY)
    n = int.from_bytes(raw, "big") if raw else 0
    store.set(NEXT_UNBONDING_ID_KEY, u64_key(n + 1))
    return n


def iterate_unbondings(
    store: KVReader, cons: bytes | None = None
) -> list[staking_pb2.UnbondingEntry]:
    """Unbonding entries of one validator (or all), in (validator, id) order."""
    p = UNBONDING_PREFIX if cons is None else unbondings_prefix(cons)
    return [decode_msg(staking_pb2.UnbondingEntry, v) for _, v in store.iterate(p, prefix_end(p))]


def _set_unbonding(store: CacheKV, e: staking_pb2.UnbondingEntry) -> None:
    store.set(unbonding_key(e.validator, e.id), encode_msg(e))


def decrease_bond(
    store: CacheKV, cons: bytes, delegator: bytes, amount: int, height: int
) -> staking_pb2.UnbondingEntry:
    """Move ``amount`` of a bond into the unbonding queue; it matures at
    ``height + unbonding_blocks``. Pre: the validator exists."""
    params = get_params(store)
    have = get_bond(store, cons, delegator)
    if have < amount:
        raise ErrInsufficientBond(
            f"bond of {to_bech32(delegator)} with validator {cons.hex().upper()} is {have}uloco, "
            f"cannot unbond {amount}uloco"
        )
    mine = [e for e in iterate_unbondings(store, cons) if e.delegator == delegator]
    if len(mine) >= params.max_unbonding_entries:
        raise ErrTooManyUnbondingEntries(
            f"{len(mine)} unbonding entries already wait with this validator (max "
            f"{params.max_unbonding_entries}); wait for one to mature"
        )
    v = get_validator(store, cons)
    assert v is not None
    _set_bond(store, cons, delegator, have - amount)
    v.tokens -= amount
    set_validator(store, cons, v)
    bank.send(store, BONDED_POOL, UNBONDING_POOL, amount)
    e = staking_pb2.UnbondingEntry(
        delegator=delegator,
        validator=cons,
        amount=amount,
        initial_amount=amount,
        creation_height=height,
        completion_height=height + params.unbonding_blocks,
        id=_next_unbonding_id(store),
    )
    _set_unbonding(store, e)
    store.set(queue_key(e.completion_height, e.id), lp(cons))
    return e


def process_matured_unbondings(ctx: Ctx) -> None:
    """Pay out every entry whose completion height is <= this block's height."""
    store = ctx.store
    end = UNBONDING_QUEUE_PREFIX + u64_key(ctx.block.height + 1)
    for k, v in list(store.iterate(UNBONDING_QUEUE_PREFIX, end)):
        _, entry_id = parse_queue_key(k)
        cons = decode_lp(v)
        raw = store.get(unbonding_key(cons, entry_id))
        if raw is None:
            raise InvariantBroken(f"unbonding queue points to a missing entry {entry_id}")
        e = decode_msg(staking_pb2.UnbondingEntry, raw)
        if e.amount:
            bank.send(store, UNBONDING_POOL, e.delegator, e.amount)
        store.delete(unbonding_key(cons, entry_id))
        store.delete(k)
        ctx.emit(events.unbonded_event(cons, e.delegator, e.amount))


# ------------------------------------------------------------------------------ slashing hooks


def slash(ctx: Ctx, cons: bytes, infraction_height: int, fraction_bps: int, reason: str) -> int:
    """Burn ``fraction_bps`` of the validator's bonds and of its unbonding entries created at
    or after ``infraction_height``; returns the uloco burned. Unknown validator: 0."""
    store = ctx.store
    v = get_validator(store, cons)
    if v is None:
        return 0
    burned_bonded = 0
    for delegator, amount in iterate_bonds(store, cons):
        p = compute_penalty(amount, fraction_bps)
        if p:
            _set_bond(store, cons, delegator, amount - p)
            burned_bonded += p
    burned_unbonding = 0
    for e in iterate_unbondings(store, cons):
        if e.creation_height < infraction_height or e.amount == 0:
            continue
        p = compute_penalty(e.amount, fraction_bps)
        if p:
            e.amount -= p
            _set_unbonding(store, e)
            burned_unbonding += p
    if burned_bonded:
        bank.burn(store, BONDED_POOL, burned_bonded)
    if burned_unbonding:
        bank.burn(store, UNBONDING_POOL, burned_unbonding)
    v.tokens -= burned_bonded
    # a running total (uint64): saturates, never raises
    v.slashed = min(v.slashed + burned_bonded + burned_unbonding, MAX_U64)
    set_validator(store, cons, v)
    ctx.emit(
        events.slashed_event(
            cons, reason, fraction_bps, burned_bonded + burned_unbonding, infraction_height
        )
    )
    return burned_bonded + burned_unbonding


def jail(ctx: Ctx, cons: bytes, until: int, reason: str) -> None:
    """Jail (power goes to 0 at end of block); MsgUnjail is accepted from height ``until``."""
    v = get_validator(ctx.store, cons)
    if v is None:
        return
    v.jailed = True
    v.jailed_until = max(v.jailed_until, until)
    set_validator(ctx.store, cons, v)
    ctx.emit(events.jailed_event(cons, reason, v.jailed_until))


def tombstone(ctx: Ctx, cons: bytes) -> None:
    v = get_validator(ctx.store, cons)
    if v is None:
        return
    v.tombstoned = True
    v.jailed = True
    set_validator(ctx.store, cons, v)
    ctx.emit(events.tombstoned_event(cons))


def is_tombstoned(store: KVReader, cons: bytes) -> bool:
    v = get_validator(store, cons)
    return v is not None and v.tombstoned


def is_jailed(store: KVReader, cons: bytes) -> bool:
    v = get_validator(store, cons)
    return v is not None and v.jailed


# ------------------------------------------------------------------------------ validator set


def lacks_settlement_key(store: KVReader, cons: bytes, keys: SettlementKeys | None) -> bool:
    """Kept out of the set for want of a settlement key (only where settlement requires one)."""
    return (
        keys is not None
        and keys.requires_settlement_key(store)
        and not keys.has_settlement_key(store, cons)
    )


def compute_active_set(store: KVReader, keys: SettlementKeys | None = None) -> dict[bytes, int]:
    """cons address -> power of the validators that should be in CometBFT's set. With ``keys``
    (the app always passes settlement's), a validator without a settlement key is no candidate
    where settlement requires one: it takes no seat, and enters at the first end-block after
    its key is registered."""
    params = get_params(store)
    gated = keys is not None and keys.requires_settlement_key(store)
    cands = []
    for cons, v in iterate_validators(store):
        p = compute_power(v.tokens, params.power_reduction)
        if not v.jailed and p > 0:
            if gated and keys is not None and not keys.has_settlement_key(store, cons):
                continue
            cands.append((-p, cons))
    cands.sort()
    return {cons: -negp for negp, cons in cands[: params.max_validators]}


def apply_validator_set(
    store: CacheKV, emit: Ctx | None = None, keys: SettlementKeys | None = None
) -> list[abci.ValidatorUpdate]:
    """Store the new powers; return the updates (address order) CometBFT must apply."""
    active = compute_active_set(store, keys)
    updates = []
    for cons, v in iterate_validators(store):
        new = active.get(cons, 0)
        if new != v.power:
            if emit is not None:
                emit.emit(events.power_changed_event(cons, v.power, new))
            v.power = new
            set_validator(store, cons, v)
            updates.append(
                abci.ValidatorUpdate(pub_key=keys_pb2.PublicKey(ed25519=v.pub_key), power=new)
            )
    return updates


# ------------------------------------------------------------------------------ rewards


def compute_reward_weights(ctx: Ctx) -> list[tuple[bytes, int]]:
    """Who earns this block's reward and fees, and with what weight: the validators whose
    signatures are in the block's decided last commit, by the power they signed with (as the
    Cosmos SDK's x/distribution pays), skipping jailed ones. Without a last commit (the first
    blocks) or with no eligible signer: the current set by stored power."""
    vals = dict(iterate_validators(ctx.store))
    signed = [
        (vote.validator, vote.power)
        for vote in sorted(ctx.block.last_commit, key=lambda x: x.validator)
        if vote.signed
        and vote.power > 0
        and vote.validator in vals
        and not vals[vote.validator].jailed
    ]
    if signed:
        return signed
    return [(cons, v.power) for cons, v in sorted(vals.items()) if v.power > 0 and not v.jailed]


def distribute_rewards(ctx: Ctx) -> None:
    """Mint ``block_reward`` into the fee collector, then pay its whole balance (fees + reward)
    to the validators of ``compute_reward_weights`` (``bank.split_pro_rata``: shares truncate,
    the dust goes one uloco each to the largest weights, ties by lower address: nothing is left
    over). No eligible validator: nothing is minted and fees wait in the collector."""

    weights = compute_reward_weights(ctx)
    if not weights:
        return
    operators = dict(iterate_validators(ctx.store))
    reward = get_params(ctx.store).block_reward
    if reward:
        bank.mint(ctx.store, FEE_COLLECTOR, reward)
        ctx.emit(events.reward_minted_event(reward))
    total = bank.get_balance(ctx.store, FEE_COLLECTOR)
    if not total:
        return
    operator = {cons: operators[cons].operator for cons, _ in weights}
    for cons, share in bank.split_pro_rata(total, weights):
        bank.send(ctx.store, FEE_COLLECTOR, operator[cons], share)
        ctx.emit(fee_paid_event(operator[cons], share))


# ------------------------------------------------------------------------------ invariants


def check_invariants(store: KVReader, keys: SettlementKeys | None = None) -> None:
    """Raises InvariantBroken if the staking books do not balance (see module docstring)."""
    params = get_params(store)
    total_tokens = 0
    bonds_by_val: dict[bytes, int] = {}
    for k, v in store.iterate(BOND_PREFIX, prefix_end(BOND_PREFIX)):
        amount = decode_amount(v)
        if amount <= 0:
            raise InvariantBroken(f"zero bond stored under {k.hex()}")
        cons, _ = parse_bond_key(k)
        bonds_by_val[cons] = bonds_by_val.get(cons, 0) + amount
    seen = set()
    for cons, val in iterate_validators(store):
        seen.add(cons)
        if val.tombstoned and not val.jailed:
            raise InvariantBroken(f"validator {cons.hex()} is tombstoned but not jailed")
        if val.tokens != bonds_by_val.get(cons, 0):
            raise InvariantBroken(
                f"validator {cons.hex()} tokens {val.tokens} != sum of bonds "
                f"{bonds_by_val.get(cons, 0)}"
            )
        total_tokens += val.tokens
    if set(bonds_by_val) - seen:
        raise InvariantBroken("bonds to a validator that does not exist")
    if bank.get_balance(store, BONDED_POOL) != total_tokens:
        raise InvariantBroken(
            f"bonded pool {bank.get_balance(store, BONDED_POOL)} != bonded tokens {total_tokens}"
        )
    entries = iterate_unbondings(store)
    queued = {
        parse_queue_key(k)[1]
        for k, _ in store.iterate(UNBONDING_QUEUE_PREFIX, prefix_end(UNBONDING_QUEUE_PREFIX))
    }
    if queued != {e.id for e in entries}:
        raise InvariantBroken("unbonding queue and unbonding entries disagree")
    held = sum(e.amount for e in entries)
    if any(e.amount > e.initial_amount for e in entries):
        raise InvariantBroken("an unbonding entry grew")
    if bank.get_balance(store, UNBONDING_POOL) != held:
        raise InvariantBroken(
            f"unbonding pool {bank.get_balance(store, UNBONDING_POOL)} != unbonding entries {held}"
        )
    active = compute_active_set(store, keys)
    for cons, val in iterate_validators(store):
        if val.power != active.get(cons, 0):
            raise InvariantBroken(
                f"validator {cons.hex()} power {val.power} != stake rule {active.get(cons, 0)} "
                f"(power_reduction {params.power_reduction})"
            )
