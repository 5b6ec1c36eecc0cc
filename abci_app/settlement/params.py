"""settlement params (genesis ``settlement.params``; query ``/settlement``)."""

from __future__ import annotations

from typing import Any

from abci_app.encoding import decode_msg, encode_msg
from abci_app.pb import settlement_pb2
from abci_app.settlement.keys import PARAMS_KEY
from abci_app.store import CacheKV, KVReader

DEFAULTS: dict[str, int] = {
    "checkpoint_interval": 100,  # blocks between checkpoints (~1 min at 0.55 s blocks)
}


def params_from_json(d: dict[str, Any]) -> settlement_pb2.Params:
    unknown = set(d) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"settlement.params: unknown keys {sorted(unknown)}")
    vals: dict[str, int] = {}
    for k, default in DEFAULTS.items():
        v = d.get(k, default)
        if isinstance(v, bool) or not isinstance(v, (int, str)) or not str(v).isdigit():
            raise ValueError(f"settlement.params.{k}: must be a non-negative integer, got {v!r}")
        vals[k] = int(v)
    p = settlement_pb2.Params(**vals)
    if p.checkpoint_interval < 2:
        raise ValueError(
            "settlement.params.checkpoint_interval must be >= 2 (a checkpoint is signed the "
            "block after it is made)"
        )
    return p


def params_to_json(p: settlement_pb2.Params) -> dict[str, int]:
    return {k: int(getattr(p, k)) for k in DEFAULTS}


def get_params(store: KVReader) -> settlement_pb2.Params:
    raw = store.get(PARAMS_KEY)
    if raw is None:
        return params_from_json({})
    return decode_msg(settlement_pb2.Params, raw)


def set_params(store: CacheKV, p: settlement_pb2.Params) -> None:
    store.set(PARAMS_KEY, encode_msg(p))
