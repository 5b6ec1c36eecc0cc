"""Strided fragments (Streaming DiLoCo's fragment schedule): ``stride:F[+q]``.

The flattened update (all tensors sorted by name, as for ``chunk``) is split into F
interleaved fragments; payload number t of a sender (``CompressionState.sent``) carries
fragment j = t mod F, i.e. every value at position i with i mod F == j, so every worker sends
the SAME positions in a round and no index bits are needed (the receiver derives them from
``offset`` in meta). With error feedback (decay 1 recommended) a position's accumulated update
is sent every F rounds. Values are quantized in groups of STRIDE_GROUP with a bfloat16 scale
per group: int1 = sign x mean|x|; int2 = codes c in 0..3, value (c - 1.5) x rms (close to the
Lloyd-Max levels of a Gaussian); int4/int8 = absmax / 7 or / 127 (codes q + 8, q + 128).
One entry ``flat`` (float32, (N,)) with parts ``q`` (packed codes or values) and ``s`` (scales).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from abci_app.jobs.policy import CodecPolicy
from trainer.commit import PayloadError
from trainer.compression.base import CompressionState, FlatCodec, PartSpecs
from trainer.compression.bits import pack_bits, unpack_bits

STRIDE_GROUP = 256
STRIDE_BITS = {"int1": 1, "int2": 2, "int4": 4, "int8": 8}


def stride_quant(q: str, v: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
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


def stride_dequant(q: str, parts: dict[str, torch.Tensor], m: int) -> torch.Tensor:
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


@dataclass(frozen=True, slots=True)
class Stride(FlatCodec):
    family: ClassVar[str] = "stride"
    stride: int
    quant: str = "fp32"

    @classmethod
    def from_policy(cls, p: CodecPolicy) -> Stride:
        return cls(stride=p.stride, quant=p.quant)

    @property
    def policy(self) -> CodecPolicy:
        return CodecPolicy("stride", self.quant, stride=self.stride)

    @property
    def density(self) -> float:
        return 1 / self.stride

    def meta(self) -> dict[str, Any]:
        return {"quant": self.quant, "sparsifier": "stride", "stride": self.stride}

    def extra_meta(self, meta: dict[str, Any]) -> dict[str, Any]:
        offset = meta.get("offset")
        if not isinstance(offset, int) or isinstance(offset, bool) or not 0 <= offset < self.stride:
            raise PayloadError("stride payload: bad fragment offset")
        return {"offset": offset}

    def skeleton_extra(self) -> dict[str, Any]:
        return {"offset": 0}  # fragment 0 is the largest one

    def flat_part_specs(self, n: int, extra: dict[str, Any]) -> PartSpecs:
        m = len(range(extra["offset"], n, self.stride))
        q = self.quant
        if q == "fp32":
            return {"q": (torch.float32, (m,))}
        if q == "fp16":
            return {"q": (torch.float16, (m,))}
        return {
            "q": (torch.uint8, (math.ceil(m * STRIDE_BITS[q] / 8),)),
            "s": (torch.bfloat16, (math.ceil(m / STRIDE_GROUP),)),
        }

    def encode_flat(
        self, flat: torch.Tensor, state: CompressionState
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor, dict[str, Any]]:
        offset = state.sent % self.stride
        state.sent += 1
        pos = torch.arange(offset, flat.numel(), self.stride)
        parts, dec_vals = stride_quant(self.quant, flat[pos])
        dec = torch.zeros_like(flat)
        dec[pos] = dec_vals
        return parts, dec, {"offset": offset}

    def decode_flat(
        self, n: int, parts: dict[str, torch.Tensor], extra: dict[str, Any]
    ) -> torch.Tensor:
        pos = torch.arange(extra["offset"], n, self.stride)
        flat = torch.zeros(n)
        flat[pos] = stride_dequant(self.quant, parts, pos.numel())
        return flat
