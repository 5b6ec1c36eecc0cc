"""Liveness and double-sign punishment, run at the start of every block.

Double sign: each ``DuplicateVoteEvidence`` CometBFT commits (``ctx.block.misbehavior``, type
DUPLICATE_VOTE) for a validator that is not already tombstoned and is no older than
``max_evidence_age_blocks``: slash ``slash_fraction_double_sign_bps`` of its bonds and of its
unbonding entries created at or after the evidence height, jail it and tombstone it (it can
never unjail, and later evidence against it is ignored: slashed at most once).

Downtime: every vote of the decided last commit (``ctx.block.last_commit``) of a validator that
is not jailed advances its window: slot = index_offset % signed_blocks_window, a missed vote
sets the slot's bit, a signed vote clears it, ``missed_blocks_counter`` counts set bits. Once
a full window has been counted (index_offset >= window) and missed > window - min_signed, where
min_signed = window * min_signed_per_window_bps // 10000, the validator is slashed
``slash_fraction_downtime_bps`` (bonds, and unbonding entries created within the window), jailed
until height + ``downtime_jail_blocks`` and its liveness record is cleared, so after unjail it
starts a fresh window.
"""

from __future__ import annotations

from abci_app.context import Ctx, Vote
from abci_app.encoding import decode_msg, encode_msg, prefix_end
from abci_app.errors import InvariantBroken
from abci_app.pb import abci
from abci_app.slashing.expected_keepers import StakingKeeper
from abci_app.slashing.keys import (
    MISSED_PREFIX,
    SIGNING_INFO_PREFIX,
    missed_key,
    missed_prefix,
    parse_missed_key,
    parse_signing_info_key,
    signing_info_key,
)
from abci_app.slashing.params import get_params, slashing_pb2
from abci_app.store import CacheKV, KVReader

DUPLICATE_VOTE = abci.MisbehaviorType.DUPLICATE_VOTE  # 1
BPS = 10_000


def get_signing_info(store: KVReader, cons: bytes) -> slashing_pb2.SigningInfo | None:
    raw = store.get(signing_info_key(cons))
    return None if raw is None else decode_msg(slashing_pb2.SigningInfo, raw)


def set_signing_info(store: CacheKV, cons: bytes, info: slashing_pb2.SigningInfo) -> None:
    store.set(signing_info_key(cons), encode_msg(info))


def clear_liveness(store: CacheKV, cons: bytes) -> None:
    p = missed_prefix(cons)
    for k, _ in list(store.iterate(p, prefix_end(p))):
        store.delete(k)
    store.delete(signing_info_key(cons))


def compute_max_missed(window: int, min_signed_bps: int) -> int:
    return window - window * min_signed_bps // BPS


def process_evidence(ctx: Ctx, staking: StakingKeeper) -> None:
    p = get_params(ctx.store)
    for ev in sorted(ctx.block.misbehavior, key=lambda m: (m.height, m.validator, m.kind)):
        if ev.kind != DUPLICATE_VOTE:
            continue  # light client attacks: not punished here (no validator-level penalty yet)
        if ev.height + p.max_evidence_age_blocks < ctx.block.height:
            continue
        if staking.is_tombstoned(ctx.store, ev.validator):
            continue
        staking.slash(ctx, ev.validator, ev.height, p.slash_fraction_double_sign_bps, "double_sign")
        staking.jail(ctx, ev.validator, 2**64 - 1, "double_sign")
        staking.tombstone(ctx, ev.validator)
        clear_liveness(ctx.store, ev.validator)


def process_vote(ctx: Ctx, staking: StakingKeeper, vote: Vote, p: slashing_pb2.Params) -> None:
    cons = vote.validator
    if staking.is_jailed(ctx.store, cons):
        return  # jailed at H-1 still sits in the commits of H and H+1; count nothing
    info = get_signing_info(ctx.store, cons) or slashing_pb2.SigningInfo(
        start_height=ctx.block.height
    )
    window = p.signed_blocks_window
    slot = info.index_offset % window
    key = missed_key(cons, slot)
    was_missed = ctx.store.get(key) is not None
    if not vote.signed and not was_missed:
        ctx.store.set(key, b"\x01")
        info.missed_blocks_counter += 1
    elif vote.signed and was_missed:
        ctx.store.delete(key)
        info.missed_blocks_counter -= 1
    info.index_offset += 1
    if info.index_offset >= window and info.missed_blocks_counter > compute_max_missed(
        window, p.min_signed_per_window_bps
    ):
        h = ctx.block.height
        staking.slash(ctx, cons, max(0, h - window), p.slash_fraction_downtime_bps, "downtime")
        staking.jail(ctx, cons, h + p.downtime_jail_blocks, "downtime")
        clear_liveness(ctx.store, cons)
        return
    set_signing_info(ctx.store, cons, info)


def process_liveness(ctx: Ctx, staking: StakingKeeper) -> None:
    p = get_params(ctx.store)
    for vote in sorted(ctx.block.last_commit, key=lambda v: v.validator):
        process_vote(ctx, staking, vote, p)


def check_invariants(store: KVReader) -> None:

    p = get_params(store)
    counts: dict[bytes, int] = {}
    for k, _ in store.iterate(MISSED_PREFIX, prefix_end(MISSED_PREFIX)):
        cons, _ = parse_missed_key(k)
        counts[cons] = counts.get(cons, 0) + 1
    for k, v in store.iterate(SIGNING_INFO_PREFIX, prefix_end(SIGNING_INFO_PREFIX)):
        cons = parse_signing_info_key(k)
        info = decode_msg(slashing_pb2.SigningInfo, v)
        if info.missed_blocks_counter != counts.pop(cons, 0):
            raise InvariantBroken(
                f"missed-blocks counter of {cons.hex()} disagrees with its bitmap"
            )
        if info.missed_blocks_counter > p.signed_blocks_window:
            raise InvariantBroken(f"{cons.hex()} missed more blocks than the window holds")
    if counts:
        raise InvariantBroken("missed-block bits without a signing info")
