"""Slashing genesis (``app_state["slashing"]``): ``{"params": {...}}`` (see params.DEFAULTS)."""

from __future__ import annotations

from typing import Any

from abci_app.slashing.params import params_from_json, set_params
from abci_app.store import CacheKV


def init_genesis(store: CacheKV, state: dict[str, Any]) -> None:
    set_params(store, params_from_json(state.get("params", {})))
