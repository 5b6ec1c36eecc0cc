"""Following the chain: CometBFT's ``/websocket`` for new blocks (with the app's events), and a
JSON-RPC client that falls back to another ``--node`` when one is down.

``ChainFollower`` runs an aiohttp websocket client in a background thread: it subscribes to
``tm.event='NewBlock'`` (each event carries the block's header and the app's FinalizeBlock
events), wakes the worker on every block, and on any error reconnects with exponential backoff
(0.5 s doubling to 8 s), moving to the next ``--node`` each time. The worker never depends on
the socket alone: ``wait_block`` also returns after ``poll_s`` without an event, and the worker
then reads the height over JSON-RPC, so a lost subscription costs latency, not correctness.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import aiohttp

from node import safejson
from node.client.rpc import Client, NodeUnreachable, RpcError

log = logging.getLogger("loconet.worker.follow")
T = TypeVar("T")

BACKOFF_START_S = 0.5
BACKOFF_MAX_S = 8.0


def ws_url(rpc_url: str) -> str:
    u = rpc_url.rstrip("/")
    if u.startswith("https://"):
        return "wss://" + u[len("https://") :] + "/websocket"
    return "ws://" + u.removeprefix("http://") + "/websocket"


class Nodes:
    """The ``--node`` URLs in order; ``call(fn)`` runs ``fn(client)`` on the current node and
    moves to the next one when it is unreachable (each tried once per call)."""

    def __init__(self, urls: list[str], timeout: float = 10.0) -> None:
        if not urls:
            raise ValueError("at least one --node URL is needed")
        self.urls = [u.rstrip("/") for u in urls]
        self.i = 0
        self.timeout = timeout
        self._client: Client | None = None
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return self.urls[self.i]

    def client(self) -> Client:
        if self._client is None:
            self._client = Client(self.url, timeout=self.timeout)
        return self._client

    def rotate(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None
            self.i = (self.i + 1) % len(self.urls)
            log.warning("switching to node %s", self.url)

    def call(self, fn: Callable[[Client], T]) -> T:
        last: Exception | None = None
        for _ in range(len(self.urls)):
            try:
                return fn(self.client())
            except NodeUnreachable as e:
                last = e
                self.rotate()
        raise NodeUnreachable(f"no --node answers ({', '.join(self.urls)}): {last}")

    def query_json(self, path: str, height: int = 0) -> Any:
        """An ABCI query's JSON value; RpcError with the node's log when the app refuses it."""
        qr = self.call(lambda c: c.abci_query(path, height=height))
        if qr.code != 0:
            raise RpcError(f"query {path} failed (code {qr.code}): {qr.log}")
        return json.loads(qr.value)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class ChainFollower:
    """Background websocket subscription to new blocks; ``wait_block`` wakes the worker."""

    def __init__(
        self, urls: list[str], on_events: Callable[[int, list[dict[str, Any]]], None] | None = None
    ) -> None:
        self.urls = [u.rstrip("/") for u in urls]
        self.on_events = on_events
        self.height = 0
        self.connected_to = ""
        self.reconnects = 0
        self._cv = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chain-follower", daemon=True)

    def start(self) -> ChainFollower:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def wait_block(self, after: int, poll_s: float = 2.0) -> int:
        """Block until a height above ``after`` is seen or ``poll_s`` passes; the height seen."""
        with self._cv:
            self._cv.wait_for(lambda: self.height > after or self._stop.is_set(), timeout=poll_s)
            return self.height

    def _seen(self, height: int, events: list[dict[str, Any]]) -> None:
        with self._cv:
            self.height = max(self.height, height)
            self._cv.notify_all()
        if self.on_events is not None and events:
            try:
                self.on_events(height, events)
            except Exception:  # a callback bug must not kill the subscription
                log.exception("event callback failed")

    def _run(self) -> None:
        asyncio.run(self._loop())

    async def _loop(self) -> None:
        delay, i = BACKOFF_START_S, 0
        while not self._stop.is_set():
            url = ws_url(self.urls[i % len(self.urls)])
            try:
                timeout = aiohttp.ClientTimeout(total=None, connect=5, sock_read=30)
                async with (
                    aiohttp.ClientSession(timeout=timeout) as session,
                    session.ws_connect(url, heartbeat=10, max_msg_size=64 << 20) as ws,
                ):
                    await ws.send_json(
                        {
                            "jsonrpc": "2.0",
                            "id": 1,
                            "method": "subscribe",
                            "params": {"query": "tm.event='NewBlock'"},
                        }
                    )
                    self.connected_to = url
                    log.info("subscribed to new blocks at %s", url)
                    delay = BACKOFF_START_S
                    while not self._stop.is_set():
                        try:
                            msg = await ws.receive(timeout=1.0)
                        except TimeoutError:
                            continue
                        if msg.type != aiohttp.WSMsgType.TEXT:
                            if msg.type in (
                                aiohttp.WSMsgType.CLOSED,
                                aiohttp.WSMsgType.CLOSING,
                                aiohttp.WSMsgType.ERROR,
                            ):
                                raise ConnectionError(f"websocket closed ({msg.type.name})")
                            continue
                        self._handle(msg.data)
            except Exception as e:  # noqa: BLE001 (any failure: back off, next node)
                self.connected_to = ""
                if self._stop.is_set():
                    break
                log.warning(
                    "websocket %s: %s; reconnecting in %.1fs", url, e.__class__.__name__, delay
                )
                self.reconnects += 1
                i += 1
                t_end = time.monotonic() + delay
                while time.monotonic() < t_end and not self._stop.is_set():
                    await asyncio.sleep(0.1)
                delay = min(delay * 2, BACKOFF_MAX_S)

    def _handle(self, text: str) -> None:
        try:
            body = safejson.loads(text)  # bounded nesting: never a C-stack overflow
            value = ((body.get("result") or {}).get("data") or {}).get("value") or {}
            height = int(value["block"]["header"]["height"])
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
            # the subscribe ack, or something this worker does not read (a JSON list or one
            # nested 100,000 deep dropped the connection and moved to the next node)
            return
        events = (value.get("result_finalize_block") or {}).get("events") or []
        self._seen(height, events)
