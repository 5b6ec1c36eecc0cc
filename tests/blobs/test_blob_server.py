"""The aiohttp blob server on loopback, spoken to with httpx: GET, HEAD, Range, 404, 400 for a
bad hash, no upload, the bytes-sent counter."""

from __future__ import annotations

import os

import httpx
import pytest

from node.blobs import BlobServer, BlobStore
from node.blobs.server import parse_range
from tests.kits.blobkit import sha

DATA = os.urandom(100_000)


def url(server: BlobServer, h: str) -> str:
    return f"{server.url}/blob/{h}"


def test_get_whole_blob(served: tuple[BlobStore, BlobServer]) -> None:
    store, server = served
    h = store.put_bytes(DATA)
    r = httpx.get(url(server, h))
    assert r.status_code == 200 and r.content == DATA
    assert r.headers["content-length"] == str(len(DATA))
    assert r.headers["accept-ranges"] == "bytes" and r.headers["etag"] == f'"{h}"'


def test_head_gives_headers_without_body(served: tuple[BlobStore, BlobServer]) -> None:
    store, server = served
    h = store.put_bytes(DATA)
    r = httpx.head(url(server, h))
    assert r.status_code == 200 and r.content == b""
    assert r.headers["content-length"] == str(len(DATA))
    assert httpx.head(url(server, sha(b"absent"))).status_code == 404
    assert httpx.get(f"{server.url}/stats").json()["bytes_sent"] == 0


@pytest.mark.parametrize(
    "header,first,last",
    [
        ("bytes=0-0", 0, 0),
        ("bytes=10-99", 10, 99),
        ("bytes=99990-", 99990, 99999),
        ("bytes=-25", 99975, 99999),
        ("bytes=50000-999999999", 50000, 99999),  # clipped to the end
        ("bytes=-200000", 0, 99999),  # suffix longer than the blob: all of it
    ],
)
def test_range_206(
    served: tuple[BlobStore, BlobServer], header: str, first: int, last: int
) -> None:
    store, server = served
    h = store.put_bytes(DATA)
    r = httpx.get(url(server, h), headers={"Range": header})
    assert r.status_code == 206
    assert r.content == DATA[first : last + 1]
    assert r.headers["content-range"] == f"bytes {first}-{last}/{len(DATA)}"


@pytest.mark.parametrize("header", ["bytes=100000-", "bytes=100000-100010", "bytes=-0"])
def test_range_unsatisfiable_416(served: tuple[BlobStore, BlobServer], header: str) -> None:
    store, server = served
    h = store.put_bytes(DATA)
    r = httpx.get(url(server, h), headers={"Range": header})
    assert r.status_code == 416
    assert r.headers["content-range"] == f"bytes */{len(DATA)}"


@pytest.mark.parametrize(
    "header", ["bytes=5-2", "bytes=a-b", "items=0-5", "bytes=0-1,5-6", "bytes"]
)
def test_malformed_or_multi_range_is_ignored(
    served: tuple[BlobStore, BlobServer], header: str
) -> None:
    store, server = served
    h = store.put_bytes(DATA)
    r = httpx.get(url(server, h), headers={"Range": header})
    assert r.status_code == 200 and r.content == DATA


def test_parse_range_empty_blob() -> None:
    assert parse_range("bytes=0-", 0) is None
    assert parse_range("bytes=-5", 0) is None


def test_unknown_blob_404(served: tuple[BlobStore, BlobServer]) -> None:
    _, server = served
    r = httpx.get(url(server, sha(b"never stored")))
    assert r.status_code == 404 and r.json()["error"] == "not_found"


@pytest.mark.parametrize(
    "name",
    [
        "A" * 64,
        "a" * 63,
        "zz" + "a" * 62,
        "..%2F..%2Fmeta.db",
        "%2e%2e",
        "meta.db",
        "a" * 64 + "%00",
    ],
)
def test_bad_hash_in_url_is_400(served: tuple[BlobStore, BlobServer], name: str) -> None:
    _, server = served
    r = httpx.get(f"{server.url}/blob/{name}")
    assert r.status_code == 400
    assert r.json()["error"] == "invalid_hash"


def test_traversal_paths_never_reach_files(served: tuple[BlobStore, BlobServer]) -> None:
    store, server = served
    store.put_bytes(DATA)
    for path in ["/blob/../meta.db", "/blob/../../etc/passwd", "/meta.db", "/blobs/"]:
        r = httpx.get(server.url + path)
        assert r.status_code in (400, 404)
        assert b"SQLite" not in r.content and b"root:" not in r.content


@pytest.mark.parametrize("method", ["PUT", "POST", "DELETE", "PATCH"])
def test_no_upload_or_delete_over_http(served: tuple[BlobStore, BlobServer], method: str) -> None:
    store, server = served
    body = b"uninvited"
    r = httpx.request(method, url(server, sha(body)), content=body)
    assert r.status_code == 405
    assert not store.has(sha(body)) and store.ls() == []


def test_stats_count_body_bytes_sent(served: tuple[BlobStore, BlobServer]) -> None:
    store, server = served
    h = store.put_bytes(DATA)
    httpx.get(url(server, h))
    httpx.get(url(server, h), headers={"Range": "bytes=0-99"})
    httpx.head(url(server, h))
    httpx.get(url(server, sha(b"absent")))
    st = httpx.get(f"{server.url}/stats").json()
    assert st["bytes_sent"] == len(DATA) + 100
    assert (st["hits"], st["ranges"], st["not_found"]) == (3, 1, 1)
    assert server.stats.bytes_sent == len(DATA) + 100
    assert st["store"]["used_bytes"] == len(DATA)


def test_port_in_use_is_an_error_at_start(served: tuple[BlobStore, BlobServer]) -> None:
    store, server = served
    with pytest.raises(OSError):
        BlobServer(store, "127.0.0.1", server.port).start_thread()


# ---- red-team regressions


@pytest.mark.parametrize(
    "header,expect",
    [
        ("bytes=" + "9" * 5000 + "-", 416),  # int() of 5000 digits raised: a 500 and a traceback
        ("bytes=0-" + "9" * 5000, 206),  # past the end: clamped to the last byte
        ("bytes=-" + "9" * 5000, 206),  # a suffix longer than the blob: all of it
        ("bytes=١-", 200),  # Unicode digits are not digits here: ignored
        ("bytes=²-5", 200),
        ("bytes=-٣", 200),
    ],
)
def test_invalid_range_numbers(
    served: tuple[BlobStore, BlobServer], header: str, expect: int
) -> None:
    store, server = served
    h = store.put_bytes(DATA)
    r = httpx.get(url(server, h), headers=[(b"Range", header.encode())])  # UTF-8 on the wire
    assert r.status_code == expect, r.text[:200]
    if expect == 206:
        assert (
            r.content == DATA
            and r.headers["content-range"] == f"bytes 0-{len(DATA) - 1}/{len(DATA)}"
        )


def test_invalid_partial_request_is_closed_after_the_idle_timeout(make_store) -> None:
    """slowloris: a connection that never finishes its request headers used to stay open for
    aiohttp's default keep-alive (an hour); it is closed after ``idle_timeout``."""
    import socket
    import time

    with BlobServer(make_store(), port=0, idle_timeout=1.0) as server:
        s = socket.create_connection(("127.0.0.1", server.port))
        s.settimeout(30)
        # no blank line: never ends
        s.sendall(b"GET /blob/" + b"0" * 64 + b" HTTP/1.1\r\nHost: x\r\n")
        t0 = time.monotonic()
        assert s.recv(100) == b""  # closed by the server
        assert time.monotonic() - t0 < 10
        s.close()
        assert httpx.get(f"{server.url}/health").text == "ok"  # and it still serves others


def test_invalid_reader_that_never_reads_is_dropped(make_store) -> None:
    """A client that asks for a big blob and never reads pinned a handler (and an open file) for as
    long as it liked; after ``write_timeout`` without progress the server drops it."""
    import socket
    import time

    store = make_store()
    size = 48 << 20
    h = store.put_bytes(os.urandom(1 << 20) * 48)
    with BlobServer(store, port=0, write_timeout=1.0) as server:
        s = socket.create_connection(("127.0.0.1", server.port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        s.sendall(f"GET /blob/{h} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        time.sleep(4)  # read nothing: the server's writes stall, then it gives up
        got = 0
        s.settimeout(10)
        try:
            while chunk := s.recv(1 << 20):
                got += len(chunk)
        except (ConnectionResetError, TimeoutError):
            pass
        s.close()
        assert got < size  # the body was cut off
        assert httpx.get(f"{server.url}/health").text == "ok"


@pytest.mark.parametrize(
    "headers,expect",
    [
        ([(b"Range", b"bytes=5-9"), (b"Range", b"bytes=0-1")], 200),  # two: ambiguous, whole blob
        ([(b"Range", b"bytes=5-9"), (b"If-Range", b'"not-this-blob"')], 200),
        ([(b"Range", b"bytes=5-9"), (b"If-Range", b"Wed, 21 Oct 2015 07:28:00 GMT")], 200),
        ([(b"Range", b"bytes=5-9"), (b"If-Range", b"ETAG")], 206),  # its own ETag: the range
    ],
)
def test_invalid_range_with_two_headers_or_a_stale_if_range(
    served: tuple[BlobStore, BlobServer], headers: list[tuple[bytes, bytes]], expect: int
) -> None:
    """Two Range headers served the first one's bytes; an If-Range naming another version was
    ignored (RFC 9110: a validator that does not match means the whole representation)."""
    store, server = served
    h = store.put_bytes(DATA)
    headers = [(k, v.replace(b"ETAG", f'"{h}"'.encode())) for k, v in headers]
    r = httpx.get(url(server, h), headers=headers)
    assert r.status_code == expect
    assert r.content == (DATA if expect == 200 else DATA[5:10])


def test_invalid_connection_flood_gets_503_and_the_server_keeps_serving(make_store) -> None:
    """A peer opening connections without end (each silent until the idle timeout) held one file
    descriptor each in the worker's own process: thousands of them starve its training, store and
    chain client into EMFILE. Past ``max_connections`` a new one gets a 503 and is closed at once;
    when one of the flood goes, a real client is served again."""
    import socket
    import time

    store = make_store()
    h = store.put_bytes(DATA)
    with BlobServer(store, port=0, max_connections=4, idle_timeout=30.0) as server:
        flood = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(4)]
        time.sleep(0.3)
        extra = socket.create_connection(("127.0.0.1", server.port))
        extra.settimeout(5)
        got = b""
        while chunk := extra.recv(1000):
            got += chunk
        assert got.startswith(b"HTTP/1.1 503 "), got  # and then closed (recv returned b"")
        assert httpx.get(url(server, h)).status_code == 503
        flood.pop().close()
        time.sleep(0.3)
        r = httpx.get(url(server, h))
        assert r.status_code == 200 and r.content == DATA
        for s in flood:
            s.close()


@pytest.mark.parametrize(
    "request_line",
    [
        b"GET /blob/\xff\xfe HTTP/1.1",  # non-UTF-8 path
        b"GET /stats?\xc3\xbf\xff HTTP/1.1",  # non-UTF-8 query
        b"GET /health HTTP/9.9",  # unknown version
        b"GET /health HTTP/1.1\r\nX-A: " + b"a" * 100_000,  # a header past aiohttp's 8 KiB
        b"GET /health HTTP/1.1\r\nContent-Length: -1",
    ],
)
def test_invalid_unparsable_request_logs_one_line_not_a_traceback(
    make_store, caplog: pytest.LogCaptureFixture, request_line: bytes
) -> None:
    """aiohttp logged every request it could not parse as ERROR with a ten-line traceback: one
    bad request a second from anyone filled the worker's log. It is a 400 and one INFO line."""
    import logging
    import socket

    caplog.set_level(logging.DEBUG)
    with BlobServer(make_store(), port=0) as server:
        s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        s.sendall(request_line + b"\r\nConnection: close\r\n\r\n")
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        s.close()
        assert out.startswith((b"HTTP/1.0 400", b"HTTP/1.1 400")), out[:100]
        assert httpx.get(f"{server.url}/health").text == "ok"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert any(r.name == "loconet.http" and "bad request" in r.message for r in caplog.records)
