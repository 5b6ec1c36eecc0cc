"""providers genesis: ``{"params": {...}}`` (see params.DEFAULTS). Providers register by tx."""

from __future__ import annotations

from typing import Any

from abci_app.providers.params import params_from_json, set_params
from abci_app.store import CacheKV


def init_genesis(store: CacheKV, state: dict[str, Any]) -> None:
    unknown = set(state) - {"params"}
    if unknown:
        raise ValueError(f"providers genesis: unknown keys {sorted(unknown)}")
    set_params(store, params_from_json(state.get("params", {})))
