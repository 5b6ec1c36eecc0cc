"""Per-tensor top-k: ``topk:D[+q]`` keeps the k = ceil(D * n) largest |values| of each tensor
(D an exact decimal, k computed in integers, at least 1). Parts: ``idx`` (the kept indices,
sorted ascending, bit-packed at ceil(log2 n) bits, LSB first) and the values quantized by
``q`` (``v``, or ``q`` + ``s``). The receiver checks that the indices are in range and
strictly increasing."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from abci_app.jobs.policy import CodecPolicy, Density
from trainer.commit import PayloadError
from trainer.compression.base import CompressionState, PartSpecs, PerTensorCodec
from trainer.compression.bits import index_width, pack_bits, unpack_bits
from trainer.compression.quantization import dequant, per_tensor_meta, quant_part_specs, quant_parts


@dataclass(frozen=True, slots=True)
class TopK(PerTensorCodec):
    family: ClassVar[str] = "topk"
    fraction: Density
    quant: str = "fp32"

    @classmethod
    def from_policy(cls, p: CodecPolicy) -> TopK:
        if p.density is None:
            raise ValueError("a topk policy has a density")
        return cls(fraction=p.density, quant=p.quant)

    @property
    def policy(self) -> CodecPolicy:
        return CodecPolicy("topk", self.quant, density=self.fraction)

    @property
    def density(self) -> float:
        return self.fraction.units / 10**self.fraction.scale

    def meta(self) -> dict[str, Any]:
        return per_tensor_meta("topk", self.quant, density=repr(self.density))

    def k(self, n: int) -> int:
        return min(n, max(1, self.fraction.ceil_times(n)))

    def part_specs(self, shape: tuple[int, ...]) -> PartSpecs:
        n = math.prod(shape)
        k = self.k(n)
        specs = {"idx": (torch.uint8, (math.ceil(k * index_width(n) / 8),))}
        specs.update(quant_part_specs(k, self.quant, ""))
        return specs

    def encode_one(
        self, name: str, g: torch.Tensor, state: CompressionState
    ) -> dict[str, torch.Tensor]:
        flat = g.reshape(-1)
        n = flat.numel()
        idx = torch.topk(flat.abs(), self.k(n), sorted=False).indices.sort().values
        parts = {"idx": pack_bits(idx, index_width(n))}
        parts.update(quant_parts(flat[idx], self.quant, ""))
        return parts

    def decode_parts(self, shape: tuple[int, ...], parts: dict[str, torch.Tensor]) -> torch.Tensor:
        n = math.prod(shape)
        k = self.k(n)
        idx = unpack_bits(parts["idx"], index_width(n), k)
        if k and (bool((idx >= n).any()) or bool((idx[1:] <= idx[:-1]).any())):
            raise PayloadError("top-k indices out of range or not strictly increasing")
        out = torch.zeros(n)
        out[idx] = dequant(parts, self.quant, "", k)
        return out.reshape(shape)
