"""jobs genesis: ``{"params": {...}}`` (see params.DEFAULTS). Jobs are created by tx."""

from __future__ import annotations

from typing import Any

from abci_app.jobs.expected import ProviderKeeper
from abci_app.jobs.params import params_from_json, set_params
from abci_app.store import CacheKV


def init_genesis(store: CacheKV, state: dict[str, Any], providers: ProviderKeeper) -> None:
    unknown = set(state) - {"params"}
    if unknown:
        raise ValueError(f"jobs genesis: unknown keys {sorted(unknown)}")
    p = params_from_json(state.get("params", {}))
    unbonding = providers.get_unbonding_blocks(store)  # providers genesis runs first
    if unbonding <= 4 * p.max_window_blocks:
        raise ValueError(
            f"providers.params.unbonding_blocks ({unbonding}) must exceed 4 x jobs.params.max_window_blocks "
            f"({4 * p.max_window_blocks}): an exiting provider must stay slashable for every round it is in"
        )
    set_params(store, p)
