"""Staking params: stored under ``PARAMS_KEY``, set in genesis (``app_state.staking.params``)."""

from __future__ import annotations

from typing import Any

from abci_app.encoding import decode_msg, encode_msg
from abci_app.pb import staking_pb2
from abci_app.staking.keys import PARAMS_KEY
from abci_app.store import CacheKV, KVReader

# Defaults when genesis names no value. block_reward is 0 here (no inflation unless the
# genesis asks for it); `loconet init` and `loconet testnet up` write 1 LOCO per block.
DEFAULTS: dict[str, int] = {
    "power_reduction": 1_000_000,  # 1 LOCO of stake = 1 unit of voting power
    "min_self_bond": 1_000_000,  # 1 LOCO
    "unbonding_blocks": 100,
    "max_validators": 100,
    "block_reward": 0,
    "max_unbonding_entries": 7,  # Cosmos SDK default
}


def params_from_json(raw: dict[str, Any]) -> staking_pb2.Params:
    unknown = sorted(set(raw) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"staking.params: unknown keys {unknown}; known: {sorted(DEFAULTS)}")
    values: dict[str, int] = {}
    for k, default in DEFAULTS.items():
        v = raw.get(k, default)
        if isinstance(v, bool) or not isinstance(v, (int, str)) or not str(v).isdigit():
            raise ValueError(f"staking.params.{k}: a non-negative integer, got {v!r}")
        values[k] = int(v)
    if values["power_reduction"] == 0:
        raise ValueError("staking.params.power_reduction must be positive")
    if values["max_validators"] == 0 or values["max_unbonding_entries"] == 0:
        raise ValueError("staking.params.max_validators and max_unbonding_entries must be positive")
    return staking_pb2.Params(**values)


def params_to_json(p: staking_pb2.Params) -> dict[str, int]:
    return {k: int(getattr(p, k)) for k in DEFAULTS}


def get_params(store: KVReader) -> staking_pb2.Params:
    raw = store.get(PARAMS_KEY)
    if raw is None:
        return staking_pb2.Params(**DEFAULTS)
    return decode_msg(staking_pb2.Params, raw)


def set_params(store: CacheKV, p: staking_pb2.Params) -> None:
    store.set(PARAMS_KEY, encode_msg(p))
