"""State-sync snapshots of the Merkle store (ABCI ListSnapshots, LoadSnapshotChunk,
OfferSnapshot, ApplySnapshotChunk).

Format 1. The committed (key, value) pairs at height H, in key order, each encoded as
``uvarint(len key) ‖ key ‖ uvarint(len value) ‖ value``, cut into chunks of at most
``chunk_bytes`` at pair boundaries (a pair longer than that gets a chunk of its own).
``Snapshot.metadata`` is the sha256 of every chunk, concatenated (32 bytes per chunk), and
``Snapshot.hash = sha256(metadata)``. Two nodes with the same state and chunk size produce
byte-identical snapshots, so CometBFT fetches the chunks of one snapshot from every peer that
offers it.

Taking (``Snapshotter``): when Commit makes height H with H % ``snapshot_interval`` == 0, a
background thread reads the committed version H through ``MerkleStore.iterate_at`` (the store is
thread-safe and H stays readable for ``keep_recent`` heights), writes the chunks to
``DIR/tmp-H/`` and renames the folder to ``DIR/H/`` when complete; blocks go on meanwhile. The
last ``keep`` snapshots are kept. One more can wait while one is written; a snapshot due beyond
that is skipped (logged).

Restoring (``Restore``): CometBFT's light client verifies the header of H + 1 and passes its
app hash to OfferSnapshot. The offer is accepted only by an empty store, for format 1, at a
height 1..2^63-1 (CometBFT's int64), with metadata of 32 bytes per chunk whose sha256 is the
snapshot hash. Each chunk (applied in order) must hash to its entry in the metadata, else CometBFT
refetches it and rejects its sender; its keys must continue the strictly ascending order. After the
last chunk the pairs go to ``MerkleStore.restore``, which commits them as version H only if their
root equals the trusted app hash; otherwise the snapshot is rejected and the store stays empty. The
metadata itself is untrusted until that final check: a peer inventing a snapshot wastes one
download, nothing more.
"""

from __future__ import annotations

import hashlib
import logging
import os
import queue
import shutil
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from google.protobuf.message import DecodeError

from abci_app.encoding import encode_uvarint
from abci_app.pb import abci
from abci_app.server import FramingError, decode_uvarint
from abci_app.store import MerkleStore, StoreError

log = logging.getLogger("loconet.snapshots")

FORMAT = 1
CHUNK_BYTES = 1 << 20  # CometBFT's p2p limit for a chunk message is 16 MiB
HASH_BYTES = 32
MAX_HEIGHT = 2**63 - 1  # CometBFT heights are int64 (the store keeps them as SQLite INTEGERs)


class SnapshotError(Exception):
    pass


# -- format 1 -------------------------------------------------------------------------------------


def encode_pair(key: bytes, value: bytes) -> bytes:
    return encode_uvarint(len(key)) + key + encode_uvarint(len(value)) + value


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    try:
        r = decode_uvarint(buf, pos)
    except FramingError:
        r = None
    if r is None:
        raise SnapshotError("chunk ends inside a length, or a length is longer than 10 bytes")
    return r


def decode_chunk(chunk: bytes) -> list[tuple[bytes, bytes]]:
    """The pairs of a chunk; raises SnapshotError when the bytes are not whole pairs."""
    out, pos = [], 0
    while pos < len(chunk):
        parts = []
        for _ in range(2):
            n, pos = _uvarint(chunk, pos)
            if pos + n > len(chunk):
                raise SnapshotError("chunk ends inside a key or value")
            parts.append(chunk[pos : pos + n])
            pos += n
        out.append((parts[0], parts[1]))
    return out


def chunk_pairs(
    pairs: Iterable[tuple[bytes, bytes]], chunk_bytes: int = CHUNK_BYTES
) -> Iterator[bytes]:
    """Deterministic cut of the encoded pairs into chunks of at most ``chunk_bytes``."""
    buf = bytearray()
    for k, v in pairs:
        enc = encode_pair(k, v)
        if buf and len(buf) + len(enc) > chunk_bytes:
            yield bytes(buf)
            buf.clear()
        buf += enc
    if buf:
        yield bytes(buf)


def snapshot_of(height: int, chunk_hashes: list[bytes]) -> abci.Snapshot:
    metadata = b"".join(chunk_hashes)
    return abci.Snapshot(
        height=height,
        format=FORMAT,
        chunks=len(chunk_hashes),
        hash=hashlib.sha256(metadata).digest(),
        metadata=metadata,
    )


# -- taking and serving ---------------------------------------------------------------------------


class Snapshotter:
    """Snapshots of ``store`` every ``interval`` committed heights, in ``directory``."""

    def __init__(
        self,
        store: MerkleStore,
        directory: str | os.PathLike[str],
        *,
        interval: int,
        keep: int = 2,
        chunk_bytes: int = CHUNK_BYTES,
    ) -> None:
        if interval < 0 or keep < 1 or chunk_bytes < 1:
            raise ValueError(
                "snapshot interval must be >= 0 (0 = off), keep >= 1 and chunk_bytes >= 1"
            )
        self.store, self.dir = store, Path(directory)
        self.interval, self.keep, self.chunk_bytes = interval, keep, chunk_bytes
        self.dir.mkdir(parents=True, exist_ok=True)
        for p in self.dir.glob("tmp-*"):  # a snapshot interrupted by a crash
            shutil.rmtree(p, ignore_errors=True)
        self._due: queue.Queue[int | None] = queue.Queue()
        self._lock = threading.Lock()
        self._pending = 0  # snapshots queued or being written (at most 2)
        self._idle = threading.Event()
        self._idle.set()
        self._thread: threading.Thread | None = None

    # -- taking
    def on_commit(self, height: int) -> None:
        """Called after Commit of ``height``: queue a snapshot if one is due (never blocks)."""
        if not self.interval or height % self.interval:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="snapshots", daemon=True)
            self._thread.start()
        with self._lock:
            if self._pending >= 2:
                log.warning(
                    "snapshot of height %d skipped: the previous ones are still being written",
                    height,
                )
                return
            self._pending += 1
            self._idle.clear()
        self._due.put(height)

    def _run(self) -> None:
        while True:
            height = self._due.get()
            if height is None:
                return
            try:
                self.take(height)
            except Exception as e:  # noqa: BLE001 (a snapshot never stops the node)
                log.warning("snapshot of height %d failed: %s", height, e)
            finally:
                with self._lock:
                    self._pending -= 1
                    if not self._pending:
                        self._idle.set()

    def take(self, height: int) -> abci.Snapshot:
        """Write the snapshot of committed ``height`` (synchronously) and prune old ones."""
        final = self.dir.joinpath(str(height))
        tmp = self.dir.joinpath(f"tmp-{height}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        hashes = []
        for i, chunk in enumerate(
            chunk_pairs(self.store.iterate_at(height, b""), self.chunk_bytes)
        ):
            tmp.joinpath(f"chunk-{i}").write_bytes(chunk)
            hashes.append(hashlib.sha256(chunk).digest())
        snap = snapshot_of(height, hashes)
        tmp.joinpath("snapshot").write_bytes(snap.SerializeToString(deterministic=True))
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        log.info("snapshot of height %d: %d chunks, hash %s", height, snap.chunks, snap.hash.hex())
        for old in self.heights()[: -self.keep]:
            shutil.rmtree(self.dir.joinpath(str(old)), ignore_errors=True)
        return snap

    def wait_idle(self, timeout: float | None = None) -> bool:
        """True once no snapshot is queued or being written (tests, shutdown)."""
        return self._idle.wait(timeout)

    def close(self) -> None:
        if self._thread is not None:
            self._due.put(None)
            self._thread.join()
            self._thread = None

    # -- serving
    def heights(self) -> list[int]:
        return sorted(int(p.name) for p in self.dir.iterdir() if p.name.isdigit())

    def list(self) -> list[abci.Snapshot]:
        out = []
        for h in self.heights():
            try:
                out.append(
                    abci.Snapshot.FromString(self.dir.joinpath(str(h), "snapshot").read_bytes())
                )
            except OSError:
                continue  # pruned meanwhile
            except DecodeError:
                log.warning("snapshot %d: its snapshot file is corrupt; not offered", h)
        return out

    def load_chunk(self, height: int, fmt: int, index: int) -> bytes:
        """The chunk's bytes, or b"" when this node does not have it (CometBFT asks another)."""
        if fmt != FORMAT:
            return b""
        try:
            return self.dir.joinpath(str(height), f"chunk-{index}").read_bytes()
        except OSError:
            return b""


# -- restoring ------------------------------------------------------------------------------------

Offer = abci.ResponseOfferSnapshot
Apply = abci.ResponseApplySnapshotChunk


class Restore:
    """One accepted snapshot being applied, chunk by chunk, onto an empty store."""

    def __init__(self, snapshot: abci.Snapshot, app_hash: bytes) -> None:
        self.snapshot, self.app_hash = snapshot, app_hash
        self.hashes = [
            snapshot.metadata[i : i + HASH_BYTES]
            for i in range(0, len(snapshot.metadata), HASH_BYTES)
        ]
        self.next = 0
        self.pairs: list[tuple[bytes, bytes]] = []

    @staticmethod
    def check_offer(snapshot: abci.Snapshot, app_hash: bytes) -> int:
        """The OfferSnapshot result for this snapshot (ACCEPT when it can be applied)."""
        if snapshot.format != FORMAT:
            return Offer.REJECT_FORMAT
        md = snapshot.metadata
        if (
            not 1 <= snapshot.height <= MAX_HEIGHT
            or snapshot.chunks < 1
            or len(md) != HASH_BYTES * snapshot.chunks
            or hashlib.sha256(md).digest() != snapshot.hash
            or len(app_hash) != HASH_BYTES
        ):
            return Offer.REJECT
        return Offer.ACCEPT

    def apply(
        self, index: int, chunk: bytes, sender: str
    ) -> tuple[abci.ResponseApplySnapshotChunk, bool]:
        """(response, whether this was the last chunk). A chunk that does not hash to its
        metadata entry is refetched (from another peer: its sender is rejected); one that
        hashes right but does not decode to ascending pairs condemns the whole snapshot."""
        if index != self.next:  # CometBFT applies chunks in order
            return Apply(result=Apply.RETRY, refetch_chunks=[self.next]), False
        if hashlib.sha256(chunk).digest() != self.hashes[index]:
            log.warning(
                "snapshot %d chunk %d from %s does not match its hash: refetching",
                self.snapshot.height,
                index,
                sender,
            )
            return Apply(
                result=Apply.RETRY,
                refetch_chunks=[index],
                reject_senders=[sender] if sender else [],
            ), False
        try:
            pairs = decode_chunk(chunk)
        except SnapshotError as e:
            log.warning(
                "snapshot %d chunk %d is malformed (%s): rejecting the snapshot",
                self.snapshot.height,
                index,
                e,
            )
            return Apply(result=Apply.REJECT_SNAPSHOT), False
        last = self.pairs[-1][0] if self.pairs else None
        for k, _ in pairs:
            if last is not None and k <= last:
                log.warning(
                    "snapshot %d chunk %d: keys out of order: rejecting the snapshot",
                    self.snapshot.height,
                    index,
                )
                return Apply(result=Apply.REJECT_SNAPSHOT), False
            last = k
        self.pairs += pairs
        self.next += 1
        return Apply(result=Apply.ACCEPT), self.next == len(self.hashes)

    def finish(self, store: MerkleStore) -> abci.ResponseApplySnapshotChunk:
        """Commit the pairs as version H if their root is the trusted app hash."""
        try:
            store.restore(self.snapshot.height, self.pairs, self.app_hash)
        except StoreError as e:
            log.warning("snapshot %d rejected: %s", self.snapshot.height, e)
            return Apply(result=Apply.REJECT_SNAPSHOT)
        log.info(
            "state restored from snapshot %d: %d keys, app hash %s",
            self.snapshot.height,
            len(self.pairs),
            self.app_hash.hex(),
        )
        return Apply(result=Apply.ACCEPT)


__all__ = [
    "CHUNK_BYTES",
    "FORMAT",
    "Restore",
    "SnapshotError",
    "Snapshotter",
    "chunk_pairs",
    "decode_chunk",
    "encode_pair",
    "snapshot_of",
]
