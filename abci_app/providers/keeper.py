"""Provider registry, bonds, status, reputation and provider slashing.

Every bonded and unbonding uloco sits in the ``PROVIDER_BONDS`` module account, so
``sum(balances) == supply`` keeps holding; ``check_invariants`` checks that the account covers
the books (sum of bond + unbonding over all providers) and that the books are consistent.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from abci_app.bank import keeper as bank
from abci_app.codec.address import to_bech32
from abci_app.context import Ctx
from abci_app.encoding import MAX_U64, decode_msg, encode_msg, prefix_end, u64_key
from abci_app.errors import InvariantBroken
from abci_app.pb import providers_pb2
from abci_app.providers import events
from abci_app.providers.keys import (
    LAST_REPUTATION_PREFIX,
    PROVIDER_BONDS,
    PROVIDER_PREFIX,
    TOMBSTONE_PREFIX,
    UNBONDING_PREFIX,
    last_reputation_key,
    parse_last_reputation_key,
    parse_provider_key,
    parse_tombstone_key,
    parse_unbonding_key,
    provider_key,
    tombstone_key,
    unbonding_key,
)
from abci_app.providers.params import get_params
from abci_app.reputation.rules import BPS, MAX_REPUTATION, ceil_div
from abci_app.rewards.rules import compute_bounty, compute_shares
from abci_app.store import CacheKV, KVReader

Status = providers_pb2.ProviderStatus
ACTIVE = providers_pb2.PROVIDER_STATUS_ACTIVE
JAILED = providers_pb2.PROVIDER_STATUS_JAILED
EXITING = providers_pb2.PROVIDER_STATUS_EXITING


# -- reads ----------------------------------------------------------------------------------------


def get_provider(store: KVReader, address: bytes) -> providers_pb2.Provider | None:
    raw = store.get(provider_key(address))
    return None if raw is None else decode_msg(providers_pb2.Provider, raw)


def iterate_providers(store: KVReader) -> Iterator[providers_pb2.Provider]:
    """Providers in address order."""
    for _, v in store.iterate(PROVIDER_PREFIX, prefix_end(PROVIDER_PREFIX)):
        yield decode_msg(providers_pb2.Provider, v)


def is_tombstoned(store: KVReader, address: bytes) -> bool:
    return store.get(tombstone_key(address)) is not None


def get_last_reputation(store: KVReader, address: bytes) -> int | None:
    """Reputation the address had when its provider record was removed (exit completed); None if
    it never left."""
    raw = store.get(last_reputation_key(address))
    return None if raw is None else int.from_bytes(raw, "big")


def is_eligible(
    store: KVReader, p: providers_pb2.Provider, min_reputation: int, min_stake: int
) -> bool:
    """May be drawn as participant or verifier: active, bond >= max(min_stake, min_provider_stake),
    reputation >= max(min_reputation, 1) (a zero weight can never be drawn)."""
    floor = max(min_stake, get_params(store).min_provider_stake)
    return p.status == ACTIVE and p.bond >= floor and p.reputation >= max(min_reputation, 1)


def get_eligible(
    store: KVReader, min_reputation: int, min_stake: int
) -> list[providers_pb2.Provider]:
    floor = max(min_stake, get_params(store).min_provider_stake)
    rep = max(min_reputation, 1)
    return [
        p
        for p in iterate_providers(store)
        if p.status == ACTIVE and p.bond >= floor and p.reputation >= rep
    ]


def is_punished_since(before: providers_pb2.Provider, now: providers_pb2.Provider | None) -> bool:
    """``now`` (the record as this block has left it so far) was jailed, slashed or removed since
    ``before`` (its record at the block's start). No tx lowers bond + unbonding (an exit moves
    the bond into unbonding; MsgUpdateProvider only adds) or touches ``slashed_total`` or
    ``jailed_height``: only the jobs end-block's slashes and jails do."""
    return (
        now is None
        or now.status == JAILED
        or now.jailed_height != 0
        or now.slashed_total > before.slashed_total
        or now.bond + now.unbonding < before.bond + before.unbonding
    )


def get_draw_pool(
    store: CacheKV, min_reputation: int, min_stake: int
) -> list[providers_pb2.Provider]:
    """The providers a seeded end-block draw picks from (participants, verifiers, the appeal/audit
    and final panels): ``get_eligible`` over ``store.parent``, with the records of then (bond,
    reputation, policy), less those the block so far jailed, tombstoned or slashed
    (``is_punished_since``). ``store`` must be the block's CacheKV (the end-block ``ctx.store``):
    its parent is the state after the previous block, fixed before this block's seed was known, so
    no tx of this block (register, top-up, policy update, exit) moves the draw; a provider that
    exits in this block is drawn as it was, and the duty binds it as any duty assigned before an
    exit (README *Draws see the state before the seeded block*). Cost: the one scan of the
    providers ``get_eligible`` makes, plus this block's own provider and tombstone writes."""
    pool = get_eligible(store.parent, min_reputation, min_stake)
    changed = {
        parse_provider_key(k): v
        for k, v in store.pending(PROVIDER_PREFIX, prefix_end(PROVIDER_PREFIX))
    }
    if not changed:
        return pool
    tombstoned = {
        parse_tombstone_key(k)
        for k, v in store.pending(TOMBSTONE_PREFIX, prefix_end(TOMBSTONE_PREFIX))
        if v is not None
    }
    out = []
    for p in pool:
        if p.address in tombstoned:
            continue
        if p.address in changed:
            raw = changed[p.address]
            now = None if raw is None else decode_msg(providers_pb2.Provider, raw)
            if is_punished_since(p, now):
                continue
        out.append(p)
    return out


# -- writes ---------------------------------------------------------------------------------------


def set_provider(store: CacheKV, p: providers_pb2.Provider) -> None:
    if not 0 <= p.reputation <= MAX_REPUTATION:
        raise InvariantBroken(f"reputation {p.reputation} out of range for {to_bech32(p.address)}")
    store.set(provider_key(p.address), encode_msg(p))


def compute_start_reputation(store: KVReader, address: bytes) -> int:
    """initial_reputation for a new address; min(last reputation, initial_reputation) for one
    that exited before: leaving and coming back never raises a reputation."""
    initial = get_params(store).initial_reputation
    last = get_last_reputation(store, address)
    return initial if last is None else min(last, initial)


def process_register(store: CacheKV, p: providers_pb2.Provider) -> None:
    """Precondition: p validated, not registered, not tombstoned, reputation from
    compute_start_reputation. Moves the bond into the module account; the remembered reputation
    (if any) now lives in the record again."""
    bank.send(store, p.address, PROVIDER_BONDS, p.bond)
    store.delete(last_reputation_key(p.address))
    set_provider(store, p)


def increase_bond(store: CacheKV, p: providers_pb2.Provider, amount: int) -> None:
    bank.send(store, p.address, PROVIDER_BONDS, amount)
    p.bond += amount


def process_exit(store: CacheKV, p: providers_pb2.Provider, height: int) -> int:
    """Move the whole bond into unbonding; returns the height at which it is paid out."""
    done = height + get_params(store).unbonding_blocks
    p.unbonding += p.bond
    p.bond = 0
    p.unbonding_height = done
    p.status = EXITING
    store.set(unbonding_key(done, p.address), b"")
    set_provider(store, p)
    return done


def compute_floored_reputation(old: int, new: int, floor: int) -> int:
    """A reputation change under the probation floor: 0 (fraud, withholding) and anything at or
    above ``floor`` stand; a loss that would go below the floor stops at it (or at ``old`` when
    that was already below it: a loss never raises)."""
    if new == 0 or new >= floor or new >= old:
        return new
    return min(old, floor)


def set_reputation(store: CacheKV, address: bytes, value: int) -> int:
    """Store a provider's new reputation, a loss floored at ``reputation_floor``
    (``compute_floored_reputation``); returns the value stored (0 for no provider)."""
    p = get_provider(store, address)
    if p is None:
        return 0
    p.reputation = compute_floored_reputation(
        p.reputation, value, get_params(store).reputation_floor
    )
    set_provider(store, p)
    return p.reputation


def compute_effective_throughput(p: providers_pb2.Provider, cap: int) -> int:
    """One figure for ``p`` where a single number is wanted: its measured figure once its own
    accepted work measured it (never more, whatever it claims), else min(claimed, ``cap``).
    The draw does not use it: ``compute_meets_throughput`` holds the claim itself against a
    need (believed downwards only), and ``record_throughput`` caps an unverified sample at
    ``compute_speed_standing``."""
    if p.measured_tokens_per_sec:
        return p.measured_tokens_per_sec
    return min(p.throughput_tokens_per_sec, cap)


def get_effective_throughput(store: KVReader, p: providers_pb2.Provider) -> int:
    return compute_effective_throughput(p, get_params(store).unmeasured_throughput_cap)


def compute_speed_standing(p: providers_pb2.Provider) -> int:
    """Tokens/s the draw holds against a job's need (README *Measured speed*): the measured
    figure once accepted work measured it (the claim no longer counts, up or down), else the
    provider's own claim."""
    return p.measured_tokens_per_sec or p.throughput_tokens_per_sec


def compute_meets_throughput(p: providers_pb2.Provider, need: int) -> bool:
    """May ``p`` be drawn for a job needing ``need`` tokens/s: its standing reaches the need.
    A measured provider by its measurement; one no work measured yet by its own claim, so a new
    provider still gets the round that measures it, and an honest machine is never seated where
    its own claim says it is too slow (it would miss the commit and pay the liveness slash).
    Before, an unmeasured claim was held at min(claim, cap) against min(need, cap): a truthful
    2,000 tokens/s was seated for a 17,067 tokens/s job. A false claim buys one measuring round
    at most, as before: its work then decides."""
    return compute_speed_standing(p) >= need


def meets_throughput(store: KVReader, p: providers_pb2.Provider, need: int) -> bool:
    return compute_meets_throughput(p, need)


def compute_throughput_ema(old: int, sample: int, window: int) -> int:
    """Integer EMA over ``window`` samples; the first sample (``old`` 0) is the figure."""
    if old == 0:
        return sample
    return (old * (window - 1) + sample) // window


def record_throughput(store: CacheKV, address: bytes, sample: int, verified: bool) -> int:
    """One accepted commitment's speed ``sample`` (tokens/s, from the chain's header times) into
    the provider's measured figure; returns the new figure (0: no provider). A sample that no
    panel verified (an unchallenged commitment: nobody re-executed it, so it may be garbage sent
    early) counts at most at the standing the draw already used (``compute_speed_standing``:
    the figure, or the claim before any): it can lower what the draw holds, never raise it; only
    verified work raises it. (Before, it counted at most at min(claim, cap): an honest provider
    that trained at 8,192 tokens/s was recorded at 1,000 by its first unchallenged round and
    never seated again for a job needing more than 1,000, with no round left to re-measure it.)"""
    p = get_provider(store, address)
    if p is None:
        return 0
    params = get_params(store)
    if not verified:
        sample = min(sample, compute_speed_standing(p))
    new = compute_throughput_ema(p.measured_tokens_per_sec, sample, params.throughput_ema_window)
    p.measured_tokens_per_sec = min(max(new, 1), MAX_U64)
    p.measured_samples = min(p.measured_samples + 1, MAX_U64)
    set_provider(store, p)
    return p.measured_tokens_per_sec


def get_unbonding_blocks(store: KVReader) -> int:
    """Blocks from an exit to its payout: how long an exiting provider stays slashable."""
    return get_params(store).unbonding_blocks


def get_reputation(store: KVReader, address: bytes) -> int:
    p = get_provider(store, address)
    return 0 if p is None else p.reputation


def jail(ctx: Ctx, address: bytes, reason: str) -> None:
    """Jail for proven fraud: never drawn again; reputation 0; may only exit (then tombstoned)."""
    p = get_provider(ctx.store, address)
    if p is None:
        return
    p.reputation = 0
    if p.status != EXITING:
        p.status = JAILED
    p.jailed_height = ctx.block.height
    set_provider(ctx.store, p)
    ctx.store.set(tombstone_key(address), u64_key(ctx.block.height))
    ctx.emit(events.jailed(address, reason))


@dataclass(frozen=True, slots=True)
class SlashResult:
    amount: int  # taken from the provider (bond first, then unbonding)
    bounties: tuple[tuple[bytes, int], ...]  # paid out of the slash
    burned: int


def slash(
    ctx: Ctx,
    address: bytes,
    fraction_bps: int,
    *,
    reason: str,
    job_id: int,
    round_: int,
    bounty_bps: int = 0,
    bounty_weights: Sequence[tuple[bytes, int]] = (),
    min_amount: int = 0,
) -> SlashResult:
    """Slash max(ceil((bond + unbonding) * fraction_bps / 10000), min_amount) (penalties round
    up), at most bond + unbonding, bond first.
    floor(amount * bounty_bps / 10000) is split among ``bounty_weights`` (address, weight) by
    ``rewards.compute_shares`` (truncating); the rest is burned. A provider that no longer exists
    is slashed 0."""
    p = get_provider(ctx.store, address)
    if p is None:
        return SlashResult(0, (), 0)
    total = p.bond + p.unbonding
    amount = min(total, max(ceil_div(total * fraction_bps, BPS), min_amount))
    from_bond = min(p.bond, amount)
    p.bond -= from_bond
    p.unbonding -= amount - from_bond
    # a running total (uint64): saturates, never raises
    p.slashed_total = min(p.slashed_total + amount, MAX_U64)
    set_provider(ctx.store, p)
    left = amount
    paid = compute_shares(compute_bounty(amount, bounty_bps), bounty_weights)
    for addr, give in paid:
        bank.send(ctx.store, PROVIDER_BONDS, addr, give)
        left -= give
    if left:
        bank.burn(ctx.store, PROVIDER_BONDS, left)
    if amount:
        ctx.emit(events.slashed(address, amount, reason, left, job_id, round_))
    return SlashResult(amount, tuple(paid), left)


# -- end block ------------------------------------------------------------------------------------


def process_unbonding_queue(ctx: Ctx) -> None:
    """Pay out unbonding that completes at this height; the provider record is removed, its
    reputation kept under ``0x44`` for a later re-registration (a jailed provider stays
    tombstoned)."""
    h = ctx.block.height
    due = list(ctx.store.iterate(UNBONDING_PREFIX, UNBONDING_PREFIX + u64_key(h + 1)))
    for key, _ in due:
        _, addr = parse_unbonding_key(key)
        ctx.store.delete(key)
        p = get_provider(ctx.store, addr)
        if p is None or p.status != EXITING:
            raise InvariantBroken(f"unbonding entry for {addr.hex()} without an exiting provider")
        amount = p.unbonding
        if amount:
            bank.send(ctx.store, PROVIDER_BONDS, addr, amount)
        ctx.store.delete(provider_key(addr))
        ctx.store.set(last_reputation_key(addr), u64_key(p.reputation))
        ctx.emit(events.unbonded(addr, amount))


# -- invariants -----------------------------------------------------------------------------------


def check_invariants(store: KVReader) -> int:
    """Books: reputation in 0..10000, and 0 with a tombstone once jailed; status valid; exiting
    <=> unbonding entry; no bond while exiting; the PROVIDER_BONDS account holds exactly
    sum(bond + unbonding) (bank refuses sends to module accounts, so nothing else can reach it).
    Returns 0: the tokens are plain balances of a module account."""
    total = 0
    queued: dict[bytes, int] = {}
    for key, _ in store.iterate(UNBONDING_PREFIX, prefix_end(UNBONDING_PREFIX)):
        height, addr = parse_unbonding_key(key)
        queued[addr] = height
    for p in iterate_providers(store):
        if not 0 <= p.reputation <= MAX_REPUTATION:
            raise InvariantBroken(
                f"provider {to_bech32(p.address)} reputation {p.reputation} out of range"
            )
        if p.status not in (ACTIVE, JAILED, EXITING):
            raise InvariantBroken(f"provider {to_bech32(p.address)} has status {p.status}")
        if (p.status == JAILED or p.jailed_height) and (
            p.reputation or not is_tombstoned(store, p.address)
        ):
            raise InvariantBroken(
                f"jailed provider {to_bech32(p.address)} has reputation {p.reputation} or no "
                "tombstone"
            )
        if p.status == EXITING:
            if p.bond != 0 or queued.pop(p.address, None) != p.unbonding_height:
                raise InvariantBroken(f"exiting provider {to_bech32(p.address)} books inconsistent")
        elif p.unbonding:
            raise InvariantBroken(f"provider {to_bech32(p.address)} unbonding without exiting")
        total += p.bond + p.unbonding
    if queued:
        raise InvariantBroken(f"unbonding entries without providers: {sorted(queued)}")
    for key, v in store.iterate(LAST_REPUTATION_PREFIX, prefix_end(LAST_REPUTATION_PREFIX)):
        addr = parse_last_reputation_key(key)
        if get_provider(store, addr) is not None or int.from_bytes(v, "big") > MAX_REPUTATION:
            raise InvariantBroken(
                f"last reputation entry {key.hex()} for a registered provider or out of range"
            )
    held = bank.get_balance(store, PROVIDER_BONDS)
    if held != total:
        raise InvariantBroken(f"provider_bonds account holds {held} != bonds + unbonding {total}")
    return 0


__all__ = [
    "ACTIVE",
    "EXITING",
    "JAILED",
    "PROVIDER_BONDS",
    "TOMBSTONE_PREFIX",
    "SlashResult",
    "compute_effective_throughput",
    "compute_meets_throughput",
    "compute_speed_standing",
    "compute_start_reputation",
    "get_draw_pool",
    "get_effective_throughput",
    "get_eligible",
    "get_last_reputation",
    "get_provider",
    "get_reputation",
    "get_unbonding_blocks",
    "is_eligible",
    "is_punished_since",
    "is_tombstoned",
    "iterate_providers",
    "jail",
    "meets_throughput",
    "record_throughput",
    "set_reputation",
    "slash",
]
