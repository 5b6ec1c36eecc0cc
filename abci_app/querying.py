"""Shared query plumbing: JSON encoding, errors, path parsing."""

from __future__ import annotations

import json
from typing import Any

PROOF_TYPE = "loconet:smt"


class QueryError(Exception):
    code = 1


def to_json(v: Any) -> bytes:
    return json.dumps(v, sort_keys=True, separators=(",", ":")).encode()


# every query parameter a path takes (list paths); ``offset`` is another name for ``from``
PARAMS = frozenset({"from", "limit", "status", "owner"})
ALIASES = {"offset": "from"}


class Params(dict[str, str]):
    """A path's query parameters that remember which ones its handler read: one it never read
    (``/job/3?limit=5``, ``/providers?owner=...``) did not apply to that path, and is refused by
    :meth:`refuse_unread` instead of being silently ignored."""

    def __init__(self) -> None:
        super().__init__()
        self.read: set[str] = set()

    def __getitem__(self, k: str) -> str:
        self.read.add(k)
        return super().__getitem__(k)

    def get(self, k: str, default: Any = None) -> Any:
        self.read.add(k)
        return super().get(k, default)

    def __contains__(self, k: object) -> bool:
        if isinstance(k, str):
            self.read.add(k)
        return super().__contains__(k)

    def refuse_unread(self, path: str) -> None:
        unread = sorted(set(self) - self.read)
        if unread:
            raise QueryError(
                f"query parameter {unread[0]!r} does not apply to {path.partition('?')[0][:80]!r}"
            )


def parse_path(path: str) -> tuple[list[str], Params]:
    """``/rounds/7?from=2&limit=10`` -> (["rounds", "7"], {"from": "2", "limit": "10"}).
    A parameter no path takes, or one given twice (``from`` and ``offset`` count as one), is a
    QueryError: a typo (``?ownr=``) never reads as a clean answer to another question."""
    base, _, qs = path.partition("?")
    params = Params()
    for part in qs.split("&") if qs else []:
        if not part:
            continue  # "?&limit=5", a trailing "&"
        k, _, v = part.partition("=")
        name = ALIASES.get(k, k)
        if name not in PARAMS:
            raise QueryError(
                f"unknown query parameter {k[:40]!r}; known: "
                f"{', '.join(sorted(PARAMS | set(ALIASES)))}"
            )
        if name in params:
            raise QueryError(f"query parameter {name!r} given twice")
        params[name] = v
    params.read.clear()  # the checks above are not the handler's reads
    return [p for p in base.split("/") if p], params


def parse_u64(text: str, what: str) -> int:
    """``text`` as an unsigned 64-bit integer written in ASCII decimal digits; anything else (a
    sign, spaces, ``1e3``, ``0x1``, Unicode digits such as ``١`` or ``²``, 2^64 and more) is a
    QueryError naming ``what`` (code 1), never Python's own int() error."""
    if not (0 < len(text) <= 20 and text.isascii() and text.isdigit()) or int(text) >= 1 << 64:
        shown = text if len(text) <= 24 else text[:24] + "..."
        raise QueryError(
            f"{what} must be an unsigned integer below 2^64 (decimal digits), got {shown!r}"
        )
    return int(text)


def int_param(params: dict[str, str], name: str, default: int, hi: int | None = None) -> int:
    """Query parameter ``name`` as a non-negative integer (``default`` when absent), capped at
    ``hi``."""
    v = params.get(name, "")
    if v == "":
        return default
    n = parse_u64(v, name)
    return min(n, hi) if hi is not None else n
