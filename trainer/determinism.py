"""Determinism: a repo-owned PRNG and a tested ``set_determinism()``.

``DetRNG`` is a sha256 counter-mode generator: block i = sha256(key || i as u64 BE),
key = sha256(domain || canonical encoding of the seed parts). Anyone (a verifier, the
chain) can recompute the exact same stream from the same parts, in any language,
without Python's ``random`` or torch's generators.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Iterable

import torch


def _encode_part(p: int | str | bytes) -> bytes:
    # type tag + length prefix makes the encoding injective
    if isinstance(p, bool):
        raise TypeError("DetRNG seed parts: bool is not allowed")
    if isinstance(p, int):
        if p < 0:
            raise ValueError("DetRNG seed parts: negative ints are not allowed")
        b = p.to_bytes(max(1, (p.bit_length() + 7) // 8), "big")
        tag = b"i"
    elif isinstance(p, str):
        b, tag = p.encode("utf-8"), b"s"
    elif isinstance(p, (bytes, bytearray)):
        b, tag = bytes(p), b"b"
    else:
        raise TypeError(f"DetRNG seed parts: unsupported type {type(p).__name__}")
    return tag + struct.pack(">I", len(b)) + b


class DetRNG:
    """sha256 counter-mode PRNG keyed by a domain string and seed parts.

    >>> DetRNG("batch", 0, "job", 1).randbelow(10)  # doctest: +SKIP
    """

    def __init__(self, domain: str, *parts: int | str | bytes) -> None:
        h = hashlib.sha256(_encode_part(domain))
        for p in parts:
            h.update(_encode_part(p))
        self._key = h.digest()
        self._counter = 0
        self._buf = b""

    def _refill(self) -> None:
        self._buf += hashlib.sha256(self._key + struct.pack(">Q", self._counter)).digest()
        self._counter += 1

    def randbytes(self, n: int) -> bytes:
        while len(self._buf) < n:
            self._refill()
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def u64(self) -> int:
        return int.from_bytes(self.randbytes(8), "big")

    def randbelow(self, n: int) -> int:
        """Uniform integer in [0, n) by rejection sampling (no modulo bias)."""
        if n <= 0:
            raise ValueError("randbelow: n must be positive")
        limit = (1 << 64) - ((1 << 64) % n)
        while True:
            x = self.u64()
            if x < limit:
                return x % n

    def shuffle(self, items: list) -> list:
        """Return a new list, Fisher-Yates shuffled."""
        out = list(items)
        for i in range(len(out) - 1, 0, -1):
            j = self.randbelow(i + 1)
            out[i], out[j] = out[j], out[i]
        return out

    def torch_seed(self) -> int:
        """A 63-bit seed for torch generators (used only for model init)."""
        return self.u64() >> 1


def derive_int(domain: str, parts: Iterable[int | str | bytes], n: int) -> int:
    return DetRNG(domain, *parts).randbelow(n)


def set_determinism(seed: int = 0, threads: int | None = 1) -> None:
    """Make torch computations bitwise reproducible on this software stack.

    * seeds torch (CPU and CUDA) with ``seed``;
    * ``torch.use_deterministic_algorithms(True)``; cuDNN deterministic, no benchmark,
      no TF32;
    * sets ``CUBLAS_WORKSPACE_CONFIG`` (needed by deterministic cuBLAS);
    * ``threads``: intra-op threads (1 by default: reductions are then summed in a
      fixed order regardless of how many cores the machine has; None leaves it).
    """
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if threads is not None:
        torch.set_num_threads(threads)


def is_deterministic() -> bool:
    return bool(torch.are_deterministic_algorithms_enabled())


# ---------------------------------------------------------------- the "same stack"

DETERMINISM_MODES = ("exact", "tolerance")


def stack_id(device: str = "cpu", dtype: str = "float32") -> str:
    """What "the same stack" means for exact re-execution, as the job spec pins it:
    ``torch=<version>;device=<class>;dtype=<training dtype>;tf32=off``.

    Exact mode compares state bytes, and float addition is not associative: the bytes depend
    on the kernels torch picks (its version), the device class (CPU vs one GPU generation: a
    different GEMM tiling sums in a different order), the training dtype and whether matmuls
    may round through TF32. Two honest providers on different stacks produce different bytes,
    so exact mode is only meaningful among verifiers on the job's stack; tolerance mode
    compares whole states within a calibrated relative distance and works across stacks.
    """
    dev = str(device).split(":")[0]
    if dev == "cuda" and torch.cuda.is_available():
        name = torch.cuda.get_device_name(0).replace(";", " ").replace("=", " ")
        dev = f"cuda/{name}"
    tf32 = (
        "on"
        if (torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32)
        else "off"
    )
    return f"torch={torch.__version__};device={dev};dtype={dtype};tf32={tf32}"
