"""settlement genesis: ``{"params": {...}, "keys": [{"validator": HEX, "evm_address": "0x.."}]}``
(params.DEFAULTS; keys of genesis validators, trusted as the genesis is; later ones come by
MsgSetSettlementKey with a proof of possession). The vote-extension enable height comes from
the genesis consensus params (InitChain)."""

from __future__ import annotations

from typing import Any

from abci_app.pb import abci
from abci_app.settlement import evm
from abci_app.settlement.expected_keepers import StakingKeeper
from abci_app.settlement.keeper import get_key_owner, set_settlement_key, set_vote_extensions_height
from abci_app.settlement.params import params_from_json, set_params
from abci_app.store import CacheKV


def init_genesis(
    store: CacheKV, state: dict[str, Any], req: abci.RequestInitChain, staking: StakingKeeper
) -> None:
    unknown = set(state) - {"params", "keys"}
    if unknown:
        raise ValueError(f"settlement genesis: unknown keys {sorted(unknown)}")
    set_params(store, params_from_json(state.get("params", {})))
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
    h = (
        req.consensus_params.abci.vote_extensions_enable_height
        if req.HasField("consensus_params")
        else 0
    )
    set_vote_extensions_height(store, max(0, h))
