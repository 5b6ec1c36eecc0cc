"""Canonical byte layouts and commitments (update root, state hashes, trace root).

Byte layout, version 1 (all integers big-endian; tensor data little-endian, C order)::

    header
      magic        4   b"LOCO"
      version      u16 1
      kind         u8  1 = compressed update, 2 = trainer state, 3 = model parameters,
                       4 = error-feedback carry (trainer/carry.py)
      reserved     u8  0
      codec        u8 length + ASCII          e.g. "topk:0.01+int4"; "raw" (state, model)
      meta         u32 length + ASCII JSON    canonical: sorted keys, no spaces, no NaN
      n_entries    u32
    tensor table   n_entries entries, sorted by name (byte order of UTF-8), unique
      name         u16 length + UTF-8         parameter name, e.g. "h.0.attn.c_attn.weight"
      dtype        u8  (DTYPE_CODES)          dtype of the original tensor
      ndim         u8  (<= 8), dims u64 each  shape of the original tensor
      n_parts      u8  (>= 1)
      parts        n_parts, sorted by part name, unique
        name       u8 length + ASCII          e.g. "val", "idx", "scale", "P", "Q"
        dtype      u8, ndim u8, dims u64 each
    data           the parts' bytes in table order, nothing between, nothing after

The decoder checks every field and the exact total length, and rejects non-finite
floating data, so a malformed payload raises ``PayloadError`` (a ``ValueError``)
with the cause, never another exception.

Commitments:
  * update root = Merkle root (abci_app.merkle) over the payload's 1 MiB chunks;
  * state hash  = sha256(state bytes) (kind 2: parameters + AdamW moments + step);
  * model hash  = sha256(model bytes) (kind 3: parameters only, float32);
  * trace root  = Merkle root whose leaf data are the 32-byte state hashes taken
    every k inner steps (steps 0, k, 2k, ..., H).

Bound commitments (what the chain accepts in MsgSubmitUpdate): given a ``Binding(provider,
job, round, base_model_hash)``, leaf 0 of each tree is ``abci_app.merkle.binding_leaf(kind,
...)`` (kind b"update" / b"trace") and the chunks / state hashes follow as leaves 1, 2, ...
Then trace entry i is leaf i + 1; ``trace_proof``/``chunk_proof`` take care of the offset, and
``binding_proof`` gives the proof of leaf 0 that the chain checks at submit. Without a binding
the roots are the unbound ones (leaf i = entry i), kept for local use and the known answers.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from abci_app.jobs.probe import encode_probe
from abci_app.merkle import (
    BINDING_INDEX,
    ENTRY_OFFSET,
    binding_leaf,
    bound_trace_leaves,
    bound_update_leaves,
    chunk_bytes,
    merkle_proof,
    merkle_root,
    merkle_root_of_bytes,
    verify_merkle_proof,
)

MAGIC = b"LOCO"
VERSION = 1
KIND_UPDATE, KIND_STATE, KIND_MODEL, KIND_CARRY = 1, 2, 3, 4
KIND_NAMES = {KIND_UPDATE: "update", KIND_STATE: "state", KIND_MODEL: "model", KIND_CARRY: "carry"}

DTYPE_CODES: dict[torch.dtype, int] = {
    torch.float32: 1,
    torch.float16: 2,
    torch.bfloat16: 3,
    torch.int8: 4,
    torch.uint8: 5,
    torch.int16: 6,
    torch.int32: 7,
    torch.int64: 8,
    torch.float64: 9,
}
CODE_DTYPES = {v: k for k, v in DTYPE_CODES.items()}
FLOAT_DTYPES = {torch.float32, torch.float16, torch.bfloat16, torch.float64}
ELEMENT_SIZE = {dt: torch.empty((), dtype=dt).element_size() for dt in DTYPE_CODES}
_STRUCTS: dict[str, struct.Struct] = {}

MAX_NDIM = 8
MAX_ENTRIES = 1 << 16
MAX_PARTS = 16
MAX_ELEMENTS = 1 << 34  # per tensor; anything larger is "absurd" for this node
MAX_META = 1 << 16
MAX_META_DEPTH = 32  # arrays/objects nested in a meta (the node's own metas nest 2-3 deep)

if sys.byteorder != "little":  # pragma: no cover - all supported hosts are little-endian
    raise RuntimeError("trainer.commit assumes a little-endian host")


class PayloadError(ValueError):
    """A payload or state could not be decoded; the message names the cause."""


@dataclass(slots=True)
class Entry:
    """One named tensor: its original dtype and shape, and the parts that encode it."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    parts: dict[str, torch.Tensor]


@dataclass(slots=True)
class Payload:
    kind: int
    codec: str
    meta: dict = field(default_factory=dict)
    entries: dict[str, Entry] = field(default_factory=dict)


def canonical_json(obj: object) -> bytes:
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=True
    ).encode("ascii")


def _tensor_bytes(t: torch.Tensor) -> bytes:
    t = t.detach().to("cpu").contiguous().reshape(-1)
    if t.numel() == 0:
        return b""
    return t.view(torch.uint8).numpy().tobytes()


def _dims(shape: Sequence[int]) -> bytes:
    if len(shape) > MAX_NDIM:
        raise PayloadError(f"tensor has {len(shape)} dims, at most {MAX_NDIM} allowed")
    return struct.pack(">B", len(shape)) + b"".join(struct.pack(">Q", int(d)) for d in shape)


def encode(p: Payload) -> bytes:
    """Canonical bytes of ``p`` (see the module docstring)."""
    codec = p.codec.encode("ascii")
    meta = canonical_json(p.meta)
    if len(codec) > 255 or len(meta) > MAX_META or _nesting(meta) > MAX_META_DEPTH:
        raise PayloadError("codec name or meta too long, or meta nested too deep")
    head = [
        MAGIC,
        struct.pack(">HBB", VERSION, p.kind, 0),
        struct.pack(">B", len(codec)),
        codec,
        struct.pack(">I", len(meta)),
        meta,
        struct.pack(">I", len(p.entries)),
    ]
    table: list[bytes] = []
    data: list[bytes] = []
    for name in sorted(p.entries, key=lambda s: s.encode("utf-8")):
        e = p.entries[name]
        nb = name.encode("utf-8")
        table += [
            struct.pack(">H", len(nb)),
            nb,
            struct.pack(">B", DTYPE_CODES[e.dtype]),
            _dims(e.shape),
            struct.pack(">B", len(e.parts)),
        ]
        for pname in sorted(e.parts):
            t = e.parts[pname]
            pb = pname.encode("ascii")
            if t.dtype not in DTYPE_CODES:
                raise PayloadError(f"{name}/{pname}: dtype {t.dtype} has no code")
            table += [
                struct.pack(">B", len(pb)),
                pb,
                struct.pack(">B", DTYPE_CODES[t.dtype]),
                _dims(tuple(t.shape)),
            ]
            data.append(_tensor_bytes(t))
    return b"".join(head + table + data)


class _Reader:
    def __init__(self, buf: bytes) -> None:
        self.buf = memoryview(buf)
        self.pos = 0

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise PayloadError(
                f"truncated payload: needed {n} bytes for {what} at offset {self.pos}, "
                f"{len(self.buf) - self.pos} left"
            )
        out = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return out

    def u(self, fmt: str, what: str) -> int:
        st = _STRUCTS.get(fmt) or _STRUCTS.setdefault(fmt, struct.Struct(fmt))
        if self.pos + st.size > len(self.buf):
            self.take(st.size, what)  # raises the truncation error
        out = st.unpack_from(self.buf, self.pos)[0]
        self.pos += st.size
        return int(out)

    def dtype(self, what: str) -> torch.dtype:
        code = self.u(">B", what)
        if code not in CODE_DTYPES:
            raise PayloadError(f"{what}: unknown dtype code {code}")
        return CODE_DTYPES[code]

    def shape(self, what: str) -> tuple[int, ...]:
        nd = self.u(">B", what)
        if nd > MAX_NDIM:
            raise PayloadError(f"{what}: {nd} dims, at most {MAX_NDIM} allowed")
        dims = tuple(self.u(">Q", what) for _ in range(nd))
        # each dim too (a zero beside 2^64 - 1 passed the product and broke torch.empty with a
        # TypeError or a stride-overflow RuntimeError)
        if math.prod(dims) > MAX_ELEMENTS or any(d > MAX_ELEMENTS for d in dims):
            raise PayloadError(f"{what}: absurd size {dims} (more than 2^34 elements)")
        return dims


def _nesting(raw: bytes) -> int:
    """How deep the JSON text ``raw`` nests arrays and objects (brackets inside strings not
    counted); a plain byte scan, so its answer never depends on the interpreter's stack."""
    if b"[" not in raw and b"{" not in raw:
        return 0
    depth = deepest = 0
    in_string = escaped = False
    for c in raw:
        if in_string:
            if escaped:
                escaped = False
            elif c == 0x5C:  # backslash
                escaped = True
            elif c == 0x22:  # closing quote
                in_string = False
        elif c == 0x22:
            in_string = True
        elif c in (0x5B, 0x7B):  # [ {
            depth += 1
            deepest = max(deepest, depth)
        elif c in (0x5D, 0x7D):  # ] }
            depth -= 1
    return deepest


def _read_header(r: _Reader, expected_kind: int | None) -> tuple[int, str, dict]:
    """(kind, codec, meta) of the header at the reader's start, fully validated."""
    if r.take(4, "magic") != MAGIC:
        raise PayloadError("not a loconet payload (bad magic)")
    version, kind, reserved = struct.unpack(">HBB", r.take(4, "version/kind"))
    if version != VERSION:
        raise PayloadError(f"unsupported payload version {version} (this node reads {VERSION})")
    if kind not in KIND_NAMES:
        raise PayloadError(f"unknown payload kind {kind}")
    if expected_kind is not None and kind != expected_kind:
        raise PayloadError(
            f"payload is a {KIND_NAMES[kind]}, expected a {KIND_NAMES[expected_kind]}"
        )
    if reserved != 0:
        raise PayloadError("reserved header byte is not 0")
    try:
        codec = r.take(r.u(">B", "codec length"), "codec").decode("ascii")
        meta_len = r.u(">I", "meta length")
        if meta_len > MAX_META:
            raise PayloadError(f"meta of {meta_len} bytes is absurd (max {MAX_META})")
        meta_raw = r.take(meta_len, "meta")
        if _nesting(meta_raw) > MAX_META_DEPTH:
            # before json.loads: its recursion limit depends on the caller's stack, so a meta
            # nested ~1,000 deep decoded on one node and raised RecursionError on another
            raise PayloadError(f"meta nested deeper than {MAX_META_DEPTH} levels")
        meta = json.loads(meta_raw.decode("ascii"))
        canonical = isinstance(meta, dict) and canonical_json(meta) == meta_raw
    except ValueError as exc:  # UnicodeDecodeError, JSONDecodeError, NaN, a 5,000-digit int
        raise PayloadError(f"bad codec name or meta: {str(exc)[:200]}") from None
    if not canonical:
        raise PayloadError("meta is not canonical JSON of an object")
    return kind, codec, meta


def decode_meta(buf: bytes, expected_kind: int | None = None) -> dict:
    """The header's meta alone (validated as ``decode`` does), without reading the tensors:
    what a verifier compares before it decides to decode a whole state."""
    if not isinstance(buf, (bytes, bytearray, memoryview)):
        raise PayloadError(f"payload must be bytes, got {type(buf).__name__}")
    return _read_header(_Reader(memoryview(buf)[: 14 + MAX_META + 256].tobytes()), expected_kind)[2]


_Layout = list[tuple[str, torch.dtype, tuple[int, ...], list[tuple[str, torch.dtype, tuple]]]]
# tensor tables parsed lately (entry count, the table's bytes, its layout, its data size): a
# trainer decodes many states of one model, whose tables are byte for byte the same; the same
# bytes parse to the same layout and pass the same checks, so a byte-equal table is not parsed
# again
_TABLE_CACHE: list[tuple[int, bytes, _Layout, int]] = []
_TABLE_CACHE_SIZE = 8


def _table_cache_hit(r: _Reader, n: int) -> tuple[_Layout, int] | None:
    for cn, raw, layout, total in reversed(tuple(_TABLE_CACHE)):  # a snapshot: threads decode
        end = r.pos + len(raw)
        if cn == n and end <= len(r.buf) and r.buf[r.pos : end] == raw:
            r.pos = end
            return layout, total
    return None


def _read_table(r: _Reader, n: int) -> tuple[_Layout, int]:
    """The tensor table of ``n`` entries at the reader's position (every field checked) and the
    data size it declares."""
    layout: _Layout = []
    total = 0
    prev: bytes | None = None
    for i in range(n):
        nb = r.take(r.u(">H", f"entry {i} name length"), f"entry {i} name")
        if prev is not None and nb <= prev:
            raise PayloadError(f"entry {i}: names not sorted and unique")
        prev = nb
        try:
            name = nb.decode("utf-8")
        except UnicodeDecodeError:
            raise PayloadError(f"entry {i}: name is not UTF-8") from None
        dt = r.dtype(name)
        shape = r.shape(name)
        n_parts = r.u(">B", f"{name} part count")
        if not 1 <= n_parts <= MAX_PARTS:
            raise PayloadError(f"{name}: {n_parts} parts (1..{MAX_PARTS} allowed)")
        parts = []
        prev_part: bytes | None = None
        for _ in range(n_parts):
            pb = r.take(r.u(">B", f"{name} part name length"), f"{name} part name")
            if prev_part is not None and pb <= prev_part:
                raise PayloadError(f"{name}: part names not sorted and unique")
            prev_part = pb
            try:
                pname = pb.decode("ascii")
            except UnicodeDecodeError:
                raise PayloadError(f"{name}: part name is not ASCII") from None
            pdt = r.dtype(f"{name}/{pname}")
            pshape = r.shape(f"{name}/{pname}")
            total += math.prod(pshape) * ELEMENT_SIZE[pdt]
            parts.append((pname, pdt, pshape))
        layout.append((name, dt, shape, parts))
    return layout, total


def decode(buf: bytes, expected_kind: int | None = None, check_finite: bool = True) -> Payload:
    """Parse and validate canonical bytes; raise ``PayloadError`` on any defect."""
    if not isinstance(buf, (bytes, bytearray, memoryview)):
        raise PayloadError(f"payload must be bytes, got {type(buf).__name__}")
    try:
        return _decode(buf, expected_kind, check_finite)
    except PayloadError:
        raise
    except (ValueError, TypeError, OverflowError, IndexError, RuntimeError) as exc:
        # a backstop: the checks above are meant to leave nothing to torch or struct, but a
        # peer's bytes must never raise anything else (the worker reads PayloadError as
        # "invalid"); the message names the type only, the same on every node
        raise PayloadError(f"malformed payload ({type(exc).__name__})") from None


def _decode(buf: bytes, expected_kind: int | None, check_finite: bool) -> Payload:
    r = _Reader(buf if isinstance(buf, bytes) else bytes(buf))
    kind, codec, meta = _read_header(r, expected_kind)
    n = r.u(">I", "entry count")
    if n > MAX_ENTRIES:
        raise PayloadError(f"absurd entry count {n} (max {MAX_ENTRIES})")
    table_at = r.pos
    cached = _table_cache_hit(r, n)
    if cached is not None:
        layout, total = cached
    else:
        layout, total = _read_table(r, n)
        _TABLE_CACHE.append((n, bytes(r.buf[table_at : r.pos]), layout, total))
        del _TABLE_CACHE[:-_TABLE_CACHE_SIZE]
    left = len(r.buf) - r.pos
    if total != left:
        kind_ = "truncated" if total > left else "trailing bytes in"
        raise PayloadError(f"{kind_} payload: table declares {total} data bytes, {left} present")
    # one copy of the data section (the table already checked its length); each part is a view
    # of it where its offset suits its dtype, else a copy of its own
    whole = torch.frombuffer(bytearray(r.buf[r.pos :]), dtype=torch.uint8) if left else None
    dtypes = {pdt for _, _, _, parts in layout for _, pdt, _ in parts}
    # a state or a model is float32 throughout: one finiteness check over the whole section
    # (a failure falls back to the per-part check below, which names the tensor)
    per_part = check_finite and not (
        dtypes == {torch.float32}
        and whole is not None
        and bool(torch.isfinite(whole.view(torch.float32)).all())
    )
    entries: dict[str, Entry] = {}
    off = 0
    for name, dt, shape, parts in layout:
        tensors: dict[str, torch.Tensor] = {}
        for pname, pdt, pshape in parts:
            size = math.prod(pshape) * ELEMENT_SIZE[pdt]
            if size == 0 or whole is None:
                t = torch.empty(pshape, dtype=pdt)
            elif off % ELEMENT_SIZE[pdt] == 0:
                t = whole[off : off + size].view(pdt).reshape(pshape)
            else:
                t = torch.frombuffer(
                    bytearray(r.buf[r.pos + off : r.pos + off + size]), dtype=torch.uint8
                )
                t = t.view(pdt).reshape(pshape)
            off += size
            if per_part and pdt in FLOAT_DTYPES and not bool(torch.isfinite(t).all()):
                raise PayloadError(f"{name}/{pname}: contains NaN or inf")
            tensors[pname] = t
        entries[name] = Entry(dtype=dt, shape=shape, parts=tensors)
    return Payload(kind=kind, codec=codec, meta=meta, entries=entries)


# ---------------------------------------------------------------- commitments


def sha256(b: bytes) -> bytes:
    return hashlib.sha256(b).digest()


@dataclass(frozen=True, slots=True)
class Binding:
    """Who commits, for which job, round and base model: leaf 0 of the bound roots."""

    provider: bytes  # 20-byte address (train simulate: sha256(provider_id)[:20])
    job: int
    round: int
    base_model_hash: bytes  # 32 bytes

    def leaf(self, kind: bytes) -> bytes:
        return binding_leaf(kind, self.provider, self.job, self.round, self.base_model_hash)


def update_leaves(payload_bytes: bytes, binding: Binding | None = None) -> list[bytes]:
    """Leaf data of the update tree: abci_app.merkle.bound_update_leaves when bound, else the
    1 MiB chunks."""
    if binding is None:
        return chunk_bytes(payload_bytes)
    b = binding
    return bound_update_leaves(b.provider, b.job, b.round, b.base_model_hash, payload_bytes)


def trace_leaves(state_hashes: Sequence[bytes], binding: Binding | None = None) -> list[bytes]:
    """Leaf data of the trace tree: abci_app.merkle.bound_trace_leaves when bound, else the
    32-byte state hashes."""
    for h in state_hashes:
        if len(h) != 32:
            raise ValueError("trace entries must be 32-byte state hashes")
    if binding is None:
        return [bytes(h) for h in state_hashes]
    b = binding
    return bound_trace_leaves(b.provider, b.job, b.round, b.base_model_hash, state_hashes)


def _offset(bound: bool) -> int:
    return ENTRY_OFFSET if bound else 0


def update_root(payload_bytes: bytes, binding: Binding | None = None) -> bytes:
    """Merkle root over the payload's 1 MiB chunks (what MsgSubmitUpdate carries: bound, so
    leaf 0 is the binding leaf and chunk i is leaf i + 1)."""
    if binding is None:
        return merkle_root_of_bytes(payload_bytes)
    return merkle_root_of_bytes(payload_bytes, head=[binding.leaf(b"update")])


def chunk_proof(
    payload_bytes: bytes, index: int, binding: Binding | None = None
) -> tuple[bytes, list[bytes], int]:
    """(chunk, proof, n_chunks) for chunk ``index`` of a payload (bound: the proof of leaf
    ``entry_leaf(index)`` in a tree of ``n_update_leaves`` leaves)."""
    leaves = update_leaves(payload_bytes, binding)
    off = _offset(binding is not None)
    return leaves[index + off], merkle_proof(leaves, index + off), len(leaves) - off


def verify_chunk(
    root: bytes,
    chunk: bytes,
    index: int,
    n_chunks: int,
    proof: Sequence[bytes],
    bound: bool = False,
) -> bool:
    off = _offset(bound)
    return verify_merkle_proof(root, chunk, index + off, n_chunks + off, proof)


def trace_root(state_hashes: Sequence[bytes], binding: Binding | None = None) -> bytes:
    """Merkle root of the trace; leaf data are the 32-byte state hashes (bound: after the
    binding leaf)."""
    return merkle_root(trace_leaves(state_hashes, binding))


def trace_proof(
    state_hashes: Sequence[bytes], index: int, binding: Binding | None = None
) -> list[bytes]:
    """Proof of trace entry ``index`` (bound: leaf ``entry_leaf(index)``)."""
    return merkle_proof(trace_leaves(state_hashes, binding), index + _offset(binding is not None))


def binding_proof(kind: bytes, data: bytes | Sequence[bytes], binding: Binding) -> list[bytes]:
    """Proof of the binding leaf: ``kind`` b"update" with the payload bytes, or b"trace" with
    the state hashes. This is MsgSubmitUpdate's update/trace_binding_proof."""
    if kind == b"update":
        return merkle_proof(update_leaves(bytes(data), binding), BINDING_INDEX)  # type: ignore[arg-type]
    if kind == b"trace":
        return merkle_proof(trace_leaves(data, binding), BINDING_INDEX)  # type: ignore[arg-type]
    raise ValueError("binding_proof: kind must be b'update' or b'trace'")


def probe_leaves(probes: Sequence[Sequence[int]], binding: Binding) -> list[bytes]:
    """Leaf data of the bound probe tree (tolerance mode): ``binding_leaf(b"probe", ...)``, then
    ``abci_app.jobs.probe.encode_probe`` of each trace entry's probe (entry i is leaf i + 1, the
    trace's layout)."""
    return [binding.leaf(b"probe")] + [encode_probe(p) for p in probes]


def probe_root(probes: Sequence[Sequence[int]], binding: Binding) -> bytes:
    """MsgSubmitUpdate.probe_root: the Merkle root of ``probe_leaves``."""
    return merkle_root(probe_leaves(probes, binding))


def probe_proof(probes: Sequence[Sequence[int]], index: int, binding: Binding) -> list[bytes]:
    """Proof of trace entry ``index``'s probe (leaf ``entry_leaf(index)``), MsgOpenEnd's
    probe_proof; ``index`` = BINDING_INDEX - ENTRY_OFFSET (-1) gives the binding proof."""
    return merkle_proof(probe_leaves(probes, binding), index + ENTRY_OFFSET)


def verify_trace_entry(
    root: bytes,
    state_hash: bytes,
    index: int,
    n_entries: int,
    proof: Sequence[bytes],
    bound: bool = False,
) -> bool:
    """What the chain runs: is ``state_hash`` entry ``index`` of the committed trace? (bound:
    leaf ``index + 1`` of ``n_entries + 1``, as MsgRevealSegment is checked)."""
    off = _offset(bound)
    return len(state_hash) == 32 and verify_merkle_proof(
        root, state_hash, index + off, n_entries + off, proof
    )
