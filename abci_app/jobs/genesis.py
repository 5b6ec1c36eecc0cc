"""jobs genesis: ``{"params": {...}}`` (see params.DEFAULTS). Jobs are created by tx."""

from __future__ import annotations

from typing import Any

from abci_app.jobs.expected import ProviderKeeper
from abci_app.jobs.params import ROUND_MAX_WINDOWS, params_from_json, set_params
from abci_app.store import CacheKV


def init_genesis(store: CacheKV, state: dict[str, Any], providers: ProviderKeeper) -> None:
    unknown = set(state) - {"params"}
    if unknown:
        raise ValueError(f"jobs genesis: unknown keys {sorted(unknown)}")
    p = params_from_json(state.get("params", {}))
    unbonding = providers.get_unbonding_blocks(store)  # providers genesis runs first
    longest = ROUND_MAX_WINDOWS * p.max_window_blocks
    if unbonding <= longest:
        raise ValueError(
            f"providers.params.unbonding_blocks ({unbonding}) must exceed {ROUND_MAX_WINDOWS} x "
            f"jobs.params.max_window_blocks ({longest}, the longest round: commit, reveal, three "
            "panels of two vote windows, attest): an exiting provider must stay slashable for "
            "every round it is in"
        )
    set_params(store, p)
