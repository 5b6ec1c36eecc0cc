"""Staking genesis (``app_state["staking"]``)::

    {"params": {"power_reduction": "1000000", "min_self_bond": "1000000", "unbonding_blocks": "100",
                "max_validators": "100", "block_reward": "1000000", "max_unbonding_entries": "7"},
     "validators": [{"pub_key": "<base64 ed25519>", "operator": "loco1...", "moniker": "node0",
                     "self_bond": "100000000000"}]}

Each validator's ``self_bond`` is moved from the operator's genesis balance (bank genesis runs
first) into the bonded pool; the validator set CometBFT starts with is the one computed from
these bonds and returned by InitChain (``RequestInitChain.validators`` is ignored then).

Compatibility: an entry without ``self_bond`` (the foundation's format) takes its stake from
the power CometBFT's genesis gives that key: ``power × power_reduction`` is minted to the
operator at genesis and bonded, so power still follows bonded stake.
"""

from __future__ import annotations

import base64
from typing import Any

from abci_app.bank import keeper as bank
from abci_app.bank.genesis import parse_amount
from abci_app.codec.address import address_from_pubkey, from_bech32
from abci_app.pb import abci, staking_pb2
from abci_app.staking import keeper
from abci_app.staking.errors import ErrInvalidMoniker
from abci_app.staking.msgs import validate_moniker
from abci_app.staking.params import params_from_json, set_params
from abci_app.store import CacheKV


def init_genesis(
    store: CacheKV, state: dict[str, Any], req: abci.RequestInitChain
) -> list[abci.ValidatorUpdate]:
    params = params_from_json(state.get("params", {}))
    set_params(store, params)
    comet_power = {gv.pub_key.ed25519: gv.power for gv in req.validators}
    for i, entry in enumerate(state.get("validators", [])):
        where = f"staking.validators[{i}]"
        pk = base64.b64decode(entry["pub_key"], validate=True)
        if len(pk) != 32:
            raise ValueError(f"{where}: pub_key must be a base64 32-byte ed25519 key")
        operator = from_bech32(entry["operator"])
        cons = address_from_pubkey(pk)
        if keeper.get_validator(store, cons) is not None:
            raise ValueError(f"{where}: duplicate validator key")
        if "self_bond" in entry:
            self_bond = parse_amount(entry["self_bond"], f"{where}.self_bond")
        else:  # foundation format: stake from CometBFT's genesis power, minted here
            if pk not in comet_power:
                raise ValueError(
                    f"{where}: no self_bond and not among CometBFT's genesis validators"
                )
            self_bond = comet_power[pk] * params.power_reduction
            bank.mint(store, operator, self_bond)
        if self_bond < params.min_self_bond:
            raise ValueError(
                f"{where}: self_bond {self_bond} is below min_self_bond {params.min_self_bond}"
            )
        if bank.get_balance(store, operator) < self_bond:
            raise ValueError(
                f"{where}: operator {entry['operator']} has "
                f"{bank.get_balance(store, operator)}uloco in bank genesis, cannot self-bond "
                f"{self_bond}"
            )
        moniker = entry.get("moniker", "")
        try:  # MsgCreateValidator's rule: a number was stored as its str(), a control char kept
            if not isinstance(moniker, str):
                raise ErrInvalidMoniker(f"moniker must be a string, got {moniker!r}"[:200])
            if moniker:  # an unnamed genesis validator is allowed
                validate_moniker(moniker)
        except ErrInvalidMoniker as e:
            raise ValueError(f"{where}: {e}") from None
        keeper.set_validator(
            store,
            cons,
            staking_pb2.Validator(pub_key=pk, operator=operator, moniker=moniker),
        )
        keeper.increase_bond(store, cons, operator, self_bond)
    updates = keeper.apply_validator_set(store)
    if not updates:
        raise ValueError(
            "staking genesis bonds no validator with power > 0: the chain could not start"
        )
    return updates
