"""Vote extensions: one envelope (``loconet.abci.v1.VoteExtension``, one field per module) and
one dispatch for the four ABCI++ calls that touch them.

- ExtendVote (height h, committed state h-1): each module adds its part (settlement: its
  signature over the pending checkpoint, when this node's settlement key is in its signer set;
  beacon: its VRF proof over (chain id, h) with its consensus key, abci_app/beacon.py, always).
- VerifyVoteExtension: the envelope must decode strictly and each part must pass its module's
  check; a REJECT makes CometBFT drop that precommit.
- PrepareProposal (height h): CometBFT hands the proposer the extensions of the last commit
  (height h-1); the proposer puts them, as ``INJECTED_PREFIX + ExtendedCommitInfo``, first in
  its block. The prefix starts with 0x00, which no TxRaw can (tag 0 is invalid), so CheckTx and
  every other path refuse such bytes as a tx.
- ProcessProposal: the injected votes must be the last commit's (validator and power as
  CometBFT's proposed_last_commit says, block_id_flag COMMIT, no duplicates), each extension
  signed by the validator's ed25519 key over CometBFT's CanonicalVoteExtension, each part valid,
  and together more than 2/3 of the last commit's power; a block must carry them when a module
  needs them (settlement: a checkpoint was pending when those votes were made; beacon: always,
  once the last commit had extensions). Every injected extension must carry a valid beacon share.
- FinalizeBlock: ``execute_block`` hands the decoded votes to the modules through
  ``BlockContext.vote_extensions`` and the block's beacon (``block_beacon``) through
  ``BlockContext.beacon``; the injected tx gets an empty ExecTxResult (code 0).

Vote extensions are on from ``consensus_params.abci.vote_extensions_enable_height`` (genesis,
written by ``loconet init`` and ``loconet testnet``); the settlement module stores that height.

Adding a module's part (field 3 onwards): give it a field of
``VoteExtension`` in proto/loconet/abci/v1/vote_extension.proto, fill it in ``extend_vote``,
check it in ``check_parts`` (called by VerifyVoteExtension with ``pending_only=True`` and by
ProcessProposal with ``False``), read it from ``ctx.block.vote_extensions`` in the module's
begin-block, and, if blocks must carry it, say when in ``needed``.
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet
from nacl.exceptions import BadSignatureError, CryptoError
from nacl.signing import VerifyKey

from abci_app import beacon
from abci_app.encoding import encode_msg, encode_uvarint
from abci_app.pb import abci, canonical_pb2, vote_extension_pb2
from abci_app.settlement import evm
from abci_app.settlement import keeper as settlement
from abci_app.staking import keeper as staking
from abci_app.store import KVReader

INJECTED_PREFIX = b"\x00loconet/vote-extensions/v1\x00"
BLOCK_ID_FLAG_COMMIT = 2
VoteExtension = vote_extension_pb2.VoteExtension  # the envelope (re-exported for tests and tools)


@dataclass(frozen=True)
class ExtensionKeys:
    """Secrets the node gives the app to sign its vote extensions with (never in state)."""

    settlement: bytes | None = None  # 32-byte secp256k1 secret of this validator's settlement key
    consensus: bytes | None = (
        None  # 32-byte ed25519 seed of this validator's consensus key (beacon share)
    )


def decode_extension(raw: bytes) -> vote_extension_pb2.VoteExtension | None:
    """Strict decode (canonical bytes, no unknown fields); None if malformed."""
    try:
        ext = vote_extension_pb2.VoteExtension.FromString(raw)
    except DecodeError:
        return None
    if len(UnknownFieldSet(ext)) or encode_msg(ext) != raw:
        return None
    return ext


def enabled(store: KVReader, height: int) -> bool:
    h = settlement.vote_extensions_height(store)
    return h > 0 and height >= h


# ------------------------------------------------------------------------------ votes


def extend_vote(store: KVReader, height: int, chain_id: str, keys: ExtensionKeys) -> bytes:
    ext = vote_extension_pb2.VoteExtension()
    cp = settlement.pending_checkpoint(store)
    if keys.settlement is not None and cp is not None:
        me = evm.address_of_private_key(keys.settlement)
        if any(s.evm_address == me for s in cp.signers.signers):
            ext.settlement.number = cp.number
            ext.settlement.signature = evm.sign_digest(
                keys.settlement, settlement.digest_of(store, chain_id, cp)
            )
    if keys.consensus is not None:
        ext.beacon = beacon.prove(keys.consensus, beacon.alpha(chain_id, height))
    return encode_msg(ext)


def beacon_share(
    store: KVReader,
    chain_id: str,
    validator: bytes,
    height: int,
    ext: vote_extension_pb2.VoteExtension,
) -> bytes | None:
    """The output of the extension's beacon share, if it is the validator's VRF proof for
    (chain id, height) under its consensus key; else None."""
    val = staking.get_validator(store, validator)
    if val is None:
        return None
    return beacon.verify(val.pub_key, beacon.alpha(chain_id, height), ext.beacon)


def check_parts(
    store: KVReader,
    chain_id: str,
    validator: bytes,
    height: int,
    ext: vote_extension_pb2.VoteExtension,
    *,
    pending_only: bool,
) -> str | None:
    """``height``: the height the vote was cast at."""
    if beacon_share(store, chain_id, validator, height, ext) is None:
        return f"vote extension of {validator.hex()} lacks a valid beacon share for height {height}"
    if ext.HasField("settlement"):
        return settlement.check_vote(
            store, chain_id, validator, ext.settlement, pending_only=pending_only
        )
    return None


def verify_vote_extension(
    store: KVReader, validator: bytes, height: int, chain_id: str, raw: bytes
) -> bool:
    if not enabled(store, height):
        return raw == b""
    ext = decode_extension(raw)
    return (
        ext is not None
        and check_parts(store, chain_id, validator, height, ext, pending_only=True) is None
    )


# ------------------------------------------------------------------------------ proposals


def needed(store: KVReader, height: int) -> bool:
    """Must the block at ``height`` carry the last commit's extensions? Always once the last
    commit had them (the beacon), and settlement's rule besides."""
    return enabled(store, height - 1) or settlement.needs_signatures(store, height)


def inject(store: KVReader, last_commit: abci.ExtendedCommitInfo, height: int) -> bytes | None:
    """The proposer's injected tx (or None when no module needs one)."""
    if not enabled(store, height - 1):
        return None
    votes = [v for v in last_commit.votes if v.block_id_flag == BLOCK_ID_FLAG_COMMIT]
    if not needed(store, height) and not any(v.vote_extension for v in votes):
        return None
    return INJECTED_PREFIX + encode_msg(
        abci.ExtendedCommitInfo(round=last_commit.round, votes=votes)
    )


def extension_sign_bytes(extension: bytes, height: int, round_: int, chain_id: str) -> bytes:
    """CometBFT's VoteExtensionSignBytes: length-delimited CanonicalVoteExtension."""
    m = canonical_pb2.CanonicalVoteExtension(
        extension=extension, height=height, round=round_, chain_id=chain_id
    )
    b = m.SerializeToString(deterministic=True)
    return encode_uvarint(len(b)) + b


def _decode_injected(raw: bytes) -> abci.ExtendedCommitInfo | None:
    body = raw[len(INJECTED_PREFIX) :]
    try:
        info = abci.ExtendedCommitInfo.FromString(body)
    except DecodeError:
        return None
    if len(UnknownFieldSet(info)) or encode_msg(info) != body:
        return None
    return info


def check_proposal(
    store: KVReader,
    proposed_last_commit: abci.CommitInfo,
    txs: list[bytes],
    height: int,
    chain_id: str,
) -> tuple[str | None, list[bytes]]:
    """(why the proposal's vote extensions are unacceptable or None, the other txs)."""
    has = bool(txs) and txs[0].startswith(INJECTED_PREFIX)
    rest = txs[1:] if has else txs
    if any(t.startswith(INJECTED_PREFIX) for t in rest):
        return "injected vote extensions anywhere but first", rest
    if not has:
        return (
            "the block lacks the last commit's vote extensions" if needed(store, height) else None
        ), rest
    if not enabled(store, height - 1):
        return "vote extensions before they are enabled", rest
    info = _decode_injected(txs[0])
    if info is None:
        return "malformed injected vote extensions", rest
    if info.round != proposed_last_commit.round:
        return "injected votes are from another round", rest
    commit = {v.validator.address: v for v in proposed_last_commit.votes}
    total = sum(v.validator.power for v in proposed_last_commit.votes)
    seen: set[bytes] = set()
    power = 0
    for v in info.votes:
        addr = v.validator.address
        c = commit.get(addr)
        if (
            c is None
            or c.block_id_flag != BLOCK_ID_FLAG_COMMIT
            or v.block_id_flag != BLOCK_ID_FLAG_COMMIT
        ):
            return f"vote of {addr.hex()} is not in the last commit", rest
        if addr in seen or v.validator.power != c.validator.power:
            return f"vote of {addr.hex()} duplicated or with another power", rest
        seen.add(addr)
        val = staking.get_validator(store, addr)
        if val is None:
            return f"unknown validator {addr.hex()}", rest
        try:
            VerifyKey(val.pub_key).verify(
                extension_sign_bytes(v.vote_extension, height - 1, info.round, chain_id),
                v.extension_signature,
            )
        except (BadSignatureError, CryptoError, ValueError, TypeError):
            return f"bad extension signature of {addr.hex()}", rest
        ext = decode_extension(v.vote_extension)
        if ext is None:
            return f"malformed vote extension of {addr.hex()}", rest
        why = check_parts(store, chain_id, addr, height - 1, ext, pending_only=False)
        if why is not None:
            return why, rest
        power += c.validator.power
    if power * 3 <= total * 2:
        return f"vote extensions carry {power} of {total} power, not more than 2/3", rest
    return None, rest


# ------------------------------------------------------------------------------ execution


def block_beacon(votes: tuple[tuple[bytes, vote_extension_pb2.VoteExtension], ...]) -> bytes:
    """The block's beacon from its injected votes (``split_block``): sha256 over the shares'
    VRF outputs sorted by validator address (abci_app.beacon.block_beacon); b"" without votes.
    ProcessProposal verified every share, so the output is read without re-verifying."""
    return beacon.block_beacon(
        [(a, beacon.output(e.beacon)) for a, e in votes if len(e.beacon) == beacon.PROOF_BYTES]
    )


def split_block(
    txs: list[bytes],
) -> tuple[tuple[tuple[bytes, vote_extension_pb2.VoteExtension], ...], int]:
    """(validator address, extension) of the injected votes, and how many leading txs were
    injected (0 or 1). Malformed parts are skipped: ProcessProposal refused them already."""
    if not txs or not txs[0].startswith(INJECTED_PREFIX):
        return (), 0
    info = _decode_injected(txs[0])
    out: list[tuple[bytes, vote_extension_pb2.VoteExtension]] = []
    for v in info.votes if info is not None else []:
        ext = decode_extension(v.vote_extension)
        if ext is not None:
            out.append((v.validator.address, ext))
    return tuple(sorted(out, key=lambda p: p[0])), 1
