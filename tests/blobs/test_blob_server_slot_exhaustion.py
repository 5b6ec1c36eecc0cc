"""One peer cannot take every connection slot of the blob server (attacker-review regression):
the cap was global only (max_connections, 256), so one address holding that many idle sockets
(reopening each when idle_timeout closes it) had every honest fetch answered 503, and a
provider's revealed states read as unavailable to its verifiers, who then vote INVALID after
tries (now: until near its window's end). Now one address holds at most max_per_peer of them."""

import socket
import time

from node.blobs import BlobClient, BlobServer, BlobStore


def _from(source: str, port: int) -> socket.socket:
    s = socket.socket()
    s.bind((source, 0))  # Linux answers for all of 127.0.0.0/8: a second address on loopback
    s.connect(("127.0.0.1", port))
    return s


def test_one_peer_cannot_take_every_connection_slot(tmp_path) -> None:
    store = BlobStore(tmp_path / "s")
    h = store.put_bytes(b"honest state" * 100)
    srv = BlobServer(
        store, port=0, idle_timeout=5.0, max_connections=8, max_per_peer=3
    ).start_thread()
    hog = [_from("127.0.0.2", srv.port) for _ in range(8)]  # all 8 slots, if it could
    time.sleep(0.3)
    try:
        # its connections past 3 were answered 503 and closed
        refused = 0
        for s in hog:
            s.settimeout(0.5)
            try:
                refused += s.recv(64).startswith(b"HTTP/1.1 503")
            except TimeoutError:
                pass  # admitted: idle, waiting for a request
        assert refused == 5
        for i in range(3):  # and an honest peer is served
            BlobClient(timeout_s=2.0).fetch(h, [srv.url], BlobStore(tmp_path / f"c{i}"))
    finally:
        for s in hog:
            s.close()
        srv.stop_thread()
