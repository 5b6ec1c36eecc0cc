"""settlement genesis: ``{"params": {...}, "keys": [{"validator": HEX, "evm_address": "0x.."}]}``
(params.DEFAULTS; keys of genesis validators, trusted as the genesis is; later ones come by
MsgSetSettlementKey with a proof of possession). The vote-extension enable height comes from
the genesis consensus params (InitChain).

With ``require_settlement_key`` (the default whenever the genesis has a settlement section),
every genesis validator with power must have its key here: staking's genesis ran first and
handed CometBFT its set, so a keyless one in it is refused rather than silently let in. A
genesis without a settlement section (or an empty one) stores ``require_settlement_key = 0``:
the chain runs without settlement, and its set needs no key."""

from __future__ import annotations

from typing import Any

from abci_app.pb import abci
from abci_app.settlement import evm
from abci_app.settlement.expected_keepers import StakingKeeper
from abci_app.settlement.keeper import (
    get_key_owner,
    get_settlement_key,
    set_settlement_key,
    set_vote_extensions_height,
)
from abci_app.settlement.params import params_from_json, set_params
from abci_app.store import CacheKV


def init_genesis(
    store: CacheKV, state: dict[str, Any], req: abci.RequestInitChain, staking: StakingKeeper
) -> None:
    unknown = set(state) - {"params", "keys"}
    if unknown:
        raise ValueError(f"settlement genesis: unknown keys {sorted(unknown)}")
    params = params_from_json(state.get("params", {}) if state else {"require_settlement_key": 0})
    set_params(store, params)
    for i, k in enumerate(state.get("keys", [])):
        try:
            validator, addr = bytes.fromhex(k["validator"]), evm.parse_address(k["evm_address"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(
                f"settlement.keys[{i}]: want {{'validator': HEX, 'evm_address': '0x..'}} ({e})"
            ) from None
        if staking.get_validator(store, validator) is None:
            raise ValueError(f"settlement.keys[{i}]: no genesis validator {k['validator']}")
        if addr == bytes(20) or get_key_owner(store, addr) is not None:
            raise ValueError(
                f"settlement.keys[{i}]: EVM address {k['evm_address']} is zero or already used"
            )
        set_settlement_key(store, validator, addr)
    if params.require_settlement_key:
        keyless = [
            cons.hex().upper()
            for cons, v in staking.iterate_validators(store)
            if v.power > 0 and get_settlement_key(store, cons) is None
        ]
        if keyless:
            raise ValueError(
                f"settlement.keys: genesis validators {keyless} have power but no settlement key "
                "(require_settlement_key is 1: give each its key, as `loconet init` does)"
            )
    h = (
        req.consensus_params.abci.vote_extensions_enable_height
        if req.HasField("consensus_params")
        else 0
    )
    set_vote_extensions_height(store, max(0, h))
