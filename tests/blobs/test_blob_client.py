"""BlobClient against the real server and against lying peers: every fetched blob is hashed
before use; a mismatch, a truncated body, an oversize body, a slow peer each fail that location
with a stable code, the bytes are discarded, and the next location is tried."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable

import pytest
from aiohttp import web

from node.blobs import (
    BlobClient,
    BlobServer,
    BlobStore,
    FetchFailed,
    HashMismatch,
    InvalidHash,
    Oversize,
    PeerTimeout,
    PeerUnavailable,
    QuotaExceeded,
    Truncated,
    blob_url,
)
from node.ports import is_port_free
from tests.kits.blobkit import Peers, sha

MakeStore = Callable[..., BlobStore]
DATA = os.urandom(300_000)
H = sha(DATA)


def assert_clean(store: BlobStore, h: str = H) -> None:
    assert not store.has(h)
    assert list(store.tmp_dir.iterdir()) == []
    assert store.ls() == []


def only_error(e: FetchFailed) -> Exception:
    assert len(e.attempts) == 1
    return e.attempts[0][1]


def test_fetch_stores_and_reuses(
    served: tuple[BlobStore, BlobServer], make_store: MakeStore
) -> None:
    src, server = served
    src.put_bytes(DATA)
    dst = make_store("dst")
    with BlobClient(timeout_s=5, max_bytes=1 << 20) as c:
        p = c.fetch(H, [server.url], dst, tier="temp", round_key="job1/r0")
        assert p.read_bytes() == DATA and dst.info(H).rounds == ("job1/r0",)
        assert c.bytes_received == len(DATA)
        sent = server.stats.bytes_sent
        assert c.fetch(H, [server.url], dst, tier="cold") == p  # already here: no transfer
        assert server.stats.bytes_sent == sent
        assert dst.info(H).pinned


def test_full_blob_url_is_accepted_but_not_one_for_another_hash() -> None:
    assert blob_url("http://h:1/", H) == f"http://h:1/blob/{H}"
    assert blob_url(f"http://h:1/blob/{H}", H) == f"http://h:1/blob/{H}"
    # a reveal's query
    assert blob_url(f"http://h:1/blob/{H}?trace={'0' * 64}", H) == f"http://h:1/blob/{H}"
    with pytest.raises(PeerUnavailable):
        blob_url(f"http://h:1/blob/{sha(b'other')}", H)
    with pytest.raises(PeerUnavailable):
        blob_url("file:///etc/passwd", H)
    with pytest.raises(InvalidHash):
        blob_url("http://h:1", "../meta.db")


def test_source_port_out_of_range_is_named_not_connection_refused() -> None:
    # http://h:99999 reached connect() and failed as "Connection refused", as if nothing listened
    for bad in ("http://127.0.0.1:99999", "http://h:0/", "https://[::1]:65536/x"):
        with pytest.raises(PeerUnavailable, match="not a TCP port"):
            blob_url(bad, H)
    assert blob_url("http://[::1]:65535", H) == f"http://[::1]:65535/blob/{H}"
    assert blob_url("http://h/a:0", H) == f"http://h/a:0/blob/{H}"  # a path, not a port


def test_invalid_hash_refused_before_any_request(make_store: MakeStore) -> None:
    with BlobClient(timeout_s=5, max_bytes=1 << 20) as c, pytest.raises(InvalidHash):
        c.fetch(H.upper(), ["http://127.0.0.1:1"], make_store())


def test_hash_mismatch_then_next_location(
    peers: Peers, served: tuple[BlobStore, BlobServer], make_store: MakeStore
) -> None:
    src, server = served
    src.put_bytes(DATA)

    async def liar(request: web.Request) -> web.Response:
        return web.Response(body=DATA[:-1] + b"\x00")

    bad = peers.http(liar)
    dst = make_store("dst")
    with BlobClient(timeout_s=5, max_bytes=1 << 20) as c:
        with pytest.raises(FetchFailed) as e:
            c.fetch(H, [bad], dst)
        err = only_error(e.value)
        assert isinstance(err, HashMismatch) and err.code == "hash_mismatch" and err.url == bad
        assert_clean(dst)
        assert c.fetch(H, [bad, server.url], dst).read_bytes() == DATA


def test_truncated_body(peers: Peers, make_store: MakeStore) -> None:
    head = (
        "HTTP/1.1 200 OK\r\n"
        f"Content-Length: {len(DATA)}\r\n"
        "Content-Type: application/octet-stream\r\n"
        "\r\n"
    )
    liar = peers.raw(head.encode() + DATA[: len(DATA) // 2])  # announces all, sends half, hangs up
    dst = make_store("dst")
    with BlobClient(timeout_s=5, max_bytes=1 << 20) as c, pytest.raises(FetchFailed) as e:
        c.fetch(H, [liar], dst)
    err = only_error(e.value)
    assert isinstance(err, Truncated) and err.code == "truncated"
    assert_clean(dst)


def test_oversize_refused_from_content_length(peers: Peers, make_store: MakeStore) -> None:
    sent: list[int] = []

    async def big(request: web.Request) -> web.Response:
        sent.append(1)
        return web.Response(body=DATA)

    url = peers.http(big)
    dst = make_store("dst")
    with BlobClient(timeout_s=5, max_bytes=1 << 20) as c:
        with pytest.raises(FetchFailed) as e:
            c.fetch(H, [url], dst, max_bytes=len(DATA) - 1)  # the job's limit, below the client cap
        err = only_error(e.value)
        assert isinstance(err, Oversize) and err.code == "oversize" and "announces" in str(err)
        assert c.bytes_received < len(DATA)
    with BlobClient(timeout_s=5, max_bytes=1000) as c, pytest.raises(FetchFailed) as e:
        c.fetch(H, [url], dst, max_bytes=1 << 30)  # the cap wins over a larger per-fetch limit
    assert isinstance(only_error(e.value), Oversize)
    assert_clean(dst)


def test_oversize_refused_while_streaming(peers: Peers, make_store: MakeStore) -> None:
    async def chunked(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        resp.enable_chunked_encoding()  # no Content-Length: only the streamed count can stop it
        await resp.prepare(request)
        for i in range(0, len(DATA), 10_000):
            await resp.write(DATA[i : i + 10_000])
        await resp.write_eof()
        return resp

    url = peers.http(chunked)
    dst = make_store("dst")
    with BlobClient(timeout_s=5, max_bytes=100_000) as c, pytest.raises(FetchFailed) as e:
        c.fetch(H, [url], dst)
    err = only_error(e.value)
    assert isinstance(err, Oversize) and "more than the limit" in str(err)
    assert_clean(dst)
    with BlobClient(timeout_s=5, max_bytes=1 << 20) as c:  # under the limit, chunked is fine
        assert c.fetch(H, [url], dst).read_bytes() == DATA


def test_slow_peer_times_out_then_next_location(
    peers: Peers, served: tuple[BlobStore, BlobServer], make_store: MakeStore
) -> None:
    src, server = served
    src.put_bytes(DATA)

    async def stalls(request: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return web.Response(body=DATA)

    slow = peers.http(stalls)
    dst = make_store("dst")
    t0 = time.monotonic()
    with BlobClient(timeout_s=0.5, max_bytes=1 << 20) as c:
        assert c.fetch(H, [slow, server.url], dst).read_bytes() == DATA
    assert time.monotonic() - t0 < 4
    with BlobClient(timeout_s=0.5, max_bytes=1 << 20) as c, pytest.raises(FetchFailed) as e:
        c.fetch(sha(b"x"), [slow], make_store("other"))
    err = only_error(e.value)
    assert isinstance(err, PeerTimeout) and err.code == "timeout"


def test_dripping_peer_is_too_slow(peers: Peers, make_store: MakeStore) -> None:
    async def drip(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        resp.content_length = len(DATA)
        await resp.prepare(request)
        for i in range(0, len(DATA), 1000):  # a byte often enough to dodge the read timeout
            await resp.write(DATA[i : i + 1000])
            await asyncio.sleep(0.05)
        return resp

    url = peers.http(drip)
    dst = make_store("dst")
    t0 = time.monotonic()
    with (
        BlobClient(timeout_s=0.5, max_bytes=1 << 20, min_rate_bps=1 << 20) as c,
        pytest.raises(FetchFailed) as e,
    ):
        c.fetch(H, [url], dst)
    assert isinstance(only_error(e.value), PeerTimeout) and "too slow" in str(only_error(e.value))
    assert time.monotonic() - t0 < 5
    assert_clean(dst)


def test_404_refused_connection_and_all_fail(
    served: tuple[BlobStore, BlobServer], make_store: MakeStore
) -> None:
    _, server = served
    port = next(p for p in range(47_000, 48_000) if is_port_free(p))
    dst = make_store("dst")
    with BlobClient(timeout_s=2, max_bytes=1 << 20) as c, pytest.raises(FetchFailed) as e:
        c.fetch(H, [server.url, f"http://127.0.0.1:{port}", "ftp://x"], dst)
    codes = [(err.code, "404" in str(err)) for _, err in e.value.attempts]
    assert codes == [("unavailable", True), ("unavailable", False), ("unavailable", False)]
    assert e.value.code == "fetch_failed" and H in str(e.value)
    assert_clean(dst)
    with (
        BlobClient(timeout_s=2, max_bytes=1 << 20) as c,
        pytest.raises(FetchFailed, match="no location"),
    ):
        c.fetch(H, [], dst)


def test_a_full_local_store_is_a_local_error_not_a_peer_failure(
    served: tuple[BlobStore, BlobServer], make_store: MakeStore
) -> None:
    src, server = served
    src.put_bytes(DATA)
    dst = make_store("dst", quota=len(DATA) - 1)
    with BlobClient(timeout_s=5, max_bytes=1 << 20) as c, pytest.raises(QuotaExceeded):
        c.fetch(H, [server.url, server.url], dst)  # no point trying the next location
    assert_clean(dst)
    assert server.stats.hits == 1


# ---- red-team: hostile peers the client already withstood (pinned so that it stays so)


@pytest.mark.parametrize(
    "location", ["file:///etc/passwd", "http://evil.example.invalid/", "/blob/" + H]
)
def test_invalid_redirect_is_not_followed(
    peers: Peers, served: tuple[BlobStore, BlobServer], make_store: MakeStore, location: str
) -> None:
    store, server = served
    store.put_bytes(DATA)
    if location.startswith("/"):
        location = server.url + location  # even to a server that has the blob
    head = f"HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\n\r\n"
    dst = make_store("dst")
    with BlobClient(timeout_s=5) as c, pytest.raises(FetchFailed) as e:
        c.fetch(H, [peers.raw(head.encode())], dst)
    err = only_error(e.value)
    assert isinstance(err, PeerUnavailable) and "302" in str(err)
    assert_clean(dst)


def test_invalid_gzip_bomb_is_never_inflated(peers: Peers, make_store: MakeStore) -> None:
    import gzip

    bomb = gzip.compress(b"\0" * (64 << 20))  # 64 KiB on the wire, 64 MiB inflated
    head = f"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: {len(bomb)}\r\n\r\n"
    dst = make_store("dst")
    with BlobClient(timeout_s=5, max_bytes=1 << 20) as c, pytest.raises(FetchFailed) as e:
        c.fetch(H, [peers.raw(head.encode() + bomb)], dst)
    assert isinstance(only_error(e.value), HashMismatch)  # the raw bytes were hashed, not inflated
    assert c.bytes_received == len(bomb)
    assert_clean(dst)


@pytest.mark.parametrize("cl", ["-1", "\xb2", "9" * 5000, "5, 6"])
def test_invalid_content_length(peers: Peers, make_store: MakeStore, cl: str) -> None:
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {cl}\r\n\r\n".encode("latin-1")
    dst = make_store("dst")
    with BlobClient(timeout_s=5) as c, pytest.raises(FetchFailed) as e:
        c.fetch(H, [peers.raw(head + DATA)], dst)
    assert isinstance(only_error(e.value), (PeerUnavailable, Oversize))
    assert_clean(dst)


@pytest.mark.parametrize("bad", ["http://[::1", "http://h:99x", "http://[zz]:1"])
def test_invalid_url_is_a_peer_error_and_the_next_source_is_tried(
    served: tuple[BlobStore, BlobServer], make_store: MakeStore, bad: str
) -> None:
    """A source like http://[::1 raised httpx.InvalidURL (not an HTTPError) out of fetch: a
    traceback for `blob get`, and a worker's fetch stopped at the first such location instead
    of trying the next (red-team regression)."""
    src, server = served
    src.put_bytes(DATA)
    dst = make_store("dst")
    with BlobClient(timeout_s=5, max_bytes=1 << 20) as c:
        with pytest.raises(FetchFailed) as e:
            c.fetch(H, [bad], dst)
        assert isinstance(only_error(e.value), PeerUnavailable)
        assert c.fetch(H, [bad, server.url], dst).read_bytes() == DATA
