"""Settlement keys, withdrawals, the rewards tree, checkpoints and forged-checkpoint evidence
(the logic; handlers in msgs.py stay thin).

A checkpoint of height H is made in the begin-block of H+1 (when H % checkpoint_interval == 0
and no earlier checkpoint is still pending, and validators with a settlement key hold more than
2/3 of the voting power): it commits to the app hash after H (the header of H+1 carries it), the
rewards root over every (EVM address, cumulative withdrawn) after H, and the signer set that
signs the next checkpoint. Validators sign it in ExtendVote from the next height on; their
signatures reach the state through the vote extensions the next proposer puts into its block
(abci_app/vote_extensions.py), and ``apply_votes`` adds each valid one (``MsgSignCheckpoint``
adds one by transaction). It is *final* once its signatures carry more than 2/3 of the *whole*
power of its signer set (validators without a settlement key count, as not signing); the signer
set then becomes its ``next_set``. Until then no newer interval checkpoint is made.

A *valset update* is made in the end-block of H when staking just moved more than 1/4 of the
stored signer set's power away from it: CometBFT applies the change at H+2, so the outgoing set
still votes at H+1 and signs the update in its vote extensions (Gravity Bridge's valset
updates, without its unbonding duty). It carries the state of the newest checkpoint (height, app
hash, rewards root) and only moves the set; a pending interval checkpoint it replaces is marked
``superseded_by``.

The rewards tree is kept in the state (``update_leaf``): a withdrawal to a new address appends a
leaf, a withdrawal rewrites one leaf and its O(log n) ancestors; the root and a proof are
O(log n) reads.

Books (``check_invariants``): balance(SETTLEMENT_ESCROW) == sum of cumulative claims; the
stored tree is the tree of the stored cumulatives.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from abci_app.bank import keeper as bank
from abci_app.encoding import decode_amount, decode_msg, encode_amount, encode_msg, prefix_end
from abci_app.errors import InvariantBroken
from abci_app.pb import settlement_pb2
from abci_app.settlement import events, evm
from abci_app.settlement.errors import (
    ErrCheckpointNotPending,
    ErrInvalidCheckpointSignature,
    ErrInvalidEvidence,
    ErrNotForged,
)
from abci_app.settlement.expected_keepers import StakingKeeper
from abci_app.settlement.keys import (
    CLAIM_PREFIX,
    LATEST_CHECKPOINT_KEY,
    LEAF_COUNT_KEY,
    LEAF_INDEX_PREFIX,
    PARAMS_KEY,
    SETTLEMENT_ESCROW,
    SETTLEMENT_KEY_PREFIX,
    SIGNER_SET_KEY,
    TREE_NODE_PREFIX,
    VOTE_EXTENSIONS_HEIGHT_KEY,
    checkpoint_key,
    claim_key,
    key_owner_key,
    leaf_index_key,
    parse_claim_key,
    parse_leaf_index_key,
    parse_settlement_key_key,
    settlement_key_key,
    tree_node_key,
)
from abci_app.settlement.params import get_params
from abci_app.store import CacheKV, KVReader

if TYPE_CHECKING:
    from abci_app.context import Ctx

KEY_PROOF_TAG = b"loconet/settlement-key/v1"
MAX_U64 = (1 << 64) - 1


def key_proof_digest(chain_id: str, validator: bytes) -> bytes:
    """What a settlement key signs to prove possession when it is registered."""
    return evm.keccak256(KEY_PROOF_TAG + b"\x00" + chain_id.encode() + b"\x00" + validator)


# ------------------------------------------------------------------------------ keys


def get_settlement_key(store: KVReader, validator: bytes) -> bytes | None:
    return store.get(settlement_key_key(validator))


def get_key_owner(store: KVReader, evm_address: bytes) -> bytes | None:
    """The validator that registered ``evm_address``, now or ever: a replaced key stays bound to
    its validator, so what it signs stays slashable (``process_forged_checkpoint``)."""
    return store.get(key_owner_key(evm_address))


def set_settlement_key(store: CacheKV, validator: bytes, evm_address: bytes) -> None:
    store.set(settlement_key_key(validator), evm_address)
    store.set(key_owner_key(evm_address), validator)


def has_settlement_key(store: KVReader, validator: bytes) -> bool:
    """Staking's read (its ``SettlementKeys`` Protocol): may ``validator`` be in the set?"""
    return store.get(settlement_key_key(validator)) is not None


def requires_settlement_key(store: KVReader) -> bool:
    """Staking's read: is a validator without a settlement key kept out of the set? (Before
    settlement's genesis has run, as during staking's, no: settlement's genesis checks the
    genesis validators itself.)"""
    return store.get(PARAMS_KEY) is not None and bool(get_params(store).require_settlement_key)


def iterate_settlement_keys(store: KVReader) -> Iterator[tuple[bytes, bytes]]:
    """(consensus address, EVM address) in consensus-address order."""
    for k, v in list(store.iterate(SETTLEMENT_KEY_PREFIX, prefix_end(SETTLEMENT_KEY_PREFIX))):
        yield parse_settlement_key_key(k), v


def compute_signer_set(store: KVReader, staking: StakingKeeper) -> settlement_pb2.SignerSet:
    """Validators in CometBFT's set (power > 0) with a settlement key, by EVM address, and the
    power of those without one (``keyless_power``: in the total, never signing)."""
    out = []
    keyless = 0
    for cons, v in staking.iterate_validators(store):
        if v.power <= 0:
            continue
        evm_address = get_settlement_key(store, cons)
        if evm_address is None:
            keyless += v.power
        else:
            out.append(
                settlement_pb2.Signer(evm_address=evm_address, power=v.power, validator=cons)
            )
    out.sort(key=lambda s: s.evm_address)
    return settlement_pb2.SignerSet(signers=out, keyless_power=keyless)


def total_power(s: settlement_pb2.SignerSet) -> int:
    return sum(x.power for x in s.signers) + s.keyless_power


def keyed_majority(keyed: settlement_pb2.SignerSet) -> bool:
    """Do validators with a settlement key hold more than 2/3 of CometBFT's voting power? Only
    then is a checkpoint made: a set the contract trusts must be able to sign."""
    return sum(s.power for s in keyed.signers) * 3 > total_power(keyed) * 2


def hash_of(s: settlement_pb2.SignerSet) -> bytes:
    return evm.set_hash(
        [x.evm_address for x in s.signers], [x.power for x in s.signers], s.keyless_power
    )


def compute_overlap(old: settlement_pb2.SignerSet, now: settlement_pb2.SignerSet) -> int:
    """Power of ``old``'s members that still sign with as much in ``now`` (same key, same
    validator): what of ``old`` can still sign once CometBFT applies ``now``."""
    cur = {(s.validator, s.evm_address): s.power for s in now.signers}
    return sum(min(s.power, cur.get((s.validator, s.evm_address), 0)) for s in old.signers)


# ------------------------------------------------------------------------------ rewards tree


def get_cumulative(store: KVReader, evm_address: bytes) -> int:
    return decode_amount(store.get(claim_key(evm_address)))


def iterate_claims(store: KVReader) -> list[tuple[bytes, int]]:
    """(EVM address, cumulative) in ascending address order."""
    return [
        (parse_claim_key(k), decode_amount(v))
        for k, v in store.iterate(CLAIM_PREFIX, prefix_end(CLAIM_PREFIX))
    ]


def leaf_count(store: KVReader) -> int:
    return decode_amount(store.get(LEAF_COUNT_KEY))


def get_leaf_index(store: KVReader, evm_address: bytes) -> int | None:
    raw = store.get(leaf_index_key(evm_address))
    return None if raw is None else decode_amount(raw)


def get_node(store: KVReader, level: int, index: int) -> bytes:
    raw = store.get(tree_node_key(level, index))
    if raw is None:
        raise InvariantBroken(f"rewards tree node ({level}, {index}) is missing")
    return raw


def iterate_leaves(store: KVReader) -> list[tuple[bytes, int]]:
    """(EVM address, cumulative) in leaf order (first withdrawal first): the tree's leaves."""
    indexed = sorted(
        (decode_amount(v), parse_leaf_index_key(k))
        for k, v in store.iterate(LEAF_INDEX_PREFIX, prefix_end(LEAF_INDEX_PREFIX))
    )
    return [(a, get_cumulative(store, a)) for _, a in indexed]


def update_leaf(store: CacheKV, index: int, leaf: bytes) -> None:
    """Write leaf ``index`` and recompute its ancestors (the tree of ``evm.rewards_root``: level
    k+1 pairs (2j, 2j+1) of level k, an odd last node moves up unchanged). Appending leaf n
    changes only its own path: every node whose shape changes is one of its ancestors."""
    size = leaf_count(store)
    store.set(tree_node_key(0, index), leaf)
    level, i = 0, index
    while size > 1:
        parent = i // 2
        left = get_node(store, level, 2 * parent)
        if 2 * parent + 1 < size:
            node = evm.pair_hash(left, get_node(store, level, 2 * parent + 1))
        else:
            node = left
        store.set(tree_node_key(level + 1, parent), node)
        level, i, size = level + 1, parent, (size + 1) // 2


def compute_depth(n: int) -> int:
    depth = 0
    while n > 1:
        n, depth = (n + 1) // 2, depth + 1
    return depth


def get_rewards_root(store: KVReader) -> bytes:
    """One read: the top node (32 zero bytes for no leaves)."""
    n = leaf_count(store)
    return evm.ZERO32 if n == 0 else get_node(store, compute_depth(n), 0)


def get_claim_proof(store: KVReader, index: int) -> list[bytes]:
    """Sibling hashes from leaf ``index`` up to the root: O(log n) reads."""
    size = leaf_count(store)
    level, proof = 0, []
    while size > 1:
        sib = index ^ 1
        if sib < size:
            proof.append(get_node(store, level, sib))
        index, size, level = index // 2, (size + 1) // 2, level + 1
    return proof


def process_withdraw(store: CacheKV, sender: bytes, evm_address: bytes, amount: int) -> int:
    bank.send(store, sender, SETTLEMENT_ESCROW, amount)
    total = get_cumulative(store, evm_address) + amount
    set_cumulative(store, evm_address, total)
    return total


def set_cumulative(store: CacheKV, evm_address: bytes, total: int) -> None:
    """Store the address's cumulative and rewrite its leaf (appending one for a new address)."""
    store.set(claim_key(evm_address), encode_amount(total))
    index = get_leaf_index(store, evm_address)
    if index is None:
        index = leaf_count(store)
        store.set(leaf_index_key(evm_address), encode_amount(index))
        store.set(LEAF_COUNT_KEY, encode_amount(index + 1))
    update_leaf(store, index, evm.claim_leaf(evm_address, total))


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
    return cp if cp is not None and cp.final_height == 0 and not cp.superseded_by else None


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


def digest_of(store: KVReader, chain_id: str, cp: settlement_pb2.Checkpoint) -> bytes:
    """What validators sign: the checkpoint, for this chain's one deployment (params)."""
    p = get_params(store)
    return evm.checkpoint_digest(
        chain_id,
        p.evm_chain_id,
        p.evm_contract,
        cp.number,
        cp.height,
        cp.app_hash,
        cp.rewards_root,
        cp.next_set_hash,
    )


def _store_new(ctx: Ctx, cp: settlement_pb2.Checkpoint, signers: settlement_pb2.SignerSet) -> None:
    set_checkpoint(ctx.store, cp)
    ctx.store.set(LATEST_CHECKPOINT_KEY, encode_amount(cp.number))
    ctx.store.set(SIGNER_SET_KEY, encode_msg(signers))
    ctx.emit(events.checkpoint_created(cp.number, cp.height, cp.rewards_root, cp.next_set_hash))


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
    if not keyed_majority(now):
        # the EVM side must trust a set that can sign, not a keyed minority
        return None
    app_hash = ctx.block.last_app_hash if len(ctx.block.last_app_hash) == 32 else evm.ZERO32
    cp = settlement_pb2.Checkpoint(
        number=latest_number(ctx.store) + 1,
        height=height,
        app_hash=app_hash,
        rewards_root=get_rewards_root(ctx.store),
        set_hash=hash_of(signers),
        next_set_hash=hash_of(now),
        signers=signers,
        next_set=now,
        total_power=total_power(signers),
        created_height=ctx.block.height,
    )
    _store_new(ctx, cp, signers)
    return cp


def make_valset_update(ctx: Ctx, staking: StakingKeeper) -> settlement_pb2.Checkpoint | None:
    """End-block of H, after staking: when the set CometBFT gets at H+2 keeps no more than 3/4 of
    the stored signer set's power, make a checkpoint that moves the contract to it now, while
    the outgoing set still votes (at H+1). Not while another valset update is pending (it would
    lose the outgoing set's only votes), nor before the first checkpoint, nor for a set that
    could not sign (keyless power >= 1/3)."""
    stored = get_signer_set(ctx.store)
    if stored is None:
        return None
    now = compute_signer_set(ctx.store, staking)
    pending = pending_checkpoint(ctx.store)
    target = pending.next_set if pending is not None else stored
    if hash_of(now) == hash_of(target):
        return None
    if pending is not None and pending.valset_update:
        return None
    if compute_overlap(stored, now) * 4 >= total_power(stored) * 3:
        return None  # the stored set still signs: the next interval checkpoint carries the move
    if not now.signers or not keyed_majority(now):
        return None
    base = get_checkpoint(ctx.store, latest_number(ctx.store))
    if base is None:
        return None
    number = base.number + 1
    if pending is not None:
        pending.superseded_by = number
        set_checkpoint(ctx.store, pending)
    cp = settlement_pb2.Checkpoint(
        number=number,
        height=base.height,
        app_hash=base.app_hash,
        rewards_root=base.rewards_root,
        set_hash=hash_of(stored),
        next_set_hash=hash_of(now),
        signers=stored,
        next_set=now,
        total_power=total_power(stored),
        created_height=ctx.block.height,
        valset_update=True,
    )
    _store_new(ctx, cp, stored)
    return cp


def member_of(cp: settlement_pb2.Checkpoint, evm_address: bytes) -> settlement_pb2.Signer | None:
    return next((s for s in cp.signers.signers if s.evm_address == evm_address), None)


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
    if pending_only and (cp.final_height or cp.superseded_by):
        return f"checkpoint {vote.number} is no longer pending"
    member = next((s for s in cp.signers.signers if s.validator == validator), None)
    if member is None:
        return f"validator {validator.hex()} is not a signer of checkpoint {vote.number}"
    if evm.recover(digest_of(store, chain_id, cp), vote.signature) != member.evm_address:
        return f"bad signature over checkpoint {vote.number}"
    return None


def _add_signature(
    ctx: Ctx, cp: settlement_pb2.Checkpoint, member: settlement_pb2.Signer, sig: bytes
) -> None:
    cp.signatures.add(evm_address=member.evm_address, signature=sig)
    cp.signed_power += member.power
    ctx.emit(
        events.checkpoint_signed(cp.number, member.evm_address, cp.signed_power, cp.total_power)
    )


def _settle(ctx: Ctx, cp: settlement_pb2.Checkpoint) -> None:
    """Sort the signatures, make ``cp`` final when they pass 2/3 of its whole power, store it."""
    ordered = sorted(cp.signatures, key=lambda s: s.evm_address)
    del cp.signatures[:]
    cp.signatures.extend(ordered)
    if cp.signed_power * 3 > cp.total_power * 2:
        cp.final_height = ctx.block.height
        ctx.store.set(SIGNER_SET_KEY, encode_msg(cp.next_set))
        ctx.emit(events.checkpoint_final(cp.number, cp.height))
    set_checkpoint(ctx.store, cp)


def apply_votes(ctx: Ctx, votes: list[tuple[bytes, settlement_pb2.CheckpointVote]]) -> None:
    """Add the valid signatures in a block's vote extensions to the pending checkpoint; make it
    final when they pass 2/3 of its signers' power. Invalid or late votes are ignored."""
    cp = pending_checkpoint(ctx.store)
    if cp is None:
        return
    have = {s.evm_address for s in cp.signatures}
    digest = digest_of(ctx.store, ctx.block.chain_id, cp)
    added = False
    for validator, vote in sorted(votes, key=lambda v: v[0]):
        if vote.number != cp.number:
            continue
        member = next((s for s in cp.signers.signers if s.validator == validator), None)
        if member is None or member.evm_address in have:
            continue
        if evm.recover(digest, vote.signature) != member.evm_address:
            continue
        _add_signature(ctx, cp, member, vote.signature)
        have.add(member.evm_address)
        added = True
    if added:
        _settle(ctx, cp)


def process_sign_checkpoint(ctx: Ctx, number: int, signature: bytes) -> bytes:
    """MsgSignCheckpoint: add one member's signature to the pending checkpoint by transaction
    (a member that left CometBFT's set has no vote extension). Returns the signer's address.
    Raises (changing nothing) when there is no such pending checkpoint or the signature is not a
    new member's."""
    cp = pending_checkpoint(ctx.store)
    if cp is None or cp.number != number:
        raise ErrCheckpointNotPending(
            f"checkpoint {number} is not pending"
            + (f" (checkpoint {cp.number} is)" if cp is not None else " (none is)")
        )
    who = evm.recover(digest_of(ctx.store, ctx.block.chain_id, cp), signature)
    member = member_of(cp, who) if who is not None else None
    if member is None:
        raise ErrInvalidCheckpointSignature(
            f"the signature is not a signer's of checkpoint {number} (65 bytes r||s||v, low s, "
            "over its digest: `loconet query settlement checkpoint`)"
        )
    if any(s.evm_address == member.evm_address for s in cp.signatures):
        raise ErrInvalidCheckpointSignature(f"0x{member.evm_address.hex()} already signed")
    _add_signature(ctx, cp, member, signature)
    _settle(ctx, cp)
    return member.evm_address


def needs_signatures(store: KVReader, height: int) -> bool:
    """Must the proposal of ``height`` carry vote extensions? Yes when vote extensions were on
    for the last commit (height-1) and a checkpoint was already pending in the state those votes
    were made on (after height-2)."""
    ve = vote_extensions_height(store)
    if ve == 0 or height - 1 < ve:
        return False
    cp = pending_checkpoint(store)
    return cp is not None and cp.created_height <= height - 2


# ------------------------------------------------------------------------------ evidence


def is_produced(
    store: KVReader, chain_id: str, evm_chain_id: int, contract: bytes, number: int, digest: bytes
) -> bool:
    """Did this chain make a checkpoint with this digest (final, pending or superseded)?"""
    p = get_params(store)
    if (evm_chain_id, contract) != (p.evm_chain_id, p.evm_contract):
        return False
    cp = get_checkpoint(store, number)
    return cp is not None and digest_of(store, chain_id, cp) == digest


def process_forged_checkpoint(
    ctx: Ctx, staking: StakingKeeper, msg: settlement_pb2.MsgReportForgedCheckpoint
) -> list[bytes]:
    """MsgReportForgedCheckpoint: every validator whose settlement key (current or replaced)
    signed a checkpoint digest this chain never produced is slashed
    ``slash_fraction_forged_checkpoint_bps`` (bonds and every unbonding entry: when it signed is
    unknown), jailed for good and tombstoned. Returns the slashed consensus addresses.
    All checks come before any write; a report that slashes nobody is refused."""
    for name, b, n in (
        ("evm_contract", msg.evm_contract, 20),
        ("app_hash", msg.app_hash, 32),
        ("rewards_root", msg.rewards_root, 32),
        ("next_set_hash", msg.next_set_hash, 32),
    ):
        if len(b) != n:
            raise ErrInvalidEvidence(f"{name} must be {n} bytes, got {len(b)}")
    if not msg.signatures or len(msg.signatures) > 256:
        raise ErrInvalidEvidence("evidence carries 1..256 signatures")
    digest = evm.checkpoint_digest(
        ctx.block.chain_id,
        msg.evm_chain_id,
        msg.evm_contract,
        msg.number,
        msg.height,
        msg.app_hash,
        msg.rewards_root,
        msg.next_set_hash,
    )
    if is_produced(
        ctx.store, ctx.block.chain_id, msg.evm_chain_id, msg.evm_contract, msg.number, digest
    ):
        raise ErrNotForged(f"checkpoint {msg.number} with this content is the chain's own")
    guilty: set[bytes] = set()
    for i, sig in enumerate(msg.signatures):
        who = evm.recover(digest, sig)
        owner = get_key_owner(ctx.store, who) if who is not None else None
        if owner is None:
            raise ErrInvalidEvidence(
                f"signature {i} does not recover to a key any validator registered"
            )
        if not staking.is_tombstoned(ctx.store, owner):
            guilty.add(owner)
    if not guilty:
        raise ErrInvalidEvidence("every signer is already tombstoned (slashed once)")
    bps = get_params(ctx.store).slash_fraction_forged_checkpoint_bps
    out = sorted(guilty)
    for cons in out:
        staking.slash(ctx, cons, 0, bps, "forged_checkpoint")
        staking.jail(ctx, cons, MAX_U64, "forged_checkpoint")
        staking.tombstone(ctx, cons)
        ctx.emit(events.forged_checkpoint_slashed(cons, msg.number, digest))
    return out


# ------------------------------------------------------------------------------ invariants


def check_invariants(store: KVReader) -> int:
    claims = iterate_claims(store)
    total = sum(c for _, c in claims)
    held = bank.get_balance(store, SETTLEMENT_ESCROW)
    if held != total:
        raise InvariantBroken(f"settlement escrow holds {held} uloco, claims add up to {total}")
    for cons, evm_address in iterate_settlement_keys(store):
        if get_key_owner(store, evm_address) != cons:
            raise InvariantBroken(
                f"settlement key {evm_address.hex()} of {cons.hex()} has no reverse index"
            )
    leaves = iterate_leaves(store)
    if len(leaves) != len(claims) or leaf_count(store) != len(claims):
        raise InvariantBroken("the rewards tree's leaves and the claims disagree")
    if evm.rewards_root(leaves) != get_rewards_root(store):
        raise InvariantBroken("the stored rewards tree is not the tree of the cumulatives")
    n_nodes = sum(1 for _ in store.iterate(TREE_NODE_PREFIX, prefix_end(TREE_NODE_PREFIX)))
    if n_nodes > 2 * len(claims) + compute_depth(len(claims)):
        raise InvariantBroken("the rewards tree holds nodes outside its shape")
    return 0
