"""Fuzz targets shared by the hypothesis tests (tests/chain/test_fuzz_targets.py,
tests/trainer/test_trainer_payload_fuzz.py) and the coverage-guided fuzzer (benchmarks/fuzz.py).

Each ``target_*`` takes raw bytes (plus a few derived values) and returns the stable outcome:
``"ok"`` or the code / exception class the input was rejected with. Anything else (an
uncaught exception, a rejected tx that wrote state, a frame split that changes what is read)
raises ``AssertionError`` or the unexpected exception itself, which the caller reports as a
crash.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError
from hypothesis import strategies as st

from abci_app.app import Application, process_tx
from abci_app.codec.tx import SignatureCache, build_tx, decode_tx
from abci_app.context import BlockContext, Ctx
from abci_app.errors import TxError
from abci_app.pb import abci, tx_pb2
from abci_app.server import MAX_MESSAGE_BYTES, FrameReader, FramingError
from abci_app.store import CacheKV

MSG_KINDS: tuple[str, ...] = tuple(
    f.name for f in tx_pb2.Msg.DESCRIPTOR.oneofs_by_name["sum"].fields
)
MSG_CLASSES = {
    f.name: f.message_type._concrete_class
    for f in tx_pb2.Msg.DESCRIPTOR.oneofs_by_name["sum"].fields
}

QUERY_WORDS = (
    "account",
    "supply",
    "params",
    "validator",
    "validators",
    "signing_info",
    "provider",
    "providers",
    "job",
    "jobs",
    "round",
    "rounds",
    "from",
    "limit",
    "status",
    "owner",
    "active",
    "jailed",
    "exiting",
    "bank",
    "staking",
    "slashing",
    "jobs",
    "providers",
)


@dataclass
class World:
    """A committed market state (providers registered, a job in its commit window) that every
    input is checked against without changing it."""

    app: Application
    keys: list[Any]
    block: BlockContext
    chain_id: str


@cache
def world() -> World:
    from tests.kits.marketkit import job_in_commit

    m, _ = job_in_commit()
    app = m.chain.app
    return World(app, list(m.chain.keys), app._check_ctx().block, app.chain_id)


def _reset_check_state(app: Application) -> None:
    """Forget what accepted CheckTxs wrote (as a Commit does), so inputs stay independent."""
    app._check = CacheKV(app.store)
    app._check_block = None


def _run_tx(w: World, raw: bytes) -> abci.ExecTxResult:
    """Execute one tx on a fresh copy of the committed state; a rejection must write nothing."""
    store = CacheKV(w.app.store)
    ctx = Ctx(w.block, store)
    r = process_tx(ctx, raw, SignatureCache())
    # ErrInternal (tx code 15) keeps the chain alive, but it is a handler bug: report it as a crash
    assert (r.codespace, r.code) != ("tx", 15), r.log
    if r.code != 0:
        assert not store.writes(), f"rejected tx (code {r.code}) wrote state"
        assert r.codespace and r.log, "a rejection must carry a codespace and a log"
    return r


def target_tx_bytes(raw: bytes) -> str:
    """Arbitrary tx bytes: decode_tx raises only TxError; CheckTx and the block path give one
    stable code (never an exception) and a rejection writes nothing."""
    try:
        decode_tx(raw)
        decoded = "decoded"
    except TxError as e:
        decoded = f"{e.codespace}:{e.code}"
    w = world()
    r = _run_tx(w, raw)
    check = w.app.check_tx(abci.RequestCheckTx(tx=raw))
    if check.code == 0:
        _reset_check_state(w.app)
    assert check.code == r.code, (check.code, r.code, check.log)
    if decoded != "decoded":
        assert f"{r.codespace}:{r.code}" == decoded
    return f"{r.codespace}:{r.code}"


def target_msg(
    kind_index: int, msg_bytes: bytes, key_index: int = 0, sequence_delta: int = 0, fee: int = 0
) -> str:
    """A message of type ``MSG_KINDS[kind_index]`` with arbitrary fields (parsed from
    ``msg_bytes``), correctly signed by a funded key paying the minimum fee plus ``fee`` uloco:
    every message's checks run, and the result is a stable code; a rejection writes nothing."""
    kind = MSG_KINDS[kind_index % len(MSG_KINDS)]
    try:
        inner = MSG_CLASSES[kind].FromString(msg_bytes)
    except DecodeError:
        # not a protobuf encoding: fill the message's fields from the bytes instead, so every
        # input reaches the handlers
        inner = fill_message(MSG_CLASSES[kind], msg_bytes)
    w = world()
    k = w.keys[key_index % len(w.keys)]
    from abci_app.auth.keeper import get_account

    seq = get_account(w.app.store, k.address).sequence + (sequence_delta % 3)
    msg = tx_pb2.Msg(**{kind: inner})
    try:
        raw = _min_fee_plus(w, k, [msg], fee % (1 << 32), sequence=seq)
    except (ValueError, TypeError):
        return "unbuildable"
    r = _run_tx(w, raw)
    return f"{r.codespace}:{r.code}"


# Values an integer field takes from one selector byte (edges first), else the next 8 bytes.
_INTS = (
    0,
    1,
    2,
    3,
    7,
    100,
    255,
    1 << 31,
    (1 << 32) - 1,
    1 << 32,
    (1 << 63) - 1,
    1 << 63,
    (1 << 64) - 1,
)
_LENS = (0, 20, 32, 1, 19, 21, 31, 33, 64, 8)


class _Bytes:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def byte(self) -> int:
        b = self.data[self.pos] if self.pos < len(self.data) else 0
        self.pos += 1
        return b

    def take(self, n: int) -> bytes:
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out


_FD = FieldDescriptor
_INT32_TYPES = frozenset(
    (_FD.TYPE_UINT32, _FD.TYPE_INT32, _FD.TYPE_SINT32, _FD.TYPE_FIXED32, _FD.TYPE_SFIXED32)
    + (_FD.TYPE_ENUM,)
)
# every signed integer type (sint64 carries the tolerance-mode probes): drawn in its range
_SIGNED_TYPES = frozenset(
    (_FD.TYPE_INT32, _FD.TYPE_INT64, _FD.TYPE_SINT32, _FD.TYPE_SINT64, _FD.TYPE_SFIXED32)
    + (_FD.TYPE_SFIXED64, _FD.TYPE_ENUM)
)


def _fill(msg: Any, r: _Bytes, depth: int) -> Any:
    for f in msg.DESCRIPTOR.fields:
        n = r.byte() % 4 if f.is_repeated else 1
        for _ in range(n):
            t = f.type
            if t == f.TYPE_MESSAGE:
                if depth >= 2:
                    break
                sub = getattr(msg, f.name).add() if f.is_repeated else getattr(msg, f.name)
                _fill(sub, r, depth + 1)
                if not f.is_repeated:
                    sub.SetInParent()
                continue
            sel = r.byte()
            if t in (f.TYPE_BYTES, f.TYPE_STRING):
                size = _LENS[sel % len(_LENS)] if sel < 200 else sel - 200
                raw = r.take(size).ljust(size, b"\x01")
                v: Any = raw if t == f.TYPE_BYTES else raw.decode("utf-8", "replace")
            elif t == f.TYPE_BOOL:
                v = bool(sel & 1)
            else:
                v = _INTS[sel % len(_INTS)] if sel < 200 else int.from_bytes(r.take(8), "big")
                bits = 32 if t in _INT32_TYPES else 64
                if t in _SIGNED_TYPES:
                    v = (v % (1 << bits)) - (1 << (bits - 1)) if sel & 1 else v % (1 << (bits - 1))
                else:
                    v %= 1 << bits
            if f.is_repeated:
                getattr(msg, f.name).append(v)
            else:
                setattr(msg, f.name, v)
    return msg


def fill_message(cls: Any, data: bytes) -> Any:
    """A message of ``cls`` whose fields (in declaration order, nested up to 2 levels) take their
    values from ``data``: edge integers, addresses and hashes of the right and wrong sizes,
    arbitrary strings. Deterministic: the same bytes give the same message."""
    return _fill(cls(), _Bytes(data), 0)


def target_frames(stream: bytes, cuts: list[int]) -> str:
    """The ABCI frame reader over ``stream`` delivered in pieces cut at ``cuts``: the frames read
    never depend on how the stream is split; errors are FramingError only; every frame is a
    Request or a protobuf DecodeError (what the server refuses)."""

    def read(pieces: list[bytes]) -> tuple[list[bytes], str]:
        fr = FrameReader()
        out: list[bytes] = []
        try:
            for p in pieces:
                out += fr.feed(p)
        except FramingError:
            return out, "framing"
        buffered = len(fr._buf)
        assert buffered <= MAX_MESSAGE_BYTES + 10, "reader buffered more than one frame"
        return out, "ok"

    points = sorted({c % (len(stream) + 1) for c in cuts})
    pieces = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    frames, status = read(pieces)
    whole, whole_status = read([stream])
    if status == whole_status == "ok":
        assert frames == whole, "frames depend on how the stream was split"
    else:
        # a framing error is found at the same place whatever the split
        assert status == whole_status, (status, whole_status)
        assert whole[: len(frames)] == frames or frames[: len(whole)] == whole
    decoded = 0
    for f in whole:
        try:
            abci.Request.FromString(f)
            decoded += 1
        except DecodeError:
            pass
    return status if decoded == len(whole) else f"{status}+undecodable"


def target_query(path: str, data: bytes, height: int, prove: bool) -> str:
    """app.query with any path, data and height: a response with a code, never an exception."""
    w = world()
    before = w.app.store.app_hash, w.app.store.height
    resp = w.app.query(abci.RequestQuery(path=path, data=data, height=height, prove=prove))
    assert isinstance(resp, abci.ResponseQuery)
    assert (w.app.store.app_hash, w.app.store.height) == before
    if resp.code != 0:
        assert resp.codespace == "query" and resp.log, (resp.code, resp.log)
    return f"query:{resp.code}"


def query_path(raw: bytes) -> str:
    """Arbitrary bytes as a query path: valid UTF-8 kept as is, other bytes replaced (a
    RequestQuery's path is a proto string; bytes that are not UTF-8 never reach the app)."""
    return raw.decode("utf-8", errors="replace")


# A small model layout: big enough for every codec (top-k, low rank, chunks, strides), small
# enough that a whole valid payload fits in a fuzzer input.
PAYLOAD_SHAPES: dict[str, tuple[int, ...]] = {"h.0.w": (6, 5), "h.1.b": (7,)}
PAYLOAD_CODECS = (
    "none",
    "int8",
    "int4",
    "fp16",
    "topk:0.3+int4",
    "lowrank:2+int8",
    "chunk:3/8+int2",
    "stride:3+int1",
)


def payload_seeds() -> list[bytes]:
    """Valid update payloads over ``PAYLOAD_SHAPES``, one per codec (a fuzzer's start)."""
    import torch

    from trainer.commit import encode
    from trainer.compression import CompressionState, make_codec

    g = torch.Generator().manual_seed(1)
    tensors = {n: torch.randn(s, generator=g) for n, s in PAYLOAD_SHAPES.items()}
    return [encode(make_codec(c).compress(tensors, CompressionState())) for c in PAYLOAD_CODECS]


def target_payload(buf: bytes) -> str:
    """The trainer's payload decoder, then the codec the payload declares against a model's
    shapes: PayloadError / ValueError only."""
    from trainer.commit import KIND_UPDATE, PayloadError, decode
    from trainer.compression import codec_from_payload

    try:
        p = decode(buf)
    except PayloadError:
        return "PayloadError:decode"
    if p.kind != KIND_UPDATE:
        return "ok:not-update"
    try:
        codec = codec_from_payload(p)
    except ValueError:
        return "ValueError:codec"
    outcomes = []
    for shapes in (PAYLOAD_SHAPES, None):
        try:
            codec.decompress(p, shapes)
            outcomes.append("ok")
        except PayloadError:
            outcomes.append("PayloadError")
    return "decompress:" + "/".join(outcomes)


# ------------------------------------------------------------------ seeds (valid inputs)


def seed_msgs() -> list[tx_pb2.Msg]:
    """One valid-looking message of every type, against ``world()``."""
    from abci_app.pb import bank_pb2
    from tests.kits import marketkit as mk

    k = world().keys
    msgs = [
        mk.register_msg(),
        mk.update_msg(region="us-east"),
        mk.exit_msg(),
        mk.create_job_msg(),
        mk.cancel_msg(1),
        mk.submit_msg(k[1].address, 1, 0),
        mk.reveal_msg(k[1].address, 1, 0, 0),
        mk.verdict_msg(1, 0, k[2].address, mk.h("vote")),
        mk.reveal_vote_msg(1, 0, k[2].address, True, 8_000, mk.h("evidence"), mk.h("salt")),
        mk.attest_msg(1, 0, mk.h("model")),
        tx_pb2.Msg(send=bank_pb2.MsgSend(to_address=k[2].address, amount=5)),
    ]
    from abci_app.pb import staking_pb2

    val = world().app.store  # the genesis validator's consensus address, as staking keys it
    from abci_app.staking import keeper as staking_keeper

    cons = next(iter(staking_keeper.iterate_validators(val)))[0]
    msgs += [
        tx_pb2.Msg(bond=staking_pb2.MsgBond(validator=cons, amount=10)),
        tx_pb2.Msg(unbond=staking_pb2.MsgUnbond(validator=cons, amount=1)),
        tx_pb2.Msg(unjail=staking_pb2.MsgUnjail()),
        tx_pb2.Msg(
            create_validator=staking_pb2.MsgCreateValidator(
                pub_key=bytes(range(32)), self_bond=10**6, moniker="v"
            )
        ),
    ]
    return msgs


def seed_txs() -> list[bytes]:
    """Correctly signed txs carrying the seed messages (current sequences)."""
    from abci_app.auth.keeper import get_account

    w = world()
    out = []
    for i, msg in enumerate(seed_msgs()):
        k = w.keys[i % 4]
        seq = get_account(w.app.store, k.address).sequence
        out.append(_min_fee_plus(w, k, [msg], i, sequence=seq, memo="m" * i))
    return out


def _min_fee_plus(w: Any, k: Any, msgs: list[Any], extra: int, **kw: Any) -> bytes:
    """A tx paying the chain's minimum fee plus ``extra`` uloco (auth params of ``w``)."""
    from abci_app.auth.params import fee_fixpoint, get_params

    return fee_fixpoint(
        get_params(w.app.store),
        len(msgs),
        lambda f: build_tx(k, chain_id=w.chain_id, msgs=msgs, fee=f, **kw),
        margin=lambda need: need + extra,
    )[1]


def seed_requests() -> list[abci.Request]:
    return [
        abci.Request(echo=abci.RequestEcho(message="hi")),
        abci.Request(flush=abci.RequestFlush()),
        abci.Request(info=abci.RequestInfo(version="0.38.25")),
        abci.Request(check_tx=abci.RequestCheckTx(tx=b"\x0a\x01x")),
        abci.Request(query=abci.RequestQuery(path="/supply", height=3, prove=True)),
        abci.Request(finalize_block=abci.RequestFinalizeBlock(height=5, txs=[b"t"])),
    ]


def seed_query_paths() -> list[str]:
    from abci_app.codec.address import to_bech32

    a = to_bech32(world().keys[1].address)
    return [
        "/account/" + a,
        "/supply",
        "/params",
        "/params/bank",
        "/validators",
        "/providers?status=active",
        "/provider/" + a,
        "/jobs?owner=" + a + "&status=active&from=0&limit=5",
        "/job/1",
        "/round/1/0",
        "/rounds/1?from=0&limit=2",
        "/signing_info/" + "00" * 20,
        "/validator/" + "AB" * 20,
    ]


# ------------------------------------------------------------------ hypothesis helpers


@st.composite
def mutated(draw, seeds: list[bytes]) -> bytes:
    """A seed with a few byte flips, insertions, deletions or a truncation."""
    b = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        pos = draw(st.integers(0, len(b)))
        if op == "flip" and pos < len(b):
            b[pos] ^= draw(st.integers(1, 255))
        elif op == "insert":
            b[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete" and pos < len(b):
            del b[pos : pos + draw(st.integers(1, 8))]
        elif op == "truncate":
            del b[pos:]
    return bytes(b)
