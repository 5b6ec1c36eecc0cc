"""A member's signature of the pending checkpoint, by transaction (``MsgSignCheckpoint``).

Validators sign checkpoints in their vote extensions; a member whose extension did not carry
its signature (its node ran without the settlement key, it was absent at the one height a valset
update is signed, or it has left CometBFT's set since the checkpoint was made) signs with
``loconet tx settlement sign-pending`` instead (``--watch`` keeps doing it). The digest is the
one the chain and the contract compute (``abci_app.settlement.evm.checkpoint_digest``) over the
pending checkpoint the validator's own node reports."""

from __future__ import annotations

from typing import Any

from abci_app.settlement import evm


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
