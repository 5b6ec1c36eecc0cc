"""settlement queries: ``/checkpoint/{n|latest|pending}``, ``/claim/{0x evm address}``,
``/settlement`` (params, current signer set, settlement keys).

JSON: bytes in lower-case hex (EVM addresses with 0x), amounts integers (uloco)."""

from __future__ import annotations

from typing import Any

from abci_app.pb import settlement_pb2
from abci_app.querying import QueryError, parse_u64, to_json
from abci_app.settlement import evm, keeper
from abci_app.settlement.expected_keepers import StakingKeeper
from abci_app.settlement.keys import (
    LATEST_CHECKPOINT_KEY,
    PARAMS_KEY,
    SIGNER_SET_KEY,
    checkpoint_key,
    claim_key,
)
from abci_app.settlement.params import get_params, params_to_json
from abci_app.store import KVReader


def set_to_json(s: settlement_pb2.SignerSet) -> list[dict[str, Any]]:
    return [
        {
            "evm_address": "0x" + x.evm_address.hex(),
            "power": x.power,
            "validator": x.validator.hex().upper(),
        }
        for x in s.signers
    ]


def checkpoint_to_json(cp: settlement_pb2.Checkpoint) -> dict[str, Any]:
    return {
        "number": cp.number,
        "height": cp.height,
        "app_hash": cp.app_hash.hex(),
        "rewards_root": cp.rewards_root.hex(),
        "set_hash": cp.set_hash.hex(),
        "next_set_hash": cp.next_set_hash.hex(),
        "signers": set_to_json(cp.signers),
        "next_set": set_to_json(cp.next_set),
        "keyless_power": cp.signers.keyless_power,
        "next_keyless_power": cp.next_set.keyless_power,
        "signatures": [
            {"evm_address": "0x" + s.evm_address.hex(), "signature": s.signature.hex()}
            for s in cp.signatures
        ],
        "signed_power": cp.signed_power,
        "total_power": cp.total_power,
        "created_height": cp.created_height,
        "final_height": cp.final_height,
        "final": cp.final_height != 0,
        "valset_update": cp.valset_update,
        "superseded_by": cp.superseded_by,
    }


def query_checkpoint(
    reader: KVReader, args: list[str], params: dict[str, str]
) -> tuple[bytes, list[bytes]]:
    """/checkpoint/{n} | /checkpoint/latest (newest final) | /checkpoint/pending"""
    if len(args) != 1:
        raise QueryError("usage: /checkpoint/{number} | /checkpoint/latest | /checkpoint/pending")
    if args[0] == "latest":
        cp = keeper.latest_final(reader)
        if cp is None:
            raise QueryError("no final checkpoint yet")
    elif args[0] == "pending":
        cp = keeper.pending_checkpoint(reader)
        if cp is None:
            raise QueryError("no checkpoint is pending")
    elif args[0][:1].isdigit():
        cp = keeper.get_checkpoint(reader, parse_u64(args[0], "checkpoint number"))
        if cp is None:
            raise QueryError(
                f"checkpoint {args[0]} not found (latest is {keeper.latest_number(reader)})"
            )
    else:
        raise QueryError(f"checkpoint must be a number, 'latest' or 'pending'; got {args[0]!r}")
    return to_json(checkpoint_to_json(cp)), [checkpoint_key(cp.number), LATEST_CHECKPOINT_KEY]


def query_claim(
    reader: KVReader, args: list[str], params: dict[str, str]
) -> tuple[bytes, list[bytes]]:
    """/claim/{0x...} -> the address's cumulative withdrawals at this height and its Merkle proof
    against the rewards root of this height's state (query at a checkpoint's height to get the
    proof its rewards_root verifies). O(log n) reads: the tree is kept in the state."""
    if len(args) != 1:
        raise QueryError("usage: /claim/{0x evm address}")
    try:
        addr = evm.parse_address(args[0])
    except ValueError as e:
        raise QueryError(str(e)) from None
    index = keeper.get_leaf_index(reader, addr)
    if index is None:
        raise QueryError(
            f"nothing was withdrawn to {args[0]}: `loconet tx settlement withdraw` first"
        )
    cumulative = keeper.get_cumulative(reader, addr)
    out = {
        "evm_address": "0x" + addr.hex(),
        "cumulative": cumulative,
        "leaf": evm.claim_leaf(addr, cumulative).hex(),
        "leaf_index": index,
        "proof": [p.hex() for p in keeper.get_claim_proof(reader, index)],
        "rewards_root": keeper.get_rewards_root(reader).hex(),
    }
    return to_json(out), [claim_key(addr)]


def query_settlement(
    reader: KVReader, args: list[str], params: dict[str, str], staking: StakingKeeper | None = None
) -> tuple[bytes, list[bytes]]:
    """/settlement -> {"params", "signer_set" (signs the next checkpoint; before the first
    checkpoint, the set it would have now), "signer_set_hash", "keys", "latest", "latest_final"}"""
    if args:
        raise QueryError("usage: /settlement")
    signers = keeper.get_signer_set(reader)
    if signers is None and staking is not None:
        signers = keeper.compute_signer_set(reader, staking)
    final = keeper.latest_final(reader)
    out = {
        "params": params_to_json(get_params(reader)),
        "signer_set": set_to_json(signers) if signers is not None else None,
        "signer_set_hash": keeper.hash_of(signers).hex() if signers is not None else None,
        "signer_set_keyless_power": signers.keyless_power if signers is not None else 0,
        "latest_final": final.number if final is not None else 0,
        "keys": {
            cons.hex().upper(): "0x" + a.hex() for cons, a in keeper.iterate_settlement_keys(reader)
        },
        "latest": keeper.latest_number(reader),
        "vote_extensions_enable_height": keeper.vote_extensions_height(reader),
    }
    return to_json(out), [PARAMS_KEY, SIGNER_SET_KEY, LATEST_CHECKPOINT_KEY]


QUERIES = {"checkpoint": query_checkpoint, "claim": query_claim, "settlement": query_settlement}
