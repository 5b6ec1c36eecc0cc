"""Staking queries: ``/validators``, ``/validator/{HEX consensus address}`` (``/params`` spans
staking and slashing: abci_app/modules.py). ``new_queries(keys)`` takes settlement's read-only
key registry, so a validator kept out of the set for want of a settlement key shows status
``awaiting_settlement_key`` (not ``inactive``, which reads as too little stake)."""

from __future__ import annotations

import base64
from functools import partial
from typing import TYPE_CHECKING, Any

from abci_app.codec.address import to_bech32
from abci_app.pb import staking_pb2
from abci_app.querying import QueryError, to_json
from abci_app.staking import keeper
from abci_app.staking.keys import bond_key, validator_key
from abci_app.staking.params import get_params
from abci_app.store import KVReader

if TYPE_CHECKING:
    from abci_app.staking.expected_keepers import SettlementKeys


def is_awaiting_settlement_key(
    reader: KVReader, cons: bytes, v: staking_pb2.Validator, keys: SettlementKeys | None
) -> bool:
    """Out of the set only for want of a settlement key: not jailed, stake for power > 0."""
    if v.jailed or v.tombstoned or v.power > 0:
        return False
    power = keeper.compute_power(v.tokens, get_params(reader).power_reduction)
    return power > 0 and keeper.lacks_settlement_key(reader, cons, keys)


def validator_json(
    cons: bytes, v: staking_pb2.Validator, self_bond: int, awaiting_key: bool = False
) -> dict[str, Any]:
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
        else "awaiting_settlement_key"
        if awaiting_key
        else "inactive",
    }


def query_validators(
    reader: KVReader,
    args: list[str],
    params: dict[str, str],
    settlement: SettlementKeys | None = None,
) -> tuple[bytes, list[bytes]]:
    """/validators -> every validator (active, jailed, out of the set), address order."""
    if args:  # /validators/<hex> is a typo of /validator/<hex>, not a request for the list
        raise QueryError("usage: /validators (one validator: /validator/{consensus address})")
    out, keys = [], []
    for cons, v in keeper.iterate_validators(reader):
        awaiting = is_awaiting_settlement_key(reader, cons, v, settlement)
        out.append(validator_json(cons, v, keeper.get_bond(reader, cons, v.operator), awaiting))
        keys.append(validator_key(cons))
    return to_json(out), keys


def query_validator(
    reader: KVReader,
    args: list[str],
    params: dict[str, str],
    settlement: SettlementKeys | None = None,
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
    awaiting = is_awaiting_settlement_key(reader, cons, v, settlement)
    data = validator_json(cons, v, keeper.get_bond(reader, cons, v.operator), awaiting)
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


def new_queries(keys: SettlementKeys) -> dict[str, Any]:
    """The queries with settlement's key registry (the app's: abci_app/modules.py)."""
    return {
        "validators": partial(query_validators, settlement=keys),
        "validator": partial(query_validator, settlement=keys),
    }
