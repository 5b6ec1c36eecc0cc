"""The aiohttp blob server on loopback, spoken to with httpx: GET, HEAD, Range, 404, 400 for a
bad hash, no upload, the bytes-sent counter."""

from __future__ import annotations

import os

import httpx
import pytest
from blobkit import sha

from node.blobs import BlobServer, BlobStore
from node.blobs.server import parse_range

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
def test_range_206(served: tuple[BlobStore, BlobServer], header: str, first: int, last: int) -> None:
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


@pytest.mark.parametrize("header", ["bytes=5-2", "bytes=a-b", "items=0-5", "bytes=0-1,5-6", "bytes"])
def test_malformed_or_multi_range_is_ignored(served: tuple[BlobStore, BlobServer], header: str) -> None:
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
    "name", ["A" * 64, "a" * 63, "zz" + "a" * 62, "..%2F..%2Fmeta.db", "%2e%2e", "meta.db", "a" * 64 + "%00"]
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


@pytest.mark.parametrize("header,expect", [
    ("bytes=" + "9" * 5000 + "-", 416),      # int() of 5000 digits raised: a 500 and a traceback
    ("bytes=0-" + "9" * 5000, 206),          # past the end: clamped to the last byte
    ("bytes=-" + "9" * 5000, 206),           # a suffix longer than the blob: all of it
    ("bytes=١-", 200),                       # Unicode digits are not digits here: ignored
    ("bytes=²-5", 200),
    ("bytes=-٣", 200),
])
def test_invalid_range_numbers(served: tuple[BlobStore, BlobServer], header: str, expect: int) -> None:
    store, server = served
    h = store.put_bytes(DATA)
    r = httpx.get(url(server, h), headers={"Range": header.encode()})  # UTF-8 on the wire
    assert r.status_code == expect, r.text[:200]
    if expect == 206:
        assert r.content == DATA and r.headers["content-range"] == f"bytes 0-{len(DATA) - 1}/{len(DATA)}"


def test_invalid_partial_request_is_closed_after_the_idle_timeout(make_store) -> None:  # type: ignore[no-untyped-def]
    """slowloris: a connection that never finishes its request headers used to stay open for
    aiohttp's default keep-alive (an hour); it is closed after ``idle_timeout``."""
    import socket
    import time

    with BlobServer(make_store(), port=0, idle_timeout=1.0) as server:
        s = socket.create_connection(("127.0.0.1", server.port))
        s.settimeout(30)
        s.sendall(b"GET /blob/" + b"0" * 64 + b" HTTP/1.1\r\nHost: x\r\n")  # no blank line: never ends
        t0 = time.monotonic()
        assert s.recv(100) == b""  # closed by the server
        assert time.monotonic() - t0 < 10
        s.close()
        assert httpx.get(f"{server.url}/health").text == "ok"  # and it still serves others


def test_invalid_reader_that_never_reads_is_dropped(make_store) -> None:  # type: ignore[no-untyped-def]
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
