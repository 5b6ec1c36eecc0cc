"""The blob client: fetch a blob by hash from the first location that delivers it intact.

Each location is tried in order. The body is streamed into a temp file of the local store while
being hashed; it is committed under its name only when it is complete and its sha256 is the
requested hash. Anything else discards the temp file, records the reason, and moves on:

    HashMismatch     the bytes hash to something else (a lying or corrupt peer)
    Truncated        the body ended before Content-Length (or the connection broke mid-body)
    Oversize         Content-Length or the streamed body exceeds the limit (the smaller of the
                     caller's ``max_bytes`` for this fetch and the client's cap)
    PeerTimeout      no byte for ``timeout_s`` (connect/read), or the whole body took longer than
                     ``timeout_s + size / min_rate_bps`` (a peer dripping bytes)
    PeerUnavailable  refused connection, 404, 5xx, a non-HTTP URL

If no location works, ``FetchFailed`` lists each (url, error). A location is either a blob
server's base URL (``http://10.0.0.1:26680``; ``/blob/HASH`` is appended) or a full blob URL
ending in ``/blob/HASH`` for the same hash.
"""

from __future__ import annotations

import contextlib
import logging
import re
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn, Self

import httpx

from node.blobs.errors import (
    FetchError,
    FetchFailed,
    HashMismatch,
    Oversize,
    PeerTimeout,
    PeerUnavailable,
    Truncated,
)
from node.blobs.files import check_hash
from node.blobs.store import BlobStore, check_tier
from node.metrics import worker_metrics

ROUND_HEADER = "X-Loconet-Round"  # node/blobs/server.py counts the bytes for this round

log = logging.getLogger("loconet.blobs.client")

DEFAULT_MAX_BYTES = 4 << 30
DEFAULT_MIN_RATE_BPS = 256 * 1024


def blob_url(location: str, h: str) -> str:
    """The URL of blob ``h`` at ``location`` (a base URL or a full ``.../blob/HASH`` URL; a query,
    e.g. the ``?trace=HASH`` a worker's reveal adds, is dropped)."""
    check_hash(h)
    loc = location.strip().split("?", 1)[0]
    if not loc.lower().startswith(("http://", "https://")):
        raise PeerUnavailable(f"not an http(s) URL: {location!r}", location)
    # a port past 65535 (or 0) reached connect(): "Connection refused", as if nothing listened
    port = re.fullmatch(r"[^/?#]*:(\d+)", loc.split("://", 1)[1].split("/", 1)[0])
    # (length first: int() of 5,000 digits is a ValueError past Python's digit limit)
    if port and (len(port[1]) > 5 or not 1 <= int(port[1]) <= 65535):
        raise PeerUnavailable(
            f"not a valid URL (port {port[1]} is not a TCP port, 1..65535)", location
        )
    tail = loc.rstrip("/").rsplit("/", 2)
    if len(tail) == 3 and tail[1] == "blob":
        if tail[2] != h:
            raise PeerUnavailable(f"URL {location!r} names another blob than {h}", location)
        return loc.rstrip("/")
    return f"{loc.rstrip('/')}/blob/{h}"


class BlobClient:
    """``fetch(h, urls, store)`` -> the verified blob's path in ``store``. Thread-safe (one
    httpx connection pool); ``bytes_received`` counts every body byte read, failures included,
    ``received_by_hash`` the same per requested blob, ``head_bytes_sent`` / ``head_bytes_received``
    the HTTP request and response heads (request line or status line, headers, blank line).
    ``round_label`` ("JOB/ROUND"): sent as ``X-Loconet-Round`` with every request, so the serving
    blob server counts the bytes for that round (node/blobs/server.py, traffic by kind)."""

    def __init__(
        self,
        timeout_s: float = 30.0,
        max_bytes: int = DEFAULT_MAX_BYTES,
        *,
        min_rate_bps: int = DEFAULT_MIN_RATE_BPS,
        transport: httpx.BaseTransport | None = None,
        round_label: str | None = None,
    ) -> None:
        if timeout_s <= 0 or max_bytes <= 0 or min_rate_bps <= 0:
            raise ValueError("timeout_s, max_bytes and min_rate_bps must be positive")
        self.timeout_s = float(timeout_s)
        self.max_bytes = int(max_bytes)
        self.min_rate_bps = int(min_rate_bps)
        # no keep-alive: every fetch opens its own connection, so the head deadline below can
        # always reach its socket (a reused one is not announced to the trace hook)
        self._http = httpx.Client(
            timeout=httpx.Timeout(self.timeout_s),
            follow_redirects=False,
            transport=transport,
            limits=httpx.Limits(max_keepalive_connections=0),
        )
        self.bytes_received = 0
        self.received_by_hash: dict[str, int] = {}
        self.head_bytes_sent = 0
        self.head_bytes_received = 0
        self.round_label = round_label
        self._count_lock = threading.Lock()
        # progress of the current body: on_progress(bytes so far, announced size or None)
        self.on_progress: Callable[[int, int | None], None] | None = None

    def fetch(
        self,
        h: str,
        urls: list[str],
        store: BlobStore,
        tier: str = "hot",
        round_key: str | None = None,
        max_bytes: int | None = None,
        give_up_after_s: float | None = None,
    ) -> Path:
        """Return the path of blob ``h`` in ``store``, fetching it from ``urls`` if it is not
        there yet (tier and round hold are applied either way). Raises ``FetchFailed``.
        ``give_up_after_s``: no further location is tried once this long has passed since the
        first began (a list of peers that accept connections and never answer cost
        ``timeout_s`` each, without end)."""
        check_hash(h)
        check_tier(tier)
        limit = self.max_bytes if max_bytes is None else min(int(max_bytes), self.max_bytes)
        if store.has(h):
            store.retain(h, tier, round_key)
            return store.path(h)
        attempts: list[tuple[str, FetchError]] = []
        t0 = time.monotonic()
        for loc in urls:
            if give_up_after_s is not None and attempts and time.monotonic() - t0 > give_up_after_s:
                log.warning(
                    "blob %s: gave up after %.0fs and %d locations (%d not tried)",
                    h[:12],
                    time.monotonic() - t0,
                    len(attempts),
                    len(urls) - len(attempts),
                )
                break
            try:
                return self._fetch_one(h, loc, store, tier, round_key, limit)
            except FetchError as e:
                e.url = e.url or loc
                attempts.append((loc, e))
                log.warning("blob %s from %s failed: %s", h[:12], loc, e)
        raise FetchFailed(h, attempts)

    def _fetch_one(
        self, h: str, location: str, store: BlobStore, tier: str, round_key: str | None, limit: int
    ) -> Path:
        url = blob_url(location, h)
        t0 = time.monotonic()
        in_body = False
        # httpx's timeouts are per read: a peer sending "100 Continue" every few seconds, or its
        # head a byte at a time, kept fetch() (and the worker's loop) waiting forever
        head = _HeadDeadline(2 * self.timeout_s)
        headers = {"Accept-Encoding": "identity"}
        if self.round_label:
            headers[ROUND_HEADER] = self.round_label
        try:
            with self._http.stream(
                "GET",
                url,
                headers=headers,
                extensions={"trace": head.trace},
            ) as r:
                head.cancel()
                self._count_heads(r)
                if r.status_code != 200:
                    raise PeerUnavailable(f"HTTP {r.status_code}", location)
                cl_text = r.headers.get("content-length")
                expected: int | None = None
                if cl_text is not None:
                    if not cl_text.strip().isdigit():
                        raise PeerUnavailable(f"bad Content-Length {cl_text!r}", location)
                    expected = int(cl_text)
                    if expected > limit:
                        raise Oversize(
                            f"announces {expected} B, over the limit of {limit} B", location
                        )
                budget_s = (
                    self.timeout_s
                    + (expected if expected is not None else limit) / self.min_rate_bps
                )
                in_body = True
                with store.writer() as w:
                    for chunk in r.iter_raw():  # as received: the rate check sees every read
                        with self._count_lock:
                            self.bytes_received += len(chunk)
                            self.received_by_hash[h] = self.received_by_hash.get(h, 0) + len(chunk)
                        worker_metrics().blob_in(len(chunk))  # node/metrics.py
                        if w.size + len(chunk) > limit:
                            raise Oversize(f"sent more than the limit of {limit} B", location)
                        w.write(chunk)
                        if self.on_progress is not None:
                            self.on_progress(w.size, expected)
                        if time.monotonic() - t0 > budget_s:
                            raise PeerTimeout(
                                f"too slow: {w.size} B in {time.monotonic() - t0:.1f}s "
                                f"(needs {self.min_rate_bps} B/s after {self.timeout_s:g}s)",
                                location,
                            )
                    if expected is not None and w.size != expected:
                        raise Truncated(
                            f"sent {w.size} B of the {expected} B it announced", location
                        )
                    got = w.hexdigest()
                    if got != h:
                        raise HashMismatch(f"sent bytes hashing to {got}, not {h}", location)
                    w.commit(tier, round_key)
        except httpx.TimeoutException as e:
            raise PeerTimeout(
                f"no answer within {self.timeout_s:g}s ({type(e).__name__})", location
            ) from None
        except httpx.HTTPError as e:
            if not head.expired:
                self._failed(e, location, in_body)
            raise PeerTimeout(
                f"no complete response head within {head.seconds:g}s", location
            ) from None
        except httpx.InvalidURL as e:  # http://[::1 : not an HTTPError, it escaped as a traceback
            raise PeerUnavailable(f"not a valid URL ({e})", location) from None
        except UnicodeError as e:  # a DNS label over 63 characters, or an empty one (a..b)
            raise PeerUnavailable(f"not a valid host name ({e})", location) from None
        finally:
            head.cancel()
        return store.path(h)

    def _count_heads(self, r: httpx.Response) -> None:
        """The request head sent and the response head received, as HTTP/1.1 writes them."""
        q = r.request
        sent = len(b"%s %s HTTP/1.1\r\n" % (q.method.encode(), q.url.raw_path))
        sent += sum(len(k) + len(v) + 4 for k, v in q.headers.raw) + 2
        got = len(f"HTTP/1.1 {r.status_code} {r.reason_phrase}\r\n".encode())
        got += sum(len(k) + len(v) + 4 for k, v in r.headers.raw) + 2
        with self._count_lock:
            self.head_bytes_sent += sent
            self.head_bytes_received += got

    @staticmethod
    def _failed(e: Exception, location: str, in_body: bool) -> NoReturn:
        """Raises the FetchError for a transport failure ``e``."""
        if isinstance(e, httpx.RemoteProtocolError):
            if in_body:
                raise Truncated(f"connection broke mid-body ({e})", location) from None
            raise PeerUnavailable(str(e), location) from None
        raise PeerUnavailable(f"{type(e).__name__}: {e}", location) from None

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class _HeadDeadline:
    """Shuts the connection's socket down when the response head has not arrived ``seconds``
    after the request began (connect included): the blocked read then fails at once. The
    socket comes from httpcore's ``connection.connect_tcp.complete`` trace event."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def trace(self, name: str, info: dict[str, Any]) -> None:
        if name == "connection.connect_tcp.complete":
            stream = info.get("return_value")
            sock = stream.get_extra_info("socket") if stream is not None else None
            with self._lock:
                self._sock = sock
                if self.expired:
                    self._shutdown()

    def _fire(self) -> None:
        with self._lock:
            if self._timer is None:
                return  # cancelled meanwhile
            self.expired = True
            self._shutdown()

    def _shutdown(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)

    def cancel(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
