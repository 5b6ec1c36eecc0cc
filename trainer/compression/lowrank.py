"""Low rank (PowerSGD): ``lowrank:R[+q]``. A tensor M (rows x rest) is sent as P = orth(M Q)
and Q = M^T P (one power iteration), so P Q^T ~ M; Q is warm-started from the previous round
(``CompressionState.q_warm``; the first Q from ``DetRNG("powersgd", name)``). Tensors with
fewer than 2 dims, or where rank R would not save anything, are sent dense. Parts ``P.*`` and
``Q.*`` quantized by ``q``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from abci_app.jobs.policy import CodecPolicy
from trainer.compression.base import CompressionState, PartSpecs, PerTensorCodec
from trainer.compression.quantization import dequant, per_tensor_meta, quant_part_specs, quant_parts
from trainer.determinism import DetRNG


@dataclass(frozen=True, slots=True)
class LowRank(PerTensorCodec):
    family: ClassVar[str] = "lowrank"
    rank: int
    quant: str = "fp32"

    @classmethod
    def from_policy(cls, p: CodecPolicy) -> LowRank:
        return cls(rank=p.rank, quant=p.quant)

    @property
    def policy(self) -> CodecPolicy:
        return CodecPolicy("lowrank", self.quant, rank=self.rank)

    def meta(self) -> dict[str, Any]:
        return per_tensor_meta("lowrank", self.quant, rank=self.rank)

    def dims(self, shape: tuple[int, ...]) -> tuple[int, int, int] | None:
        """(rows, cols, r) of the factorisation, or None: sent dense."""
        if len(shape) < 2:
            return None
        n, m = shape[0], math.prod(shape[1:])
        r = min(self.rank, n, m)
        if r <= 0 or r * (n + m) >= n * m:  # low rank would not save anything
            return None
        return n, m, r

    def part_specs(self, shape: tuple[int, ...]) -> PartSpecs:
        d = self.dims(shape)
        if d is None:
            return quant_part_specs(math.prod(shape), self.quant, "")
        rows, cols, r = d
        specs = quant_part_specs(rows * r, self.quant, "P.")
        specs.update(quant_part_specs(cols * r, self.quant, "Q."))
        return specs

    def encode_one(
        self, name: str, g: torch.Tensor, state: CompressionState
    ) -> dict[str, torch.Tensor]:
        d = self.dims(tuple(g.shape))
        if d is None:
            return quant_parts(g.reshape(-1), self.quant, "")
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

    def decode_parts(self, shape: tuple[int, ...], parts: dict[str, torch.Tensor]) -> torch.Tensor:
        d = self.dims(shape)
        if d is None:
            return dequant(parts, self.quant, "", math.prod(shape)).reshape(shape)
        rows, cols, r = d
        P = dequant(parts, self.quant, "P.", rows * r).reshape(rows, r)
        Q = dequant(parts, self.quant, "Q.", cols * r).reshape(cols, r)
        return (P @ Q.t()).reshape(shape)
