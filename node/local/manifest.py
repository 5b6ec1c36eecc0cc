"""A local testnet's manifest (``DIR/testnet.json``): its nodes and provider workers, read and
written by ``testnet`` (the validators), ``testnet_market`` (the workers) and ``wan`` (the links
between them), which all build on it and not on each other."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from node.atomic import write_atomic

TESTNET_VERSION = 1


class TestnetError(Exception):
    pass


@dataclass(slots=True)
class NodeInfo:
    name: str
    home: str
    p2p: int
    rpc: int
    abci: int
    metrics: int
    node_id: str
    validator_address: str  # consensus address (hex); a full node has one too (unused)
    operator_key: str = ""  # keyring key of the operator ("" for a full node)

    @property
    def rpc_url(self) -> str:
        return f"http://127.0.0.1:{self.rpc}"

    @property
    def path(self) -> Path:
        return Path(self.home)


@dataclass(slots=True)
class WorkerInfo:
    name: str  # provider0
    key: str
    address: str
    dir: str
    blob_port: int
    nodes: list[str]  # RPC URLs, first = primary
    behaviour: str = "honest"
    role: str = "any"  # "train" | "verify" (fixed by its opt-in policy) | "any" (drawn)

    @property
    def path(self) -> Path:
        return Path(self.dir)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.blob_port}"


def manifest_path(d: Path) -> Path:
    return d / "testnet.json"


def load(d: Path) -> dict[str, Any]:
    p = manifest_path(d)
    if not p.exists():
        raise TestnetError(f"no testnet in {d}: create one with `loconet testnet up --dir {d}`")
    try:
        m = json.loads(p.read_text())
        ok = isinstance(m, dict)
        if ok and m.get("version") == TESTNET_VERSION:
            nodes_of(m)  # every node entry has its fields (a hand edit, another writer)
            workers_of(m)
    except (ValueError, TypeError, KeyError):
        ok = False
    if not ok:  # half a file or another shape: a JSONDecodeError/AttributeError traceback
        raise TestnetError(
            f"{p} is not a testnet manifest (corrupt or edited): `loconet testnet down --purge "
            f"--dir {d}` stops what it can find and deletes the folder (or pick another --dir)"
        )
    if m.get("version") != TESTNET_VERSION:
        raise TestnetError(
            f"{d} holds a testnet of format version {m.get('version')!r}; this loconet writes "
            f"version {TESTNET_VERSION}: remove it with `loconet testnet down --purge --dir {d}` "
            "(or pick another --dir)"
        )
    return m


def nodes_of(m: dict[str, Any]) -> list[NodeInfo]:
    return [NodeInfo(**n) for n in m["nodes"]]


def workers_of(m: dict[str, Any]) -> list[WorkerInfo]:
    return [WorkerInfo(**w) for w in m.get("workers", [])]


def save(d: Path, m: dict[str, Any]) -> None:
    # a private temp file per writer (one fixed testnet.tmp: two commands at once failed)
    write_atomic(manifest_path(d), json.dumps(m, indent=2) + "\n")


def find_node(m: dict[str, Any], name: str) -> NodeInfo:
    for n in nodes_of(m):
        if name in (n.name, n.name.removeprefix("node")):
            return n
    raise TestnetError(f"no node {name!r}; nodes: {', '.join(n.name for n in nodes_of(m))}")


def find_worker(m: dict[str, Any], name: str) -> WorkerInfo | None:
    for w in workers_of(m):
        if name in (w.name, w.key):
            return w
    return None
