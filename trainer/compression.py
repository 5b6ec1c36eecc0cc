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
    sparsifier: str = "dense"  # dense | topk | lowrank
    density: float = 1.0  # topk
    rank: int = 0  # lowrank
    quant: str = "fp32"  # fp32 | fp16 | int8 | int4

    @property
    def name(self) -> str:
        if self.sparsifier == "topk":
            s = f"topk:{self.density:g}"
        elif self.sparsifier == "lowrank":
            s = f"lowrank:{self.rank}"
        else:
            s = "dense"
        return s if self.quant == "fp32" else f"{s}+{self.quant}"

    def _meta(self) -> dict:
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
        entries: dict[str, Entry] = {}
        for name in sorted(tensors):
            t = tensors[name].detach().float().cpu()
            res = state.residual.get(name)
            g = t + res if (state.error_feedback and res is not None) else t.clone()
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


def make_codec(spec: str) -> Codec:
    """Parse ``none``, ``int8``, ``int4``, ``fp16``, ``topk:0.01``, ``topk:0.01+int4``,
    ``lowrank:4+int8`` ... into a Codec; raise ValueError with the accepted forms."""
    s = spec.strip().lower()
    alias = {"none": "dense", "fp32": "dense", "int8": "dense+int8", "int4": "dense+int4",
             "fp16": "dense+fp16"}
    s = alias.get(s, s)
    base, _, quant = s.partition("+")
    quant = quant or "fp32"
    if quant not in ("fp32", "fp16", "int8", "int4"):
        raise ValueError(f"unknown quantizer {quant!r} in {spec!r}: use fp32, fp16, int8 or int4")
    kind, _, arg = base.partition(":")
    try:
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
        f"bad compression {spec!r}: use none, int8, int4, fp16, topk:D[+q], lowrank:R[+q] "
        "(D in (0,1], R >= 1, q in fp32/fp16/int8/int4), or adaptive[:BYTES]"
    )


def codec_from_payload(payload: Payload) -> Codec:
    """The codec a payload declares (validated)."""
    return make_codec(payload.codec)


# ---------------------------------------------------------------- adaptive policy


@dataclass(kw_only=True, slots=True)
class AdaptivePolicy:
    """Pick the top-k density per round to meet a bytes-per-round budget, tighter as
    training stabilises (after DiLoCoX's adaptive compression).

    Each round: target = budget * tighten; choose the largest density on a geometric
    grid (max_density * 2^-i) whose exact encoded size fits the target. After the round,
    ``observe(loss_before, loss_after)``: when the relative loss improvement of the
    round falls below ``stable_threshold`` for ``patience`` rounds in a row, training
    is considered stable and ``tighten`` is halved (down to ``min_tighten``).
    Every decision is appended to ``log``.
    """

    budget_bytes: int
    quant: str = "int4"
    max_density: float = 0.25
    min_density: float = 1e-4
    stable_threshold: float = 0.01
    patience: int = 1
    min_tighten: float = 0.125
    tighten: float = 1.0
    log: list = field(default_factory=list)
    _calm: int = 0

    def choose(self, round: int, shapes: dict[str, tuple[int, ...]]) -> Codec:
        target = self.budget_bytes * self.tighten
        d = self.max_density
        while True:
            c = Codec(sparsifier="topk", density=d, quant=self.quant)
            est = c.estimate_bytes(shapes)
            if est <= target or d / 2 < self.min_density:
                break
            d /= 2
        self.log.append({"round": round, "event": "choose", "codec": c.name, "density": d,
                         "estimated_bytes": est, "budget_bytes": self.budget_bytes,
                         "tighten": self.tighten, "target_bytes": int(target),
                         "fits": est <= target})
        return c

    def observe(self, round: int, loss_before: float, loss_after: float, sent_bytes: int) -> None:
        rel = (loss_before - loss_after) / max(abs(loss_before), 1e-12)
        self._calm = self._calm + 1 if rel < self.stable_threshold else 0
        tightened = False
        if self._calm >= self.patience and self.tighten > self.min_tighten:
            self.tighten = max(self.min_tighten, self.tighten / 2)
            self._calm = 0
            tightened = True
        self.log.append({"round": round, "event": "observe", "rel_improvement": rel,
                         "sent_bytes": sent_bytes, "tightened": tightened,
                         "tighten": self.tighten})
