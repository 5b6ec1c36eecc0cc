"""A member's signature of the pending checkpoint, by transaction (``MsgSignCheckpoint``).

Validators sign checkpoints in their vote extensions; a member whose extension did not carry
its signature (its node ran without the settlement key, it was absent at the one height a valset
update is signed, or it has left CometBFT's set since the checkpoint was made) signs with
``loconet tx settlement sign-pending`` instead (``--watch`` keeps doing it). The digest is the
one the chain and the contract compute (``abci_app.settlement.evm.checkpoint_digest``) over the
pending checkpoint as proven state (``proven_pending``: a proof against a header signed by >2/3
of the validators the validator's own genesis trusts), never the node's unproven JSON."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from abci_app.encoding import decode_amount, decode_msg
from abci_app.errors import InvariantBroken
from abci_app.pb import settlement_pb2
from abci_app.settlement import evm
from abci_app.settlement.keys import LATEST_CHECKPOINT_KEY, PARAMS_KEY, checkpoint_key
from abci_app.settlement.params import params_to_json
from abci_app.settlement.queries import checkpoint_to_json
from node.client.proofs import ProofInvalid, verify_query

if TYPE_CHECKING:
    from node.client.rpc import Client
    from node.client.trust import TrustStore


def owed_signature(
    pending: dict[str, Any], params: dict[str, Any], chain_id: str, secret: bytes
) -> bytes | None:
    """The 65-byte signature the holder of ``secret`` owes ``pending`` (the
    ``/checkpoint/pending`` JSON), or None: not a member, already signed, final or superseded.
    ``params``: ``/settlement``'s params (the deployment the checkpoint names)."""
    if pending.get("final") or pending.get("superseded_by"):
        return None
    me = "0x" + evm.address_of_private_key(secret).hex()
    if me not in {s["evm_address"] for s in pending["signers"]}:
        return None
    if me in {s["evm_address"] for s in pending["signatures"]}:
        return None
    digest = evm.checkpoint_digest(
        chain_id,
        int(params["evm_chain_id"]),
        evm.parse_address(params["evm_contract"]),
        int(pending["number"]),
        int(pending["height"]),
        bytes.fromhex(pending["app_hash"]),
        bytes.fromhex(pending["rewards_root"]),
        bytes.fromhex(pending["next_set_hash"]),
    )
    return evm.sign_digest(secret, digest)


def proven_pending(
    client: Client, chain_id: str | None, trust: TrustStore | None
) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """(the pending checkpoint, the settlement params) as proven state, in the JSON shapes
    ``owed_signature`` takes: each answer's proof must verify against a header signed by >2/3
    of the validators (``trust``: those the validator's own genesis trusts), and both are
    re-derived from the proven records, never taken from the node's JSON. A node that lies can
    then only make the loop sign nothing; before, it could serve a made-up checkpoint naming the
    validator's key and report the signature it got back as a forged checkpoint (slash and
    tombstone). None: no checkpoint is pending. Raises ProofInvalid."""
    qs = client.abci_query("/settlement", prove=True)
    if qs.code != 0:
        raise ProofInvalid(f"query /settlement failed: {qs.log}")
    _, proven = verify_query(client, qs, chain_id=chain_id, trust=trust)
    raw_params = proven.get(PARAMS_KEY)
    if raw_params is None:  # absent or left out: no deployment to sign for
        raise ProofInvalid("the node's proof does not show the settlement params")
    params = params_to_json(decode_msg(settlement_pb2.Params, raw_params))
    qr = client.abci_query("/checkpoint/pending", prove=True)
    if qr.code != 0:
        return None, params  # nothing pending (a lie here only withholds a signature)
    _, proven = verify_query(client, qr, chain_id=chain_id, trust=trust)
    if LATEST_CHECKPOINT_KEY not in proven:
        raise ProofInvalid("the node's proof does not cover the latest checkpoint number")
    try:
        number = decode_amount(proven[LATEST_CHECKPOINT_KEY])
    except InvariantBroken as e:
        raise ProofInvalid(str(e)) from None
    raw = proven.get(checkpoint_key(number)) if number else None
    if raw is None:
        raise ProofInvalid(f"the node's proof does not show checkpoint {number}")
    cp = decode_msg(settlement_pb2.Checkpoint, raw)
    if cp.number != number:
        raise ProofInvalid(f"the record under checkpoint {number} is numbered {cp.number}")
    if cp.final_height or cp.superseded_by:
        return None, params
    return checkpoint_to_json(cp), params
