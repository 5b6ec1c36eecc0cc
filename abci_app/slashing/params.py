"""Slashing params, set in genesis (``app_state.slashing.params``), queryable at ``/params``."""

from __future__ import annotations

from typing import Any

from loconet.slashing.v1 import slashing_pb2

from abci_app.encoding import decode_msg, encode_msg
from abci_app.pb import abci  # noqa: F401  (puts the generated stubs on sys.path)
from abci_app.slashing.keys import SLASHING_PARAMS_KEY
from abci_app.store import CacheKV, KVReader

__all__ = [
    "DEFAULTS",
    "SLASHING_PARAMS_KEY",
    "get_params",
    "params_from_json",
    "params_to_json",
    "set_params",
    "slashing_pb2",
]

# Cosmos SDK defaults where they exist (ANCHORS): window 100, min signed 50 %, downtime 1 %,
# double sign 5 %. Lengths are in blocks (this chain has no wall clock).
DEFAULTS: dict[str, int] = {
    "signed_blocks_window": 100,
    "min_signed_per_window_bps": 5_000,
    "slash_fraction_downtime_bps": 100,
    "downtime_jail_blocks": 100,
    "slash_fraction_double_sign_bps": 500,
    # evidence older than this is ignored; must not exceed staking.unbonding_blocks, or a validator
    # could unbond everything before its double sign is judged (checked at genesis)
    "max_evidence_age_blocks": 100,
}


def params_from_json(raw: dict[str, Any]) -> Any:
    unknown = sorted(set(raw) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"slashing.params: unknown keys {unknown}; known: {sorted(DEFAULTS)}")
    values: dict[str, int] = {}
    for k, default in DEFAULTS.items():
        v = raw.get(k, default)
        if isinstance(v, bool) or not isinstance(v, (int, str)) or not str(v).isdigit():
            raise ValueError(f"slashing.params.{k}: a non-negative integer, got {v!r}")
        values[k] = int(v)
    if values["signed_blocks_window"] == 0:
        raise ValueError("slashing.params.signed_blocks_window must be positive")
    for k in (
        "min_signed_per_window_bps",
        "slash_fraction_downtime_bps",
        "slash_fraction_double_sign_bps",
    ):
        if values[k] > 10_000:
            raise ValueError(f"slashing.params.{k} is in basis points: at most 10000")
    return slashing_pb2.Params(**values)


def params_to_json(p: Any) -> dict[str, int]:
    return {k: int(getattr(p, k)) for k in DEFAULTS}


def get_params(store: KVReader) -> Any:
    raw = store.get(SLASHING_PARAMS_KEY)
    if raw is None:
        return slashing_pb2.Params(**DEFAULTS)
    return decode_msg(slashing_pb2.Params, raw)


def set_params(store: CacheKV, p: Any) -> None:
    store.set(SLASHING_PARAMS_KEY, encode_msg(p))
