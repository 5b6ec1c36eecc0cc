"""The application's modules, in hook order (genesis, begin block, end block, invariants).

Order matters and is fixed: slashing sees last block's votes before staking recomputes power;
jobs advance rounds before staking turns power changes into validator updates."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from abci_app.auth.keys import PARAMS_KEY as AUTH_PARAMS_KEY
from abci_app.auth.module import MODULE as AUTH
from abci_app.auth.params import get_params as get_auth_params
from abci_app.auth.params import params_to_json as auth_params_to_json
from abci_app.bank.module import MODULE as BANK
from abci_app.codec.address import from_bech32
from abci_app.jobs.keys import PARAMS_KEY as JOBS_PARAMS_KEY
from abci_app.jobs.keys import sla_key
from abci_app.jobs.module import new_module as new_jobs_module
from abci_app.jobs.params import get_params as get_jobs_params
from abci_app.jobs.params import params_to_json as jobs_params_to_json
from abci_app.jobs.queries import query_provider_sla
from abci_app.module import Handler, ModuleSpec, QueryFn
from abci_app.providers import keeper as providers_keeper
from abci_app.providers.keys import PARAMS_KEY as PROVIDERS_PARAMS_KEY
from abci_app.providers.module import MODULE as PROVIDERS
from abci_app.providers.params import get_params as get_providers_params
from abci_app.providers.params import params_to_json as providers_params_to_json
from abci_app.providers.queries import query_provider as query_provider_record
from abci_app.querying import QueryError, to_json
from abci_app.settlement import keeper as settlement_keeper
from abci_app.settlement.module import new_module as new_settlement_module
from abci_app.slashing.module import new_module as new_slashing_module
from abci_app.slashing.params import SLASHING_PARAMS_KEY
from abci_app.slashing.params import get_params as get_slashing_params
from abci_app.slashing.params import params_to_json as slashing_params_to_json
from abci_app.staking import keeper as staking_keeper
from abci_app.staking.keys import PARAMS_KEY as STAKING_PARAMS_KEY
from abci_app.staking.module import new_module as new_staking_module
from abci_app.staking.params import get_params as get_staking_params
from abci_app.staking.params import params_to_json as staking_params_to_json
from abci_app.store import KVReader

# Slashing, jobs, settlement and staking reach each other only through the Protocols they declare
# (Cosmos expected_keepers); the keepers are passed in here, so neither imports the other module.
SLASHING = new_slashing_module(staking_keeper)
JOBS = new_jobs_module(providers_keeper)
SETTLEMENT = new_settlement_module(staking_keeper)
# staking reads settlement's key registry (read-only) to keep a keyless validator out of the set
STAKING = new_staking_module(settlement_keeper)

# settlement last: its begin-block makes checkpoints from the state after the previous block
MODULES: tuple[ModuleSpec, ...] = (AUTH, BANK, SLASHING, PROVIDERS, JOBS, STAKING, SETTLEMENT)


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


def query_market_params(
    reader: KVReader, args: list[str], params: dict[str, str]
) -> tuple[bytes, list[bytes]]:
    """/market_params -> {"providers": {...}, "jobs": {...}}: both modules' params in one proven
    answer. It spans two modules, so it lives here, where both are wired."""
    if args:
        raise QueryError("usage: /market_params (one module's: /params/{providers|jobs})")
    data = {
        "providers": providers_params_to_json(get_providers_params(reader)),
        "jobs": jobs_params_to_json(get_jobs_params(reader)),
    }
    return to_json(data), [PROVIDERS_PARAMS_KEY, JOBS_PARAMS_KEY]


def query_params(
    reader: KVReader, args: list[str], params: dict[str, str]
) -> tuple[bytes, list[bytes]]:
    """/params -> {"auth": {...}, "staking": {...}, "slashing": {...}}; /params/{module} -> that
    module's (auth: the minimum fee, which clients read to pay it: node/client/fees.py)."""
    every = {
        "auth": (auth_params_to_json(get_auth_params(reader)), AUTH_PARAMS_KEY),
        "staking": (staking_params_to_json(get_staking_params(reader)), STAKING_PARAMS_KEY),
        "slashing": (slashing_params_to_json(get_slashing_params(reader)), SLASHING_PARAMS_KEY),
    }
    if not args:
        return to_json({k: v for k, (v, _) in every.items()}), [key for _, key in every.values()]
    if len(args) != 1 or args[0] not in every:
        raise QueryError(f"usage: /params or /params/{{{'|'.join(sorted(every))}}}")
    value, key = every[args[0]]
    return to_json(value), [key]


def query_provider(
    reader: KVReader, args: list[str], params: dict[str, str]
) -> tuple[bytes, list[bytes]]:
    """/provider/{loco1...} -> the provider record (providers module); /provider/{loco1...}/sla ->
    its SLA figures (jobs module: the round steps record them). An address that is neither a
    provider nor has a record is an error, so a typo never reads as a clean record of zeros."""
    if len(args) == 2 and args[1] == "sla":
        addr = from_bech32(args[0])
        if (
            providers_keeper.get_provider(reader, addr) is None
            and reader.get(sla_key(addr)) is None
        ):
            raise QueryError(f"provider {args[0]} not found (never registered, and no SLA record)")
        return query_provider_sla(reader, args[:1], params)
    return query_provider_record(reader, args, params)


# queries that span modules (served by the app, not by one module); "provider" replaces the
# providers module's own entry (it adds the /sla sub-path), see QUERIES below
APP_QUERIES: dict[str, QueryFn] = {"market_params": query_market_params, "params": query_params}

# the app's own keys (chain id, last block time: abci_app/app.py), owned like a module's
META_PREFIX = b"\x00"


def check_key_prefixes(modules: tuple[ModuleSpec, ...]) -> None:
    """Every module declares its key prefixes, and no prefix (the app's ``META_PREFIX`` included)
    is a prefix of another: a key then belongs to exactly one owner. Raises at import otherwise."""
    owned = [(META_PREFIX, "app")] + [(p, m.name) for m in modules for p in m.key_prefixes]
    for i, (p, a) in enumerate(owned):
        if not p:
            raise RuntimeError(f"module {a} declares an empty key prefix")
        for q, b in owned[i + 1 :]:
            if p.startswith(q) or q.startswith(p):
                raise RuntimeError(f"key prefix {p.hex()} of {a} overlaps {q.hex()} of {b}")


check_key_prefixes(MODULES)
ROUTES: dict[str, Handler] = _merge("message route", [m.routes for m in MODULES])
QUERIES: dict[str, QueryFn] = _merge("query path", [*(m.queries for m in MODULES), APP_QUERIES]) | {
    "provider": query_provider
}
