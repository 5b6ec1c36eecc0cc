"""The application's modules, in hook order (genesis, begin block, end block, invariants).

Order matters and is fixed: slashing sees last block's votes before staking recomputes power;
jobs advance rounds before staking turns power changes into validator updates."""

from __future__ import annotations

from abci_app.auth.module import MODULE as AUTH
from abci_app.bank.module import MODULE as BANK
from abci_app.jobs.module import MODULE as JOBS
from abci_app.module import Handler, ModuleSpec, QueryFn
from abci_app.providers.module import MODULE as PROVIDERS
from abci_app.slashing.module import MODULE as SLASHING
from abci_app.staking.module import MODULE as STAKING

MODULES: tuple[ModuleSpec, ...] = (AUTH, BANK, SLASHING, PROVIDERS, JOBS, STAKING)


def _merge_routes() -> dict[str, Handler]:
    out: dict[str, Handler] = {}
    for m in MODULES:
        for k, h in m.routes.items():
            if k in out:
                raise RuntimeError(f"message {k!r} routed by two modules")
            out[k] = h
    return out


def _merge_queries() -> dict[str, QueryFn]:
    out: dict[str, QueryFn] = {}
    for m in MODULES:
        for k, q in m.queries.items():
            if k in out:
                raise RuntimeError(f"query path /{k} served by two modules")
            out[k] = q
    return out


ROUTES = _merge_routes()
QUERIES = _merge_queries()
