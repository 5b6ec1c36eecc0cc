"""auth module: accounts (sequence, public key) and the minimum-fee params (genesis
``auth.params``)."""

from __future__ import annotations

from typing import Any

from abci_app.auth.keys import KEY_PREFIXES
from abci_app.auth.params import params_from_json, set_params
from abci_app.module import ModuleSpec
from abci_app.pb import abci
from abci_app.store import CacheKV


def init_genesis(store: CacheKV, state: dict[str, Any], req: abci.RequestInitChain) -> None:
    if not isinstance(state, dict):
        raise ValueError(f"auth genesis: must be an object {{params}}, got {state!r}")
    unknown = set(state) - {"params"}
    if unknown:
        raise ValueError(f"auth genesis: unknown keys {sorted(unknown)}")
    set_params(store, params_from_json(state.get("params", {})))


MODULE = ModuleSpec(name="auth", key_prefixes=KEY_PREFIXES, init_genesis=init_genesis)
