"""Client-side checking of ``prove=true`` query answers against a block header's app hash.

A query at height H reads the state committed by block H, whose Merkle root CometBFT puts in
the header of block H+1 (``app_hash``). Each ProofOp carries one store key and a proof of its
value (or of its absence); all must verify against that root. The caller then re-derives what
it shows from the proven raw values, not from the JSON the node sent.

The header itself is checked first (``node.client.light``): it must hash to the block id that more
than 2/3 of the validator set's power signed, and that set must hash to the header's
``validators_hash``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from abci_app.auth.keys import account_key
from abci_app.bank.keys import balance_key
from abci_app.encoding import decode_amount, decode_msg
from abci_app.pb import state_pb2
from abci_app.querying import PROOF_TYPE
from abci_app.store import Proof, StoreError, verify_proof
from node.client import config as client_config
from node.client.light import HeaderInvalid, verified_app_hash
from node.client.rpc import Client, QueryResult
from node.client.trust import trust_store

if TYPE_CHECKING:
    from node.client.trust import TrustStore


class ProofInvalid(Exception):
    pass


def verify_query(
    client: Client,
    qr: QueryResult,
    wait: float = 30.0,
    asked: int = 0,
    chain_id: str | None = None,
    trust: TrustStore | None = None,
) -> tuple[bytes, dict[bytes, bytes | None]]:
    """Returns (app hash used, {store key: proven value or None}). Raises ProofInvalid.
    ``asked``: the height the caller queried (0: the latest); an answer for another height is
    refused (the state of another height, proven, read as the asked one's). ``trust``: the
    header's signers are trusted from genesis (``node.client.trust``), not taken from the node."""
    if asked and qr.height != asked:
        raise ProofInvalid(f"asked for height {asked}, the node answered for height {qr.height}")
    if not qr.proof_ops:
        raise ProofInvalid("the node returned no proof")
    client.wait_for_height(qr.height + 1, timeout=wait)
    try:
        root = verified_app_hash(client, qr.height + 1, chain_id=chain_id, trust=trust)
    except HeaderInvalid as e:
        raise ProofInvalid(f"header check failed: {e}") from None
    return root, verify_ops(qr, root)


def verify_answer(
    client: Client,
    qr: QueryResult,
    answer: Any,
    rederive: Callable[[dict[bytes, bytes | None]], Any],
    asked: int = 0,
    chain_id: str | None = None,
    trust: TrustStore | None = None,
) -> bytes:
    """``verify_query``, then the answer the node sent must be what ``rederive`` makes of the
    proven values: the one check every ``--prove`` caller (queries, ``evm deploy``) runs.
    Returns the app hash used. Raises ProofInvalid."""
    root, proven = verify_query(client, qr, asked=asked, chain_id=chain_id, trust=trust)
    if rederive(proven) != answer:
        raise ProofInvalid("the node's answer disagrees with its own proof")
    return root


def verify_ops(qr: QueryResult, root: bytes) -> dict[bytes, bytes | None]:
    """Every ProofOp of ``qr`` against an app hash the caller already checked (``verify_query``
    does the header check first; the explorer checks one header per height and many queries).
    Returns {store key: proven value or None}. Raises ProofInvalid."""
    if not qr.proof_ops:
        raise ProofInvalid("the node returned no proof")
    proven: dict[bytes, bytes | None] = {}
    for op in qr.proof_ops:
        if op["type"] != PROOF_TYPE:
            raise ProofInvalid(f"unknown proof type {op['type']!r}")
        try:
            proof = Proof.from_bytes(op["data"])
        except StoreError as e:
            raise ProofInvalid(f"malformed proof: {e}") from None
        if proof.key != op["key"] or not verify_proof(proof, root, op["key"], proof.value):
            raise ProofInvalid(
                f"proof for key {op['key'].hex()} does not verify against app hash {root.hex()}"
            )
        proven[op["key"]] = proof.value
    return proven


def proven_record(proven: dict[bytes, bytes | None], key: bytes) -> bytes | None:
    """The proven value of ``key`` (None: proven absent), when the proof covers exactly that key.
    Each op verifying against the app hash is not enough: a true proof of *another* key (provider
    A's SLA shown as B's, an absence proof of some unrelated key hiding B's record) verified too."""
    if set(proven) != {key}:
        raise ProofInvalid(
            f"the proof covers {len(proven)} key(s), not exactly the record asked for "
            f"({key.hex()[:24]}...)"
        )
    return proven[key]


def proven_records(
    proven: dict[bytes, bytes | None],
    decode: Callable[[bytes], Any],
    key_of: Callable[[Any], bytes],
) -> list[Any]:
    """The records of a proven list answer, in key order: every key present, and each record
    stored under the key its own id makes (``key_of``): a record of another module or another
    job, proven under its own key, is refused (protobuf parses most bytes as most messages)."""
    out = []
    for k, raw in sorted(proven.items()):
        if raw is None:
            raise ProofInvalid(f"a list answer proves key {k.hex()[:24]}... absent")
        try:
            rec = decode(raw)
        except Exception:  # noqa: BLE001 (a value that is not this record: refused, named)
            raise ProofInvalid(f"the value under key {k.hex()[:24]}... is not a record") from None
        if key_of(rec) != k:
            raise ProofInvalid(
                f"the record proven under key {k.hex()[:24]}... is not stored where its id says"
            )
        out.append(rec)
    return out


def verified_account(
    client: Client,
    qr: QueryResult,
    address: bytes,
    asked: int = 0,
    chain_id: str | None = None,
    trust: TrustStore | None = None,
) -> dict[str, Any]:
    """Balance and sequence re-derived from the proven store values."""
    root, proven = verify_query(client, qr, asked=asked, chain_id=chain_id, trust=trust)
    bk, ak = balance_key(address), account_key(address)
    if bk not in proven or ak not in proven:
        raise ProofInvalid("proof does not cover the account's balance and sequence keys")
    raw_acc = proven[ak]
    seq = decode_msg(state_pb2.Account, raw_acc).sequence if raw_acc else 0
    proof_json = [
        {
            "type": PROOF_TYPE,
            "key": base64.b64encode(op["key"]).decode(),
            "data": base64.b64encode(op["data"]).decode(),
        }
        for op in qr.proof_ops
    ]
    return {
        "balance": decode_amount(proven[bk]),
        "sequence": seq,
        "app_hash": root.hex().upper(),
        "proof": proof_json,
    }


def expected_chain_id(home: str | None) -> str | None:
    """The chain id a ``--prove`` header must name: the client config's in ``home``, else the
    chain id of the node home's genesis (``HOME/config/genesis.json``); None when neither says."""
    if not home:
        return None

    try:
        named = client_config.load(home).get("chain-id")
        if named:
            return named
        genesis = json.loads((Path(home) / "config" / "genesis.json").read_text())
        cid = genesis.get("chain_id") if isinstance(genesis, dict) else None
        return cid if isinstance(cid, str) and cid else None
    except Exception:  # noqa: BLE001 (no readable config or genesis: nothing pinned, as before)
        return None


def trust_of(home: str | None) -> TrustStore | None:
    """The genesis trust of ``--home`` when it is a node home (``node.client.trust``), else None
    (the node's own validator set is checked, as before). Raises ProofInvalid for a genesis whose
    validator set cannot be computed."""

    try:
        return trust_store(home)
    except HeaderInvalid as e:
        raise ProofInvalid(str(e)) from None
