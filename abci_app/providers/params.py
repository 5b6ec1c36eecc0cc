"""providers params (genesis ``providers.params``; query ``/market_params``)."""

from __future__ import annotations

from typing import Any

from abci_app.encoding import MAX_U64, decode_msg, encode_msg
from abci_app.pb import providers_pb2
from abci_app.providers.keys import PARAMS_KEY
from abci_app.store import CacheKV, KVReader

DEFAULTS: dict[str, int] = {
    "min_provider_stake": 1_000_000_000,  # 1,000 LOCO
    # > jobs.params.ROUND_MAX_WINDOWS (9) x jobs.max_window_blocks (200): an exiting provider stays
    # slashable for every round it is in, the longest (escalated to the final panel) included
    "unbonding_blocks": 2_000,
    "max_hardware_entries": 8,
    # probation (issue 31, 3): a new key starts at the floor no record falls below short of fraud,
    # so a fresh key is never worth more than a damaged record (no whitewashing), and a key's
    # reputation above it was earned by verified, paid work
    "initial_reputation": 2_000,
    "reputation_floor": 2_000,
    # measured speed (README *Measured speed*): a provider no work has measured yet is drawn at
    # min(claimed, this) tokens/s, so a claim above it buys nothing; its own accepted commitments
    # then set the figure, an integer EMA over this many samples
    "unmeasured_throughput_cap": 1_000,
    "throughput_ema_window": 4,
}


def params_from_json(d: dict[str, Any]) -> providers_pb2.ProvidersParams:
    unknown = set(d) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"providers.params: unknown keys {sorted(unknown)}")
    vals: dict[str, int] = {}
    for k, default in DEFAULTS.items():
        v = d.get(k, default)
        if isinstance(v, bool) or not isinstance(v, (int, str)) or not str(v).isdigit():
            raise ValueError(f"providers.params.{k}: must be a non-negative integer, got {v!r}")
        vals[k] = int(v)
        field = providers_pb2.ProvidersParams.DESCRIPTOR.fields_by_name[k]
        top = MAX_U64 if field.type == field.TYPE_UINT64 else (1 << 32) - 1
        if vals[k] > top:
            raise ValueError(f"providers.params.{k}: must be <= {top}, got {vals[k]}")
    p = providers_pb2.ProvidersParams(**vals)
    if p.min_provider_stake == 0:
        raise ValueError("providers.params.min_provider_stake must be > 0")
    if p.initial_reputation > 10_000 or p.initial_reputation == 0:
        raise ValueError("providers.params.initial_reputation must be 1..10000")
    if p.reputation_floor > 10_000:
        raise ValueError("providers.params.reputation_floor must be 0..10000")
    if p.reputation_floor and p.initial_reputation > p.reputation_floor:
        raise ValueError(
            "providers.params.initial_reputation must be <= reputation_floor: a new key would "
            "start above a record it could shed by re-registering (set them equal)"
        )
    if p.unmeasured_throughput_cap == 0:
        raise ValueError("providers.params.unmeasured_throughput_cap must be 1..2^64-1")
    if not 1 <= p.throughput_ema_window <= 1_000:
        raise ValueError("providers.params.throughput_ema_window must be 1..1000")
    if p.max_hardware_entries == 0:
        raise ValueError("providers.params.max_hardware_entries must be > 0")
    return p


def params_to_json(p: providers_pb2.ProvidersParams) -> dict[str, int]:
    return {k: int(getattr(p, k)) for k in DEFAULTS}


def get_params(store: KVReader) -> providers_pb2.ProvidersParams:
    raw = store.get(PARAMS_KEY)
    if raw is None:
        return params_from_json({})
    return decode_msg(providers_pb2.ProvidersParams, raw)


def set_params(store: CacheKV, p: providers_pb2.ProvidersParams) -> None:
    store.set(PARAMS_KEY, encode_msg(p))
