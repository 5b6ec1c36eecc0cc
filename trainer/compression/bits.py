"""Bit packing shared by the codecs: little-endian bits, LSB first, zero padding bits."""

from __future__ import annotations

import math

import torch


def pack_bits(values: torch.Tensor, width: int) -> torch.Tensor:
    """Pack non-negative int64 ``values`` (< 2**width) into uint8, little-endian bits."""
    if values.numel() == 0:
        return torch.zeros(0, dtype=torch.uint8)
    shifts = torch.arange(width, dtype=torch.int64)
    bits = ((values.reshape(-1, 1) >> shifts) & 1).reshape(-1).to(torch.uint8)
    pad = (-bits.numel()) % 8
    if pad:
        bits = torch.cat([bits, torch.zeros(pad, dtype=torch.uint8)])
    weights = 1 << torch.arange(8, dtype=torch.int64)
    return (bits.reshape(-1, 8).long() * weights).sum(1).to(torch.uint8)


def unpack_bits(packed: torch.Tensor, width: int, count: int) -> torch.Tensor:
    if count == 0:
        return torch.zeros(0, dtype=torch.int64)
    bits = ((packed.long().reshape(-1, 1) >> torch.arange(8)) & 1).reshape(-1)
    bits = bits[: count * width].reshape(count, width)
    return (bits * (1 << torch.arange(width, dtype=torch.int64))).sum(1)


def index_width(n: int) -> int:
    """Bits per index into n positions: ceil(log2 n), at least 1."""
    return max(1, math.ceil(math.log2(n))) if n > 1 else 1
