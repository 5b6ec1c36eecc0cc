"""The blob server: aiohttp, read-only over HTTP.

    GET  /blob/{sha256}   the bytes; ``Range: bytes=a-b | a- | -n`` -> 206 with Content-Range,
                          an unsatisfiable range -> 416 (``Content-Range: bytes */SIZE``); a
                          malformed or multi-range header is ignored (200, the whole blob);
                          positions are ASCII digits (a 5000-digit one is "past the end", not a
                          500); two Range headers, or an If-Range other than the ETag, give the
                          whole blob
    HEAD /blob/{sha256}   the same headers, no body
    GET  /stats           JSON counters: bytes_sent (body bytes written), requests, hits, ...,
                          and the bytes sent by kind and by round (see *Traffic by kind* below)
    GET  /health          "ok"
    GET  /metrics         the worker's Prometheus figures (node/metrics.py WorkerMetrics)

File reads and the metadata update run in the loop's default executor, so a slow disk or a
store locked by another process never stalls other requests. A malformed hash is 400 (``{"error":
"invalid_hash"}``), an unknown one 404; any other method is 405: nothing can be uploaded over the
network, only the local worker writes through BlobStore. A connection gets ``idle_timeout`` (15 s)
to send a whole request (slowloris), a reader ``write_timeout`` (60 s) to take each chunk. Bodies
are streamed from the file in ``chunk_size`` pieces; ``bytes_sent`` counts what was handed to the
transport (the round-overhead benchmark reads it).

Traffic by kind (issue 29, benchmarks/traffic.py): every byte the server writes is also counted
under a *kind* and a *round*. The kind of a blob body is what ``classify(hash, head)`` says (the
worker installs one that knows what it stored: trace lists, datasets), else the kind byte of the
blob's canonical header (trainer/commit.py: ``LOCO``, u16 version, kind at offset 6: update,
state, model, carry), else ``other``; the response heads (status line and headers, as written)
and the short error bodies (404, 400, 416) are kind ``http``. The round is the one the requester
names in ``X-Loconet-Round: JOB/ROUND`` (the worker's blob client sends the round it fetches for:
self-reported, used for counting only), else ``round_of(hash)`` (the worker's: the blob's round
hold in the store, else the newest round it has seen), else the blob's round hold in the store,
else ``""`` (unattributed). The request heads the server reads are counted too
(``head_bytes_received``, by round), so a worker's received bytes include the requests it serves.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Self

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from node.blobs.client import ROUND_HEADER
from node.blobs.errors import BlobNotFound
from node.blobs.files import HASH_RE
from node.blobs.store import BlobStore
from node.httplog import client_error_log
from node.metrics import worker_metrics

log = logging.getLogger("loconet.blobs.server")

DEFAULT_PORT = 26680  # node i of a local testnet serves blobs on 26680 + 100·i


# the canonical blob header (trainer/commit.py; not imported: the blob exchange needs no torch):
# magic b"LOCO", u16 version, then the kind byte at offset 6
BLOB_MAGIC = b"LOCO"
KIND_OFFSET = 6
HEADER_KINDS = {1: "update", 2: "state", 3: "model", 4: "carry"}
# every kind a worker's traffic is counted under (node/worker README, "Traffic by kind")
KINDS = ("update", "state", "trace_list", "carry", "model", "dataset", "other", "http")
_ROUND_RE = re.compile(r"[0-9]{1,12}/[0-9]{1,12}")
MAX_ROUNDS_KEPT = 4096  # per-round counters kept (oldest dropped first): a bounded map


def kind_of_head(head: bytes) -> str:
    """A blob's kind from its first bytes: the canonical header's kind byte, else ``other``."""
    if head[:4] == BLOB_MAGIC and len(head) > KIND_OFFSET:
        return HEADER_KINDS.get(head[KIND_OFFSET], "other")
    return "other"


def round_label(value: str | None) -> str:
    """The ``X-Loconet-Round`` value if it is a round key (``JOB/ROUND``), else ``""``."""
    v = (value or "").strip()
    return v if _ROUND_RE.fullmatch(v) else ""


@dataclass(slots=True)
class ServerStats:
    requests: int = 0
    hits: int = 0  # GET/HEAD answered 200 or 206
    ranges: int = 0  # of which 206
    not_found: int = 0
    bad_requests: int = 0  # malformed hash
    unsatisfiable: int = 0  # 416
    client_aborts: int = 0  # connections the client closed mid-response
    bytes_sent: int = 0  # blob body bytes
    head_bytes_sent: int = 0  # response heads and error bodies (kind "http")
    head_bytes_received: int = 0  # request heads read
    # kind -> bytes sent (bodies by the blob's kind, heads and error bodies as "http")
    sent_by_kind: dict[str, int] = field(default_factory=dict)
    # round key ("JOB/ROUND", "" unattributed) -> kind -> bytes sent
    sent_by_round: dict[str, dict[str, int]] = field(default_factory=dict)
    # round key -> request head bytes read
    received_by_round: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def count_sent(self, kind: str, round_key: str, n: int) -> None:
        """``n`` bytes written under ``kind`` for ``round_key``."""
        with self._lock:
            if kind == "http":
                self.head_bytes_sent += n
            else:
                self.bytes_sent += n
            self.sent_by_kind[kind] = self.sent_by_kind.get(kind, 0) + n
            per = self._round(self.sent_by_round, round_key, dict)
            per[kind] = per.get(kind, 0) + n

    def count_received(self, round_key: str, n: int) -> None:
        with self._lock:
            self.head_bytes_received += n
            self._round(self.received_by_round, round_key, int)
            self.received_by_round[round_key] += n

    @staticmethod
    def _round(m: dict[str, Any], key: str, new: Callable[[], Any]) -> Any:
        if key not in m:
            if len(m) >= MAX_ROUNDS_KEPT:
                del m[next(iter(m))]
            m[key] = new()
        return m[key]

    def to_dict(self) -> dict[str, Any]:
        """A snapshot (copied under the lock: the server's thread keeps counting)."""
        with self._lock:
            return {
                "requests": self.requests,
                "hits": self.hits,
                "ranges": self.ranges,
                "not_found": self.not_found,
                "bad_requests": self.bad_requests,
                "unsatisfiable": self.unsatisfiable,
                "client_aborts": self.client_aborts,
                "bytes_sent": self.bytes_sent,
                "head_bytes_sent": self.head_bytes_sent,
                "head_bytes_received": self.head_bytes_received,
                "sent_by_kind": dict(self.sent_by_kind),
                "sent_by_round": {k: dict(v) for k, v in self.sent_by_round.items()},
                "received_by_round": dict(self.received_by_round),
            }


MAX_CONNECTIONS = 256
# open connections one address may hold: one peer holding every slot answered every honest
# fetch with 503, so a provider's revealed states read as unavailable to its verifiers. Per
# exact address: an IPv6 host with a /64 still gets 16 per address it uses (grouping by /64
# would make the honest workers of one datacenter subnet share 16)
MAX_PER_PEER = 16


class _Busy(asyncio.Protocol):
    """A connection over ``max_connections``: one 503, then closed."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.write(
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 1\r\n"
            b"Connection: close\r\n\r\n"
        )
        transport.close()


def _peer_host(transport: asyncio.BaseTransport | None) -> Any:
    peer = transport.get_extra_info("peername") if transport is not None else None
    return peer[0] if isinstance(peer, tuple) and peer else peer


class _PerPeerGate(asyncio.Protocol):
    """Admits a connection when its address holds fewer than ``per_peer`` open ones: hands the
    transport to a fresh aiohttp handler (``transport.set_protocol``); answers 503 otherwise."""

    def __init__(self, server: Any, per_peer: int) -> None:
        self._server, self._per_peer = server, per_peer

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        host = _peer_host(transport)
        held = sum(1 for c in self._server.connections if _peer_host(c.transport) == host)
        if held >= self._per_peer:
            _Busy().connection_made(transport)
            return
        handler = self._server()
        transport.set_protocol(handler)
        handler.connection_made(transport)


class _CappedSite(web.TCPSite):
    """TCPSite whose protocol factory answers ``_Busy`` past ``max_connections`` open ones, or
    past ``per_peer`` open ones from the same address."""

    def __init__(
        self, runner: web.AppRunner, host: str, port: int, cap: int, per_peer: int, **kw: Any
    ) -> None:
        super().__init__(runner, host, port, **kw)
        self._cap, self._per_peer = cap, per_peer

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with the runner
        server = self._runner.server
        assert server is not None

        def factory() -> asyncio.Protocol:
            if len(server.connections) >= self._cap:
                return _Busy()
            return _PerPeerGate(server, self._per_peer)

        self._server = await asyncio.get_running_loop().create_server(
            factory,
            self._host,
            self._port,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
        )
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port


BEYOND = 10**30  # stands for any position past every file: a huge number in a Range header


def _position(text: str) -> int | None:
    """A byte position of a Range header: ASCII decimal digits only (no sign, no Unicode digits);
    more than 30 digits reads as BEYOND instead of reaching int()'s 4300-digit error (a 500)."""
    if not (text.isascii() and text.isdigit()):
        return None
    return int(text) if len(text) <= 30 else BEYOND


def _span(request: web.Request, headers: dict[str, str], size: int) -> tuple[int, int, int] | None:
    """(first byte, last byte, status) a GET of a ``size``-byte blob answers: the whole blob
    (200) unless one satisfiable ``Range`` applies (206, its Content-Range added to
    ``headers``); None when that range is unsatisfiable (416)."""
    ranges = request.headers.getall("Range", [])
    rng = ranges[0] if len(ranges) == 1 else None  # two Range headers: ambiguous, whole
    if_range = request.headers.get("If-Range")
    if if_range is not None and if_range.strip() != headers["ETag"]:
        rng = None  # RFC 9110 13.1.5: a validator that does not match means the whole
    if rng is None:
        return 0, size - 1, 200
    parsed = parse_range(rng, size)
    if parsed is None:
        return None
    if parsed is False:
        return 0, size - 1, 200
    assert isinstance(parsed, tuple)
    first, last = parsed
    headers["Content-Range"] = f"bytes {first}-{last}/{size}"
    return first, last, 206


def parse_range(header: str, size: int) -> tuple[int, int] | None | bool:
    """RFC 9110 single byte range. Returns (first, last) inclusive; ``None`` when unsatisfiable
    (-> 416); ``False`` when the header is to be ignored (malformed, multi-range, other unit)."""
    unit, _, spec = header.strip().partition("=")
    if unit.strip().lower() != "bytes" or not spec or "," in spec:
        return False
    first_s, dash, last_s = spec.strip().partition("-")
    if not dash:
        return False
    first_s, last_s = first_s.strip(), last_s.strip()
    if first_s == "":  # suffix range: the last N bytes
        n = _position(last_s)
        if n is None:
            return False
        if n == 0 or size == 0:
            return None
        return max(0, size - n), size - 1
    first = _position(first_s)
    last = _position(last_s) if last_s else size - 1
    if first is None or last is None:
        return False
    if last_s and last < first:
        return False
    if first >= size:
        return None
    return first, min(last, size - 1)


class BlobServer:
    """Serves ``store`` on http://host:port. ``await start()`` / ``await stop()`` inside an event
    loop; ``start_thread()`` / ``stop_thread()`` (or ``with BlobServer(...):``) run it on its own
    loop in a daemon thread for synchronous callers. Port 0 picks a free port (``.port``)."""

    def __init__(
        self,
        store: BlobStore,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        *,
        chunk_size: int = 256 * 1024,
        idle_timeout: float = 15.0,
        write_timeout: float = 60.0,
        max_connections: int = MAX_CONNECTIONS,
        max_per_peer: int = MAX_PER_PEER,
        classify: Callable[[str, bytes], str | None] | None = None,
        round_of: Callable[[str], str | None] | None = None,
    ) -> None:
        self.store = store
        # traffic by kind and round (module docstring): the owner's hooks, consulted first
        self.classify = classify
        self.round_of = round_of
        # a connection that has not sent a whole request within idle_timeout seconds of opening (or
        # of its last response) is closed: slowloris clients cannot hold sockets open for an hour
        # (aiohttp's default keep-alive); a reader that takes more than write_timeout seconds to
        # accept one chunk is dropped, so a client that never reads cannot pin a handler either
        self.idle_timeout, self.write_timeout = idle_timeout, write_timeout
        # open connections beyond this get a 503 and are closed at once: each one holds a file
        # descriptor of the worker's own process (which trains, stores blobs and talks to the
        # chain), so a peer opening thousands would otherwise starve it into EMFILE
        self.max_connections = max_connections
        self.max_per_peer = max_per_peer
        self.host = host
        self.port = port
        self.chunk_size = chunk_size
        self.stats = ServerStats()
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def make_app(self) -> web.Application:
        app = web.Application()
        app.on_response_prepare.append(self._count_head)
        app.router.add_get("/blob/{h}", self._blob)  # also answers HEAD
        app.router.add_get("/stats", self._stats)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        return app

    # ------------------------------------------------------------------ handlers

    async def _count_head(self, request: web.Request, resp: web.StreamResponse) -> None:
        """on_response_prepare: the response head about to be written (the headers are final
        here; the status line is aiohttp's), plus a short error body, as kind ``http``."""
        if not request.path.startswith("/blob/"):
            return  # /stats and /health: the operator's monitoring, not the network's traffic
        v = request.version
        n = len(f"HTTP/{v[0]}.{v[1]} {resp.status} {resp.reason}\r\n".encode())
        n += sum(len(k.encode()) + len(str(val).encode()) + 4 for k, val in resp.headers.items())
        n += 2
        body = getattr(resp, "body", None)  # web.Response (an error's JSON); a blob streams
        if isinstance(body, bytes | bytearray):
            n += len(body)
        self.stats.count_sent("http", request.get("loconet_round", ""), n)

    def _round_of(self, h: str) -> str:
        """The round a served blob is counted for when the requester names none: the owner's
        ``round_of`` hook, else the blob's newest round hold in the store, else ``""``."""
        try:
            got = self.round_of(h) if self.round_of is not None else None
        except Exception:  # noqa: BLE001 (counting only: never fail a request over it)
            log.debug("round_of(%s) failed", h[:12], exc_info=True)
            got = None
        if got is not None:
            return round_label(got)
        try:
            rounds = self.store.info(h).rounds
        except Exception:  # noqa: BLE001 (counting only: never fail a request over it)
            return ""
        keys = [r for r in rounds if _ROUND_RE.fullmatch(r)]
        return max(keys, key=lambda r: tuple(int(x) for x in r.split("/")), default="")

    def _kind_of(self, h: str, f: Any) -> str:
        """A served blob's kind (module docstring); reads its first bytes, then rewinds."""
        pos = f.tell()
        f.seek(0)
        head = f.read(8)
        f.seek(pos)
        try:
            got = self.classify(h, head) if self.classify is not None else None
        except Exception:  # noqa: BLE001 (counting only: never fail a request over it)
            log.debug("classify(%s) failed", h[:12], exc_info=True)
            got = None
        return got if got in KINDS else kind_of_head(head)

    async def _blob(self, request: web.Request) -> web.StreamResponse:
        self.stats.requests += 1
        named = self._count_request(request)
        h = request.match_info["h"]
        if HASH_RE.fullmatch(h) is None:
            self.stats.bad_requests += 1
            return web.json_response(
                {
                    "error": "invalid_hash",
                    "detail": "the blob name must be a sha256: 64 lowercase hex characters",
                },
                status=400,
            )
        head = request.method == "HEAD"
        loop = asyncio.get_running_loop()
        try:
            # the metadata touch may wait on SQLite's lock held by another process: not on the loop
            f, size = await loop.run_in_executor(None, self.store.open, h, not head)
        except BlobNotFound:
            self.stats.not_found += 1
            return web.json_response({"error": "not_found", "hash": h}, status=404)
        with f:
            kind, rk = await self._kind_and_round(h, f, named)
            request["loconet_round"] = rk
            headers = {
                "Accept-Ranges": "bytes",
                "Content-Type": "application/octet-stream",
                "ETag": f'"{h}"',
                "Cache-Control": "public, max-age=31536000, immutable",
            }
            span = _span(request, headers, size)
            if span is None:
                self.stats.unsatisfiable += 1
                return web.Response(
                    status=416,
                    headers={"Content-Range": f"bytes */{size}", "Accept-Ranges": "bytes"},
                )
            first, last, status = span
            length = max(0, last - first + 1)
            resp = web.StreamResponse(status=status, headers=headers)
            resp.content_length = length
            self.stats.hits += 1
            self.stats.ranges += status == 206
            sent = [0]  # body bytes handed to the transport, for the line below
            try:
                return await self._send(
                    request, resp, f, first, length, head, sent, kind=kind, round_key=rk
                )
            except ConnectionError as e:
                self._client_closed(request, h, sent[0], length, e)
                return resp

    def _count_request(self, request: web.Request) -> str:
        """Counts the request head as read (request line, headers, blank line) under the round
        the requester names; returns that round (``""``: none, or not a round key)."""
        named = round_label(request.headers.get(ROUND_HEADER))
        request["loconet_round"] = named
        self.stats.count_received(
            named,
            len(f"{request.method} {request.raw_path} HTTP/1.1\r\n".encode())
            + sum(len(k) + len(v) + 4 for k, v in request.raw_headers)
            + 2,
        )
        return named

    async def _kind_and_round(self, h: str, f: Any, named: str) -> tuple[str, str]:
        """The (kind, round) a served blob's bytes are counted under (module docstring), read in
        the executor: both hooks may touch the disk or the store's lock."""
        loop = asyncio.get_running_loop()
        if named:
            return await loop.run_in_executor(None, self._kind_of, h, f), named

        def both() -> tuple[str, str]:
            return self._kind_of(h, f), self._round_of(h)

        return await loop.run_in_executor(None, both)

    def _client_closed(
        self, request: web.Request, h: str, sent: int, length: int, e: ConnectionError
    ) -> None:
        """The client closed (or reset) its connection before the end: its choice (a reader that
        got what it needed, a Ctrl-C), never our error. One line; it was a 17-line ERROR
        traceback from aiohttp for every early close."""
        self.stats.client_aborts += 1
        log.info(
            "client %s closed the connection before the end of blob %s (%d of %d B written; %s)",
            request.remote,
            h[:12],
            sent,
            length,
            type(e).__name__,
        )
        if request.transport is not None:
            request.transport.abort()

    async def _send(
        self,
        request: web.Request,
        resp: web.StreamResponse,
        f: Any,
        first: int,
        length: int,
        head: bool,
        sent: list[int],
        *,
        kind: str = "other",
        round_key: str = "",
    ) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        await resp.prepare(request)
        if head:
            return resp
        f.seek(first)
        remaining = length
        while remaining > 0:
            chunk = await loop.run_in_executor(None, f.read, min(self.chunk_size, remaining))
            if not chunk:
                break
            try:
                async with asyncio.timeout(self.write_timeout):
                    await resp.write(chunk)
            except TimeoutError:
                log.info("dropping a client that read nothing for %.0f s", self.write_timeout)
                if request.transport is not None:
                    request.transport.abort()
                return resp
            self.stats.count_sent(kind, round_key, len(chunk))  # bytes_sent, by kind and round
            sent[0] += len(chunk)
            worker_metrics().blob_out(len(chunk))  # node/metrics.py
            remaining -= len(chunk)
        await resp.write_eof()
        return resp

    async def _stats(self, request: web.Request) -> web.Response:
        return web.json_response({**self.stats.to_dict(), "store": self.store.usage()})

    async def _metrics(self, request: web.Request) -> web.Response:
        """The worker's Prometheus figures (node/metrics.py ``WorkerMetrics``: blob bytes,
        training loss, round and step time by job) beside its blobs: what the explorer's job page
        shows as a provider's live progress."""
        body = generate_latest(worker_metrics().registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._runner = web.AppRunner(
            self.make_app(),
            access_log=None,
            handle_signals=False,
            shutdown_timeout=2.0,
            keepalive_timeout=self.idle_timeout,
            logger=client_error_log(),  # a peer's unparsable request: one line, no traceback
        )
        await self._runner.setup()
        site = _CappedSite(
            self._runner,
            self.host,
            self.port,
            self.max_connections,
            self.max_per_peer,
            reuse_address=True,
        )
        await site.start()
        if self.port == 0:
            self.port = int(self._runner.addresses[0][1])
        log.info("serving blobs from %s at %s", self.store.root, self.url)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def serve_forever(self) -> None:
        """Start, then run until cancelled (or ``stop_thread``)."""
        await self.start()
        self._stopped = asyncio.Event()
        try:
            await self._stopped.wait()
        finally:
            await self.stop()

    def start_thread(self) -> BlobServer:
        """Run on a private event loop in a daemon thread; returns once listening (or raises
        the start error, e.g. the port is taken)."""
        if self._thread is not None:
            raise RuntimeError("the blob server is already running in a thread")
        ready = threading.Event()
        error: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self.start())
                self._stopped = asyncio.Event()
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                error.append(e)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_until_complete(self._stopped.wait())
                loop.run_until_complete(self.stop())
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name=f"blob-server:{self.port}", daemon=True)
        self._thread.start()
        ready.wait()
        if error:
            self._thread.join()
            self._thread = None
            raise error[0]
        return self

    def stop_thread(self, timeout: float = 10.0) -> None:
        if self._thread is None:
            return
        loop, stopped = self._loop, self._stopped
        if loop is not None and stopped is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stopped.set)
        self._thread.join(timeout)
        self._thread = None

    def __enter__(self) -> Self:
        self.start_thread()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_thread()


def serve_blobs(
    store: BlobStore,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    *,
    classify: Callable[[str, bytes], str | None] | None = None,
    round_of: Callable[[str], str | None] | None = None,
) -> BlobServer:
    """Start a blob server in a background thread and return it (``.url``, ``.stats``,
    ``.stop_thread()``): the one-line way for a synchronous worker to serve its store.
    ``classify``/``round_of``: the traffic counters' hooks (module docstring)."""
    return BlobServer(store, host, port, classify=classify, round_of=round_of).start_thread()
