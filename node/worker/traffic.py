"""The bytes a worker exchanges with its node (stats.json ``traffic``): JSON-RPC requests and
answers counted by an httpx transport, the new-block websocket's messages by the follower."""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from typing import Any

import httpx

from node.client.rpc import Client
from node.worker.follow import ChainFollower, Nodes


class Traffic:
    """Bytes this worker exchanges with its node (cumulative; stats.json ``traffic``): JSON-RPC
    requests and answers as HTTP/1.1 writes them (``rpc_out``, ``rpc_in``: the loop's queries,
    tx broadcasts and the waits for their blocks) and the new-block websocket's messages
    (``ws_in``: payload bytes, frame headers not counted). Not per round: the loop polls every
    block for every job (node/worker README, "Traffic by kind")."""

    def __init__(self) -> None:
        self.rpc_out = 0
        self.rpc_in = 0
        self.ws_in = 0
        self.lock = threading.Lock()

    def add(self, what: str, n: int) -> None:
        with self.lock:
            setattr(self, what, getattr(self, what) + n)

    def to_dict(self) -> dict[str, int]:
        with self.lock:
            return {"rpc_out": self.rpc_out, "rpc_in": self.rpc_in, "ws_in": self.ws_in}


class _CountingStream(httpx.SyncByteStream):
    def __init__(self, inner: Any, count: Callable[[int], None]) -> None:
        self.inner, self.count = inner, count

    def __iter__(self) -> Any:
        for chunk in self.inner:
            self.count(len(chunk))
            yield chunk

    def close(self) -> None:
        self.inner.close()


class CountingTransport(httpx.BaseTransport):
    """httpx transport counting the bytes of each exchange: the request (line, headers, body)
    and the answer (status line, headers, the body as it came over the wire)."""

    def __init__(self, traffic: Traffic) -> None:
        self.inner = httpx.HTTPTransport()
        self.traffic = traffic

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        out = len(b"%s %s HTTP/1.1\r\n" % (request.method.encode(), request.url.raw_path))
        out += sum(len(k) + len(v) + 4 for k, v in request.headers.raw) + 2
        out += len(request.content) if isinstance(request.stream, httpx.ByteStream) else 0
        self.traffic.add("rpc_out", out)
        resp = self.inner.handle_request(request)
        head = len(f"HTTP/1.1 {resp.status_code} {resp.reason_phrase}\r\n".encode())
        head += sum(len(k) + len(v) + 4 for k, v in resp.headers.raw) + 2
        self.traffic.add("rpc_in", head)
        resp.stream = _CountingStream(resp.stream, partial(self.traffic.add, "rpc_in"))
        return resp

    def close(self) -> None:
        self.inner.close()


class CountingNodes(Nodes):
    """``Nodes`` whose clients count their bytes into ``traffic``."""

    def __init__(self, urls: list[str], traffic: Traffic, timeout: float = 10.0) -> None:
        super().__init__(urls, timeout)
        self.traffic = traffic

    def client(self) -> Client:
        if self._client is None:
            self._client = Client(
                self.url, timeout=self.timeout, transport=CountingTransport(self.traffic)
            )
        return self._client


class CountingFollower(ChainFollower):
    """``ChainFollower`` counting the websocket messages it reads into ``traffic.ws_in``."""

    traffic: Traffic | None = None

    def _handle(self, text: str) -> None:
        if self.traffic is not None:
            self.traffic.add("ws_in", len(text.encode()))
        super()._handle(text)
