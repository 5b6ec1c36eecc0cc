"""Issue #28 item 6a: a client that closed a blob download early made aiohttp log a 17-line ERROR
traceback (ClientConnectionResetError) each time. A client's doing is never a traceback: one
line at most, at INFO. The same for the other things a client can do to the server: reset mid
request, send a malformed request line, drip its header (slowloris)."""

from __future__ import annotations

import logging
import os
import socket
import struct
import time
from collections.abc import Callable, Iterator

import pytest

from node.blobs import BlobServer, BlobStore
from node.httplog import client_error_log

BIG = 32 << 20  # far more than loopback socket buffers hold: the server is mid-write at the close


@pytest.fixture
def big(make_store: Callable[..., BlobStore]) -> Iterator[tuple[str, BlobServer]]:
    store = make_store("big")
    h = store.put_bytes(os.urandom(BIG))
    with BlobServer(store, "127.0.0.1", 0, idle_timeout=0.5) as server:
        yield h, server


def _records(caplog: pytest.LogCaptureFixture, since: float) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.created >= since]


def _assert_one_line_at_most(caplog: pytest.LogCaptureFixture, since: float) -> None:
    recs = _records(caplog, since)
    assert all(r.exc_info is None and r.exc_text is None for r in recs), [
        r.getMessage() for r in recs
    ]
    assert "Traceback" not in caplog.text
    assert len(recs) <= 1, [r.getMessage() for r in recs]
    assert all(r.levelno <= logging.INFO for r in recs), [r.getMessage() for r in recs]


def _wait(cond: Callable[[], bool], seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _connect(server: BlobServer) -> socket.socket:
    c = socket.create_connection(("127.0.0.1", server.port), timeout=20)
    return c


def _reset(c: socket.socket) -> None:
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close -> RST
    c.close()


@pytest.mark.parametrize("how", ["close", "reset"])
def test_client_closing_a_download_early_is_one_line_no_traceback(
    big: tuple[str, BlobServer], caplog: pytest.LogCaptureFixture, how: str
) -> None:
    h, server = big
    caplog.set_level(logging.DEBUG)
    since = time.time()
    c = _connect(server)
    c.sendall(f"GET /blob/{h} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    got = b""
    while len(got) < 100_000:  # a bit of the body, then away
        chunk = c.recv(65536)
        assert chunk
        got += chunk
    assert got.startswith(b"HTTP/1.1 200")
    c.close() if how == "close" else _reset(c)
    _wait(lambda: server.stats.client_aborts == 1)
    time.sleep(0.2)  # anything aiohttp would log after the handler returned
    _assert_one_line_at_most(caplog, since)
    (line,) = [r.getMessage() for r in _records(caplog, since)]
    assert "closed the connection before the end of blob " + h[:12] in line
    assert server.stats.bytes_sent < BIG
    # and the server serves the next client as before
    c = _connect(server)
    c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert c.recv(4096).startswith(b"HTTP/1.1 200")
    c.close()


@pytest.mark.parametrize(
    "sent",
    [
        b"GET /blob/abc",  # a reset in the middle of the request line
        b"GET /blob/" + b"a" * 64 + b" HTTP/1.1\r\nHost: x\r\nX-Slow: ",  # a dripped header
        b"\x00\xffGARBAGE\r\n\r\n",  # not a request line
        b"GET /%ff\xfe HTTP/1.1\r\nHost: x\r\n\r\n",  # not UTF-8
        b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",  # a lying length
    ],
    ids=["reset-mid-request", "slowloris-header", "malformed-line", "bad-utf8", "bad-length"],
)
def test_client_misbehaving_mid_request_is_one_line_no_traceback(
    big: tuple[str, BlobServer], caplog: pytest.LogCaptureFixture, sent: bytes
) -> None:
    _, server = big
    caplog.set_level(logging.DEBUG)
    since = time.time()
    c = _connect(server)
    c.sendall(sent)
    if sent.endswith(b"\r\n\r\n"):  # a whole (bad) request: answered 400
        assert c.recv(4096).startswith(b"HTTP/1.")
        c.close()
    elif b"X-Slow" in sent:  # the idle timeout (0.5 s here) closes it
        assert c.recv(4096) == b""
        c.close()
    else:
        time.sleep(0.1)
        _reset(c)
    time.sleep(0.3)
    _assert_one_line_at_most(caplog, since)


def test_the_aiohttp_logger_keeps_a_real_error_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A client that left is one line; an error of our own handler keeps its traceback."""
    adapter = client_error_log()
    caplog.set_level(logging.DEBUG, logger="loconet.http")
    try:
        raise ConnectionResetError("Cannot write to closing transport")
    except ConnectionResetError as e:
        adapter.exception("Error handling request from %s", "10.0.0.7", exc_info=e)
    try:
        raise KeyError("a bug")
    except KeyError as e:
        adapter.exception("Error handling request from %s", "10.0.0.7", exc_info=e)
    gone, bug = caplog.records
    assert gone.levelno == logging.INFO and gone.exc_info is None
    assert gone.getMessage() == (
        "client 10.0.0.7 went away mid-request (ConnectionResetError: Cannot write to closing "
        "transport)"
    )
    assert bug.levelno == logging.ERROR and bug.exc_info is not None
