"""``abci_query`` paths (DESIGN §3.5). Each returns a JSON value for people and clients, and the
state keys that value was read from: with ``prove=true`` the response carries one Merkle proof
per key (ProofOp type ``loconet:smt``), and the client re-derives the JSON from the proven raw
values (``node.proofs``), so nothing in the JSON is taken on trust.

| path | value |
|---|---|
| `/account/{loco1...}` | `{"address", "balance", "sequence"}` |
| `/validators` | `[{"address", "pub_key", "operator", "power", "moniker"}]` |
| `/supply` | `{"supply"}` |
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

from abci_app.auth.keeper import get_account
from abci_app.auth.keys import account_key
from abci_app.bank import keeper as bank
from abci_app.bank.keys import SUPPLY_KEY, balance_key
from abci_app.codec.address import from_bech32, to_bech32
from abci_app.staking import keeper as staking
from abci_app.staking.keys import validator_key
from abci_app.store import KVReader

PROOF_TYPE = "loconet:smt"


class QueryError(Exception):
    code = 1


def _json(v: Any) -> bytes:
    return json.dumps(v, sort_keys=True, separators=(",", ":")).encode()


def account_json(reader: KVReader, addr: bytes) -> dict[str, Any]:
    acc = get_account(reader, addr)
    return {"address": to_bech32(addr), "balance": bank.get_balance(reader, addr), "sequence": acc.sequence}


def _account(reader: KVReader, args: list[str], data: bytes) -> tuple[bytes, list[bytes]]:
    if len(args) != 1:
        raise QueryError("usage: /account/{loco1...}")
    addr = from_bech32(args[0])
    return _json(account_json(reader, addr)), [balance_key(addr), account_key(addr)]


def _validators(reader: KVReader, args: list[str], data: bytes) -> tuple[bytes, list[bytes]]:
    out, keys = [], []
    for cons, v in staking.iterate_validators(reader):
        out.append(
            {
                "address": cons.hex().upper(),
                "pub_key": base64.b64encode(v.pub_key).decode(),
                "operator": to_bech32(v.operator),
                "power": v.power,
                "moniker": v.moniker,
            }
        )
        keys.append(validator_key(cons))
    return _json(out), keys


def _supply(reader: KVReader, args: list[str], data: bytes) -> tuple[bytes, list[bytes]]:
    return _json({"supply": bank.get_supply(reader)}), [SUPPLY_KEY]


ROUTES: dict[str, Callable[[KVReader, list[str], bytes], tuple[bytes, list[bytes]]]] = {
    "account": _account,
    "validators": _validators,
    "supply": _supply,
}


def route(reader: KVReader, path: str, data: bytes) -> tuple[bytes, list[bytes]]:
    parts = [p for p in path.split("?")[0].split("/") if p]
    if not parts or parts[0] not in ROUTES:
        raise QueryError(f"unknown query path {path!r}; known: " + ", ".join(f"/{r}" for r in sorted(ROUTES)))
    return ROUTES[parts[0]](reader, parts[1:], data)
