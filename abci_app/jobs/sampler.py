"""Seeded sampling kept in this repo (never ``random``): sha256 in counter mode.

``Sampler(seed)`` yields 64-bit words ``int(sha256(DOMAIN || seed || u64 counter)[:8])``;
``below(n)`` is uniform on [0, n) by rejection (no modulo bias); ``weighted_sample`` draws k
distinct items with probability proportional to integer weights, one at a time without
replacement (successive sampling: P(first pick = i) = w_i / W exactly; later picks renormalise
over what is left); ``shuffle`` is Fisher-Yates. Candidates are taken in the order given, which
callers keep sorted (by address), so every node draws the same.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TypeVar

DOMAIN = b"loconet/sampler/v1"
T = TypeVar("T")
_U64 = 1 << 64


class Sampler:
    def __init__(self, seed: bytes) -> None:
        self._seed = bytes(seed)
        self._counter = 0

    def next_u64(self) -> int:
        d = hashlib.sha256(DOMAIN + self._seed + self._counter.to_bytes(8, "big")).digest()
        self._counter += 1
        return int.from_bytes(d[:8], "big")

    def below(self, n: int) -> int:
        """Uniform integer in [0, n); n must be in 1..2^64."""
        if not 0 < n <= _U64:
            raise ValueError(f"below(n): n must be in 1..2^64, got {n}")
        limit = _U64 - _U64 % n
        while True:
            x = self.next_u64()
            if x < limit:
                return x % n

    def below_big(self, n: int) -> int:
        """Uniform integer in [0, n) for any n >= 1 (weights can exceed 2^64): rejection over
        enough 64-bit words to cover n."""
        if n <= 0:
            raise ValueError("below_big: n must be positive")
        words = (n.bit_length() + 63) // 64
        space = 1 << (64 * words)
        limit = space - space % n
        while True:
            x = 0
            for _ in range(words):
                x = (x << 64) | self.next_u64()
            if x < limit:
                return x % n


def weighted_sample(seed: bytes, candidates: Sequence[tuple[T, int]], k: int) -> list[T]:
    """Draw min(k, #positive weights) distinct items, each pick proportional to weight among the
    items not yet picked. Zero weights are never picked. Returns items in draw order."""
    s = Sampler(seed)
    pool = [(item, w) for item, w in candidates if w > 0]
    if any(w < 0 for _, w in candidates):
        raise ValueError("negative weight")
    out: list[T] = []
    total = sum(w for _, w in pool)
    while pool and len(out) < k:
        r = s.below_big(total)
        acc = 0
        for i, (item, w) in enumerate(pool):
            acc += w
            if r < acc:
                out.append(item)
                total -= w
                pool.pop(i)
                break
    return out


def shuffle(seed: bytes, n: int) -> list[int]:
    """A uniformly random permutation of range(n) (Fisher-Yates)."""
    s = Sampler(seed)
    xs = list(range(n))
    for i in range(n - 1, 0, -1):
        j = s.below(i + 1)
        xs[i], xs[j] = xs[j], xs[i]
    return xs
