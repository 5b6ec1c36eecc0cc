"""A node that answers garbage (red-team regressions): the RPC client turns every malformed
answer into an RpcError (it raised AttributeError/KeyError, and read any size into memory), and
the explorer shows an error page instead of aiohttp's bare 500 with a traceback. A real HTTP
server plays the hostile node; the explorer is the real aiohttp app on loopback."""

from __future__ import annotations

import asyncio
import gzip
import http.server
import threading
from collections.abc import Iterator

import httpx
import pytest

from node.client import rpc
from node.client.rpc import Client, RpcError
from node.explorer.server import Explorer


class Hostile(http.server.BaseHTTPRequestHandler):
    body: bytes = b""
    headers_out: dict[str, str] = {}

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        for k, v in {"Content-Type": "application/json", **type(self).headers_out}.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(type(self).body)))
        self.end_headers()
        self.wfile.write(type(self).body)

    def log_message(self, *a: object) -> None:
        pass


@pytest.fixture
def node() -> Iterator[type[Hostile]]:
    handler = type("H", (Hostile,), {"body": b"", "headers_out": {}})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    handler.url = f"http://127.0.0.1:{srv.server_address[1]}"  # type: ignore[attr-defined]
    yield handler
    srv.shutdown()


@pytest.mark.parametrize(
    "body",
    [
        b"[]",
        b'"x"',
        b"null",
        b"{}",
        b'{"error": "boom"}',
        b'{"jsonrpc": "2.0"}',
        b"{" * 100_000,
        b"not json",
        b"\xff\xfe",
    ],
)
def test_invalid_node_answers_are_rpc_errors(node: type[Hostile], body: bytes) -> None:
    node.body = body
    with Client(node.url) as c:  # type: ignore[attr-defined]
        with pytest.raises(RpcError):
            c.status()


def test_invalid_huge_or_gzip_bomb_answer(
    node: type[Hostile], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rpc, "MAX_RESPONSE_BYTES", 1 << 20)
    # 8 KiB that inflate to 8 MiB
    node.body = gzip.compress(b'{"result": "' + b"a" * (8 << 20) + b'"}')
    node.headers_out = {"Content-Encoding": "gzip"}
    with Client(node.url) as c, pytest.raises(RpcError, match="over 1 MiB"):  # type: ignore[attr-defined]
        c.status()


def test_invalid_explorer_pages_over_a_garbage_node(node: type[Hostile]) -> None:
    node.body = b'{"jsonrpc": "2.0", "id": 1, "result": {"block": 5}}'  # JSON-RPC, but not a block
    ex = Explorer(node.url, poll=60)  # type: ignore[attr-defined]

    async def main() -> list[tuple[int, str]]:
        from aiohttp import web

        runner = web.AppRunner(ex.app())
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        out = []
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http_:
            for path in (
                "/block/5",
                "/tx/" + "AB" * 32,
                "/job/²",
                "/job/" + "9" * 5000,
                "/block/" + "9" * 5000,
                "/block/0",
                "/",
                "/provider/%3Cscript%3E",
            ):
                r = await http_.get(path)
                out.append((r.status_code, r.text))
        await runner.cleanup()
        return out

    results = asyncio.run(main())
    for status, text in results:
        assert status in (200, 404, 502), (status, text[:300])
        assert "Traceback" not in text and "<script>" not in text
    assert results[0][0] == 502 and "could not be shown" in results[0][1]


def test_invalid_metrics_failure_never_halts_a_block(monkeypatch: pytest.MonkeyPatch) -> None:
    """The app's /metrics is measured inside FinalizeBlock and Commit: a metrics bug used to
    raise out of them (the ABCI server then halts the node). It is logged and the block goes on."""
    from prometheus_client import CollectorRegistry

    from abci_app.pb import abci
    from abci_app.store import MerkleStore
    from node.metrics import MeteredApplication, NodeMetrics
    from tests.kits.chainkit import genesis_request, signer

    metrics = NodeMetrics(CollectorRegistry())
    app = MeteredApplication(MerkleStore(None), metrics=metrics)
    app.init_chain(genesis_request({signer(0).address: 10**9}, [(signer(1000), 10)]))

    def broken(events: object) -> None:
        raise ValueError("an attribute the metrics did not expect")

    monkeypatch.setattr(metrics, "observe_events", broken)
    monkeypatch.setattr(app, "_count_rounds", lambda: 1 / 0)
    req = abci.RequestFinalizeBlock(
        height=1, proposer_address=signer(1000).address, hash=b"\x01" * 32
    )
    res = app.finalize_block(req)
    app.commit(abci.RequestCommit())
    assert app.store.height == 1 and res.app_hash == app.store.app_hash


def test_invalid_metrics_scrape_that_never_finishes_is_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """prometheus_client's start_http_server kept a silent connection (and its thread) for ever."""
    import socket
    import time

    from prometheus_client import CollectorRegistry

    from node import metrics

    monkeypatch.setattr(metrics, "CLIENT_TIMEOUT_S", 1.0)
    reg = CollectorRegistry()
    metrics.NodeMetrics(reg)
    httpd, _ = metrics.serve(reg, "127.0.0.1:0")
    try:
        port = httpd.server_address[1]
        s = socket.create_connection(("127.0.0.1", port))
        s.settimeout(30)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never ends its headers
        t0 = time.monotonic()
        assert s.recv(100) == b"" and time.monotonic() - t0 < 10
        s.close()
        body = httpx.get(f"http://127.0.0.1:{port}/metrics?name[]=loconet_blocks_total").text
        assert "loconet_blocks" in body
    finally:
        httpd.shutdown()


def test_invalid_metrics_client_dripping_or_flooding_is_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The per-read timeout left two holes (README's known list): a client dripping one header
    line every second held its thread for ever, and every connection got a thread. Now a
    connection is shut REQUEST_DEADLINE_S after it opened, and past MAX_SCRAPERS at once a new
    one is closed without a thread; scrapes still work after both."""
    import socket
    import time

    from prometheus_client import CollectorRegistry

    from node import metrics

    monkeypatch.setattr(metrics, "CLIENT_TIMEOUT_S", 5.0)
    monkeypatch.setattr(metrics, "REQUEST_DEADLINE_S", 2.0)
    monkeypatch.setattr(metrics, "MAX_SCRAPERS", 2)
    reg = CollectorRegistry()
    metrics.NodeMetrics(reg)
    httpd, _ = metrics.serve(reg, "127.0.0.1:0")
    port = httpd.server_address[1]
    try:
        drip = socket.create_connection(("127.0.0.1", port))
        drip.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        t0, dropped = time.monotonic(), None
        while time.monotonic() - t0 < 12:
            try:
                drip.sendall(b"X-Drip: 1\r\n")
            except OSError:
                dropped = time.monotonic() - t0
                break
            time.sleep(0.5)
        drip.close()
        assert dropped is not None and dropped < 6, dropped

        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
        time.sleep(0.3)
        extra = socket.create_connection(("127.0.0.1", port))
        extra.settimeout(5)
        assert extra.recv(100) == b""  # closed at once: no thread for it
        extra.close()
        for s in held:
            s.close()
        time.sleep(0.5)
        assert "loconet_blocks" in httpx.get(f"http://127.0.0.1:{port}/metrics").text
    finally:
        httpd.shutdown()


def test_invalid_job_and_provider_urls_are_404_before_the_first_snapshot() -> None:
    """With no snapshot yet (the node down or slow), /job/-1, /job/😀, /job/2^64 and
    /provider/<anything> answered 200 "waiting for the node" as if they could exist: a URL that
    can never name a job or a provider is a 404 naming why, whatever the node does."""
    from abci_app.codec.address import to_bech32
    from tests.kits.chainkit import signer

    addr = to_bech32(signer(0).address)
    ex = Explorer("http://127.0.0.1:1", poll=60)  # nothing listens: no snapshot ever

    async def main() -> list[tuple[str, int, str]]:
        from aiohttp import web

        runner = web.AppRunner(ex.app())
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        out = []
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http_:
            for path in (
                "/job/-1",
                "/job/%F0%9F%98%80",
                "/job/18446744073709551616",
                "/provider/x",
                "/provider/" + "x" * 5000,
                "/provider/" + addr[:-1] + ("q" if addr[-1] != "q" else "p"),  # bad checksum
                "/job/7",  # could exist: the waiting page
                "/provider/" + addr,
            ):
                r = await http_.get(path)
                out.append((path, r.status_code, r.text))
        await runner.cleanup()
        return out

    results = asyncio.run(main())
    for path, status, text in results[:-2]:
        assert status == 404, (path, status)
        assert "not a job id" in text or "not an address" in text, path
        assert "x" * 100 not in text  # the reflected name is cut
    assert [s for _, s, _ in results[-2:]] == [200, 200]


def test_invalid_metrics_paths_are_404() -> None:
    """prometheus_client's WSGI app answered 200 with every metric on any path (/x, /%ff,
    /favicon.ico with an empty body): only / and /metrics serve them; others are a 404."""
    from prometheus_client import CollectorRegistry

    from node import metrics

    reg = CollectorRegistry()
    metrics.NodeMetrics(reg)
    httpd, _ = metrics.serve(reg, "127.0.0.1:0")
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        for path in ("/x", "/%ff", "/favicon.ico", "/metrics/x", "/metricsx"):
            r = httpx.get(base + path)
            assert r.status_code == 404 and "/metrics" in r.text, (path, r.status_code)
        for path in ("/", "/metrics", "/metrics?name[]=loconet_blocks_total"):
            r = httpx.get(base + path)
            assert r.status_code == 200 and "loconet_blocks" in r.text, path
    finally:
        httpd.shutdown()
