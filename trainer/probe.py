"""Tolerance-mode probes (docs/threat-model.md *Evidence only re-execution yields*): the
integers a provider commits for every trace state before any challenge exists, and a verifier
recomputes from the state its re-execution reached. The chain only compares integers
(``abci_app.jobs.probe``); this is the float side.

``compute_probe(prev, cur)`` = a seeded count-sketch of the parameter displacement ``cur − prev``
(every parameter tensor, in name order): each element goes to one of ``PROBE_DIM`` buckets with
a ±1 sign, both drawn from torch's CPU generator seeded by ``sha256("loconet/probe/v1/" + tensor
name)``; the bucket sums are accumulated in float64, scaled by ``2^PROBE_SCALE_BITS`` and rounded.
The L1 norm of the difference of two such sketches, over the L1 norm of one, estimates the
relative L2 distance of the two displacements (each bucket is a random ±1 sum of about
``n / PROBE_DIM`` elements), i.e. the verifier's full-state ``param`` distance, so the job's one
``tolerance_ppm`` bounds both. Only a re-execution yields the displacement: it needs the k steps'
gradients.

``trace_probes(states)`` gives the probe of every trace entry (entry 0: all zeros, the
displacement from itself), what ``trainer.commit.probe_root`` commits to.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import lru_cache

import torch

from abci_app.jobs.probe import PROBE_DIM, PROBE_LIMIT, PROBE_SCALE_BITS
from trainer.commit import KIND_STATE, Payload, decode

PROBE_DOMAIN = b"loconet/probe/v1/"
ZERO_PROBE = [0] * PROBE_DIM


@lru_cache(maxsize=256)
def _sketch(name: str, numel: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(bucket index, ±1 sign as float64) of each element of tensor ``name``."""
    seed = int.from_bytes(hashlib.sha256(PROBE_DOMAIN + name.encode()).digest()[:8], "big") >> 1
    g = torch.Generator(device="cpu").manual_seed(seed)
    r = torch.randint(0, 2 * PROBE_DIM, (numel,), generator=g, dtype=torch.int64)
    return r >> 1, (1 - 2 * (r & 1)).to(torch.float64)


def _params(x: bytes | Payload) -> dict[str, torch.Tensor]:
    p = x if isinstance(x, Payload) else decode(bytes(x), expected_kind=KIND_STATE)
    return {n: e.parts["param"] for n, e in p.entries.items()}


def sketch_displacement(prev: bytes | Payload, cur: bytes | Payload) -> torch.Tensor:
    """The float64 count-sketch (PROBE_DIM values) of ``cur − prev``'s parameters. Raises
    ``KeyError``/``ValueError`` when the two states do not have the same tensors."""
    a, b = _params(prev), _params(cur)
    if sorted(a) != sorted(b):
        raise ValueError("the two states do not have the same parameter tensors")
    acc = torch.zeros(PROBE_DIM, dtype=torch.float64)
    for name in sorted(b):
        d = b[name].detach().to("cpu", torch.float64) - a[name].detach().to("cpu", torch.float64)
        if d.shape != a[name].shape:
            raise ValueError(f"tensor {name} changed shape")
        idx, sign = _sketch(name, d.numel())
        acc.index_add_(0, idx, d.flatten() * sign)
    return acc


def quantize(sketch: torch.Tensor) -> list[int]:
    """Scale by 2^PROBE_SCALE_BITS, round, clamp within the chain's range."""
    lim = PROBE_LIMIT - 1
    scaled = (sketch * float(1 << PROBE_SCALE_BITS)).round()
    return [max(-lim, min(lim, int(x))) for x in scaled.tolist()]


def compute_probe(prev: bytes | Payload, cur: bytes | Payload) -> list[int]:
    """The probe of state ``cur`` (the trace entry after ``prev``)."""
    return quantize(sketch_displacement(prev, cur))


def trace_probes(states: Sequence[bytes]) -> list[list[int]]:
    """The probe of every trace entry (decoding each state once): entry 0 all zeros."""
    out = [list(ZERO_PROBE)]
    prev = decode(bytes(states[0]), expected_kind=KIND_STATE) if states else None
    for s in states[1:]:
        cur = decode(bytes(s), expected_kind=KIND_STATE)
        assert prev is not None
        out.append(compute_probe(prev, cur))
        prev = cur
    return out
