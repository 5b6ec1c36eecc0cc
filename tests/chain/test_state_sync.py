"""State-sync snapshots (abci_app/snapshots.py) through the Application's ABCI methods: taken in
the background from a committed version, deterministic, applied chunk by chunk with each chunk
checked against the metadata and the rebuilt root against the trusted app hash; a node restored
from a snapshot then runs in lockstep with one that executed every block. The real network
(cometbft's state sync, light client and p2p) is in tests/testnet/test_testnet_state_sync.py."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pytest

from abci_app.app import Application
from abci_app.pb import abci
from abci_app.snapshots import Snapshotter, chunk_pairs, decode_chunk, encode_pair, snapshot_of
from abci_app.store import MerkleStore, VersionNotAvailable
from tests.kits.chainkit import new_chain, send_msg
from tests.kits.simkit import SimConfig, Simulation

Offer = abci.ResponseOfferSnapshot
Apply = abci.ResponseApplySnapshotChunk


def sync(
    target: Application, source: Application, snap: abci.Snapshot, app_hash: bytes
) -> list[int]:
    """What CometBFT's syncer does: offer, then fetch each chunk from the source and apply it.
    Returns the results."""
    offer = target.offer_snapshot(abci.RequestOfferSnapshot(snapshot=snap, app_hash=app_hash))
    if offer.result != Offer.ACCEPT:
        return [offer.result]
    out = []
    for i in range(snap.chunks):
        chunk = source.load_snapshot_chunk(
            abci.RequestLoadSnapshotChunk(height=snap.height, format=snap.format, chunk=i)
        ).chunk
        out.append(
            target.apply_snapshot_chunk(
                abci.RequestApplySnapshotChunk(index=i, chunk=chunk, sender="peer")
            ).result
        )
    return out


@pytest.fixture
def sim(tmp_path: Path) -> Simulation:
    """A chain with some of everything (40 blocks of the invariant simulation; two apps
    agreeing)."""
    s = Simulation(SimConfig(seed=5, blocks=0))
    seen: set[tuple[int, int, int]] = set()
    for _ in range(40):
        s.step(seen)
    s.app.a.snapshots = Snapshotter(
        s.app.a.store, tmp_path / "snaps-a", interval=0, chunk_bytes=512
    )
    return s


def test_a_restored_node_continues_in_lockstep(sim: Simulation, tmp_path: Path) -> None:
    a = sim.app.a
    assert a.snapshots is not None
    h, app_hash = a.store.height, a.store.app_hash
    snap = a.snapshots.take(h)
    assert snap.chunks > 5  # small chunks: the walk below is really chunk by chunk
    c = Application(MerkleStore(tmp_path / "c.db"), check_invariants=True)
    assert c.info(abci.RequestInfo()).last_block_height == 0
    assert sync(c, a, snap, app_hash) == [Apply.ACCEPT] * snap.chunks
    info = c.info(abci.RequestInfo())
    # what cometbft checks next
    assert (info.last_block_height, info.last_block_app_hash) == (
        h,
        app_hash,
    )
    assert c.store.earliest_height == h  # it did not replay: nothing below the snapshot exists
    with pytest.raises(VersionNotAvailable):
        c.store.get_at(b"\x00chain_id", h - 1)
    c.invariants()
    # the restored node replaces the second app: 30 more blocks, every response compared
    sim.app.b.store.close()
    sim.app.b = c
    seen: set[tuple[int, int, int]] = set()
    for _ in range(30):
        sim.step(seen)
    assert c.store.app_hash == a.store.app_hash and c.store.height == h + 30


def test_snapshots_are_deterministic(sim: Simulation, tmp_path: Path) -> None:
    """Two nodes with the same state offer the same snapshot (CometBFT fetches its chunks from
    both)."""
    b = Snapshotter(sim.app.b.store, tmp_path / "snaps-b", interval=0, chunk_bytes=512)
    assert sim.app.a.snapshots is not None
    sa, sb = sim.app.a.snapshots.take(sim.store.height), b.take(sim.store.height)
    assert sa.SerializeToString(deterministic=True) == sb.SerializeToString(deterministic=True)
    assert [sim.app.a.snapshots.load_chunk(sa.height, 1, i) for i in range(sa.chunks)] == [
        b.load_chunk(sb.height, 1, i) for i in range(sb.chunks)
    ]


def test_taken_in_the_background_from_the_committed_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = new_chain()
    snaps = Snapshotter(c.store, tmp_path / "snaps", interval=5, keep=2, chunk_bytes=256)
    c.app.snapshots = snaps
    threads: list[str] = []
    real_take = Snapshotter.take

    def take(self: Snapshotter, height: int) -> abci.Snapshot:
        threads.append(threading.current_thread().name)
        return real_take(self, height)

    monkeypatch.setattr(Snapshotter, "take", take)
    roots = {}
    for i in range(14):
        c.block([c.tx(c.keys[0], [send_msg(c.keys[1 + i % 3].address, 1000 + i)])])
        roots[c.store.height] = c.store.app_hash
        assert snaps.wait_idle(30)
    assert threads == ["snapshots"] * 3  # heights 5, 10, 15: never on the thread that commits
    listed = c.app.list_snapshots(abci.RequestListSnapshots()).snapshots
    assert [s.height for s in listed] == [10, 15]  # keep=2
    for s in listed:  # each is the state committed at its height, not a later one
        fresh = Application(MerkleStore(None))
        assert sync(fresh, c.app, s, roots[s.height]) == [Apply.ACCEPT] * s.chunks
    snaps.close()


def test_a_corrupt_chunk_is_refetched_and_its_sender_rejected(sim: Simulation) -> None:
    a = sim.app.a
    assert a.snapshots is not None
    snap = a.snapshots.take(a.store.height)
    c = Application(MerkleStore(None))
    assert (
        c.offer_snapshot(abci.RequestOfferSnapshot(snapshot=snap, app_hash=a.store.app_hash)).result
        == Offer.ACCEPT
    )
    good = a.snapshots.load_chunk(snap.height, 1, 0)
    bad = c.apply_snapshot_chunk(
        abci.RequestApplySnapshotChunk(index=0, chunk=good[:-1] + b"\x00", sender="evil")
    )
    assert (bad.result, list(bad.refetch_chunks), list(bad.reject_senders)) == (
        Apply.RETRY,
        [0],
        ["evil"],
    )
    assert c.store.height == 0
    rest = [
        c.apply_snapshot_chunk(
            abci.RequestApplySnapshotChunk(
                index=i, chunk=a.snapshots.load_chunk(snap.height, 1, i), sender="good"
            )
        ).result
        for i in range(snap.chunks)
    ]
    assert rest == [Apply.ACCEPT] * snap.chunks and c.store.app_hash == a.store.app_hash


def test_a_snapshot_that_does_not_rebuild_the_trusted_app_hash_is_rejected(sim: Simulation) -> None:
    """Chunks that match their (untrusted) metadata but whose root is not the light-client-verified
    app hash: rejected after the last chunk, nothing written; the next offer still works."""
    a = sim.app.a
    assert a.snapshots is not None
    h = a.store.height
    pairs = list(a.store.iterate_at(h, b""))
    forged_pairs = [(k, v) for k, v in pairs if not k.startswith(b"\x02")] + [
        (b"\x02\x14" + b"\x01" * 20, b"\xff" * 16)
    ]
    chunks = list(chunk_pairs(sorted(forged_pairs), 512))
    forged = snapshot_of(h, [hashlib.sha256(x).digest() for x in chunks])
    c = Application(MerkleStore(None))
    assert (
        c.offer_snapshot(
            abci.RequestOfferSnapshot(snapshot=forged, app_hash=a.store.app_hash)
        ).result
        == Offer.ACCEPT
    )
    results = [
        c.apply_snapshot_chunk(
            abci.RequestApplySnapshotChunk(index=i, chunk=x, sender="evil")
        ).result
        for i, x in enumerate(chunks)
    ]
    assert results == [Apply.ACCEPT] * (len(chunks) - 1) + [Apply.REJECT_SNAPSHOT]
    assert (c.store.height, c.store.app_hash) == (0, bytes(32))
    assert sync(c, a, a.snapshots.take(h), a.store.app_hash)[-1] == Apply.ACCEPT
    assert c.store.app_hash == a.store.app_hash


@pytest.mark.parametrize(
    "chunks,why",
    [
        ([encode_pair(b"b", b"1") + encode_pair(b"a", b"2")], "keys out of order"),
        ([encode_pair(b"b", b"1"), encode_pair(b"a", b"2")], "keys out of order across chunks"),
        ([encode_pair(b"a", b"1")[:-1]], "a chunk that ends inside a value"),
        ([b"\xff" * 11], "a length longer than 10 bytes"),
    ],
)
def test_a_malformed_snapshot_is_rejected(chunks: list[bytes], why: str) -> None:
    snap = snapshot_of(7, [hashlib.sha256(x).digest() for x in chunks])
    c = Application(MerkleStore(None))
    assert (
        c.offer_snapshot(abci.RequestOfferSnapshot(snapshot=snap, app_hash=bytes(32))).result
        == Offer.ACCEPT
    )
    results = [
        c.apply_snapshot_chunk(abci.RequestApplySnapshotChunk(index=i, chunk=x)).result
        for i, x in enumerate(chunks)
    ]
    assert results[-1] == Apply.REJECT_SNAPSHOT, why
    assert c.store.height == 0
    # and after a rejection there is nothing to apply chunks to
    assert (
        c.apply_snapshot_chunk(abci.RequestApplySnapshotChunk(index=0, chunk=chunks[0])).result
        == Apply.ABORT
    )


def test_offers_that_cannot_be_applied(sim: Simulation) -> None:
    a = sim.app.a
    assert a.snapshots is not None
    snap = a.snapshots.take(a.store.height)
    fresh = Application(MerkleStore(None))

    def offer(
        s: abci.Snapshot, app: Application = fresh, app_hash: bytes = a.store.app_hash
    ) -> int:
        return app.offer_snapshot(abci.RequestOfferSnapshot(snapshot=s, app_hash=app_hash)).result

    other_format = abci.Snapshot()
    other_format.CopyFrom(snap)
    other_format.format = 2
    wrong_hash = abci.Snapshot()
    wrong_hash.CopyFrom(snap)
    wrong_hash.hash = bytes(32)
    short_md = abci.Snapshot()
    short_md.CopyFrom(snap)
    short_md.metadata = snap.metadata[:-1]
    assert offer(other_format) == Offer.REJECT_FORMAT
    assert offer(wrong_hash) == Offer.REJECT
    assert offer(short_md) == Offer.REJECT
    assert offer(snap, app_hash=b"short") == Offer.REJECT
    assert offer(snap, app=a) == Offer.ABORT  # a store with blocks never takes a snapshot
    assert offer(snap) == Offer.ACCEPT
    assert (
        a.load_snapshot_chunk(
            abci.RequestLoadSnapshotChunk(height=snap.height, format=2, chunk=0)
        ).chunk
        == b""
    )
    assert (
        a.load_snapshot_chunk(
            abci.RequestLoadSnapshotChunk(height=snap.height + 1, format=1, chunk=0)
        ).chunk
        == b""
    )
    assert (
        Application(MerkleStore(None)).list_snapshots(abci.RequestListSnapshots()).snapshots == []
    )


def test_format_1_known_answer() -> None:
    """The encoding is consensus between peers (the snapshot hash names it): pinned."""
    pairs = [(b"alice", b"100"), (b"bob", b""), (b"k" * 200, b"v" * 300)]
    assert encode_pair(b"alice", b"100") == b"\x05alice\x03100"
    chunks = list(chunk_pairs(pairs, 16))
    assert [len(x) for x in chunks] == [15, 504]  # a pair longer than a chunk gets one of its own
    assert chunks[0] == b"\x05alice\x03100\x03bob\x00"
    assert chunks[1][:2] == b"\xc8\x01"  # uvarint(200)
    assert [p for x in chunks for p in decode_chunk(x)] == pairs
    snap = snapshot_of(9, [hashlib.sha256(x).digest() for x in chunks])
    assert (snap.format, snap.chunks, len(snap.metadata)) == (1, 2, 64)
    assert snap.hash.hex() == "30be0a7b3d4de4b3233b68378843d1d1e41ddcc1b1b55986acef5b6ddd631696"


# ---- red-team regressions: hostile offers and chunks get REJECT/RETRY, never an exception


def _root_of(pairs: dict[bytes, bytes]) -> bytes:
    return MerkleStore(None).stage(1, pairs)


def test_invalid_snapshot_height_past_int64() -> None:
    # with a matching app hash, a height of 2^63 or more used to raise OverflowError (SQLite) out
    # of ApplySnapshotChunk; CometBFT heights are int64, so the offer is refused
    chunk = encode_pair(b"a", b"1")
    root = _root_of({b"a": b"1"})
    for h in (2**63, 2**64 - 1):
        c = Application(MerkleStore(None))
        snap = snapshot_of(h, [hashlib.sha256(chunk).digest()])
        assert (
            c.offer_snapshot(abci.RequestOfferSnapshot(snapshot=snap, app_hash=root)).result
            == Offer.REJECT
        )
        assert (
            c.apply_snapshot_chunk(abci.RequestApplySnapshotChunk(index=0, chunk=chunk)).result
            == Apply.ABORT
        )
        assert c.info(abci.RequestInfo()).last_block_height == 0
    c = Application(MerkleStore(None))  # the largest int64 height is fine
    snap = snapshot_of(2**63 - 1, [hashlib.sha256(chunk).digest()])
    assert (
        c.offer_snapshot(abci.RequestOfferSnapshot(snapshot=snap, app_hash=root)).result
        == Offer.ACCEPT
    )
    assert (
        c.apply_snapshot_chunk(abci.RequestApplySnapshotChunk(index=0, chunk=chunk)).result
        == Apply.ACCEPT
    )


def test_invalid_snapshot_chunk_indices_and_duplicate_keys() -> None:
    chunks = [encode_pair(b"a", b"1"), encode_pair(b"a", b"2")]  # the same key twice, across chunks
    snap = snapshot_of(7, [hashlib.sha256(x).digest() for x in chunks])
    c = Application(MerkleStore(None))
    assert (
        c.offer_snapshot(abci.RequestOfferSnapshot(snapshot=snap, app_hash=bytes(32))).result
        == Offer.ACCEPT
    )
    for index in (1, 2, 2**32 - 1):  # out of order or out of range: refetch the one expected
        r = c.apply_snapshot_chunk(abci.RequestApplySnapshotChunk(index=index, chunk=chunks[0]))
        assert (r.result, list(r.refetch_chunks)) == (Apply.RETRY, [0])
    assert (
        c.apply_snapshot_chunk(abci.RequestApplySnapshotChunk(index=0, chunk=chunks[0])).result
        == Apply.ACCEPT
    )
    assert (
        c.apply_snapshot_chunk(abci.RequestApplySnapshotChunk(index=1, chunk=chunks[1])).result
        == Apply.REJECT_SNAPSHOT
    )
    assert c.info(abci.RequestInfo()).last_block_height == 0


def test_invalid_snapshot_chunk_count_without_metadata() -> None:
    c = Application(MerkleStore(None))
    snap = snapshot_of(7, [bytes(32)])
    snap.chunks = 2**32 - 1  # claims four billion chunks with the metadata of one
    assert (
        c.offer_snapshot(abci.RequestOfferSnapshot(snapshot=snap, app_hash=bytes(32))).result
        == Offer.REJECT
    )


def test_invalid_corrupt_snapshot_file_is_not_listed(tmp_path: Path) -> None:
    chain = new_chain()
    snaps = Snapshotter(chain.store, tmp_path, interval=0)
    snaps.take(chain.store.height)
    (tmp_path / str(chain.store.height) / "snapshot").write_bytes(b"\xff\xff not protobuf")
    chain.app.snapshots = snaps
    assert list(chain.app.list_snapshots(abci.RequestListSnapshots()).snapshots) == []


def test_snapshots_due_while_two_are_pending_are_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slow disk never queues snapshots without bound, and Commit never waits for one."""
    c = new_chain()
    snaps = Snapshotter(c.store, tmp_path / "snaps", interval=1)
    release, taken = threading.Event(), []

    def slow_take(self: Snapshotter, height: int) -> None:
        release.wait(30)
        taken.append(height)

    monkeypatch.setattr(Snapshotter, "take", slow_take)
    for h in (1, 2, 3, 4):
        snaps.on_commit(h)  # returns at once
    assert not snaps.wait_idle(0.1)
    release.set()
    assert snaps.wait_idle(30)
    assert taken == [1, 2]  # 3 and 4 came while 1 was being written and 2 waited
    snaps.close()
