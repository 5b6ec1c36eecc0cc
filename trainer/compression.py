"""Compression of pseudo-gradients, with error feedback, behind one interface.

    codec = make_codec("topk:0.01+int4")
    payload = codec.compress(tensors, state)   # -> commit.Payload (kind 1, canonical bytes)
    tensors2 = codec.decompress(payload)       # dict name -> float32 tensor, original shapes
    codec.ratio(payload)                       # fp32 bytes / encoded bytes (measured)
    codec.estimate_bytes(shapes)               # exact encoded size, without compressing

A codec is a *sparsifier* and a *quantizer*, written ``SPARSIFIER[+QUANTIZER]``:

  sparsifier  ``dense`` (default), ``topk:D`` (keep the ceil(D*n) largest |values| of
              each tensor; indices sorted and bit-packed at ceil(log2 n) bits each),
              ``lowrank:R`` (PowerSGD: one power iteration, warm-started Q kept in the
              state; tensors with fewer than 2 dims, or too small, are sent dense)
  quantizer   ``fp32`` (default), ``fp16``, ``int8``, ``int4`` (blockwise symmetric,
              64 values per block, one float32 scale per block = absmax / 127 or / 7;
              int4 codes are packed two per byte, low nibble first, stored as q + 8)

Named shorthands: ``none`` = dense+fp32, ``int8`` = dense+int8, ``int4`` = dense+int4.

Error feedback: ``compress`` adds ``state.residual[name]`` to the input, encodes, decodes
exactly as a receiver would, and keeps ``residual = input + old_residual - decoded``.
So what a round drops is sent in later rounds. The residual lives in the
``CompressionState``, not the codec, so an adaptive policy can switch codecs freely.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from trainer.commit import KIND_UPDATE, Entry, Payload, PayloadError, encode
from trainer.determinism import DetRNG

QBLOCK = 64
QMAX = {"int8": 127, "int4": 7}


@dataclass(slots=True)
class CompressionState:
    residual: dict[str, torch.Tensor] = field(default_factory=dict)
    q_warm: dict[str, torch.Tensor] = field(default_factory=dict)  # PowerSGD Q per tensor
    error_feedback: bool = True
    ef_decay: float = 1.0  # residual <- decay * residual before it is added (SparseLoCo: 0.95)
    sent: int = 0  # payloads compressed so far (the stride codec's fragment counter)


# ---------------------------------------------------------------- bit packing


def pack_bits(values: torch.Tensor, width: int) -> torch.Tensor:
    """Pack non-negative int64 ``values`` (< 2**width) into uint8, little-endian bits."""
    if values.numel() == 0:
        return torch.zeros(0, dtype=torch.uint8)
    shifts = torch.arange(width, dtype=torch.int64)
    bits = ((values.reshape(-1, 1) >> shifts) & 1).reshape(-1).to(torch.uint8)
    pad = (-bits.numel()) % 8
    if pad:
        bits = torch.cat([bits, torch.zeros(pad, dtype=torch.uint8)])
    weights = (1 << torch.arange(8, dtype=torch.int64))
    return (bits.reshape(-1, 8).long() * weights).sum(1).to(torch.uint8)


def unpack_bits(packed: torch.Tensor, width: int, count: int) -> torch.Tensor:
    if count == 0:
        return torch.zeros(0, dtype=torch.int64)
    bits = ((packed.long().reshape(-1, 1) >> torch.arange(8)) & 1).reshape(-1)
    bits = bits[: count * width].reshape(count, width)
    return (bits * (1 << torch.arange(width, dtype=torch.int64))).sum(1)


def index_width(n: int) -> int:
    return max(1, math.ceil(math.log2(n))) if n > 1 else 1


# ---------------------------------------------------------------- quantizers


def quant_parts(v: torch.Tensor, quant: str, prefix: str) -> dict[str, torch.Tensor]:
    """Encode a 1-D float32 tensor with ``quant``; part names start with ``prefix``."""
    v = v.reshape(-1).float()
    if quant == "fp32":
        return {prefix + "v": v.clone()}
    if quant == "fp16":
        return {prefix + "v": v.clamp(-65504.0, 65504.0).half()}
    qmax = QMAX[quant]
    n = v.numel()
    nb = math.ceil(n / QBLOCK)
    padded = torch.zeros(nb * QBLOCK, dtype=torch.float32)
    padded[:n] = v
    blocks = padded.reshape(nb, QBLOCK)
    scale = blocks.abs().amax(dim=1) / qmax  # (nb,)
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(blocks / safe[:, None]).clamp(-qmax, qmax).reshape(-1)[:n]
    if quant == "int8":
        return {prefix + "q": q.to(torch.int8), prefix + "s": scale}
    codes = (q + 8).to(torch.uint8)  # 1..15
    if n % 2:
        codes = torch.cat([codes, torch.full((1,), 8, dtype=torch.uint8)])
    packed = codes[0::2] | (codes[1::2] << 4)
    return {prefix + "q": packed, prefix + "s": scale}


def dequant(parts: dict[str, torch.Tensor], quant: str, prefix: str, n: int) -> torch.Tensor:
    try:
        if quant in ("fp32", "fp16"):
            v = parts[prefix + "v"].float().reshape(-1)
            if v.numel() != n:
                raise PayloadError(f"value part has {v.numel()} values, expected {n}")
            return v
        scale = parts[prefix + "s"].float().reshape(-1)
        raw = parts[prefix + "q"].reshape(-1)
    except KeyError as exc:
        raise PayloadError(f"missing part {exc} for quantizer {quant}") from None
    nb = math.ceil(n / QBLOCK)
    if scale.numel() != nb:
        raise PayloadError(f"{nb} scales expected, {scale.numel()} present")
    if quant == "int8":
        if raw.dtype != torch.int8 or raw.numel() != n:
            raise PayloadError(f"int8 part: {raw.numel()} {raw.dtype}, expected {n} int8")
        q = raw.float()
    else:
        if raw.dtype != torch.uint8 or raw.numel() != (n + 1) // 2:
            raise PayloadError(f"int4 part: {raw.numel()} bytes, expected {(n + 1) // 2}")
        lo = (raw & 0x0F).long() - 8
        hi = (raw >> 4).long() - 8
        q = torch.stack([lo, hi], dim=1).reshape(-1)[:n].float()
        if bool((q.abs() > 7).any()):
            raise PayloadError("int4 code out of range")
    padded = torch.zeros(nb * QBLOCK)
    padded[:n] = q
    return (padded.reshape(nb, QBLOCK) * scale[:, None]).reshape(-1)[:n]


def quant_part_specs(n: int, quant: str, prefix: str) -> dict[str, tuple[torch.dtype, tuple]]:
    if quant == "fp32":
        return {prefix + "v": (torch.float32, (n,))}
    if quant == "fp16":
        return {prefix + "v": (torch.float16, (n,))}
    nb = math.ceil(n / QBLOCK)
    q = (torch.int8, (n,)) if quant == "int8" else (torch.uint8, ((n + 1) // 2,))
    return {prefix + "q": q, prefix + "s": (torch.float32, (nb,))}


# ---------------------------------------------------------------- the codec


@dataclass(kw_only=True, slots=True, frozen=True)
class Codec:
    sparsifier: str = "dense"  # dense | topk | lowrank | chunk
    density: float = 1.0  # topk
    rank: int = 0  # lowrank
    quant: str = "fp32"  # fp32 | fp16 | int8 | int4 (| int2: chunk only)
    chunk_k: int = 0  # chunk: values kept per chunk
    chunk_size: int = 0  # chunk: elements per chunk of the flattened update

    @property
    def name(self) -> str:
        if self.sparsifier == "topk":
            s = f"topk:{self.density:g}"
        elif self.sparsifier == "lowrank":
            s = f"lowrank:{self.rank}"
        elif self.sparsifier == "chunk":
            s = f"chunk:{self.chunk_k}/{self.chunk_size}"
        elif self.sparsifier == "stride":
            s = f"stride:{self.chunk_size}"
        else:
            s = "dense"
        return s if self.quant == "fp32" else f"{s}+{self.quant}"

    def _meta(self) -> dict:
        if self.sparsifier == "stride":
            return {"quant": self.quant, "sparsifier": "stride", "stride": self.chunk_size}
        if self.sparsifier == "chunk":
            return {"chunk_k": self.chunk_k, "chunk_size": self.chunk_size, "quant": self.quant,
                    "sparsifier": "chunk"}
        return {"block": QBLOCK, "density": repr(self.density), "quant": self.quant,
                "rank": self.rank, "sparsifier": self.sparsifier}

    # -- per-tensor layout
    def _lowrank_dims(self, shape: tuple[int, ...]) -> tuple[int, int, int] | None:
        if len(shape) < 2:
            return None
        n, m = shape[0], math.prod(shape[1:])
        r = min(self.rank, n, m)
        if r <= 0 or r * (n + m) >= n * m:  # low rank would not save anything
            return None
        return n, m, r

    def _k(self, n: int) -> int:
        return min(n, max(1, math.ceil(self.density * n)))

    def part_specs(self, shape: tuple[int, ...]) -> dict[str, tuple[torch.dtype, tuple]]:
        n = math.prod(shape)
        if self.sparsifier == "topk":
            k = self._k(n)
            w = index_width(n)
            specs = {"idx": (torch.uint8, (math.ceil(k * w / 8),))}
            specs.update(quant_part_specs(k, self.quant, ""))
            return specs
        if self.sparsifier == "lowrank":
            d = self._lowrank_dims(shape)
            if d is not None:
                rows, cols, r = d
                specs = quant_part_specs(rows * r, self.quant, "P.")
                specs.update(quant_part_specs(cols * r, self.quant, "Q."))
                return specs
        return quant_part_specs(n, self.quant, "")

    def estimate_bytes(self, shapes: dict[str, tuple[int, ...]]) -> int:
        """Exact encoded payload size for tensors of these shapes."""
        if self.sparsifier == "chunk":
            return len(encode(chunk_payload_skeleton(self, shapes)))
        if self.sparsifier == "stride":  # fragment 0 is the largest one
            return len(encode(stride_payload_skeleton(self, shapes)))
        entries = {
            name: Entry(dtype=torch.float32, shape=tuple(shape), parts={
                pn: torch.zeros(ps, dtype=dt) for pn, (dt, ps) in self.part_specs(tuple(shape)).items()
            })
            for name, shape in shapes.items()
        }
        return len(encode(Payload(kind=KIND_UPDATE, codec=self.name, meta=self._meta(), entries=entries)))

    def nominal_ratio(self, shapes: dict[str, tuple[int, ...]]) -> float:
        raw = 4 * sum(math.prod(s) for s in shapes.values())
        return raw / self.estimate_bytes(shapes)

    # -- encode / decode one tensor
    def _encode_one(self, name: str, g: torch.Tensor, state: CompressionState) -> dict[str, torch.Tensor]:
        flat = g.reshape(-1)
        n = flat.numel()
        if self.sparsifier == "topk":
            k = self._k(n)
            idx = torch.topk(flat.abs(), k, sorted=False).indices.sort().values
            parts = {"idx": pack_bits(idx, index_width(n))}
            parts.update(quant_parts(flat[idx], self.quant, ""))
            return parts
        if self.sparsifier == "lowrank":
            d = self._lowrank_dims(tuple(g.shape))
            if d is not None:
                rows, cols, r = d
                M = g.reshape(rows, cols)
                Q = state.q_warm.get(name)
                if Q is None or tuple(Q.shape) != (cols, r):
                    gen = torch.Generator().manual_seed(DetRNG("powersgd", name).torch_seed())
                    Q = torch.randn(cols, r, generator=gen)
                P = M @ Q  # (rows, r)
                P, _ = torch.linalg.qr(P)  # orthonormal columns
                Q = M.t() @ P  # (cols, r)
                state.q_warm[name] = Q.clone()
                parts = quant_parts(P, self.quant, "P.")
                parts.update(quant_parts(Q, self.quant, "Q."))
                return parts
        return quant_parts(flat, self.quant, "")

    def _decode_one(self, shape: tuple[int, ...], parts: dict[str, torch.Tensor]) -> torch.Tensor:
        n = math.prod(shape)
        expected = self.part_specs(shape)
        if set(parts) != set(expected):
            raise PayloadError(f"parts {sorted(parts)} do not match codec {self.name}: {sorted(expected)}")
        for pn, (dt, ps) in expected.items():
            if parts[pn].dtype != dt or tuple(parts[pn].shape) != tuple(ps):
                raise PayloadError(
                    f"part {pn}: {parts[pn].dtype}{tuple(parts[pn].shape)}, expected {dt}{ps} "
                    f"(shape mismatch)"
                )
        if self.sparsifier == "topk":
            k = self._k(n)
            idx = unpack_bits(parts["idx"], index_width(n), k)
            if k and (bool((idx >= n).any()) or bool((idx[1:] <= idx[:-1]).any())):
                raise PayloadError("top-k indices out of range or not strictly increasing")
            out = torch.zeros(n)
            out[idx] = dequant(parts, self.quant, "", k)
            return out.reshape(shape)
        if self.sparsifier == "lowrank":
            d = self._lowrank_dims(shape)
            if d is not None:
                rows, cols, r = d
                P = dequant(parts, self.quant, "P.", rows * r).reshape(rows, r)
                Q = dequant(parts, self.quant, "Q.", cols * r).reshape(cols, r)
                return (P @ Q.t()).reshape(shape)
        return dequant(parts, self.quant, "", n).reshape(shape)

    # -- the interface
    def compress(self, tensors: dict[str, torch.Tensor], state: CompressionState) -> Payload:
        if self.sparsifier == "chunk":
            return chunk_compress(self, tensors, state)
        if self.sparsifier == "stride":
            return stride_compress(self, tensors, state)
        entries: dict[str, Entry] = {}
        for name in sorted(tensors):
            t = tensors[name].detach().float().cpu()
            res = state.residual.get(name)
            g = (t + state.ef_decay * res if (state.error_feedback and res is not None)
                 else t.clone())
            parts = self._encode_one(name, g, state)
            dec = self._decode_one(tuple(t.shape), parts)
            if state.error_feedback:
                state.residual[name] = g - dec
            entries[name] = Entry(dtype=torch.float32, shape=tuple(t.shape), parts=parts)
        return Payload(kind=KIND_UPDATE, codec=self.name, meta=self._meta(), entries=entries)

    def decompress(self, payload: Payload, expected_shapes: dict[str, tuple[int, ...]] | None = None) -> dict[str, torch.Tensor]:
        if payload.kind != KIND_UPDATE:
            raise PayloadError("not an update payload")
        if payload.codec != self.name:
            raise PayloadError(f"payload codec {payload.codec!r}, expected {self.name!r}")
        if self.sparsifier == "chunk":
            return chunk_decompress(self, payload, expected_shapes)
        if self.sparsifier == "stride":
            return stride_decompress(self, payload, expected_shapes)
        if expected_shapes is not None:
            if set(payload.entries) != set(expected_shapes):
                raise PayloadError("update tensor names do not match the model")
            for n, e in payload.entries.items():
                if tuple(e.shape) != tuple(expected_shapes[n]):
                    raise PayloadError(f"{n}: shape {e.shape} does not match model {expected_shapes[n]}")
        out = {}
        for name, e in payload.entries.items():
            if e.dtype != torch.float32:
                raise PayloadError(f"{name}: updates must be float32 tensors")
            t = self._decode_one(tuple(e.shape), e.parts)
            if not bool(torch.isfinite(t).all()):
                raise PayloadError(f"{name}: decoded update is not finite")
            out[name] = t
        return out

    def ratio(self, payload: Payload) -> float:
        """Measured ratio: float32 bytes of the tensors / canonical encoded bytes."""
        raw = 4 * sum(math.prod(e.shape) for e in payload.entries.values())
        return raw / len(encode(payload))


# ---------------------------------------------------------------- chunked top-k (SparseLoCo)
#
# ``chunk:K/C[+q]``: all tensors, sorted by name, are flattened into one vector of N values
# and cut into chunks of C (the last one may be shorter); in each chunk the K largest |values|
# are kept (min(K, chunk length)). The payload has ONE entry, ``flat``, float32 of shape (N,),
# with parts (all little-endian bit packing as pack_bits, LSB first, zero pad bits):
#   ``idx``  uint8: every kept value's offset inside its chunk, ceil(log2 C) bits each,
#            chunk after chunk, strictly increasing within a chunk;
#   ``q``    the kept values: fp32/fp16 as they are; int8 as int8 codes (|q| <= 127);
#            int4 as 4-bit codes q+8 (1..15); int2 as 2-bit codes c (value (c - 1.5) * s);
#   ``s``    bfloat16 scale per chunk (int codecs only): absmax / 127, / 7, or / 1.5.
# meta: chunk_k, chunk_size, quant, sparsifier="chunk", layout (16 hex digits of
# sha256 over the sorted "name:d0xd1..." lines), so a receiver with another model refuses it.
# The receiver must know the model's shapes (``expected_shapes``); the tensor table of a
# per-tensor codec would cost ~80 bytes per tensor, more than the values of a small model.

CHUNK = 4096
CHUNK_QMAX = {"int8": 127.0, "int4": 7.0, "int2": 1.5}
CHUNK_QBITS = {"int8": 8, "int4": 4, "int2": 2}


def layout_id(shapes: dict[str, tuple[int, ...]]) -> str:
    import hashlib

    lines = "\n".join(f"{n}:{'x'.join(str(int(d)) for d in shapes[n])}" for n in sorted(shapes))
    return hashlib.sha256(lines.encode("utf-8")).hexdigest()[:16]


def _chunk_lens(n: int, c: int) -> list[int]:
    full, rest = divmod(n, c)
    return [c] * full + ([rest] if rest else [])


def _chunk_part_specs(codec: "Codec", n: int) -> dict[str, tuple[torch.dtype, tuple]]:
    lens = _chunk_lens(n, codec.chunk_size)
    kt = sum(min(codec.chunk_k, ln) for ln in lens)
    specs: dict[str, tuple[torch.dtype, tuple]] = {
        "idx": (torch.uint8, (math.ceil(kt * index_width(codec.chunk_size) / 8),))}
    q = codec.quant
    if q == "fp32":
        specs["q"] = (torch.float32, (kt,))
    elif q == "fp16":
        specs["q"] = (torch.float16, (kt,))
    elif q == "int8":
        specs["q"] = (torch.int8, (kt,))
    else:
        specs["q"] = (torch.uint8, (math.ceil(kt * CHUNK_QBITS[q] / 8),))
    if q in CHUNK_QMAX:
        specs["s"] = (torch.bfloat16, (len(lens),))
    return specs


def chunk_payload_skeleton(codec: "Codec", shapes: dict[str, tuple[int, ...]]) -> Payload:
    n = sum(math.prod(s) for s in shapes.values())
    parts = {pn: torch.zeros(ps, dtype=dt) for pn, (dt, ps) in _chunk_part_specs(codec, n).items()}
    meta = dict(codec._meta(), layout=layout_id(shapes))
    return Payload(kind=KIND_UPDATE, codec=codec.name, meta=meta,
                   entries={"flat": Entry(dtype=torch.float32, shape=(n,), parts=parts)})


def _chunk_select(codec: "Codec", flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """(offsets within chunks, global positions, kept count per chunk)."""
    c, k = codec.chunk_size, codec.chunk_k
    n = flat.numel()
    full = n // c
    offs, pos, counts = [], [], []
    if full:
        kk = min(k, c)
        o = torch.topk(flat[: full * c].reshape(full, c).abs(), kk, dim=1, sorted=False).indices
        o = o.sort(dim=1).values
        offs.append(o.reshape(-1))
        pos.append((o + (torch.arange(full) * c)[:, None]).reshape(-1))
        counts += [kk] * full
    if n % c:
        tail = flat[full * c:]
        kk = min(k, tail.numel())
        o = torch.topk(tail.abs(), kk, sorted=False).indices.sort().values
        offs.append(o)
        pos.append(o + full * c)
        counts.append(kk)
    return torch.cat(offs), torch.cat(pos), counts


def _chunk_quant(codec: "Codec", vals: torch.Tensor, counts: list[int]) -> dict[str, torch.Tensor]:
    q = codec.quant
    if q == "fp32":
        return {"q": vals.clone()}
    if q == "fp16":
        return {"q": vals.clamp(-65504.0, 65504.0).half()}
    qmax = CHUNK_QMAX[q]
    segs = torch.split(vals, counts)
    scale = torch.stack([sg.abs().amax() / qmax for sg in segs]).to(torch.bfloat16)
    s = scale.float().repeat_interleave(torch.tensor(counts))
    safe = torch.where(s > 0, s, torch.ones_like(s))
    if q == "int2":
        codes = torch.round(vals / safe + 1.5).clamp(0, 3).long()
        return {"q": pack_bits(codes, 2), "s": scale}
    qi = torch.round(vals / safe).clamp(-qmax, qmax)
    if q == "int8":
        return {"q": qi.to(torch.int8), "s": scale}
    return {"q": pack_bits((qi + 8).long(), 4), "s": scale}


def _chunk_dequant(codec: "Codec", parts: dict[str, torch.Tensor], counts: list[int]) -> torch.Tensor:
    q = codec.quant
    kt = sum(counts)
    raw = parts["q"]
    if q in ("fp32", "fp16"):
        return raw.float().reshape(-1)
    s = parts["s"].float().repeat_interleave(torch.tensor(counts))
    if not bool(torch.isfinite(s).all()) or bool((s < 0).any()):
        raise PayloadError("chunk scales must be finite and non-negative")
    if q == "int8":
        if bool((raw == -128).any()):
            raise PayloadError("int8 code -128 out of range")
        return raw.float() * s
    bits = CHUNK_QBITS[q]
    codes = unpack_bits(raw, bits, kt)
    if not torch.equal(pack_bits(codes, bits), raw):
        raise PayloadError(f"{q} part has non-zero padding bits")
    if q == "int2":
        return (codes.float() - 1.5) * s
    if bool((codes == 0).any()):
        raise PayloadError("int4 code out of range")
    return (codes.float() - 8.0) * s


def _chunk_decode_flat(codec: "Codec", n: int, parts: dict[str, torch.Tensor]) -> torch.Tensor:
    expected = _chunk_part_specs(codec, n)
    if set(parts) != set(expected):
        raise PayloadError(f"parts {sorted(parts)} do not match codec {codec.name}: {sorted(expected)}")
    for pn, (dt, ps) in expected.items():
        if parts[pn].dtype != dt or tuple(parts[pn].shape) != tuple(ps):
            raise PayloadError(f"part {pn}: {parts[pn].dtype}{tuple(parts[pn].shape)}, "
                               f"expected {dt}{ps} (shape mismatch)")
    lens = _chunk_lens(n, codec.chunk_size)
    counts = [min(codec.chunk_k, ln) for ln in lens]
    kt = sum(counts)
    w = index_width(codec.chunk_size)
    offs = unpack_bits(parts["idx"], w, kt)
    if not torch.equal(pack_bits(offs, w), parts["idx"]):
        raise PayloadError("idx part has non-zero padding bits")
    out = torch.zeros(n)
    start = 0
    base = 0
    pos = []
    for ln, k in zip(lens, counts):
        o = offs[start:start + k]
        if bool((o >= ln).any()) or bool((o[1:] <= o[:-1]).any()):
            raise PayloadError("chunk offsets out of range or not strictly increasing")
        pos.append(o + base)
        start += k
        base += ln
    vals = _chunk_dequant(codec, parts, counts)
    out[torch.cat(pos)] = vals
    return out


def _flat_with_residual(tensors: dict[str, torch.Tensor], state: CompressionState) -> torch.Tensor:
    """All tensors in name order, flattened into one float32 vector, each plus its decayed
    error-feedback residual when error feedback is on."""
    gs = []
    for name in sorted(tensors):
        t = tensors[name].detach().float().cpu().reshape(-1)
        res = state.residual.get(name)
        gs.append(t + state.ef_decay * res.reshape(-1) if (state.error_feedback and res is not None)
                  else t.clone())
    return torch.cat(gs)


def _store_residual(state: CompressionState, names: list[str], shapes: dict[str, tuple[int, ...]],
                    flat: torch.Tensor, dec: torch.Tensor) -> None:
    """Error feedback: what this round did not send, per tensor, carried to the next round."""
    if not state.error_feedback:
        return
    sizes = [math.prod(shapes[n]) for n in names]
    for name, r in zip(names, torch.split(flat - dec, sizes)):
        state.residual[name] = r.reshape(shapes[name])


def chunk_compress(codec: "Codec", tensors: dict[str, torch.Tensor], state: CompressionState) -> Payload:
    names = sorted(tensors)
    flat = _flat_with_residual(tensors, state)
    offs, pos, counts = _chunk_select(codec, flat)
    parts = {"idx": pack_bits(offs, index_width(codec.chunk_size))}
    parts.update(_chunk_quant(codec, flat[pos], counts))
    shapes = {n: tuple(tensors[n].shape) for n in names}
    dec = _chunk_decode_flat(codec, flat.numel(), parts)
    _store_residual(state, names, shapes, flat, dec)
    meta = dict(codec._meta(), layout=layout_id(shapes))
    return Payload(kind=KIND_UPDATE, codec=codec.name, meta=meta,
                   entries={"flat": Entry(dtype=torch.float32, shape=(flat.numel(),), parts=parts)})


def chunk_decompress(codec: "Codec", payload: Payload,
                     expected_shapes: dict[str, tuple[int, ...]] | None) -> dict[str, torch.Tensor]:
    if expected_shapes is None:
        raise PayloadError("a chunk payload can only be decoded with the model's shapes")
    if payload.meta != dict(codec._meta(), layout=layout_id(expected_shapes)):
        raise PayloadError("chunk payload meta (codec or model layout) does not match")
    if set(payload.entries) != {"flat"}:
        raise PayloadError("a chunk payload has exactly one entry, 'flat'")
    e = payload.entries["flat"]
    names = sorted(expected_shapes)
    sizes = [math.prod(expected_shapes[n]) for n in names]
    if e.dtype != torch.float32 or tuple(e.shape) != (sum(sizes),):
        raise PayloadError(f"flat: {e.dtype}{tuple(e.shape)}, expected float32({sum(sizes)},)")
    flat = _chunk_decode_flat(codec, sum(sizes), e.parts)
    if not bool(torch.isfinite(flat).all()):
        raise PayloadError("flat: decoded update is not finite")
    return {n: t.reshape(expected_shapes[n]) for n, t in zip(names, torch.split(flat, sizes))}


# ---------------------------------------------------------------- strided fragments
#
# ``stride:F[+q]`` (q = int1 | int2 | int4 | int8 | fp16 | fp32): the flattened update (all
# tensors sorted by name, as for ``chunk``) is split into F interleaved fragments; payload number
# t (``CompressionState.sent``, counted per sender) carries fragment j = t mod F, i.e. every value
# at position i with i mod F == j, so every worker sends the SAME positions in a round and no
# index bits are needed (the receiver derives them from ``offset`` in meta). With error feedback
# (decay 1 recommended) a position's accumulated update is sent every F rounds, as in Streaming
# DiLoCo's fragment schedule. Values are quantized in groups of STRIDE_GROUP with a bfloat16
# scale per group: int1 = sign x mean|x|; int2 = codes c in 0..3, value (c - 1.5) x rms (close to
# the Lloyd-Max levels of a Gaussian); int4/int8 = absmax / 7 or / 127.
# One entry ``flat`` (float32, (N,)) with parts ``q`` (packed codes or values) and ``s`` (scales).

STRIDE_GROUP = 256
STRIDE_BITS = {"int1": 1, "int2": 2, "int4": 4, "int8": 8}


def _stride_part_specs(codec: "Codec", n: int, offset: int) -> dict[str, tuple[torch.dtype, tuple]]:
    m = len(range(offset, n, codec.chunk_size))
    q = codec.quant
    if q == "fp32":
        return {"q": (torch.float32, (m,))}
    if q == "fp16":
        return {"q": (torch.float16, (m,))}
    specs = {"q": (torch.uint8, (math.ceil(m * STRIDE_BITS[q] / 8),)),
             "s": (torch.bfloat16, (math.ceil(m / STRIDE_GROUP),))}
    return specs


def _stride_quant(q: str, v: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """(parts, decoded values)."""
    if q == "fp32":
        return {"q": v.clone()}, v.clone()
    if q == "fp16":
        h = v.clamp(-65504.0, 65504.0).half()
        return {"q": h}, h.float()
    m = v.numel()
    ng = math.ceil(m / STRIDE_GROUP)
    pad = torch.zeros(ng * STRIDE_GROUP)
    pad[:m] = v
    g = pad.reshape(ng, STRIDE_GROUP)
    cnt = torch.full((ng,), float(STRIDE_GROUP))
    if m % STRIDE_GROUP:
        cnt[-1] = float(m % STRIDE_GROUP)
    if q == "int1":
        s = (g.abs().sum(1) / cnt).to(torch.bfloat16)
    elif q == "int2":
        s = (g.pow(2).sum(1) / cnt).sqrt().to(torch.bfloat16)
    else:
        s = (g.abs().amax(1) / (7.0 if q == "int4" else 127.0)).to(torch.bfloat16)
    sf = s.float().repeat_interleave(STRIDE_GROUP)[:m]
    safe = torch.where(sf > 0, sf, torch.ones_like(sf))
    if q == "int1":
        codes = (v >= 0).long()
        dec = (codes.float() * 2 - 1) * sf
    elif q == "int2":
        codes = torch.floor(v / safe + 2).clamp(0, 3).long()  # thresholds 0, +-rms
        dec = (codes.float() - 1.5) * sf
    else:
        qm = 7.0 if q == "int4" else 127.0
        qi = torch.round(v / safe).clamp(-qm, qm)
        codes = (qi + (8 if q == "int4" else 128)).long()
        dec = qi * sf
    return {"q": pack_bits(codes, STRIDE_BITS[q]), "s": s}, dec


def _stride_dequant(q: str, parts: dict[str, torch.Tensor], m: int) -> torch.Tensor:
    if q in ("fp32", "fp16"):
        return parts["q"].float().reshape(-1)
    s = parts["s"].float()
    if not bool(torch.isfinite(s).all()) or bool((s < 0).any()):
        raise PayloadError("stride scales must be finite and non-negative")
    bits = STRIDE_BITS[q]
    codes = unpack_bits(parts["q"], bits, m)
    if not torch.equal(pack_bits(codes, bits), parts["q"]):
        raise PayloadError(f"{q} part has non-zero padding bits")
    sf = s.repeat_interleave(STRIDE_GROUP)[:m]
    if q == "int1":
        return (codes.float() * 2 - 1) * sf
    if q == "int2":
        return (codes.float() - 1.5) * sf
    if q == "int4":
        if bool((codes == 0).any()):
            raise PayloadError("int4 code out of range")
        return (codes.float() - 8) * sf
    if bool((codes == 0).any()):
        raise PayloadError("int8 code out of range")
    return (codes.float() - 128) * sf


def stride_compress(codec: "Codec", tensors: dict[str, torch.Tensor], state: CompressionState) -> Payload:
    names = sorted(tensors)
    flat = _flat_with_residual(tensors, state)
    offset = state.sent % codec.chunk_size
    state.sent += 1
    pos = torch.arange(offset, flat.numel(), codec.chunk_size)
    parts, dec_vals = _stride_quant(codec.quant, flat[pos])
    dec = torch.zeros_like(flat)
    dec[pos] = dec_vals
    shapes = {n: tuple(tensors[n].shape) for n in names}
    _store_residual(state, names, shapes, flat, dec)
    meta = dict(codec._meta(), layout=layout_id(shapes), offset=offset)
    return Payload(kind=KIND_UPDATE, codec=codec.name, meta=meta,
                   entries={"flat": Entry(dtype=torch.float32, shape=(flat.numel(),), parts=parts)})


def stride_decompress(codec: "Codec", payload: Payload,
                      expected_shapes: dict[str, tuple[int, ...]] | None) -> dict[str, torch.Tensor]:
    if expected_shapes is None:
        raise PayloadError("a stride payload can only be decoded with the model's shapes")
    offset = payload.meta.get("offset")
    if not isinstance(offset, int) or isinstance(offset, bool) or not 0 <= offset < codec.chunk_size:
        raise PayloadError("stride payload: bad fragment offset")
    if payload.meta != dict(codec._meta(), layout=layout_id(expected_shapes), offset=offset):
        raise PayloadError("stride payload meta (codec or model layout) does not match")
    if set(payload.entries) != {"flat"}:
        raise PayloadError("a stride payload has exactly one entry, 'flat'")
    e = payload.entries["flat"]
    names = sorted(expected_shapes)
    sizes = [math.prod(expected_shapes[n]) for n in names]
    n = sum(sizes)
    if e.dtype != torch.float32 or tuple(e.shape) != (n,):
        raise PayloadError(f"flat: {e.dtype}{tuple(e.shape)}, expected float32({n},)")
    expected = _stride_part_specs(codec, n, offset)
    if set(e.parts) != set(expected):
        raise PayloadError(f"parts {sorted(e.parts)} do not match codec {codec.name}: {sorted(expected)}")
    for pn, (dt, ps) in expected.items():
        if e.parts[pn].dtype != dt or tuple(e.parts[pn].shape) != tuple(ps):
            raise PayloadError(f"part {pn}: {e.parts[pn].dtype}{tuple(e.parts[pn].shape)}, "
                               f"expected {dt}{ps} (shape mismatch)")
    pos = torch.arange(offset, n, codec.chunk_size)
    flat = torch.zeros(n)
    flat[pos] = _stride_dequant(codec.quant, e.parts, pos.numel())
    if not bool(torch.isfinite(flat).all()):
        raise PayloadError("flat: decoded update is not finite")
    return {nm: t.reshape(expected_shapes[nm]) for nm, t in zip(names, torch.split(flat, sizes))}


def stride_payload_skeleton(codec: "Codec", shapes: dict[str, tuple[int, ...]]) -> Payload:
    n = sum(math.prod(s) for s in shapes.values())
    parts = {pn: torch.zeros(ps, dtype=dt) for pn, (dt, ps) in _stride_part_specs(codec, n, 0).items()}
    meta = dict(codec._meta(), layout=layout_id(shapes), offset=0)
    return Payload(kind=KIND_UPDATE, codec=codec.name, meta=meta,
                   entries={"flat": Entry(dtype=torch.float32, shape=(n,), parts=parts)})


def make_codec(spec: str) -> Codec:
    """Parse ``none``, ``int8``, ``int4``, ``fp16``, ``topk:0.01``, ``topk:0.01+int4``,
    ``lowrank:4+int8`` ... into a Codec; raise ValueError with the accepted forms."""
    s = spec.strip().lower()
    alias = {"none": "dense", "fp32": "dense", "int8": "dense+int8", "int4": "dense+int4",
             "fp16": "dense+fp16"}
    s = alias.get(s, s)
    base, _, quant = s.partition("+")
    quant = quant or "fp32"
    kind, _, arg = base.partition(":")
    if quant not in ("fp32", "fp16", "int8", "int4") and not (
            (kind == "chunk" and quant == "int2") or (kind == "stride" and quant in ("int1", "int2"))):
        raise ValueError(f"unknown quantizer {quant!r} in {spec!r}: use fp32, fp16, int8 or int4 "
                         "(int2 with chunk:K/C only)")
    try:
        if kind == "stride":
            f = int(arg)
            if not 1 <= f <= 1 << 20:
                raise ValueError
            return Codec(sparsifier="stride", chunk_size=f, quant=quant)
        if kind == "chunk":
            k_s, _, c_s = arg.partition("/")
            k, c = int(k_s), int(c_s or CHUNK)
            if not (1 <= k <= c and 2 <= c <= 1 << 20):
                raise ValueError
            return Codec(sparsifier="chunk", chunk_k=k, chunk_size=c, quant=quant)
        if kind == "dense" and not arg:
            return Codec(quant=quant)
        if kind == "topk":
            d = float(arg)
            if not 0 < d <= 1:
                raise ValueError
            return Codec(sparsifier="topk", density=d, quant=quant)
        if kind == "lowrank":
            r = int(arg)
            if r <= 0:
                raise ValueError
            return Codec(sparsifier="lowrank", rank=r, quant=quant)
    except ValueError:
        pass
    raise ValueError(
        f"bad compression {spec!r}: use none, int8, int4, fp16, topk:D[+q], lowrank:R[+q], "
        "chunk:K[/C][+q], stride:F[+q] (D in (0,1], R >= 1, 1 <= K <= C, q in "
        "fp32/fp16/int8/int4, int2 for chunk and stride, int1 for stride), or adaptive[:BYTES]"
    )


def codec_from_payload(payload: Payload) -> Codec:
    """The codec a payload declares (validated)."""
    return make_codec(payload.codec)


# ---------------------------------------------------------------- adaptive policy


@dataclass(kw_only=True, slots=True)
class AdaptivePolicy:
    """Pick the codec per round to meet a bytes-per-round budget, tighter as training
    stabilises (after DiLoCoX's adaptive compression).

    Each round: target = budget * tighten; choose the highest-fidelity codec of a ladder
    whose exact encoded size fits the target. ``family="topk"``: per-tensor top-k with
    densities max_density * 2^-i and ``quant``; ``family="chunk"``: chunked top-k
    ``chunk:K/4096`` with K = max_chunk_k * 2^-i (>= 1), values int4 while K >= 128, int2 below
    (codec family and value bits both adapt); ``family="stride>chunk"``: strided fragments
    ``stride:F+int2`` (smallest F that fits) while a round improves the loss by at least
    ``switch_threshold`` (relative), then the chunk ladder for good (fragments spread the early,
    large updates over all positions; top-k follows the few large coordinates later). After the round,
    ``observe(loss_before, loss_after)``: when the relative loss improvement of the
    round falls below ``stable_threshold`` for ``patience`` rounds in a row, training
    is considered stable and ``tighten`` is halved (down to ``min_tighten``); when the
    loss got worse by more than ``stable_threshold``, ``tighten`` doubles (up to 1).
    Every decision is appended to ``log``.
    """

    budget_bytes: int
    quant: str = "int4"
    family: str = "topk"  # topk | chunk | stride>chunk
    switch_threshold: float = 0.05  # stride>chunk: leave the stride phase below this improvement
    phase: int = 0  # stride>chunk: 0 = stride fragments, 1 = chunked top-k
    max_density: float = 0.25
    min_density: float = 1e-4
    max_chunk_k: int = 512
    stable_threshold: float = 0.01
    patience: int = 1
    min_tighten: float = 0.125
    tighten: float = 1.0
    log: list = field(default_factory=list)
    _calm: int = 0

    def ladder(self) -> list[Codec]:
        out: list[Codec] = []
        if self.family == "stride>chunk" and self.phase == 0:
            return [Codec(sparsifier="stride", chunk_size=f, quant="int2") for f in range(1, 1 << 12)]
        if self.family in ("chunk", "stride>chunk"):
            k = self.max_chunk_k
            while k >= 1:
                out.append(Codec(sparsifier="chunk", chunk_k=k, chunk_size=CHUNK,
                                 quant="int4" if k >= 128 else "int2"))
                k //= 2
            return out
        if self.family != "topk":
            raise ValueError(f"unknown adaptive family {self.family!r}: topk or chunk")
        d = self.max_density
        while d >= self.min_density:
            out.append(Codec(sparsifier="topk", density=d, quant=self.quant))
            d /= 2
        return out

    def choose(self, round: int, shapes: dict[str, tuple[int, ...]]) -> Codec:
        target = self.budget_bytes * self.tighten
        for c in self.ladder():
            est = c.estimate_bytes(shapes)
            if est <= target:
                break
        self.log.append({"round": round, "event": "choose", "codec": c.name,
                         "density": c.density if c.sparsifier == "topk" else c.chunk_k / c.chunk_size,
                         "estimated_bytes": est, "budget_bytes": self.budget_bytes,
                         "tighten": self.tighten, "target_bytes": int(target),
                         "fits": est <= target})
        return c

    def observe(self, round: int, loss_before: float, loss_after: float, sent_bytes: int) -> None:
        rel = (loss_before - loss_after) / max(abs(loss_before), 1e-12)
        if self.family == "stride>chunk" and self.phase == 0:
            if rel < self.switch_threshold:
                self.phase = 1
            self.log.append({"round": round, "event": "observe", "rel_improvement": rel,
                             "sent_bytes": sent_bytes, "phase": self.phase, "tighten": self.tighten})
            return
        self._calm = self._calm + 1 if 0 <= rel < self.stable_threshold else 0
        tightened = loosened = False
        if self._calm >= self.patience and self.tighten > self.min_tighten:
            self.tighten = max(self.min_tighten, self.tighten / 2)
            self._calm = 0
            tightened = True
        elif rel < -self.stable_threshold and self.tighten < 1.0:
            self.tighten = min(1.0, self.tighten * 2)
            loosened = True
        self.log.append({"round": round, "event": "observe", "rel_improvement": rel,
                         "sent_bytes": sent_bytes, "tightened": tightened, "loosened": loosened,
                         "tighten": self.tighten})
