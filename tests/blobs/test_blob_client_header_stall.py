"""Red-team: BlobClient's time budget (timeout_s + size / min_rate_bps) is only checked inside
the body loop. A hostile peer that never finishes its response head -- an endless series of
"100 Continue" interim responses, or a header dripped one byte per read timeout -- keeps
fetch() blocked forever (each read arrives within timeout_s, so httpx's per-read timeout never
fires). The worker runs judge()'s fetches (trace list from the target's own endpoint first) on
its main loop, so a challenged provider can freeze every verifier drawn for it: no commits, no
reveals, no votes for any job."""

import socket
import threading
import time

import pytest

from node.blobs import BlobClient, BlobStore, FetchFailed


def hostile(mode: str) -> tuple[str, socket.socket]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()

    def serve() -> None:
        c, _ = srv.accept()
        c.recv(65536)
        try:
            if mode == "continue":
                while True:
                    c.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                    time.sleep(0.3)
            c.sendall(b"HTTP/1.1 200 OK\r\n")
            while True:
                c.sendall(b"X")
                time.sleep(0.3)
        except OSError:
            pass

    threading.Thread(target=serve, daemon=True).start()
    return f"http://127.0.0.1:{srv.getsockname()[1]}", srv


@pytest.mark.parametrize("mode", ["continue", "header-drip"])
def test_fetch_gives_up_within_its_budget(tmp_path, mode: str) -> None:
    url, srv = hostile(mode)
    store = BlobStore(tmp_path / "s")
    out: dict = {}

    def go() -> None:
        try:
            BlobClient(timeout_s=1.0, max_bytes=1000, min_rate_bps=1000).fetch(
                "ab" * 32, [url], store
            )
        except FetchFailed as e:
            out["err"] = e

    th = threading.Thread(target=go, daemon=True)
    t0 = time.monotonic()
    th.start()
    th.join(8.0)  # the budget is 1 s + 1000 B / 1000 B/s = 2 s
    srv.close()
    assert not th.is_alive(), f"fetch still blocked after {time.monotonic() - t0:.1f}s"
    assert "err" in out


def test_fetch_stops_trying_locations_after_give_up_after_s(tmp_path) -> None:
    # peers that accept and never answer cost timeout_s each: a list of them held the worker's
    # loop for timeout_s x len(peers); past give_up_after_s no further location is started
    silent = []
    for _ in range(6):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen()
        silent.append(s)
    urls = [f"http://127.0.0.1:{s.getsockname()[1]}" for s in silent]
    t0 = time.monotonic()
    try:
        with pytest.raises(FetchFailed) as e:
            BlobClient(timeout_s=0.5).fetch(
                "ab" * 32, urls, BlobStore(tmp_path / "s"), give_up_after_s=0.7
            )
    finally:
        for s in silent:
            s.close()
    assert len(e.value.attempts) == 2, e.value.attempts  # 0.5 s each: the third never starts
    assert time.monotonic() - t0 < 3
