"""Staking queries: ``/validators``, ``/validator/{HEX consensus address}`` (``/params`` spans
staking and slashing: abci_app/modules.py)."""

from __future__ import annotations

import base64
from typing import Any

from abci_app.codec.address import to_bech32
from abci_app.pb import staking_pb2
from abci_app.querying import QueryError, to_json
from abci_app.staking import keeper
from abci_app.staking.keys import bond_key, validator_key
from abci_app.store import KVReader


def validator_json(cons: bytes, v: staking_pb2.Validator, self_bond: int) -> dict[str, Any]:
    return {
        "address": cons.hex().upper(),
        "pub_key": base64.b64encode(v.pub_key).decode(),
        "operator": to_bech32(v.operator),
        "moniker": v.moniker,
        "power": v.power,
        "tokens": v.tokens,
        "self_bond": self_bond,
        "jailed": v.jailed,
        "jailed_until": v.jailed_until,
        "tombstoned": v.tombstoned,
        "slashed": v.slashed,
        "created_height": v.created_height,
        "status": "tombstoned"
        if v.tombstoned
        else "jailed"
        if v.jailed
        else "active"
        if v.power > 0
        else "inactive",
    }


def query_validators(
    reader: KVReader, args: list[str], params: dict[str, str]
) -> tuple[bytes, list[bytes]]:
    """/validators -> every validator (active, jailed, out of the set), address order."""
    if args:  # /validators/<hex> is a typo of /validator/<hex>, not a request for the list
        raise QueryError("usage: /validators (one validator: /validator/{consensus address})")
    out, keys = [], []
    for cons, v in keeper.iterate_validators(reader):
        out.append(validator_json(cons, v, keeper.get_bond(reader, cons, v.operator)))
        keys.append(validator_key(cons))
    return to_json(out), keys


def query_validator(
    reader: KVReader, args: list[str], params: dict[str, str]
) -> tuple[bytes, list[bytes]]:
    """/validator/{40 hex chars} -> the validator, its bonds and unbonding entries."""
    if len(args) != 1:
        raise QueryError("usage: /validator/{consensus address, 40 hex characters}")
    try:
        cons = bytes.fromhex(args[0])
    except ValueError:
        raise QueryError(f"{args[0]!r} is not a hex consensus address") from None
    if len(cons) != 20:
        raise QueryError("a consensus address is 20 bytes (40 hex characters)")
    v = keeper.get_validator(reader, cons)
    if v is None:
        raise QueryError(f"no validator {cons.hex().upper()}")
    data = validator_json(cons, v, keeper.get_bond(reader, cons, v.operator))
    data["bonds"] = [
        {"delegator": to_bech32(d), "amount": a} for d, a in keeper.iterate_bonds(reader, cons)
    ]
    data["unbonding"] = [
        {
            "delegator": to_bech32(e.delegator),
            "amount": e.amount,
            "initial_amount": e.initial_amount,
            "creation_height": e.creation_height,
            "completion_height": e.completion_height,
        }
        for e in keeper.iterate_unbondings(reader, cons)
    ]
    return to_json(data), [validator_key(cons), bond_key(cons, v.operator)]


QUERIES = {"validators": query_validators, "validator": query_validator}
