"""The whole ABCI sequence through the socket server, by a client speaking the real v0.38
framing (uvarint length + protobuf), with pipelined requests answered in order."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from abci_app.app import Application
from abci_app.codec.tx import decode_tx
from abci_app.pb import abci
from abci_app.server import (
    MAX_MESSAGE_BYTES,
    ABCIServer,
    FrameReader,
    FramingError,
    decode_uvarint,
    encode_uvarint,
    frame,
)
from abci_app.store import MerkleStore
from tests.kits.chainkit import CHAIN_ID, genesis_request, send_msg, signer


class Client:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.frames = FrameReader()
        self.pending: list[bytes] = []

    def send(self, **kw: object) -> None:
        self.sock.sendall(frame(abci.Request(**kw)))

    def recv(self) -> abci.Response:
        while not self.pending:
            data = self.sock.recv(65536)
            assert data, "server closed the connection"
            self.pending.extend(self.frames.feed(data))
        return abci.Response.FromString(self.pending.pop(0))

    def call(self, **kw: object) -> abci.Response:
        self.send(**kw)
        self.send(flush=abci.RequestFlush())
        resp = self.recv()
        assert self.recv().WhichOneof("value") == "flush"
        return resp


@pytest.fixture
def server():
    """An ABCIServer on an ephemeral port, running its own event loop in a thread."""
    store = MerkleStore(None)
    srv = ABCIServer(Application(store, check_invariants=True), "tcp://127.0.0.1:0")
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    stop: list[asyncio.Event] = []

    async def main() -> None:
        stop.append(asyncio.Event())
        await srv.start()
        ready.set()
        serving = asyncio.create_task(srv.serve_forever())
        await stop[0].wait()
        await srv.stop()
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in others:
            t.cancel()
        await asyncio.gather(serving, *others, return_exceptions=True)

    t = threading.Thread(target=lambda: loop.run_until_complete(main()), daemon=True)
    t.start()
    assert ready.wait(10)
    yield srv
    loop.call_soon_threadsafe(stop[0].set)
    t.join(10)
    loop.close()
    store.close()


def test_uvarint_framing_roundtrip() -> None:
    for n in [0, 1, 127, 128, 300, 2**32, 2**63 - 1]:
        enc = encode_uvarint(n)
        assert decode_uvarint(enc, 0) == (n, len(enc))
    assert encode_uvarint(300) == b"\xac\x02"  # unsigned, not zigzag (v0.34 would give 0xd8 0x04)
    assert decode_uvarint(b"\x80", 0) is None  # incomplete
    with pytest.raises(FramingError):
        decode_uvarint(b"\xff" * 11, 0)
    fr = FrameReader()
    msgs = [b"a", b"", b"x" * 300]
    stream = b"".join(encode_uvarint(len(m)) + m for m in msgs)
    got = []
    for i in range(len(stream)):  # byte by byte: split frames are reassembled
        got += fr.feed(stream[i : i + 1])
    assert got == msgs


# long: one ABCI server's session, call by call; each reads the state the last one left
def test_full_abci_sequence(server: ABCIServer) -> None:
    k0, k1 = signer(0), signer(1)
    val = signer(1000)
    port = server.bound_port()
    consensus, mempool, query, snapshot = (Client(port) for _ in range(4))

    echo = query.call(echo=abci.RequestEcho(message="hi"))
    assert echo.echo.message == "hi"
    info = query.call(info=abci.RequestInfo(version="0.38.25"))
    assert info.info.last_block_height == 0 and info.info.last_block_app_hash == b""

    ic = consensus.call(init_chain=genesis_request({k0.address: 10**9}, [(val, 10)]))
    assert len(ic.init_chain.app_hash) == 32

    from abci_app.codec.tx import build_tx

    tx1 = build_tx(k0, chain_id=CHAIN_ID, msgs=[send_msg(k1.address, 100)], sequence=0, fee=5_000)
    tx2 = build_tx(k0, chain_id=CHAIN_ID, msgs=[send_msg(k1.address, 200)], sequence=1, fee=5_000)
    # pipelined: three CheckTx then one Flush; answers come back in order
    mempool.send(check_tx=abci.RequestCheckTx(tx=tx1))
    mempool.send(check_tx=abci.RequestCheckTx(tx=tx2))
    mempool.send(check_tx=abci.RequestCheckTx(tx=b"junk"))
    mempool.send(flush=abci.RequestFlush())
    codes = [mempool.recv().check_tx.code for _ in range(3)]
    assert codes[:2] == [0, 0] and codes[2] != 0
    assert mempool.recv().WhichOneof("value") == "flush"

    pp = consensus.call(
        prepare_proposal=abci.RequestPrepareProposal(
            txs=[tx1, tx2, b"junk"], max_tx_bytes=10**6, height=1
        )
    )
    assert list(pp.prepare_proposal.txs) == [tx1, tx2]  # stateless-invalid junk dropped
    ok = consensus.call(process_proposal=abci.RequestProcessProposal(txs=[tx1, tx2], height=1))
    assert ok.process_proposal.status == abci.ResponseProcessProposal.ACCEPT
    bad = consensus.call(process_proposal=abci.RequestProcessProposal(txs=[tx1, b"junk"], height=1))
    assert bad.process_proposal.status == abci.ResponseProcessProposal.REJECT

    ev = consensus.call(extend_vote=abci.RequestExtendVote(height=1))
    assert ev.extend_vote.vote_extension == b""
    vv = consensus.call(
        verify_vote_extension=abci.RequestVerifyVoteExtension(height=1, vote_extension=b"")
    )
    assert vv.verify_vote_extension.status == abci.ResponseVerifyVoteExtension.ACCEPT

    fb_req = abci.RequestFinalizeBlock(
        txs=[tx1, tx2], height=1, proposer_address=val.address, hash=b"\x01" * 32
    )
    fb = consensus.call(finalize_block=fb_req)
    assert [r.code for r in fb.finalize_block.tx_results] == [0, 0]
    app_hash = fb.finalize_block.app_hash
    assert len(app_hash) == 32 and app_hash != ic.init_chain.app_hash

    # the query connection still sees the last committed state until Commit
    from abci_app.codec.address import to_bech32

    q = query.call(query=abci.RequestQuery(path=f"/account/{to_bech32(k1.address)}"))
    assert b'"balance":0' in q.query.value

    cm = consensus.call(commit=abci.RequestCommit())
    assert cm.WhichOneof("value") == "commit"
    info = query.call(info=abci.RequestInfo())
    assert (info.info.last_block_height, info.info.last_block_app_hash) == (1, app_hash)

    q = query.call(query=abci.RequestQuery(path=f"/account/{to_bech32(k1.address)}", prove=True))
    assert q.query.code == 0 and b'"balance":300' in q.query.value
    assert len(q.query.proof_ops.ops) == 2
    from abci_app.store import Proof, verify_proof

    for op in q.query.proof_ops.ops:
        p = Proof.from_bytes(op.data)
        assert verify_proof(p, app_hash, op.key, p.value)

    ls = snapshot.call(list_snapshots=abci.RequestListSnapshots())
    assert list(ls.list_snapshots.snapshots) == []
    os_ = snapshot.call(offer_snapshot=abci.RequestOfferSnapshot())
    # a store with blocks restores nothing
    assert os_.offer_snapshot.result == abci.ResponseOfferSnapshot.ABORT
    assert (
        snapshot.call(load_snapshot_chunk=abci.RequestLoadSnapshotChunk()).WhichOneof("value")
        == "load_snapshot_chunk"
    )
    ap = snapshot.call(apply_snapshot_chunk=abci.RequestApplySnapshotChunk())
    assert ap.apply_snapshot_chunk.result == abci.ResponseApplySnapshotChunk.ABORT

    # after Commit the mempool state was reset: tx2 (seq 1) is now a replay
    r = mempool.call(check_tx=abci.RequestCheckTx(tx=tx2, type=abci.RECHECK))
    assert r.check_tx.code != 0 and "sequence" in r.check_tx.log
    assert decode_tx(tx2).sequence == 1
    for c in (consensus, mempool, query, snapshot):
        c.sock.close()


def test_fatal_error_halts_server(server: ABCIServer) -> None:
    c = Client(server.bound_port())
    # FinalizeBlock before InitChain at a wrong height: the state machine must stop, not go on
    c.send(finalize_block=abci.RequestFinalizeBlock(height=5))
    c.send(flush=abci.RequestFlush())
    r = c.recv()
    assert r.WhichOneof("value") == "exception" and "height 5" in r.exception.error
    assert server.fatal_error is not None
    try:  # the server stops serving this connection: the node halts
        rest = c.sock.recv(100)
    except ConnectionResetError:
        rest = b""
    assert rest == b""
    c.sock.close()


# -- the ABCI boundary: bytes a peer can send never stop the node (issue 12, item 0) ----------


def _raw_request(field: int, inner: bytes) -> bytes:
    """A Request frame setting oneof `field` to `inner`, built by hand so that it may carry bytes
    protobuf refuses to build (a path that is not UTF-8)."""
    body = encode_uvarint(field << 3 | 2) + encode_uvarint(len(inner)) + inner
    return encode_uvarint(len(body)) + body


def _raw_query(path: bytes) -> bytes:
    # Request.query, RequestQuery.path
    return _raw_request(6, b"\x12" + encode_uvarint(len(path)) + path)


def _first_answer(c: Client, **kw: object) -> abci.Response:
    """Sends one request and a Flush; returns the first answer (a refused connection answers
    the request with an exception and closes, so the Flush gets none)."""
    c.send(**kw)
    c.send(flush=abci.RequestFlush())
    return c.recv()


def _closed(c: Client) -> bool:
    try:
        return c.sock.recv(100) == b""
    except ConnectionResetError:
        return True


def _started_chain(server: ABCIServer) -> Client:
    """InitChain + one committed empty block through a consensus connection, left open."""
    val = signer(1000)
    consensus = Client(server.bound_port())
    consensus.call(init_chain=genesis_request({signer(0).address: 10**9}, [(val, 10)]))
    consensus.call(
        finalize_block=abci.RequestFinalizeBlock(
            height=1, proposer_address=val.address, hash=b"\x01" * 32
        )
    )
    consensus.call(commit=abci.RequestCommit())
    return consensus


def test_invalid_query_path_not_utf8_is_an_error_response(server: ABCIServer) -> None:
    q = Client(server.bound_port())
    for path in (
        b"\xff",
        b"/account/\xc3\x28",
        b"\xed\xa0\x80",
    ):  # lone byte, bad continuation, surrogate
        q.sock.sendall(_raw_query(path) + frame(abci.Request(flush=abci.RequestFlush())))
        r = q.recv()
        assert r.WhichOneof("value") == "query"
        assert (r.query.code, r.query.codespace) == (3, "query") and "UTF-8" in r.query.log
        assert q.recv().WhichOneof("value") == "flush"
    # the same connection goes on answering
    ok = q.call(info=abci.RequestInfo())
    assert ok.WhichOneof("value") == "info"
    assert server.fatal_error is None


def test_invalid_query_handler_error_is_not_an_exception(server: ABCIServer, monkeypatch) -> None:
    def boom(req: abci.RequestQuery) -> abci.ResponseQuery:
        raise KeyError("surprise")

    monkeypatch.setitem(server._handlers, "query", boom)
    r = Client(server.bound_port()).call(query=abci.RequestQuery(path="/params"))
    assert r.WhichOneof("value") == "query" and (r.query.code, r.query.codespace) == (4, "query")
    assert server.fatal_error is None


@pytest.mark.parametrize(
    "request_kw",
    [
        {"commit": abci.RequestCommit()},
        {"finalize_block": abci.RequestFinalizeBlock(height=7)},
        {"finalize_block": abci.RequestFinalizeBlock(height=2, hash=b"\x02" * 32)},
        {"init_chain": abci.RequestInitChain(chain_id="evil")},
        {"prepare_proposal": abci.RequestPrepareProposal(height=2, max_tx_bytes=100)},
    ],
    ids=["commit", "finalize-wrong-height", "finalize-next-height", "init-chain", "prepare"],
)
def test_invalid_consensus_method_on_an_extra_connection(
    server: ABCIServer, request_kw: dict
) -> None:
    consensus = _started_chain(server)
    store = server.app.store
    height, app_hash = store.height, store.app_hash
    intruder = Client(server.bound_port())
    intruder.send(**request_kw)
    if (
        "finalize_block" in request_kw
    ):  # the attack that used to corrupt the home: FinalizeBlock, then Commit
        intruder.send(commit=abci.RequestCommit())
    intruder.send(flush=abci.RequestFlush())
    r = intruder.recv()
    assert r.WhichOneof("value") == "exception" and "consensus role" in r.exception.error
    assert _closed(intruder)
    assert server.fatal_error is None
    assert (store.height, store.app_hash) == (height, app_hash) and height == 1
    # the real consensus connection is untouched and goes on
    val = signer(1000)
    fb = consensus.call(
        finalize_block=abci.RequestFinalizeBlock(
            height=2, proposer_address=val.address, hash=b"\x02" * 32
        )
    )
    assert fb.WhichOneof("value") == "finalize_block"
    assert consensus.call(commit=abci.RequestCommit()).WhichOneof("value") == "commit"
    assert store.height == 2


def test_invalid_method_outside_the_connection_role(server: ABCIServer) -> None:
    port = server.bound_port()
    query = Client(port)
    assert query.call(info=abci.RequestInfo()).WhichOneof("value") == "info"
    # a query connection does not CheckTx
    r = _first_answer(query, check_tx=abci.RequestCheckTx(tx=b"x"))
    assert r.WhichOneof("value") == "exception" and "query connection" in r.exception.error
    assert _closed(query)
    mempool = Client(port)
    assert mempool.call(check_tx=abci.RequestCheckTx(tx=b"x")).WhichOneof("value") == "check_tx"
    second = Client(port)  # one mempool connection at a time
    r = _first_answer(second, check_tx=abci.RequestCheckTx(tx=b"x"))
    assert r.WhichOneof("value") == "exception" and "mempool role" in r.exception.error
    assert server.fatal_error is None


def test_role_is_released_when_its_connection_closes(server: ABCIServer) -> None:
    consensus = _started_chain(server)
    consensus.sock.close()  # cometbft restarts: its new consensus connection is accepted
    for _ in range(100):
        if "consensus" not in server._roles:
            break
        time.sleep(0.02)
    again = Client(server.bound_port())
    val = signer(1000)
    fb = again.call(
        finalize_block=abci.RequestFinalizeBlock(
            height=2, proposer_address=val.address, hash=b"\x02" * 32
        )
    )
    assert fb.WhichOneof("value") == "finalize_block"


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x05\xff\xff\xff\xff\xff",
        b"\xff" * 11,
        encode_uvarint(MAX_MESSAGE_BYTES + 1),
        b"\x03\x0f\x01\x02",
    ],
    ids=["bad-protobuf", "bad-varint", "oversize", "bad-wire-type"],
)
def test_invalid_garbage_closes_only_that_connection(
    server: ABCIServer, garbage: bytes, caplog
) -> None:
    port = server.bound_port()
    query = Client(port)
    bad = Client(port)
    with caplog.at_level("WARNING", logger="loconet.abci"):
        bad.sock.sendall(garbage)
        assert _closed(bad)
    assert not [r for r in caplog.records if r.exc_info], "garbage must not log a traceback"
    assert query.call(info=abci.RequestInfo()).WhichOneof("value") == "info"
    assert server.fatal_error is None


def test_consensus_request_is_answered_during_a_check_tx_flood(server: ABCIServer) -> None:
    """Liveness: CometBFT's consensus connection never waits behind the mempool connection's
    pipelined CheckTx. A flood of 3,000 CheckTx keeps the mempool connection's read buffer full
    (so its reads never wait for data); a PrepareProposal sent on the consensus connection in the
    middle is answered after at most a few hundred more CheckTx (the server lets the other
    connections run every YIELD_EVERY requests), not after the rest of the flood."""
    from abci_app.codec.tx import build_tx

    keys = [signer(i) for i in range(30)]
    port = server.bound_port()
    consensus, mempool = Client(port), Client(port)
    consensus.call(init_chain=genesis_request({k.address: 10**12 for k in keys}, [(keys[0], 10)]))
    n = 3000
    txs = [
        build_tx(
            keys[i % 30],
            chain_id=CHAIN_ID,
            msgs=[send_msg(b"\x01" * 20, 1)],
            sequence=i // 30,
            fee=10_000,
        )
        for i in range(n)
    ]
    handled: list[str] = []  # the order the app ran them in ("c" CheckTx, "P" the proposal)
    handlers = server._handlers  # what the server dispatches to

    def logged(mark: str, handler: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def run(req: Any) -> Any:
            handled.append(mark)
            return handler(req)

        return run

    handlers["check_tx"] = logged("c", handlers["check_tx"])
    handlers["prepare_proposal"] = logged("P", handlers["prepare_proposal"])
    wire = b"".join(frame(abci.Request(check_tx=abci.RequestCheckTx(tx=t))) for t in txs)
    flood = threading.Thread(
        target=lambda: mempool.sock.sendall(wire + frame(abci.Request(flush=abci.RequestFlush())))
    )
    flood.start()
    deadline = time.monotonic() + 30
    while handled.count("c") < 300:  # the server is inside the flood
        assert time.monotonic() < deadline, f"the flood did not start: {len(handled)} handled"
        time.sleep(0.001)
    handled.append("sent")
    pp = consensus.call(
        prepare_proposal=abci.RequestPrepareProposal(txs=[], max_tx_bytes=10**6, height=1)
    )
    assert pp.WhichOneof("value") == "prepare_proposal"
    codes = [mempool.recv().check_tx.code for _ in range(n)]
    flood.join(10)
    assert codes == [0] * n  # the flood itself was answered in full, in order
    sent, answered = handled.index("sent"), handled.index("P")
    waited = handled[sent:answered].count("c")
    assert waited <= 400, f"the consensus request waited behind {waited} CheckTx"
    assert handled.count("c") - handled[:answered].count("c") > 1000  # the flood went on after
