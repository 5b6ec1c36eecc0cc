"""Settlement keys, withdrawals, and checkpoints (the logic; handlers in msgs.py stay thin).

A checkpoint of height H is made in the begin-block of H+1 (when H % checkpoint_interval == 0
and no earlier checkpoint is still pending, and validators with a settlement key hold more than
2/3 of the voting power): it commits to the app hash after H (the header of
H+1 carries it), the rewards root over every (EVM address, cumulative withdrawn) after H, and
the signer set that signs the next checkpoint. Validators sign it in ExtendVote from the
next height on; their signatures reach the state through the vote extensions the next proposer
puts into its block (abci_app/vote_extensions.py), and ``apply_votes`` adds each valid one.
It is *final* once its signatures carry more than 2/3 of its signer set's power; the signer
set then becomes its ``next_set``. Until then no newer checkpoint is made.

Books (``check_invariants``): balance(SETTLEMENT_ESCROW) == sum of cumulative claims.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from abci_app.bank import keeper as bank
from abci_app.encoding import decode_amount, decode_msg, encode_amount, encode_msg, prefix_end
from abci_app.errors import InvariantBroken
from abci_app.pb import settlement_pb2
from abci_app.settlement import events, evm
from abci_app.settlement.expected_keepers import StakingKeeper
from abci_app.settlement.keys import (
    CLAIM_PREFIX,
    LATEST_CHECKPOINT_KEY,
    SETTLEMENT_ESCROW,
    SETTLEMENT_KEY_PREFIX,
    SIGNER_SET_KEY,
    VOTE_EXTENSIONS_HEIGHT_KEY,
    checkpoint_key,
    claim_key,
    key_owner_key,
    parse_claim_key,
    parse_settlement_key_key,
    settlement_key_key,
)
from abci_app.settlement.params import get_params
from abci_app.store import CacheKV, KVReader

if TYPE_CHECKING:
    from abci_app.context import Ctx

KEY_PROOF_TAG = b"loconet/settlement-key/v1"


def key_proof_digest(chain_id: str, validator: bytes) -> bytes:
    """What a settlement key signs to prove possession when it is registered."""
    return evm.keccak256(KEY_PROOF_TAG + b"\x00" + chain_id.encode() + b"\x00" + validator)


# ------------------------------------------------------------------------------ keys


def get_settlement_key(store: KVReader, validator: bytes) -> bytes | None:
    return store.get(settlement_key_key(validator))


def get_key_owner(store: KVReader, evm_address: bytes) -> bytes | None:
    return store.get(key_owner_key(evm_address))


def set_settlement_key(store: CacheKV, validator: bytes, evm_address: bytes) -> None:
    old = get_settlement_key(store, validator)
    if old is not None:
        store.delete(key_owner_key(old))
    store.set(settlement_key_key(validator), evm_address)
    store.set(key_owner_key(evm_address), validator)


def iterate_settlement_keys(store: KVReader) -> Iterator[tuple[bytes, bytes]]:
    """(consensus address, EVM address) in consensus-address order."""
    for k, v in list(store.iterate(SETTLEMENT_KEY_PREFIX, prefix_end(SETTLEMENT_KEY_PREFIX))):
        yield parse_settlement_key_key(k), v


def compute_signer_set(store: KVReader, staking: StakingKeeper) -> settlement_pb2.SignerSet:
    """Validators in CometBFT's set (power > 0) with a settlement key, by EVM address."""
    out = []
    for cons, evm_address in iterate_settlement_keys(store):
        v = staking.get_validator(store, cons)
        if v is not None and v.power > 0:
            out.append(
                settlement_pb2.Signer(evm_address=evm_address, power=v.power, validator=cons)
            )
    out.sort(key=lambda s: s.evm_address)
    return settlement_pb2.SignerSet(signers=out)


def keyed_majority(
    store: KVReader, staking: StakingKeeper, keyed: settlement_pb2.SignerSet
) -> bool:
    """Do validators with a settlement key hold more than 2/3 of CometBFT's voting power? Only
    then is a checkpoint made: its next set, which the contract will trust, stands for the chain."""
    total = sum(v.power for _, v in staking.iterate_validators(store))
    return sum(s.power for s in keyed.signers) * 3 > total * 2


def hash_of(s: settlement_pb2.SignerSet) -> bytes:
    return evm.set_hash([x.evm_address for x in s.signers], [x.power for x in s.signers])


# ------------------------------------------------------------------------------ claims


def get_cumulative(store: KVReader, evm_address: bytes) -> int:
    return decode_amount(store.get(claim_key(evm_address)))


def iterate_claims(store: KVReader) -> list[tuple[bytes, int]]:
    """(EVM address, cumulative) in ascending address order: the leaves of the rewards tree."""
    return [
        (parse_claim_key(k), decode_amount(v))
        for k, v in store.iterate(CLAIM_PREFIX, prefix_end(CLAIM_PREFIX))
    ]


def process_withdraw(store: CacheKV, sender: bytes, evm_address: bytes, amount: int) -> int:
    bank.send(store, sender, SETTLEMENT_ESCROW, amount)
    total = get_cumulative(store, evm_address) + amount
    store.set(claim_key(evm_address), encode_amount(total))
    return total


# ------------------------------------------------------------------------------ checkpoints


def get_checkpoint(store: KVReader, number: int) -> settlement_pb2.Checkpoint | None:
    raw = store.get(checkpoint_key(number))
    return None if raw is None else decode_msg(settlement_pb2.Checkpoint, raw)


def set_checkpoint(store: CacheKV, cp: settlement_pb2.Checkpoint) -> None:
    store.set(checkpoint_key(cp.number), encode_msg(cp))


def latest_number(store: KVReader) -> int:
    return decode_amount(store.get(LATEST_CHECKPOINT_KEY))


def pending_checkpoint(store: KVReader) -> settlement_pb2.Checkpoint | None:
    n = latest_number(store)
    cp = get_checkpoint(store, n) if n else None
    return cp if cp is not None and cp.final_height == 0 else None


def latest_final(store: KVReader) -> settlement_pb2.Checkpoint | None:
    n = latest_number(store)
    while n:
        cp = get_checkpoint(store, n)
        if cp is not None and cp.final_height:
            return cp
        n -= 1
    return None


def get_signer_set(store: KVReader) -> settlement_pb2.SignerSet | None:
    raw = store.get(SIGNER_SET_KEY)
    return None if raw is None else decode_msg(settlement_pb2.SignerSet, raw)


def vote_extensions_height(store: KVReader) -> int:
    return decode_amount(store.get(VOTE_EXTENSIONS_HEIGHT_KEY))


def set_vote_extensions_height(store: CacheKV, h: int) -> None:
    store.set(VOTE_EXTENSIONS_HEIGHT_KEY, encode_amount(h))


def digest_of(chain_id: str, cp: settlement_pb2.Checkpoint) -> bytes:
    return evm.checkpoint_digest(
        chain_id, cp.number, cp.height, cp.app_hash, cp.rewards_root, cp.next_set_hash
    )


def make_checkpoint(ctx: Ctx, staking: StakingKeeper) -> settlement_pb2.Checkpoint | None:
    """Begin-block of H+1: checkpoint of height H when it is due and none is pending."""
    height = ctx.block.height - 1
    interval = get_params(ctx.store).checkpoint_interval
    if height < 1 or height % interval or pending_checkpoint(ctx.store) is not None:
        return None
    now = compute_signer_set(ctx.store, staking)
    signers = get_signer_set(ctx.store) or now
    if not signers.signers:
        return None  # no validator has a settlement key yet
    if not keyed_majority(ctx.store, staking, now):
        # the EVM side must trust what >2/3 of loconet's power stands behind, not a keyed minority
        return None
    nxt = now
    app_hash = ctx.block.last_app_hash if len(ctx.block.last_app_hash) == 32 else evm.ZERO32
    cp = settlement_pb2.Checkpoint(
        number=latest_number(ctx.store) + 1,
        height=height,
        app_hash=app_hash,
        rewards_root=evm.rewards_root(iterate_claims(ctx.store)),
        set_hash=hash_of(signers),
        next_set_hash=hash_of(nxt),
        signers=signers,
        next_set=nxt,
        total_power=sum(s.power for s in signers.signers),
        created_height=ctx.block.height,
    )
    set_checkpoint(ctx.store, cp)
    ctx.store.set(LATEST_CHECKPOINT_KEY, encode_amount(cp.number))
    ctx.store.set(SIGNER_SET_KEY, encode_msg(signers))
    ctx.emit(events.checkpoint_created(cp.number, cp.height, cp.rewards_root, cp.next_set_hash))
    return cp


def check_vote(
    store: KVReader,
    chain_id: str,
    validator: bytes,
    vote: settlement_pb2.CheckpointVote,
    *,
    pending_only: bool,
) -> str | None:
    """Why ``vote`` (validator's settlement part of a vote extension) is invalid, or None.
    ``pending_only``: the vote must be for the checkpoint pending now (VerifyVoteExtension);
    otherwise any stored checkpoint (a proposal carries votes made one state earlier)."""
    cp = get_checkpoint(store, vote.number) if vote.number else None
    if cp is None:
        return f"no checkpoint {vote.number}"
    if pending_only and cp.final_height:
        return f"checkpoint {vote.number} is already final"
    member = next((s for s in cp.signers.signers if s.validator == validator), None)
    if member is None:
        return f"validator {validator.hex()} is not a signer of checkpoint {vote.number}"
    if evm.recover(digest_of(chain_id, cp), vote.signature) != member.evm_address:
        return f"bad signature over checkpoint {vote.number}"
    return None


def apply_votes(ctx: Ctx, votes: list[tuple[bytes, settlement_pb2.CheckpointVote]]) -> None:
    """Add the valid signatures in a block's vote extensions to the pending checkpoint; make it
    final when they pass 2/3 of its signers' power. Invalid or late votes are ignored."""
    cp = pending_checkpoint(ctx.store)
    if cp is None:
        return
    have = {s.evm_address for s in cp.signatures}
    digest = digest_of(ctx.block.chain_id, cp)
    added = False
    for validator, vote in sorted(votes, key=lambda v: v[0]):
        if vote.number != cp.number:
            continue
        member = next((s for s in cp.signers.signers if s.validator == validator), None)
        if member is None or member.evm_address in have:
            continue
        if evm.recover(digest, vote.signature) != member.evm_address:
            continue
        cp.signatures.add(evm_address=member.evm_address, signature=vote.signature)
        have.add(member.evm_address)
        cp.signed_power += member.power
        added = True
        ctx.emit(
            events.checkpoint_signed(cp.number, member.evm_address, cp.signed_power, cp.total_power)
        )
    if not added:
        return
    ordered = sorted(cp.signatures, key=lambda s: s.evm_address)
    del cp.signatures[:]
    cp.signatures.extend(ordered)
    if cp.signed_power * 3 > cp.total_power * 2:
        cp.final_height = ctx.block.height
        ctx.store.set(SIGNER_SET_KEY, encode_msg(cp.next_set))
        ctx.emit(events.checkpoint_final(cp.number, cp.height))
    set_checkpoint(ctx.store, cp)


def needs_signatures(store: KVReader, height: int) -> bool:
    """Must the proposal of ``height`` carry vote extensions? Yes when vote extensions were on
    for the last commit (height-1) and a checkpoint was already pending in the state those votes
    were made on (after height-2)."""
    ve = vote_extensions_height(store)
    if ve == 0 or height - 1 < ve:
        return False
    cp = pending_checkpoint(store)
    return cp is not None and cp.created_height <= height - 2


# ------------------------------------------------------------------------------ invariants


def check_invariants(store: KVReader) -> int:
    total = sum(c for _, c in iterate_claims(store))
    held = bank.get_balance(store, SETTLEMENT_ESCROW)
    if held != total:
        raise InvariantBroken(f"settlement escrow holds {held} uloco, claims add up to {total}")
    for cons, evm_address in iterate_settlement_keys(store):
        if get_key_owner(store, evm_address) != cons:
            raise InvariantBroken(
                f"settlement key {evm_address.hex()} of {cons.hex()} has no reverse index"
            )
    return 0
