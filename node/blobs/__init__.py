"""Content-addressed blob exchange: a local store, an aiohttp server, an httpx client.

Payloads, trace states, models and datasets travel between providers as blobs named by their
sha256. The interface (workers and the CLI code against it; extend, do not break):

    from node.blobs import BlobStore, BlobClient, BlobServer, BlobError, serve_blobs

    store = BlobStore(Path("~/.loconet/blobs"), quota_bytes=50 << 30)   # or default_root(home)
    h = store.put_bytes(data, tier="temp", round_key="job1/r3")  # -> sha256 hex
    h = store.put_file(path, tier="hot")                          # streamed, hashed on the way
    store.has(h); store.path(h); store.read(h)                    # path: read-only use
    store.pin(h)                                                  # cold: never evicted
    store.retain(h, tier, round_key); store.hold(h, round_key)    # tier/hold on a stored blob
    store.release_round("job1/r3")    # round finalized: its temp blobs expire after the margin
    store.gc() -> GcReport            # expire, clean temp files, evict down to the quota
    store.gc_plan() -> GcReport       # what gc() would delete now, deleting nothing
    store.set_quota(n); store.may_evict = False   # a put then raises EvictionNeeded, not evicts
    store.ls() -> [BlobInfo]; store.usage(); with store.writer() as w: ...  (streaming put)

    server = serve_blobs(store, "0.0.0.0", 26680)   # background thread; server.url, server.stats
    server.stop_thread()
    # or, in an event loop: s = BlobServer(store, host, port); await s.start(); await s.stop()

    with BlobClient(timeout_s=30, max_bytes=1 << 30) as client:
        path = client.fetch(h, ["http://10.0.0.1:26680", ...], store, tier="hot",
                            round_key=None, max_bytes=None)   # per-fetch limit (job spec)

HTTP: ``GET|HEAD /blob/{sha256}`` (Range: 206/416), ``GET /stats`` (bytes_sent), nothing else;
no upload over the network. Errors: ``BlobError`` subclasses with stable ``.code`` strings
(node/blobs/errors.py draws the tree). Store layout, tiers, retention and the quota rules:
node/blobs/store.py; the README next to this file explains the choices.
"""

from __future__ import annotations

import logging
from pathlib import Path

from node.blobs.client import BlobClient, blob_url
from node.blobs.errors import (
    BlobError,
    BlobNotFound,
    EvictionNeeded,
    FetchError,
    FetchFailed,
    HashMismatch,
    InvalidHash,
    Oversize,
    PeerTimeout,
    PeerUnavailable,
    QuotaExceeded,
    Truncated,
)
from node.blobs.files import check_hash
from node.blobs.retention import GcReport
from node.blobs.server import DEFAULT_PORT, BlobServer, ServerStats, serve_blobs
from node.blobs.store import TIERS, BlobInfo, BlobStore, BlobWriter

# a library: the app configures logging
logging.getLogger("loconet.blobs").addHandler(logging.NullHandler())


def default_root(home: Path | str) -> Path:
    """Where a node home keeps its blob store: ``HOME/blobs``."""
    return Path(home) / "blobs"


__all__ = [
    "DEFAULT_PORT",
    "TIERS",
    "BlobClient",
    "BlobError",
    "BlobInfo",
    "BlobNotFound",
    "BlobServer",
    "BlobStore",
    "BlobWriter",
    "EvictionNeeded",
    "FetchError",
    "FetchFailed",
    "GcReport",
    "HashMismatch",
    "InvalidHash",
    "Oversize",
    "PeerTimeout",
    "PeerUnavailable",
    "QuotaExceeded",
    "ServerStats",
    "Truncated",
    "blob_url",
    "check_hash",
    "default_root",
    "serve_blobs",
]
