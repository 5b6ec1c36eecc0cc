"""State-sync snapshots (abci_app/snapshots.py) through the Application's ABCI methods: taken in
the background from a committed version, deterministic, offered only when their subtrees fold to
the trusted app hash, applied chunk by chunk with each chunk rebuilding its own subtree; a node
restored from a snapshot then runs in lockstep with one that executed every block. The real
network (cometbft's state sync, light client and p2p) is in
tests/testnet/test_testnet_state_sync.py."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from abci_app.app import Application
from abci_app.pb import abci
from abci_app.snapshots import (
    FORMAT,
    MAX_DEPTH,
    Restore,
    Snapshotter,
    choose_depth,
    decode_chunk,
    decode_metadata,
    encode_chunk,
    encode_metadata,
    encode_pair,
    snapshot_in_memory,
)
from abci_app.store import MerkleStore, VersionNotAvailable
from abci_app.store.tree import hash_key
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


# small enough that the simulated chain's state is cut into 64 chunks (each test walks them one by
# one), large enough not to reach the deepest cut: at 512 bytes it was 65,536 chunk files, each
# fsynced, 36 s a snapshot on this machine's disk
SIM_CHUNK_BYTES = 4096


@pytest.fixture
def sim(tmp_path: Path) -> Simulation:
    """A chain with some of everything (40 blocks of the invariant simulation; two apps
    agreeing)."""
    s = Simulation(SimConfig(seed=5, blocks=0))
    seen: set[tuple[int, int, int]] = set()
    for _ in range(40):
        s.step(seen)
    s.app.a.snapshots = Snapshotter(
        s.app.a.store, tmp_path / "snaps-a", interval=0, chunk_bytes=SIM_CHUNK_BYTES
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
    b = Snapshotter(sim.app.b.store, tmp_path / "snaps-b", interval=0, chunk_bytes=SIM_CHUNK_BYTES)
    assert sim.app.a.snapshots is not None
    sa, sb = sim.app.a.snapshots.take(sim.store.height), b.take(sim.store.height)
    assert sa.SerializeToString(deterministic=True) == sb.SerializeToString(deterministic=True)
    assert [sim.app.a.snapshots.load_chunk(sa.height, FORMAT, i) for i in range(sa.chunks)] == [
        b.load_chunk(sb.height, FORMAT, i) for i in range(sb.chunks)
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
    good = a.snapshots.load_chunk(snap.height, FORMAT, 0)
    bad = c.apply_snapshot_chunk(
        abci.RequestApplySnapshotChunk(
            index=0, chunk=good[:-1] + bytes((good[-1] ^ 1,)), sender="evil"
        )
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
                index=i, chunk=a.snapshots.load_chunk(snap.height, FORMAT, i), sender="good"
            )
        ).result
        for i in range(snap.chunks)
    ]
    assert rest == [Apply.ACCEPT] * snap.chunks and c.store.app_hash == a.store.app_hash


def _forged_state(pairs: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The state with every balance taken away and one invented account's balance added."""
    return [(k, v) for k, v in pairs if not k.startswith(b"\x02")] + [
        (b"\x02\x14" + b"\x01" * 20, b"\xff" * 16)
    ]


def test_a_snapshot_of_another_state_is_refused_at_the_offer(sim: Simulation) -> None:
    """A peer inventing a snapshot (well-formed, consistent with itself) is refused before a
    single chunk is fetched: its subtrees do not fold to the light-client-verified app hash."""
    a = sim.app.a
    h = a.store.height
    forged, _ = snapshot_in_memory(h, _forged_state(list(a.store.iterate_at(h, b""))), 512)
    c = Application(MerkleStore(None))
    assert (
        c.offer_snapshot(
            abci.RequestOfferSnapshot(snapshot=forged, app_hash=a.store.app_hash)
        ).result
        == Offer.REJECT
    )
    assert (
        c.apply_snapshot_chunk(abci.RequestApplySnapshotChunk(index=0, chunk=b"\x02\x00")).result
        == Apply.ABORT
    )
    assert a.snapshots is not None
    assert sync(c, a, a.snapshots.take(h), a.store.app_hash)[-1] == Apply.ACCEPT
    assert c.store.app_hash == a.store.app_hash


def test_forged_chunks_under_the_real_metadata_are_refused_one_by_one(sim: Simulation) -> None:
    """The real snapshot's metadata with a forged state's chunks: each forged chunk is refused
    as it arrives (refetched, its sender rejected) and nothing of it is kept; the honest peer's
    chunks then complete the restore."""
    a = sim.app.a
    assert a.snapshots is not None
    h = a.store.height
    snap = a.snapshots.take(h)
    state = list(a.store.iterate_at(h, b""))
    depth, _ = decode_metadata(snap.metadata)
    bad_pairs = sorted(((hash_key(k), k, v) for k, v in _forged_state(state)), key=lambda t: t[0])
    c = Application(MerkleStore(None))
    assert (
        c.offer_snapshot(abci.RequestOfferSnapshot(snapshot=snap, app_hash=a.store.app_hash)).result
        == Offer.ACCEPT
    )
    refused = 0
    for i in range(snap.chunks):
        good = a.snapshots.load_chunk(h, FORMAT, i)
        bad = encode_chunk(
            i, [(k, v) for kh, k, v in bad_pairs if int.from_bytes(kh, "big") >> (256 - depth) == i]
        )
        if bad != good:
            r = c.apply_snapshot_chunk(
                abci.RequestApplySnapshotChunk(index=i, chunk=bad, sender="evil")
            )
            assert (r.result, list(r.refetch_chunks), list(r.reject_senders)) == (
                Apply.RETRY,
                [i],
                ["evil"],
            )
            refused += 1
        r = c.apply_snapshot_chunk(abci.RequestApplySnapshotChunk(index=i, chunk=good, sender="ok"))
        assert r.result == Apply.ACCEPT
    assert refused >= 1
    assert (c.store.height, c.store.app_hash) == (h, a.store.app_hash)
    assert list(c.store.iterate_at(h, b"")) == state


def _mangled(chunks: list[bytes], how: str) -> bytes:
    """A chunk-0 variant that must be refused (chunks: a snapshot of three keys in one chunk)."""
    pairs = decode_chunk(chunks[0], 0)
    assert len(pairs) == 3
    head = bytes((FORMAT, 0))
    body = b"".join(encode_pair(k, v) for k, v in pairs)
    return {
        "reordered": head + b"".join(encode_pair(k, v) for k, v in pairs[::-1]),
        "a key twice": head + body + encode_pair(*pairs[-1]),
        "a pair missing": head + b"".join(encode_pair(k, v) for k, v in pairs[:2]),
        "a pair added": head + body + encode_pair(b"zz", b"1"),
        "a value changed": head + body[:-1] + bytes((body[-1] ^ 1,)),
        "ends inside a value": head + body[:-1],
        "a length of 11 bytes": head + b"\xff" * 11,
        "another format": bytes((1, 0)) + body,
        "another index": bytes((FORMAT, 1)) + body,
        "empty": b"",
    }[how]


@pytest.mark.parametrize(
    "how",
    [
        "reordered",
        "a key twice",
        "a pair missing",
        "a pair added",
        "a value changed",
        "ends inside a value",
        "a length of 11 bytes",
        "another format",
        "another index",
        "empty",
    ],
)
def test_a_malformed_chunk_is_refetched_and_nothing_of_it_kept(how: str) -> None:
    state = [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]
    snap, chunks = snapshot_in_memory(7, state)
    assert snap.chunks == 1
    root = _root_of(dict(state))
    c = Application(MerkleStore(None))
    assert (
        c.offer_snapshot(abci.RequestOfferSnapshot(snapshot=snap, app_hash=root)).result
        == Offer.ACCEPT
    )
    r = c.apply_snapshot_chunk(
        abci.RequestApplySnapshotChunk(index=0, chunk=_mangled(chunks, how), sender="evil")
    )
    assert (r.result, list(r.refetch_chunks), list(r.reject_senders)) == (
        Apply.RETRY,
        [0],
        ["evil"],
    ), how
    assert c._restore is not None and c._restore.chunks == []  # nothing unverified is held
    assert c.store.height == 0
    r = c.apply_snapshot_chunk(abci.RequestApplySnapshotChunk(index=0, chunk=chunks[0]))
    assert r.result == Apply.ACCEPT and c.store.app_hash == root


def test_a_key_outside_its_chunks_subtree_is_refused() -> None:
    """Keys in ascending hash order that rebuild a subtree hash, but sent as another chunk: the
    prefix check refuses them (a peer cannot move a lone leaf to an empty sibling)."""
    state = [(bytes([i]), b"v") for i in range(40)]
    snap, chunks = snapshot_in_memory(3, state, 64)
    depth, summaries = decode_metadata(snap.metadata)
    assert depth >= 1
    root = _root_of(dict(state))
    r = Restore(snap, root)
    for i in range(snap.chunks):
        if i + 1 < snap.chunks and decode_chunk(chunks[i + 1], i + 1):
            moved = encode_chunk(i, decode_chunk(chunks[i + 1], i + 1))
            resp, _ = r.apply(i, moved, "evil")
            assert resp.result == Apply.RETRY, i
        resp, _ = r.apply(i, chunks[i], "ok")
        assert resp.result == Apply.ACCEPT
    assert sorted(r.pairs()) == sorted(state)


def test_offers_that_cannot_be_applied(sim: Simulation) -> None:
    a = sim.app.a
    assert a.snapshots is not None
    snap = a.snapshots.take(a.store.height)
    fresh = Application(MerkleStore(None))

    def offer(
        s: abci.Snapshot, app: Application = fresh, app_hash: bytes = a.store.app_hash
    ) -> int:
        return app.offer_snapshot(abci.RequestOfferSnapshot(snapshot=s, app_hash=app_hash)).result

    def variant(**fields: object) -> abci.Snapshot:
        s = abci.Snapshot()
        s.CopyFrom(snap)
        for k, v in fields.items():
            setattr(s, k, v)
        return s

    def with_metadata(md: bytes, **fields: object) -> abci.Snapshot:
        return variant(metadata=md, hash=hashlib.sha256(md).digest(), **fields)

    depth, summaries = decode_metadata(snap.metadata)
    assert offer(variant(format=1)) == Offer.REJECT_FORMAT  # what an older version offered
    assert offer(variant(format=3)) == Offer.REJECT_FORMAT
    assert offer(variant(hash=bytes(32))) == Offer.REJECT
    assert offer(with_metadata(snap.metadata[:-1])) == Offer.REJECT
    assert offer(with_metadata(b"")) == Offer.REJECT
    assert offer(with_metadata(bytes((MAX_DEPTH + 1,)) + snap.metadata[1:])) == Offer.REJECT
    assert offer(variant(chunks=snap.chunks + 1)) == Offer.REJECT
    bad_kind = [(3, h) for _, h in summaries]
    assert offer(with_metadata(encode_metadata(depth, bad_kind))) == Offer.REJECT
    empty_with_hash = [(0, b"\x01" * 32)] + summaries[1:]
    assert offer(with_metadata(encode_metadata(depth, empty_with_hash))) == Offer.REJECT
    assert offer(snap, app_hash=b"short") == Offer.REJECT
    assert offer(snap, app_hash=bytes(32)) == Offer.REJECT  # not the trusted app hash
    assert offer(snap, app=a) == Offer.ABORT  # a store with blocks never takes a snapshot
    assert offer(snap) == Offer.ACCEPT
    assert (
        a.load_snapshot_chunk(
            abci.RequestLoadSnapshotChunk(height=snap.height, format=1, chunk=0)
        ).chunk
        == b""
    )
    assert (
        a.load_snapshot_chunk(
            abci.RequestLoadSnapshotChunk(height=snap.height + 1, format=FORMAT, chunk=0)
        ).chunk
        == b""
    )
    assert (
        Application(MerkleStore(None)).list_snapshots(abci.RequestListSnapshots()).snapshots == []
    )


def test_format_2_known_answer() -> None:
    """The encoding is consensus between peers (the snapshot hash names it): pinned."""
    pairs = [(b"alice", b"100"), (b"bob", b""), (b"k" * 200, b"v" * 300)]
    assert encode_pair(b"alice", b"100") == b"\x05alice\x03100"
    snap, chunks = snapshot_in_memory(9, pairs, 64)
    # the big pair fits no 64-byte chunk at any depth: the deepest cut, 2^16 chunks
    assert (snap.format, snap.chunks, len(snap.metadata)) == (2, 1 << MAX_DEPTH, 1 + 33 * 65536)
    snap, chunks = snapshot_in_memory(9, pairs, 1024)
    assert (snap.chunks, [len(c) for c in chunks]) == (1, [2 + 10 + 5 + 504])
    assert chunks[0][:2] == b"\x02\x00"
    assert sorted(decode_chunk(chunks[0], 0)) == sorted(pairs)
    assert snap.metadata[0] == 0 and snap.metadata[1] == 2  # depth 0, one internal subtree
    assert snap.metadata[2:] == _root_of(dict(pairs))
    assert snap.hash.hex() == "426fef711e053f28a0b71e9f93b08f0ee7c32eafa84d7027f245a16db0403c4a"
    # sha256(b"alice") starts with bit 0, sha256(b"bob") with bit 1: at 10 bytes, depth 1
    snap, chunks = snapshot_in_memory(9, pairs[:2], 10)
    assert snap.chunks == 2 and snap.metadata[0] == 1
    assert chunks == [b"\x02\x00\x05alice\x03100", b"\x02\x01\x03bob\x00"]
    assert snap.hash.hex() == "a6e68e026354c3549f9bacef3af0ef04e432f8e5ffe0ab1edfba6340e5bdb42a"


def test_choose_depth_is_the_shallowest_that_fits() -> None:
    sizes = [0] * (1 << MAX_DEPTH)
    assert choose_depth(sizes, 1) == 0  # an empty state: one empty chunk
    sizes[0], sizes[-1] = 10, 10
    assert choose_depth(sizes, 20) == 0
    assert choose_depth(sizes, 19) == 1
    sizes[1] = 1
    assert choose_depth(sizes, 10) == MAX_DEPTH  # 10 + 1 share a subtree down to the last level
    assert choose_depth(sizes, 9) == MAX_DEPTH  # nothing fits: the deepest cut


# ---- red-team regressions: hostile offers and chunks get REJECT/RETRY, never an exception


def _root_of(pairs: dict[bytes, bytes]) -> bytes:
    return MerkleStore(None).stage(1, pairs)


def test_invalid_snapshot_height_past_int64() -> None:
    # with a matching app hash, a height of 2^63 or more used to raise OverflowError (SQLite) out
    # of ApplySnapshotChunk; CometBFT heights are int64, so the offer is refused
    state = [(b"a", b"1")]
    root = _root_of(dict(state))
    for h in (2**63, 2**64 - 1):
        c = Application(MerkleStore(None))
        snap, chunks = snapshot_in_memory(h, state)
        assert (
            c.offer_snapshot(abci.RequestOfferSnapshot(snapshot=snap, app_hash=root)).result
            == Offer.REJECT
        )
        assert (
            c.apply_snapshot_chunk(abci.RequestApplySnapshotChunk(index=0, chunk=chunks[0])).result
            == Apply.ABORT
        )
        assert c.info(abci.RequestInfo()).last_block_height == 0
    c = Application(MerkleStore(None))  # the largest int64 height is fine
    snap, chunks = snapshot_in_memory(2**63 - 1, state)
    assert (
        c.offer_snapshot(abci.RequestOfferSnapshot(snapshot=snap, app_hash=root)).result
        == Offer.ACCEPT
    )
    assert (
        c.apply_snapshot_chunk(abci.RequestApplySnapshotChunk(index=0, chunk=chunks[0])).result
        == Apply.ACCEPT
    )


def test_invalid_snapshot_chunk_indices() -> None:
    state = [(bytes([i]), b"v" * 20) for i in range(30)]
    snap, chunks = snapshot_in_memory(7, state, 256)
    assert snap.chunks >= 2
    c = Application(MerkleStore(None))
    assert (
        c.offer_snapshot(
            abci.RequestOfferSnapshot(snapshot=snap, app_hash=_root_of(dict(state)))
        ).result
        == Offer.ACCEPT
    )
    for index in (1, 2, 2**32 - 1):  # out of order or out of range: refetch the one expected
        r = c.apply_snapshot_chunk(abci.RequestApplySnapshotChunk(index=index, chunk=chunks[0]))
        assert (r.result, list(r.refetch_chunks)) == (Apply.RETRY, [0])
    results = [
        c.apply_snapshot_chunk(abci.RequestApplySnapshotChunk(index=i, chunk=x)).result
        for i, x in enumerate(chunks)
    ]
    assert results == [Apply.ACCEPT] * snap.chunks
    assert c.info(abci.RequestInfo()).last_block_height == 7


def test_invalid_snapshot_chunk_count_without_metadata() -> None:
    c = Application(MerkleStore(None))
    snap, _ = snapshot_in_memory(7, [(b"a", b"1")])
    snap.chunks = 2**32 - 1  # claims four billion chunks with the metadata of one
    assert (
        c.offer_snapshot(
            abci.RequestOfferSnapshot(snapshot=snap, app_hash=_root_of({b"a": b"1"}))
        ).result
        == Offer.REJECT
    )


def test_a_format_1_snapshot_left_by_an_older_version_is_not_offered(tmp_path: Path) -> None:
    chain = new_chain()
    snaps = Snapshotter(chain.store, tmp_path, interval=0)
    snaps.take(chain.store.height)
    old = abci.Snapshot(height=3, format=1, chunks=1, hash=bytes(32), metadata=bytes(32))
    (tmp_path / "3").mkdir()
    (tmp_path / "3" / "snapshot").write_bytes(old.SerializeToString())
    chain.app.snapshots = snaps
    listed = chain.app.list_snapshots(abci.RequestListSnapshots()).snapshots
    assert [(x.height, x.format) for x in listed] == [(chain.store.height, FORMAT)]


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(st.binary(min_size=1, max_size=6), st.binary(max_size=40), max_size=60),
    st.sampled_from([1, 16, 64, 300, 1 << 20]),
)
def test_any_state_restores_from_its_snapshot(state: dict[bytes, bytes], chunk_bytes: int) -> None:
    """Whatever the state and chunk size: the offer folds to the state's root, every chunk
    verifies, the restored store has the same root and pairs; chunks fit the size asked for
    unless the deepest cut is reached."""
    if not state:
        return  # a committed height always holds the chain id
    root = _root_of(state)
    snap, chunks = snapshot_in_memory(5, state.items(), chunk_bytes)
    depth, _ = decode_metadata(snap.metadata)
    if depth < MAX_DEPTH:
        assert max(len(c) for c in chunks) <= chunk_bytes + 2 + 3  # header: format, index
    c = Application(MerkleStore(None))
    assert (
        c.offer_snapshot(abci.RequestOfferSnapshot(snapshot=snap, app_hash=root)).result
        == Offer.ACCEPT
    )
    results = [
        c.apply_snapshot_chunk(abci.RequestApplySnapshotChunk(index=i, chunk=x)).result
        for i, x in enumerate(chunks)
    ]
    assert results == [Apply.ACCEPT] * snap.chunks
    assert c.store.app_hash == root
    assert dict(c.store.iterate_at(5, b"")) == state


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


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(min_value=0, max_value=3))
def test_hostile_chunk_bytes_are_refetched_never_raised(chunk: bytes, index: int) -> None:
    """Any bytes as any chunk of a real snapshot: ACCEPT only for the real chunk, else RETRY with
    the sender rejected; no exception, nothing unverified kept."""
    state = [(bytes([i]), b"v" * 9) for i in range(24)]
    snap, chunks = snapshot_in_memory(4, state, 128)
    r = Restore(snap, _root_of(dict(state)))
    for i in range(index):
        assert r.apply(i, chunks[i], "ok")[0].result == Apply.ACCEPT
    kept = list(r.pairs())
    resp, _ = r.apply(index, chunk, "evil")
    if chunk == chunks[index]:
        assert resp.result == Apply.ACCEPT
    else:
        assert (resp.result, list(resp.reject_senders)) == (Apply.RETRY, ["evil"])
        assert list(r.pairs()) == kept


@settings(max_examples=300, deadline=None)
@given(
    st.binary(max_size=120),
    st.integers(min_value=0, max_value=2**32 - 1),
    st.integers(min_value=0, max_value=2**64 - 1),
)
def test_hostile_offers_are_answered_never_raised(md: bytes, chunks: int, height: int) -> None:
    snap = abci.Snapshot(
        height=height, format=FORMAT, chunks=chunks, hash=hashlib.sha256(md).digest(), metadata=md
    )
    assert Restore.check_offer(snap, bytes(32)) in (Offer.ACCEPT, Offer.REJECT)


def test_a_chunk_is_refused_at_its_first_bad_pair_not_after_decoding_it_all(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Attacker-review finding: a 16 MiB chunk of 8M empty pairs, wrong from its second pair,
    was decoded into 8M Python tuples before the first check (seconds of the event loop,
    ~600 MB). The check now walks the chunk pair by pair: here the repeated key is found and
    the truncated tail after it is never reached (its error would be 'ends inside')."""
    state = [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]
    snap, chunks = snapshot_in_memory(7, state)
    first = decode_chunk(chunks[0], 0)[0]
    hostile = encode_chunk(0, [first, first, first]) + b"\x05ab"  # a repeat, then a cut
    r = Restore(snap, _root_of(dict(state)))
    with caplog.at_level("WARNING"):
        resp, _ = r.apply(0, hostile, "evil")
    assert resp.result == Apply.RETRY and list(resp.reject_senders) == ["evil"]
    assert "a key twice" in caplog.text and "ends inside" not in caplog.text


def test_close_abandons_a_snapshot_being_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node stopping while a snapshot is written does not wait for it (the crash storm with
    workers saw `loconet start` take over 20 s to stop after cometbft died, on a loaded machine,
    while up to two snapshots were written a fsynced chunk at a time): close() abandons it
    after the chunk in hand, drops the queued one, and the next start clears its tmp folder."""
    import abci_app.snapshots as snapshots

    c = new_chain()
    for i in range(40):  # enough state for several 256-byte chunks
        c.block([c.tx(c.keys[0], [send_msg(bytes([i + 1]) * 20, 1000 + i)])])
    snaps = Snapshotter(c.store, tmp_path / "snaps", interval=1, chunk_bytes=256)
    reached, released = threading.Event(), threading.Event()
    written: list[str] = []
    real_write = snapshots._write

    def write(path: Path, data: bytes) -> None:
        written.append(path.name)
        if path.name == "chunk-1":
            reached.set()
            assert released.wait(30)
        real_write(path, data)

    monkeypatch.setattr(snapshots, "_write", write)
    h = c.store.height
    snaps.on_commit(h)
    snaps.on_commit(h)  # a second one queued behind it
    assert reached.wait(30)
    closer = threading.Thread(target=snaps.close)
    closer.start()
    while not snaps._closing.is_set():
        closer.join(0.01)
    released.set()
    closer.join(30)
    assert not closer.is_alive()
    assert written == ["chunk-0", "chunk-1"]  # nothing after the chunk in hand
    assert snaps.heights() == [] and list((tmp_path / "snaps").glob("tmp-*"))
    again = Snapshotter(c.store, tmp_path / "snaps", interval=1, chunk_bytes=256)
    assert not list((tmp_path / "snaps").glob("tmp-*")) and again.heights() == []
    monkeypatch.setattr(snapshots, "_write", real_write)
    snap = again.take(h)  # and a later take is whole
    assert again.heights() == [h] and snap.chunks > 2
