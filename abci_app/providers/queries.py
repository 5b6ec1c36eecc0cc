"""providers queries: ``/provider/{addr}``, ``/providers?status=&from=&limit=``.

JSON: addresses bech32, amounts integers (uloco), status a lower-case word."""

from __future__ import annotations

from typing import Any

from abci_app.codec.address import from_bech32, to_bech32
from abci_app.pb import enum_name, enum_names, providers_pb2
from abci_app.providers import keeper
from abci_app.providers.keys import provider_key
from abci_app.querying import QueryError, int_param, to_json
from abci_app.store import KVReader

STATUSES = enum_names(providers_pb2.ProviderStatus)[1:]  # every status but UNSPECIFIED (0)
MAX_LIMIT = 200


def provider_to_json(p: providers_pb2.Provider) -> dict[str, Any]:
    return {
        "address": to_bech32(p.address),
        "status": enum_name(providers_pb2.ProviderStatus, p.status),
        "bond": p.bond,
        "unbonding": p.unbonding,
        "unbonding_height": p.unbonding_height,
        "reputation": p.reputation,
        "hardware": [
            {"model": g.model, "count": g.count, "memory_mib": g.memory_mib} for g in p.hardware
        ],
        "throughput_tokens_per_sec": p.throughput_tokens_per_sec,
        "measured_tokens_per_sec": p.measured_tokens_per_sec,
        "measured_samples": p.measured_samples,
        "region": p.region,
        "endpoint": p.endpoint,
        "registered_height": p.registered_height,
        "slashed_total": p.slashed_total,
        "jailed_height": p.jailed_height,
    }


def query_provider(
    reader: KVReader, args: list[str], params: dict[str, str]
) -> tuple[bytes, list[bytes]]:
    """/provider/{loco1...} -> provider (error if not registered; the proof then shows absence)."""
    if len(args) != 1:
        raise QueryError("usage: /provider/{loco1...}")
    addr = from_bech32(args[0])
    p = keeper.get_provider(reader, addr)
    if p is None:
        raise QueryError(f"provider {args[0]} not found")
    return to_json(provider_to_json(p)), [provider_key(addr)]


def query_providers(
    reader: KVReader, args: list[str], params: dict[str, str]
) -> tuple[bytes, list[bytes]]:
    """/providers?status=active&from=0&limit=100 -> {"providers": [...], "total": n}"""
    if args:
        raise QueryError("usage: /providers?status=active|jailed|exiting&from=N&limit=N")
    status = params.get("status", "")
    if status and status not in STATUSES:
        raise QueryError(f"status must be one of {', '.join(STATUSES)}; got {status!r}")
    start = int_param(params, "from", 0)
    limit = int_param(params, "limit", 100, MAX_LIMIT)
    all_ = [
        p
        for p in keeper.iterate_providers(reader)
        if not status or enum_name(providers_pb2.ProviderStatus, p.status) == status
    ]
    page = all_[start : start + limit]
    return to_json({"providers": [provider_to_json(p) for p in page], "total": len(all_)}), [
        provider_key(p.address) for p in page
    ]


QUERIES = {"provider": query_provider, "providers": query_providers}
