"""Quantisation: the blockwise quantizers every per-tensor family uses for its values, and the
``dense`` family (every value, quantized): ``dense``, ``dense+fp16``, ``dense+int8``,
``dense+int4``, ``dense+int2`` (CLI shorthands ``none``, ``fp16``, ``int8``, ``int4``, ``int2``).

``fp32`` values as they are; ``fp16`` clamped to +-65504; ``int8``/``int4``: blocks of 64
values, one float32 scale per block = absmax / 127 or / 7, round-half-even; int4 codes are
stored as q + 8 (1..15), packed two per byte, low nibble first. ``int2`` (dense only): blocks
of 64, float32 scale = absmax / 1.5, 2-bit codes c = round(v / s + 1.5) clamped to 0..3 (value
(c - 1.5) * s: +-0.5 s, +-1.5 s), packed four per byte, LSB first (``bits.pack_bits``), zero
padding bits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from abci_app.jobs.policy import CodecPolicy
from trainer.commit import PayloadError
from trainer.compression.base import CompressionState, PartSpecs, PerTensorCodec
from trainer.compression.bits import pack_bits, unpack_bits

QBLOCK = 64
QMAX = {"int8": 127, "int4": 7, "int2": 1.5}


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
    if quant == "int2":
        c = torch.round(blocks / safe[:, None] + 1.5).clamp(0, 3).reshape(-1)[:n].long()
        return {prefix + "q": pack_bits(c, 2), prefix + "s": scale}
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
    elif quant == "int2":
        if raw.dtype != torch.uint8 or raw.numel() != (2 * n + 7) // 8:
            raise PayloadError(f"int2 part: {raw.numel()} bytes, expected {(2 * n + 7) // 8}")
        c = unpack_bits(raw, 2, n)
        if not torch.equal(pack_bits(c, 2), raw):
            raise PayloadError("int2 part has non-zero padding bits")
        q = c.float() - 1.5
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


def quant_part_specs(n: int, quant: str, prefix: str) -> PartSpecs:
    if quant == "fp32":
        return {prefix + "v": (torch.float32, (n,))}
    if quant == "fp16":
        return {prefix + "v": (torch.float16, (n,))}
    nb = math.ceil(n / QBLOCK)
    q = (
        (torch.int8, (n,))
        if quant == "int8"
        else (torch.uint8, ((2 * n + 7) // 8,))
        if quant == "int2"
        else (torch.uint8, ((n + 1) // 2,))
    )
    return {prefix + "q": q, prefix + "s": (torch.float32, (nb,))}


def per_tensor_meta(family: str, quant: str, density: str = "1.0", rank: int = 0) -> dict[str, Any]:
    """Meta of the per-tensor families (density is the repr of a float, as in version 1)."""
    return {"block": QBLOCK, "density": density, "quant": quant, "rank": rank, "sparsifier": family}


@dataclass(frozen=True, slots=True)
class Quantization(PerTensorCodec):
    """``dense[+q]``: every value of every tensor, quantized by ``quant``."""

    family: ClassVar[str] = "dense"
    quant: str = "fp32"

    @classmethod
    def from_policy(cls, p: CodecPolicy) -> Quantization:
        return cls(quant=p.quant)

    @property
    def policy(self) -> CodecPolicy:
        return CodecPolicy("dense", self.quant)

    def meta(self) -> dict[str, Any]:
        return per_tensor_meta("dense", self.quant)

    def part_specs(self, shape: tuple[int, ...]) -> PartSpecs:
        return quant_part_specs(math.prod(shape), self.quant, "")

    def encode_one(
        self, name: str, g: torch.Tensor, state: CompressionState
    ) -> dict[str, torch.Tensor]:
        return quant_parts(g.reshape(-1), self.quant, "")

    def decode_parts(self, shape: tuple[int, ...], parts: dict[str, torch.Tensor]) -> torch.Tensor:
        return dequant(parts, self.quant, "", math.prod(shape)).reshape(shape)
