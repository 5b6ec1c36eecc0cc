"""Helpers for the real-cometbft testnet tests: a free base port, the CLI as a user runs it,
polling waits (never fixed sleeps), RPC reads."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from node.client.rpc import Client, RpcError
from node.local.manifest import NodeInfo, load, nodes_of
from node.paths import PROJECT_ROOT
from node.ports import find_free_base, random_bases

T = TypeVar("T")


def free_base_port(nodes: int = 7) -> int:
    """A base port (not the default 26656) whose whole testnet port range is free: each node's
    P2P, RPC, ABCI and metrics ports and its worker's blob port (+24). Below 32768, Linux's
    ephemeral range, so no client socket can take one of them while the network starts (a
    worker's blob port, unchecked and in that range, was once taken: 'address already in use')."""
    candidates = [b + 56 for b in random_bases(20_000, 32_768 - 100 * nodes - 100, 100)]
    offsets = [100 * i + k for i in range(nodes) for k in (0, 1, 2, 4, 24)]
    return find_free_base(candidates, offsets)


def cli(*args: str, check: bool = True, timeout: float = 420) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(
        [sys.executable, "-m", "node.cli", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(PROJECT_ROOT),
    )
    if check and r.returncode != 0:
        raise AssertionError(
            f"loconet {' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
        )
    return r


def wait_for(what: str, fn: Callable[[], T | None], timeout: float = 60.0, every: float = 0.3) -> T:
    deadline = time.monotonic() + timeout
    while True:
        try:
            v = fn()
        except RpcError:
            v = None
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


def height(n: NodeInfo) -> int:
    with Client(n.rpc_url, timeout=3) as c:
        return c.latest_height()


def app_hash_at(n: NodeInfo, h: int) -> str:
    with Client(n.rpc_url, timeout=3) as c:
        return c.app_hash_at(h).hex()


def comet_validators(n: NodeInfo) -> dict[str, int]:
    with Client(n.rpc_url, timeout=3) as c:
        return {v["address"]: int(v["voting_power"]) for v in c.validators()}


def commit_signers(n: NodeInfo, h: int) -> set[str]:
    """Validators whose signature for block h is in the commit (block h+1's last commit)."""
    with Client(n.rpc_url, timeout=3) as c:
        sigs = c.call("commit", height=str(h))["signed_header"]["commit"]["signatures"]
    return {s["validator_address"] for s in sigs if s.get("block_id_flag") == 2}


def query(n: NodeInfo, path: str) -> Any:
    with Client(n.rpc_url, timeout=3) as c:
        qr = c.abci_query(path)
    assert qr.code == 0, qr.log
    return json.loads(qr.value)


@contextmanager
def network(
    tmp: Path, *params: str, validators: int = 4, extra: tuple[str, ...] = ()
) -> Iterator[tuple[Path, list[NodeInfo]]]:
    d = tmp / "net"
    base = free_base_port()
    args = [
        "testnet",
        "up",
        "--dir",
        str(d),
        "--validators",
        str(validators),
        "--base-port",
        str(base),
        "--timeout",
        "150",
        *extra,
    ]
    for p in params:
        args += ["--param", p]
    try:
        cli(*args)
        yield d, nodes_of(load(d))
    finally:
        if (d / "testnet.json").exists():
            for n in nodes_of(load(d)):
                log = Path(n.home) / "cometbft.log"
                if log.exists() and "CONSENSUS FAILURE" in log.read_text(errors="replace"):
                    print(f"{n.name}: CONSENSUS FAILURE in its log")
            cli("testnet", "down", "--dir", str(d), check=False)


@contextmanager
def blob_reader(tmp: Path, urls: list[str]) -> Iterator[Callable[[str], bytes]]:
    """``blob(sha256) -> bytes``: fetched over HTTP from ``urls`` (hash-checked by the client)
    into a store of the test's own."""
    from node.blobs import BlobClient, BlobStore

    store = BlobStore(tmp / "mine", quota_bytes=1 << 30)
    with BlobClient(timeout_s=20, max_bytes=1 << 30) as bc:
        yield lambda h: Path(bc.fetch(h, urls, store)).read_bytes()


def recompute_model(
    job: dict[str, Any], r: dict[str, Any], blob: Callable[[str], bytes]
) -> tuple[str, list[str], dict[str, str]]:
    """(sha256 of the model round ``r``'s accepted updates make, the addresses of those updates,
    the ones the aggregation rule left out: address hex -> why), recomputed here: each accepted
    payload fetched by hash and checked against its bound update root, then the workers' own
    rule (node.worker.ml.aggregate_payloads: screen, clipped mean, outer step) called as a
    library on the round's base model."""
    import hashlib

    from abci_app.codec.address import from_bech32
    from abci_app.merkle import bound_update_leaves, merkle_root
    from node.worker import ml
    from trainer.data import Corpus

    plan = ml.JobPlan.from_job(job)
    payloads: dict[str, bytes | None] = {}
    included = []
    for p in r["participants"]:
        if p["outcome"] != "accepted":
            continue
        c = p["commitment"]
        payload = blob(c["blob_location"].rsplit("/", 1)[-1])
        leaves = bound_update_leaves(
            from_bech32(p["address"]),
            int(job["id"]),
            r["round"],
            bytes.fromhex(r["base_model_hash"]),
            payload,
        )
        assert merkle_root(leaves).hex() == c["update_root"], (r["round"], p["address"])
        payloads[from_bech32(p["address"]).hex()] = payload
        included.append(p["address"])
    corpus = Corpus(blob(plan.dataset_id))
    new, excluded = ml.aggregate_payloads(plan, blob(r["base_model_hash"]), payloads, corpus)
    return hashlib.sha256(new.model).hexdigest(), included, excluded
