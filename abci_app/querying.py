"""Shared query plumbing: JSON encoding, errors, path parsing."""

from __future__ import annotations

import json
from typing import Any

PROOF_TYPE = "loconet:smt"


class QueryError(Exception):
    code = 1


def to_json(v: Any) -> bytes:
    return json.dumps(v, sort_keys=True, separators=(",", ":")).encode()


def parse_path(path: str) -> tuple[list[str], dict[str, str]]:
    """``/rounds/7?from=2&limit=10`` -> (["rounds", "7"], {"from": "2", "limit": "10"})"""
    base, _, qs = path.partition("?")
    params: dict[str, str] = {}
    for part in qs.split("&") if qs else []:
        k, _, v = part.partition("=")
        params[k] = v
    return [p for p in base.split("/") if p], params


def int_param(params: dict[str, str], name: str, default: int, hi: int | None = None) -> int:
    """Query parameter ``name`` as a non-negative integer (``default`` when absent), capped at ``hi``."""
    v = params.get(name, "")
    if v == "":
        return default
    if not v.isdigit():
        raise QueryError(f"{name} must be a non-negative integer, got {v!r}")
    n = int(v)
    return min(n, hi) if hi is not None else n
