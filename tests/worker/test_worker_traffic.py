"""The traffic counters (issue 29): a worker fetching a blob of each kind from another worker's
real blob server counts exactly the blob's bytes under its kind for the round it fetches for, and
the serving worker's server counts the same bytes sent, by the same kind and round (stats.json
``bytes_in.KIND`` / ``bytes_out.KIND``); the HTTP heads are counted on both ends alike; a blob
fetched without a round named is counted for its round hold, else for the server owner's newest
round; the signed tx bytes and the JSON-RPC bytes with the node are counted. Two real workers
(started with the real wiring: blob server hooks, counting node client) on loopback; the chain is
not needed."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import torch
from aiohttp import web

from node.blobs import BlobClient, BlobStore
from node.blobs.server import HEADER_KINDS, KINDS, kind_of_head
from node.client.keys import Keyring
from node.client.rpc import Client
from node.worker import ml
from node.worker.records import Job
from node.worker.traffic import CountingTransport, Traffic
from node.worker.worker import ProviderWorker, WorkerConfig
from tests.kits.blobkit import Peers
from trainer.commit import KIND_NAMES, MAGIC, Entry, Payload, encode
from trainer.data import Corpus, synthetic_text

DATA = synthetic_text(30_000)
MODEL = {"n_layers": 1, "n_heads": 2, "d_model": 16, "context_len": 16, "vocab_size": 256}
INIT = ml.initial_model_bytes(ml.config_from_job(MODEL), 0)
RK = "3/1"  # the round the fetcher works for


def blob(kind: int, n: int) -> bytes:
    t = torch.arange(n, dtype=torch.float32)
    return encode(Payload(kind, "raw", {}, {"w": Entry(torch.float32, (n,), {"val": t})}))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def job(source: str) -> dict[str, Any]:
    return {
        "id": 3,
        "spec": {
            "model": MODEL,
            "inner_steps": 4,
            "trace_interval": 2,
            "tokens_per_step": 64,
            "num_shards": 4,
            "dataset_id": Corpus(DATA).id,
            "dataset_bytes": len(DATA),
            "initial_model_hash": hashlib.sha256(INIT).hexdigest(),
            "initial_model_bytes": len(INIT),
            "compression_policy": "dense",
            "blob_sources": [source],
        },
    }


def make(tmp: Path, key: str) -> ProviderWorker:
    Keyring(tmp).add(key)
    port = free_port()
    w = ProviderWorker(
        WorkerConfig(
            home=tmp,
            key=key,
            nodes=["http://127.0.0.1:9"],  # nothing listens: the follower retries, harmlessly
            data_dir=tmp / key,
            listen=f"127.0.0.1:{port}",
            check_hardware=False,
        )
    )
    w.endpoint = f"http://127.0.0.1:{port}"
    w.preflight = dict  # type: ignore[method-assign]
    w._peer_urls = list  # type: ignore[method-assign]
    w.start()  # the real wiring: the blob server with the worker's hooks, the counting follower
    return w


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[ProviderWorker, ProviderWorker]]:
    ws = [make(tmp_path, "provider"), make(tmp_path, "verifier")]
    yield ws[0], ws[1]
    for w in ws:
        w.stop()


def test_the_blob_header_kinds_are_the_trainers() -> None:
    assert dict(KIND_NAMES) == HEADER_KINDS
    assert set(HEADER_KINDS.values()) <= set(KINDS)
    assert kind_of_head(MAGIC + b"\x00\x01" + bytes([2])) == "state"
    assert kind_of_head(b"LOC") == kind_of_head(os.urandom(64)[:3]) == "other"


def test_each_kind_is_counted_on_both_ends_for_the_round(
    pair: tuple[ProviderWorker, ProviderWorker],
) -> None:
    prov, ver = pair
    store = prov.store
    payload = blob(1, 3000)
    state = blob(2, 5000)
    model = blob(3, 4000)
    other = os.urandom(777)
    hs = {
        "update": store.put_bytes(payload, tier="hot", round_key=RK),
        "state": store.put_bytes(state, tier="temp", round_key=RK),
        "model": store.put_bytes(model, tier="cold"),
        "other": store.put_bytes(other, tier="hot"),
    }
    trace = [hashlib.sha256(b"%d" % i).digest() for i in range(3)]
    hs["trace_list"] = prov.reveals._store_trace_list(3, 1, trace)  # stores the carry too
    carry = ml.fresh_carry_bytes()
    hs["carry"] = hashlib.sha256(carry).hexdigest()
    store.put_bytes(DATA, tier="cold")
    store.put_bytes(INIT, tier="cold")
    sizes = {
        "update": len(payload),
        "state": len(state),
        "model": len(model) + len(INIT),
        "other": len(other),
        "trace_list": 32 * 3,
        "carry": len(carry),
        "dataset": len(DATA),
    }

    ver._here.key = RK  # the round the verifier's duty works for (worker._round sets it)
    for w in (prov, ver):  # both follow the job (worker._job): the dataset's hash is known
        w._plans[3] = ml.JobPlan.from_job(job(prov.endpoint))
    for kind in ("update", "state", "model", "other", "carry"):
        assert ver.fetch(hs[kind], [prov.endpoint], round_key=RK) == store.read(hs[kind])
    ver._kinds[hs["trace_list"]] = "trace_list"  # as judge() names the list it fetches
    assert len(ver.fetch(hs["trace_list"], [prov.endpoint], tier="temp", round_key=RK)) == 96
    ver._inputs(Job.from_json(job(prov.endpoint)))  # the dataset and the initial model (a model)

    got = ver.timing[RK]
    for kind, n in sizes.items():
        assert got[f"bytes_in.{kind}"] == n, kind
    served = prov.server.stats.to_dict()
    assert served["sent_by_round"][RK] == {
        **sizes,
        "http": got["bytes_in.http"],  # the response heads, as the fetcher read them
    }
    assert served["received_by_round"][RK] == got["bytes_out.http"]  # the request heads
    assert got["bytes_in.http"] > 0 and got["bytes_out.http"] > 0
    assert served["bytes_sent"] == sum(sizes.values())

    prov.write_stats()  # the server's counters merged into the round: bytes_out.KIND
    ver.write_stats()
    p_round = json.loads((prov.cfg.data_dir / "stats.json").read_text())["rounds"][RK]
    v_round = json.loads((ver.cfg.data_dir / "stats.json").read_text())["rounds"][RK]
    for kind, n in sizes.items():
        assert p_round[f"bytes_out.{kind}"] == v_round[f"bytes_in.{kind}"] == n
    assert p_round["bytes_out.http"] == v_round["bytes_in.http"]
    assert p_round["bytes_in.http"] == v_round["bytes_out.http"]


def test_a_fetch_naming_no_round_is_counted_for_the_hold_else_the_newest_round(
    pair: tuple[ProviderWorker, ProviderWorker], tmp_path: Path
) -> None:
    prov, _ = pair
    held = prov.store.put_bytes(blob(2, 100), tier="temp", round_key="3/2")
    loose = prov.store.put_bytes(blob(3, 200), tier="cold")
    prov.timing = {"3/4": {"seen": 10.0}, "3/5": {"seen": 20.0}, "3/3": {"seen": 5.0}}
    with BlobStore(tmp_path / "plain") as mine, BlobClient() as c:  # e.g. `loconet blob get`
        c.fetch(held, [prov.endpoint], mine)
        c.fetch(loose, [prov.endpoint], mine)
    by_round = prov.server.stats.to_dict()["sent_by_round"]
    assert by_round["3/2"]["state"] == len(prov.store.read(held))
    assert by_round["3/5"]["model"] == len(prov.store.read(loose))


def test_failed_attempts_are_counted_too(pair: tuple[ProviderWorker, ProviderWorker]) -> None:
    """A location that sends other bytes costs them: counted under the blob's kind, and the
    next location is tried."""
    prov, ver = pair
    good, bad = blob(1, 1000), blob(1, 1001)
    h = prov.store.put_bytes(good)

    async def liar(request: web.Request) -> web.Response:
        return web.Response(body=bad)

    peers = Peers()
    try:
        ver._here.key = RK
        assert ver.fetch(h, [peers.http(liar), prov.endpoint], round_key=RK) == good
    finally:
        peers.close()
    assert ver.timing[RK]["bytes_in.update"] == len(bad) + len(good)


def test_tx_bytes_are_the_signed_bytes(pair: tuple[ProviderWorker, ProviderWorker]) -> None:
    _, w = pair
    w._here.key = RK
    signed = os.urandom(321)

    def sent(fn: Any) -> Any:  # the node: send_tx's answer, the signed bytes with it
        return {"txhash": "AB", "height": 5, "tx": signed}

    w.nodes.call = sent  # type: ignore[method-assign]
    w._send()
    w._send()
    assert w.timing[RK]["tx_bytes"] == 2 * len(signed)
    assert w.timing[RK]["txs"] == 2


class _Rpc(BaseHTTPRequestHandler):
    BODY = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"x": "y" * 5000}}).encode()

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.BODY)))
        self.end_headers()
        self.wfile.write(self.BODY)

    def log_message(self, *a: Any) -> None:
        pass


def test_the_node_link_is_counted() -> None:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Rpc)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    traffic = Traffic()
    try:
        with Client(
            f"http://127.0.0.1:{srv.server_address[1]}", transport=CountingTransport(traffic)
        ) as c:
            assert c.call("status") == {"x": "y" * 5000}
    finally:
        srv.shutdown()
    t = traffic.to_dict()
    request = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "status", "params": {}}, separators=(",", ":")
    )
    assert len(request) < t["rpc_out"] < len(request) + 400  # the body and a head
    assert len(_Rpc.BODY) < t["rpc_in"] < len(_Rpc.BODY) + 400
