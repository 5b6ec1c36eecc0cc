"""Per-tensor chunked top-k (SparseLoCo / DeMo style): ``tchunk:K/C[+q]``.

Like ``chunk:K/C`` (chunked.py) but chunks never cross a tensor boundary: each tensor, flattened
row-major, is cut into chunks of C values (its last chunk may be shorter) and the K largest
|values| of each chunk are kept, so a bias or a norm competes only with itself, never with a
matrix. For a matrix whose rows are shorter than C, a chunk is C/cols consecutive rows (a 2-D
block spanning all columns), not a square tile. One entry per tensor (``PerTensorCodec``) with
the parts of ``chunk`` for that tensor alone: ``idx`` (offsets in the chunk, ceil(log2 C) bits
each), ``q`` (the kept values: fp32/fp16/int8/int4/int2 codes) and ``s`` (bfloat16 scale per
chunk for the int quantizers). Error feedback per tensor (the ``PerTensorCodec`` path).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from abci_app.jobs.policy import DEFAULT_CHUNK, CodecPolicy
from trainer.compression.base import CompressionState, PartSpecs, PerTensorCodec
from trainer.compression.chunked import ChunkedTopK, ChunkFamily


@dataclass(frozen=True, slots=True)
class TensorChunkedTopK(ChunkFamily, PerTensorCodec):
    family: ClassVar[str] = "tchunk"
    chunk_k: int
    chunk_size: int = DEFAULT_CHUNK
    quant: str = "fp32"

    @classmethod
    def from_policy(cls, p: CodecPolicy) -> TensorChunkedTopK:
        return cls(chunk_k=p.chunk_k, chunk_size=p.chunk_size, quant=p.quant)

    def _one(self) -> ChunkedTopK:
        """The chunk codec's encoder, applied to one tensor's values."""
        return ChunkedTopK(chunk_k=self.chunk_k, chunk_size=self.chunk_size, quant=self.quant)

    def part_specs(self, shape: tuple[int, ...]) -> PartSpecs:
        return self._one().flat_part_specs(math.prod(shape), {})

    def encode_one(
        self, name: str, g: torch.Tensor, state: CompressionState
    ) -> dict[str, torch.Tensor]:
        parts, _, _ = self._one().encode_flat(g.reshape(-1), state)
        return parts

    def decode_parts(self, shape: tuple[int, ...], parts: dict[str, torch.Tensor]) -> torch.Tensor:
        return self._one().decode_flat(math.prod(shape), parts, {}).reshape(shape)
