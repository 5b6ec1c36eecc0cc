"""The application's modules, in hook order (genesis, begin block, end block, invariants).

Order matters and is fixed: slashing sees last block's votes before staking recomputes power;
jobs advance rounds before staking turns power changes into validator updates."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from abci_app.auth.module import MODULE as AUTH
from abci_app.bank.module import MODULE as BANK
from abci_app.jobs.module import MODULE as JOBS
from abci_app.module import Handler, ModuleSpec, QueryFn
from abci_app.providers.module import MODULE as PROVIDERS
from abci_app.slashing.module import MODULE as SLASHING
from abci_app.staking.module import MODULE as STAKING

MODULES: tuple[ModuleSpec, ...] = (AUTH, BANK, SLASHING, PROVIDERS, JOBS, STAKING)


T = TypeVar("T")


def _merge(what: str, tables: list[Mapping[str, T]]) -> dict[str, T]:
    """One table from every module's; a name claimed twice is a wiring error caught at import."""
    out: dict[str, T] = {}
    for table in tables:
        for k, v in table.items():
            if k in out:
                raise RuntimeError(f"{what} {k!r} is claimed by two modules")
            out[k] = v
    return out


ROUTES: dict[str, Handler] = _merge("message route", [m.routes for m in MODULES])
QUERIES: dict[str, QueryFn] = _merge("query path", [m.queries for m in MODULES])
