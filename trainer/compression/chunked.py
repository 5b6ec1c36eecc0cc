"""Chunked top-k (SparseLoCo): ``chunk:K/C[+q]``.

All tensors, sorted by name, are flattened into one vector of N values and cut into chunks of
C (the last one may be shorter); in each chunk the K largest |values| are kept (min(K, chunk
length)). The payload has ONE entry, ``flat``, float32 of shape (N,), with parts (bit packing
LSB first, zero pad bits):

* ``idx`` uint8: every kept value's offset inside its chunk, ceil(log2 C) bits each, chunk
  after chunk, strictly increasing within a chunk;
* ``q`` the kept values: fp32/fp16 as they are; int8 as int8 codes (|q| <= 127); int4 as
  4-bit codes q+8 (1..15); int2 as 2-bit codes c (value (c - 1.5) * s);
* ``s`` bfloat16 scale per chunk (int quantizers only): absmax / 127, / 7, or / 1.5.

meta: chunk_k, chunk_size, quant, sparsifier="chunk", layout (see ``base.layout_id``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from abci_app.jobs.policy import DEFAULT_CHUNK, CodecPolicy
from trainer.commit import PayloadError
from trainer.compression.base import (
    CodecBase,
    CompressionState,
    FlatCodec,
    PartSpecs,
    check_parts,
)
from trainer.compression.bits import index_width, pack_bits, unpack_bits

CHUNK = DEFAULT_CHUNK
CHUNK_QMAX = {"int8": 127.0, "int4": 7.0, "int2": 1.5}
CHUNK_QBITS = {"int8": 8, "int4": 4, "int2": 2}


def chunk_lens(n: int, c: int) -> list[int]:
    full, rest = divmod(n, c)
    return [c] * full + ([rest] if rest else [])


class ChunkFamily(CodecBase):
    """What the two chunked families share (``chunk`` here, ``tchunk`` per tensor): K of every
    C values kept, quantizer q; their policy, density and meta (``sparsifier`` = the family)."""

    chunk_k: int
    chunk_size: int

    @property
    def policy(self) -> CodecPolicy:
        return CodecPolicy(
            self.family, self.quant, chunk_k=self.chunk_k, chunk_size=self.chunk_size
        )

    @property
    def density(self) -> float:
        return self.chunk_k / self.chunk_size

    def meta(self) -> dict[str, Any]:
        return {
            "chunk_k": self.chunk_k,
            "chunk_size": self.chunk_size,
            "quant": self.quant,
            "sparsifier": self.family,
        }


@dataclass(frozen=True, slots=True)
class ChunkedTopK(ChunkFamily, FlatCodec):
    family: ClassVar[str] = "chunk"
    chunk_k: int
    chunk_size: int = CHUNK
    quant: str = "fp32"

    @classmethod
    def from_policy(cls, p: CodecPolicy) -> ChunkedTopK:
        return cls(chunk_k=p.chunk_k, chunk_size=p.chunk_size, quant=p.quant)

    def counts(self, n: int) -> tuple[list[int], list[int]]:
        """(chunk lengths, kept values per chunk)."""
        lens = chunk_lens(n, self.chunk_size)
        return lens, [min(self.chunk_k, ln) for ln in lens]

    def flat_part_specs(self, n: int, extra: dict[str, Any]) -> PartSpecs:
        lens, counts = self.counts(n)
        kt = sum(counts)
        specs: PartSpecs = {
            "idx": (torch.uint8, (math.ceil(kt * index_width(self.chunk_size) / 8),))
        }
        q = self.quant
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

    def select(self, flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
        """(offsets within chunks, global positions, kept count per chunk)."""
        c, k = self.chunk_size, self.chunk_k
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
            tail = flat[full * c :]
            kk = min(k, tail.numel())
            o = torch.topk(tail.abs(), kk, sorted=False).indices.sort().values
            offs.append(o)
            pos.append(o + full * c)
            counts.append(kk)
        return torch.cat(offs), torch.cat(pos), counts

    def quantize(self, vals: torch.Tensor, counts: list[int]) -> dict[str, torch.Tensor]:
        q = self.quant
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

    def dequantize(self, parts: dict[str, torch.Tensor], counts: list[int]) -> torch.Tensor:
        q = self.quant
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

    def encode_flat(
        self, flat: torch.Tensor, state: CompressionState
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor, dict[str, Any]]:
        offs, pos, counts = self.select(flat)
        parts = {"idx": pack_bits(offs, index_width(self.chunk_size))}
        parts.update(self.quantize(flat[pos], counts))
        check_parts(self.name, parts, self.flat_part_specs(flat.numel(), {}))
        return parts, self.decode_flat(flat.numel(), parts, {}), {}

    def decode_flat(
        self, n: int, parts: dict[str, torch.Tensor], extra: dict[str, Any]
    ) -> torch.Tensor:
        lens, counts = self.counts(n)
        kt = sum(counts)
        w = index_width(self.chunk_size)
        offs = unpack_bits(parts["idx"], w, kt)
        if not torch.equal(pack_bits(offs, w), parts["idx"]):
            raise PayloadError("idx part has non-zero padding bits")
        out = torch.zeros(n)
        start = 0
        base = 0
        pos = []
        for ln, k in zip(lens, counts, strict=True):
            o = offs[start : start + k]
            if bool((o >= ln).any()) or bool((o[1:] <= o[:-1]).any()):
                raise PayloadError("chunk offsets out of range or not strictly increasing")
            pos.append(o + base)
            start += k
            base += ln
        out[torch.cat(pos)] = self.dequantize(parts, counts)
        return out
