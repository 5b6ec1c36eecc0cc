"""Issue #28 item 6b: an idle connection to `/metrics` made socketserver print a `TimeoutError`
traceback to stderr when the connection's timeout dropped it. A client's doing is never a
traceback: one INFO line on ``loconet.metrics``. The same for a reset mid-request, a dripped
header, a client dripping past the deadline, and a malformed request line."""

from __future__ import annotations

import logging
import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter

from node.metrics import serve

IDLE_S = 0.3  # the connection timeout (10 s in production)
DEADLINE_S = 1.5  # a connection's whole life (30 s in production)


@pytest.fixture
def metrics() -> Iterator[int]:
    registry = CollectorRegistry()
    Counter("loconet_test", "a counter", registry=registry).inc()
    httpd, thread = serve(registry, "127.0.0.1:0", client_timeout_s=IDLE_S, deadline_s=DEADLINE_S)
    yield int(httpd.server_address[1])
    httpd.shutdown()
    httpd.server_close()
    thread.join(10)


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=20)


def _check_log(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str], since: float
) -> list[str]:
    time.sleep(0.2)  # the handler thread logs before it closes; let it finish
    err = capsys.readouterr().err
    recs = [r for r in caplog.records if r.created >= since]
    assert "Traceback" not in err and "Exception occurred" not in err, err
    assert "Traceback" not in caplog.text
    assert all(r.exc_info is None for r in recs)
    assert len(recs) <= 1, [r.getMessage() for r in recs]
    assert all(r.levelno == logging.INFO for r in recs)
    return [r.getMessage() for r in recs]


def test_idle_metrics_connection_is_one_line_not_a_timeout_traceback(
    metrics: int, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    since = time.time()
    c = _connect(metrics)
    t0 = time.monotonic()
    assert c.recv(100) == b""  # sent nothing: closed by the server once the timeout passed
    assert time.monotonic() - t0 >= IDLE_S * 0.9
    c.close()
    (line,) = _check_log(caplog, capsys, since)
    assert line.startswith("metrics client 127.0.0.1 dropped idle past the timeout")
    assert "TimeoutError" in line
    # and the endpoint answers the next scrape
    r = httpx.get(f"http://127.0.0.1:{metrics}/metrics", timeout=20)
    assert r.status_code == 200 and "loconet_test_total 1.0" in r.text


def _reset(c: socket.socket) -> None:
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    c.close()


def _slow_header(c: socket.socket) -> Any:
    c.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # and then nothing
    return c.recv(100)


def _reset_mid_request(c: socket.socket) -> Any:
    c.sendall(b"GET /metr")
    time.sleep(0.05)
    _reset(c)


def _drip_past_deadline(c: socket.socket) -> Any:
    end = time.monotonic() + DEADLINE_S + 1.5
    while time.monotonic() < end:  # a byte each 0.2 s: never idle, never a request
        try:
            c.sendall(b"G")
        except OSError:
            break
        time.sleep(0.2)


def _malformed(c: socket.socket) -> Any:
    c.sendall(b"\x00\xff garbage\r\n\r\n")
    return c.recv(100)


@pytest.mark.parametrize("act", [_slow_header, _reset_mid_request, _drip_past_deadline, _malformed])
def test_misbehaving_metrics_client_is_one_line_no_traceback(
    metrics: int, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str], act: Any
) -> None:
    caplog.set_level(logging.DEBUG)
    since = time.time()
    c = _connect(metrics)
    act(c)
    c.close()
    _check_log(caplog, capsys, since)
