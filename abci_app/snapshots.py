"""State-sync snapshots of the Merkle store (ABCI ListSnapshots, LoadSnapshotChunk,
OfferSnapshot, ApplySnapshotChunk), each chunk verified against the trusted app hash.

Format 2. The store is a binary sparse Merkle tree over sha256(key) (``abci_app/store/tree.py``).
A snapshot of height H cuts it at a depth d (0..``MAX_DEPTH``) into its 2^d subtrees: chunk i
holds the (key, value) pairs whose sha256(key) starts with the d bits of i, in ascending
sha256(key) order:

    chunk_i   = u8 2 ‖ uvarint(i) ‖ pair ‖ pair ‖ ...       pair = uvarint(len key) ‖ key ‖
                                                                   uvarint(len value) ‖ value
    metadata  = u8 d ‖ for each subtree i in order: u8 kind ‖ its hash (32 bytes)
    hash      = sha256(metadata);  chunks = 2^d

(kind 0 empty with 32 zero bytes, 1 one key: its leaf hash, 2 two or more: the internal hash:
``tree.subtree_summary``). d is the smallest depth at which every chunk fits ``chunk_bytes``
(hashes spread keys evenly, so chunks come out of similar sizes), ``MAX_DEPTH`` at most. Two
nodes with the same state and chunk size produce byte-identical snapshots, so CometBFT fetches
the chunks of one snapshot from every peer that offers it.

Taking (``Snapshotter``): when Commit makes height H with H % ``snapshot_interval`` == 0, a
background thread reads the committed version H through ``MerkleStore.iterate_at`` (the store is
thread-safe and H stays readable for ``keep_recent`` heights): once to size the subtrees, then
once more to build the chunks (spilling them to temporary files in runs of ``PASS_BYTES`` when
the state is larger), into ``DIR/tmp-H/``; the folder is renamed to
``DIR/H/`` when complete; blocks go on meanwhile. The last ``keep`` snapshots are kept. One more
can wait while one is written; a snapshot due beyond that is skipped (logged).

Restoring (``Restore``): CometBFT's light client verifies the header of H + 1 and passes its
app hash to OfferSnapshot. The offer is accepted only by an empty store, for format 2, at a
height 1..2^63-1 (CometBFT's int64), with well-formed metadata whose sha256 is the snapshot hash
and whose subtrees fold to the trusted app hash (``tree.fold_summaries``): so the metadata is
trusted from the offer on, and a peer inventing a snapshot is refused before any chunk is
fetched. Each chunk (applied in order) must then rebuild its own subtree: its keys carry the
chunk's prefix, in strictly ascending hash order, and their (kind, hash) is the metadata's entry.
A chunk that does not is refetched and its sender rejected (CometBFT asks another peer); only
verified pairs are kept, so what a restore holds in memory is the real state, whatever a peer
sends. A restore keeps the verified chunks' bytes (the state's compact form); after the last
chunk their pairs are streamed, in the snapshot's sha256(key) order, into ``MerkleStore.restore``,
which builds the tree in one pass and commits it as version H after checking the root once more
(memory: the snapshot's size, not a copy of the state as Python objects and its whole new tree).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import queue
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from google.protobuf.message import DecodeError

from abci_app.encoding import encode_uvarint
from abci_app.pb import abci
from abci_app.server import FramingError, decode_uvarint
from abci_app.store import MerkleStore, StoreError
from abci_app.store.tree import (
    EMPTY_HASH,
    KIND_EMPTY,
    KIND_INTERNAL,
    KIND_LEAF,
    fold_summaries,
    hash_key,
    hash_value,
    subtree_summary,
)

log = logging.getLogger("loconet.snapshots")

FORMAT = 2
CHUNK_BYTES = 1 << 20  # CometBFT's p2p limit for a chunk message is 16 MiB
HASH_BYTES = 32
MAX_HEIGHT = 2**63 - 1  # CometBFT heights are int64 (the store keeps them as SQLite INTEGERs)
# 2^16 chunks at most: metadata of 2.1 MB, inside CometBFT's 4 MB snapshot message; at 1 MiB a
# chunk, states up to ~64 GiB stay within the target size
MAX_DEPTH = 16
PASS_BYTES = 16 << 20  # chunk bytes a snapshot holds in memory at once while writing (~3x in
# Python objects)
MAX_SPILL_FILES = 64  # runs of PASS_BYTES spilled by one pass over the state (open files)
_ENTRY = 1 + HASH_BYTES


class SnapshotError(Exception):
    pass


# -- format 2 -------------------------------------------------------------------------------------


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


def encode_chunk(index: int, pairs: Iterable[tuple[bytes, bytes]]) -> bytes:
    """Chunk ``index`` of the given pairs, which must already be in ascending sha256(key)
    order."""
    return encode_chunk_records(index, (encode_pair(k, v) for k, v in pairs))


def iter_chunk(chunk: bytes, index: int) -> Iterator[tuple[bytes, bytes]]:
    """The pairs of chunk ``index`` one at a time, so a checker can stop at the first bad one
    (a peer's 16 MiB of 8M empty pairs, wrong from the second, was decoded whole first: seconds
    of the event loop and ~600 MB); raises SnapshotError, when it gets there, if the bytes are
    not a format-2 header for that index followed by whole pairs."""
    if not chunk or chunk[0] != FORMAT:
        raise SnapshotError("chunk does not start with the format byte 2")
    i, pos = _uvarint(chunk, 1)
    if i != index:
        raise SnapshotError(f"chunk says it is chunk {i}, not {index}")
    end = len(chunk)
    while pos < end:
        n, pos = _uvarint(chunk, pos)
        if pos + n > end:
            raise SnapshotError("chunk ends inside a key or value")
        key = chunk[pos : pos + n]
        pos += n
        n, pos = _uvarint(chunk, pos)
        if pos + n > end:
            raise SnapshotError("chunk ends inside a key or value")
        value = chunk[pos : pos + n]
        pos += n
        yield key, value


def decode_chunk(chunk: bytes, index: int) -> list[tuple[bytes, bytes]]:
    """The pairs of chunk ``index``; raises SnapshotError when the bytes are not a format-2
    header for that index followed by whole pairs."""
    return list(iter_chunk(chunk, index))


def encode_metadata(depth: int, summaries: list[tuple[int, bytes]]) -> bytes:
    return bytes((depth,)) + b"".join(bytes((k,)) + h for k, h in summaries)


def decode_metadata(md: bytes) -> tuple[int, list[tuple[int, bytes]]]:
    """(depth, the 2^depth subtree summaries); raises SnapshotError when malformed."""
    if not md or md[0] > MAX_DEPTH:
        raise SnapshotError(f"metadata must start with a depth 0..{MAX_DEPTH}")
    depth = md[0]
    if len(md) != 1 + _ENTRY * (1 << depth):
        raise SnapshotError(f"metadata of depth {depth} must be {1 + _ENTRY * (1 << depth)} bytes")
    out = []
    for pos in range(1, len(md), _ENTRY):
        kind, h = md[pos], md[pos + 1 : pos + _ENTRY]
        if kind not in (KIND_EMPTY, KIND_LEAF, KIND_INTERNAL) or (kind == KIND_EMPTY) != (
            h == EMPTY_HASH
        ):
            raise SnapshotError(f"subtree {(pos - 1) // _ENTRY}: bad kind {kind} or hash")
        out.append((kind, h))
    return depth, out


def snapshot_of(height: int, depth: int, summaries: list[tuple[int, bytes]]) -> abci.Snapshot:
    metadata = encode_metadata(depth, summaries)
    return abci.Snapshot(
        height=height,
        format=FORMAT,
        chunks=len(summaries),
        hash=hashlib.sha256(metadata).digest(),
        metadata=metadata,
    )


def _bucket(key_hash: bytes, depth: int) -> int:
    return int.from_bytes(key_hash[:4], "big") >> (32 - depth)


def choose_depth(sizes: list[int], chunk_bytes: int) -> int:
    """The smallest depth at which every subtree's encoded pairs fit ``chunk_bytes``
    (``sizes``: bytes per subtree at ``MAX_DEPTH``); ``MAX_DEPTH`` when none does."""
    best, level = MAX_DEPTH, sizes
    for depth in range(MAX_DEPTH, -1, -1):  # level: bytes per subtree at ``depth``
        if max(level) <= chunk_bytes:
            best = depth
        if depth:
            level = [a + b for a, b in zip(level[0::2], level[1::2], strict=True)]
    return best


def cut(
    pairs_at: Callable[[], Iterable[tuple[bytes, bytes]]],
    height: int,
    chunk_bytes: int,
    emit: Callable[[int, bytes], None],
    pass_bytes: int = PASS_BYTES,
    spill_dir: str | os.PathLike[str] | None = None,
) -> abci.Snapshot:
    """Cut the state that ``pairs_at()`` yields (each call: the same pairs, any order) into the
    format-2 snapshot of ``height``: ``emit(i, chunk_i)`` for every chunk in order, then the
    Snapshot. One pass sizes the subtrees and groups the chunks into runs of ``pass_bytes``; when
    there is one run, a second pass builds it in memory; otherwise the second pass spills each
    pair into its run's temporary file (in ``spill_dir``; ``MAX_SPILL_FILES`` runs a pass) and the
    runs are built from their files one at a time. So the state is read twice whatever its size
    (it was read once more per run), and memory holds one run."""
    sizes = [0] * (1 << MAX_DEPTH)
    for k, v in pairs_at():
        sizes[_bucket(hash_key(k), MAX_DEPTH)] += len(encode_pair(k, v))
    depth = choose_depth(sizes, chunk_bytes)
    per = 1 << (MAX_DEPTH - depth)
    chunk_sizes = [sum(sizes[i : i + per]) for i in range(0, len(sizes), per)]
    runs: list[tuple[int, int]] = []  # chunks [lo, hi) built together
    lo = 0
    while lo < len(chunk_sizes):
        hi, held = lo + 1, chunk_sizes[lo]
        while hi < len(chunk_sizes) and held + chunk_sizes[hi] <= pass_bytes:
            held += chunk_sizes[hi]
            hi += 1
        runs.append((lo, hi))
        lo = hi
    summaries: list[tuple[int, bytes]] = []

    def build(lo: int, hi: int, records: Iterable[bytes]) -> None:
        # one bytes object per pair, key hash first (the sort order): kh ‖ vh ‖ encoded pair
        groups: list[list[bytes]] = [[] for _ in range(lo, hi)]
        for e in records:
            groups[_bucket(e[:HASH_BYTES], depth) - lo].append(e)
        for i, group in enumerate(groups, lo):
            group.sort()
            leaves = [(e[:HASH_BYTES], e[HASH_BYTES : 2 * HASH_BYTES]) for e in group]
            summaries.append(subtree_summary(leaves, depth))
            emit(i, encode_chunk_records(i, (e[2 * HASH_BYTES :] for e in group)))
            group.clear()

    def record(k: bytes, v: bytes) -> bytes:
        return hash_key(k) + hash_value(v) + encode_pair(k, v)

    if len(runs) == 1:  # the whole state in one run: no spill
        lo, hi = runs[0]
        build(lo, hi, (record(k, v) for k, v in pairs_at()) if any(chunk_sizes) else ())
        return snapshot_of(height, depth, summaries)
    run_of = [0] * len(chunk_sizes)
    for r, (lo, hi) in enumerate(runs):
        run_of[lo:hi] = [r] * (hi - lo)
    for first in range(0, len(runs), MAX_SPILL_FILES):
        batch = runs[first : first + MAX_SPILL_FILES]
        with contextlib.ExitStack() as open_files:
            files = [open_files.enter_context(tempfile.TemporaryFile(dir=spill_dir)) for _ in batch]
            writes = [f.write for f in files]
            for k, v in pairs_at():
                e = record(k, v)
                r = run_of[_bucket(e[:HASH_BYTES], depth)] - first
                if 0 <= r < len(batch):
                    writes[r](len(e).to_bytes(4, "big") + e)
            for (lo, hi), f in zip(batch, files, strict=True):
                f.seek(0)
                build(lo, hi, _spilled(f.read()))
                f.close()  # its disk space goes now, not after the whole batch
    return snapshot_of(height, depth, summaries)


def _write(path: Path, data: bytes) -> None:
    """A file of the snapshot's tmp-H folder, on disk before the folder is renamed to H (the
    rename alone could reach the disk before the files after a power cut: a snapshot served
    with truncated chunks)."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(folder: Path) -> None:
    # node/atomic.py has the same helper; abci_app does not import node (node imports abci_app)
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _spilled(data: bytes) -> Iterator[bytes]:
    """The records of a spill file: u32 length ‖ record, back to back."""
    pos = 0
    while pos < len(data):
        n = int.from_bytes(data[pos : pos + 4], "big")
        yield data[pos + 4 : pos + 4 + n]
        pos += 4 + n


def encode_chunk_records(index: int, encoded_pairs: Iterable[bytes]) -> bytes:
    """Chunk ``index`` from pairs already encoded (``encode_pair``), in ascending sha256(key)
    order: the bytes :func:`encode_chunk` makes of the same pairs."""
    return b"".join([bytes((FORMAT,)), encode_uvarint(index), *encoded_pairs])


def snapshot_in_memory(
    height: int, pairs: Iterable[tuple[bytes, bytes]], chunk_bytes: int = CHUNK_BYTES
) -> tuple[abci.Snapshot, list[bytes]]:
    """The snapshot of ``pairs`` at ``height`` and its chunks (tests and tools)."""
    state = list(pairs)
    chunks: list[bytes] = []
    snap = cut(lambda: state, height, chunk_bytes, lambda i, c: chunks.append(c))
    return snap, chunks


# -- taking and serving ---------------------------------------------------------------------------


class SnapshotAbandoned(Exception):
    """A snapshot being taken when the node stops (``Snapshotter.close``): its tmp folder is
    left, and dropped at the next start, as after a crash."""


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
        self._closing = threading.Event()
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
            except SnapshotAbandoned:
                log.info("snapshot of height %d abandoned: the node is stopping", height)
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
        snap = cut(
            lambda: self._unless_closing(self.store.iterate_at(height, b"")),
            height,
            self.chunk_bytes,
            lambda i, chunk: self._write_unless_closing(tmp.joinpath(f"chunk-{i}"), chunk),
            spill_dir=tmp,
        )
        _write(tmp.joinpath("snapshot"), snap.SerializeToString(deterministic=True))
        _fsync_dir(tmp)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        _fsync_dir(self.dir)
        log.info("snapshot of height %d: %d chunks, hash %s", height, snap.chunks, snap.hash.hex())
        for old in self.heights()[: -self.keep]:
            shutil.rmtree(self.dir.joinpath(str(old)), ignore_errors=True)
        return snap

    def wait_idle(self, timeout: float | None = None) -> bool:
        """True once no snapshot is queued or being written (tests, shutdown)."""
        return self._idle.wait(timeout)

    def _unless_closing(
        self, pairs: Iterable[tuple[bytes, bytes]]
    ) -> Iterator[tuple[bytes, bytes]]:
        for i, kv in enumerate(pairs):
            if not i & 4095 and self._closing.is_set():
                raise SnapshotAbandoned
            yield kv

    def _write_unless_closing(self, path: Path, data: bytes) -> None:
        if self._closing.is_set():
            raise SnapshotAbandoned
        _write(path, data)

    def close(self) -> None:
        """Stop taking snapshots, promptly: one being written is abandoned (its tmp folder is
        dropped at the next start) and queued ones are dropped. Waiting for them made a node's
        stop take as long as writing up to two snapshots (a chunk file fsynced at a time), which
        the crash storm with workers measured past 20 s on a loaded machine."""
        if self._thread is not None:
            self._closing.set()
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
                snap = abci.Snapshot.FromString(self.dir.joinpath(str(h), "snapshot").read_bytes())
            except OSError:
                continue  # pruned meanwhile
            except DecodeError:
                log.warning("snapshot %d: its snapshot file is corrupt; not offered", h)
                continue
            if snap.format == FORMAT:  # one an older version wrote is never offered
                out.append(snap)
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
        self.depth, self.summaries = decode_metadata(snapshot.metadata)
        self.next = 0
        # the verified chunks as they came: their bytes are the state's most compact form
        # (~60 bytes a key against ~220 as Python pairs); finish streams them into the store
        self.chunks: list[bytes] = []

    @staticmethod
    def check_offer(snapshot: abci.Snapshot, app_hash: bytes) -> int:
        """The OfferSnapshot result for this snapshot (ACCEPT when it can be applied): its
        metadata must fold to the trusted ``app_hash``."""
        if snapshot.format != FORMAT:
            return Offer.REJECT_FORMAT
        md = snapshot.metadata
        if (
            not 1 <= snapshot.height <= MAX_HEIGHT
            or len(app_hash) != HASH_BYTES
            or hashlib.sha256(md).digest() != snapshot.hash
        ):
            return Offer.REJECT
        try:
            depth, summaries = decode_metadata(md)
        except SnapshotError as e:
            log.warning("snapshot %d refused: %s", snapshot.height, e)
            return Offer.REJECT
        if snapshot.chunks != len(summaries) or fold_summaries(summaries)[1] != app_hash:
            log.warning(
                "snapshot %d refused: its subtrees do not make the trusted app hash %s",
                snapshot.height,
                app_hash.hex(),
            )
            return Offer.REJECT
        return Offer.ACCEPT

    def _chunk_problem(self, index: int, chunk: bytes) -> str | list[tuple[bytes, bytes]]:
        """The chunk's pairs when they rebuild subtree ``index`` exactly, else why not."""
        pairs, leaves, last = [], [], None
        try:
            for k, v in iter_chunk(chunk, index):  # stops at the first bad pair
                kh = hash_key(k)
                if _bucket(kh, self.depth) != index:
                    return "a key outside the chunk's subtree"
                if last is not None and kh <= last:
                    return "keys out of hash order, or a key twice"
                last = kh
                pairs.append((k, v))
                leaves.append((kh, hash_value(v)))
        except SnapshotError as e:
            return str(e)
        if subtree_summary(leaves, self.depth) != self.summaries[index]:
            return "its pairs do not make the subtree the trusted metadata names"
        return pairs

    def apply(
        self, index: int, chunk: bytes, sender: str
    ) -> tuple[abci.ResponseApplySnapshotChunk, bool]:
        """(response, whether this was the last chunk). A chunk that does not rebuild its
        subtree is refetched (from another peer: its sender is rejected)."""
        if index != self.next:  # CometBFT applies chunks in order
            return Apply(result=Apply.RETRY, refetch_chunks=[self.next]), False
        got = self._chunk_problem(index, chunk)
        if isinstance(got, str):
            log.warning(
                "snapshot %d chunk %d from %s refused (%s): refetching",
                self.snapshot.height,
                index,
                sender or "?",
                got,
            )
            return Apply(
                result=Apply.RETRY,
                refetch_chunks=[index],
                reject_senders=[sender] if sender else [],
            ), False
        self.chunks.append(bytes(chunk))
        self.next += 1
        return Apply(result=Apply.ACCEPT), self.next == len(self.summaries)

    def pairs(self, release: bool = False) -> Iterator[tuple[bytes, bytes]]:
        """Every verified pair so far, in ascending sha256(key) order (chunk by chunk);
        ``release``: each chunk's bytes are let go once decoded (finish)."""
        for i in range(len(self.chunks)):
            chunk = self.chunks[i]
            if release:
                self.chunks[i] = b""
            yield from iter_chunk(chunk, i)

    def finish(self, store: MerkleStore) -> abci.ResponseApplySnapshotChunk:
        """Commit the pairs as version H, streamed (the store checks their root once more)."""
        try:
            store.restore(self.snapshot.height, self.pairs(release=True), self.app_hash)
        except StoreError as e:
            log.warning("snapshot %d rejected: %s", self.snapshot.height, e)
            return Apply(result=Apply.REJECT_SNAPSHOT)
        finally:
            self.chunks = []
        log.info(
            "state restored from snapshot %d: %d keys, app hash %s",
            self.snapshot.height,
            store.stats.changed_keys,
            self.app_hash.hex(),
        )
        return Apply(result=Apply.ACCEPT)


__all__ = [
    "CHUNK_BYTES",
    "FORMAT",
    "MAX_DEPTH",
    "Restore",
    "SnapshotError",
    "Snapshotter",
    "choose_depth",
    "cut",
    "decode_chunk",
    "decode_metadata",
    "encode_chunk",
    "encode_metadata",
    "encode_pair",
    "snapshot_in_memory",
    "snapshot_of",
]
