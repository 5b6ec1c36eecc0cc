"""The adaptive policy (after DiLoCoX's adaptive compression): a codec per round that meets a
bytes-per-round budget, tighter as training stabilises. Written ``adaptive[:BYTES][/ladder]``
(abci_app/jobs/policy.py); built by ``registry.load_policy``."""

from __future__ import annotations

from dataclasses import dataclass, field

from abci_app.jobs.policy import (
    DEFAULT_CHUNK,
    CodecPolicy,
    Density,
    canonical_decimal,
    parse_policy,
)
from trainer.compression.base import Codec, Shapes
from trainer.compression.chunked import ChunkedTopK
from trainer.compression.stride import Stride
from trainer.compression.topk import TopK

LADDERS = ("topk", "chunk", "stride-chunk")


def _exact(x: float | str) -> Density:
    """A density given as a float or a decimal string, as the exact decimal it spells."""
    p = parse_policy(f"topk:{canonical_decimal(x if isinstance(x, str) else repr(x))}")
    if not isinstance(p, CodecPolicy) or p.density is None:
        raise ValueError(f"not a density: {x!r}")
    return p.density


@dataclass(kw_only=True, slots=True)
class FixedPolicy:
    """One codec every round (any ``codec`` policy string)."""

    codec: Codec
    log: list = field(default_factory=list)

    def choose(self, round: int, shapes: Shapes) -> Codec:
        return self.codec

    def observe(self, round: int, loss_before: float, loss_after: float, sent_bytes: int) -> None:
        return None


@dataclass(kw_only=True, slots=True)
class AdaptivePolicy:
    """Pick the codec per round to meet a bytes-per-round budget, tighter as training
    stabilises.

    Each round: target = budget * tighten; choose the highest-fidelity codec of a ladder
    whose exact encoded size fits the target. ``family="topk"``: per-tensor top-k with
    densities max_density * 2^-i (exact decimals, down to min_density) and ``quant``;
    ``family="chunk"``: chunked top-k ``chunk:K/4096`` with K = max_chunk_k * 2^-i (>= 1),
    values int4 while K >= 128, int2 below (codec family and value bits both adapt);
    ``family="stride-chunk"``: strided fragments ``stride:F+int2`` (smallest F that fits) while
    a round improves the loss by at least ``switch_threshold`` (relative), then the chunk ladder
    for good (fragments spread the early, large updates over all positions; top-k follows the
    few large coordinates later). After the round, ``observe(loss_before, loss_after)``: when
    the relative loss improvement of the round falls below ``stable_threshold`` for
    ``patience`` rounds in a row, training is considered stable and ``tighten`` is halved (down
    to ``min_tighten``); when the loss got worse by more than ``stable_threshold``, ``tighten``
    doubles (up to 1). Every decision is appended to ``log``.
    """

    budget_bytes: int
    quant: str = "int4"
    family: str = "topk"  # topk | chunk | stride-chunk
    switch_threshold: float = 0.05  # stride-chunk: leave the stride phase below this improvement
    phase: int = 0  # stride-chunk: 0 = stride fragments, 1 = chunked top-k
    max_density: float | str = 0.25
    min_density: float | str = 1e-4
    max_chunk_k: int = 512
    stable_threshold: float = 0.01
    patience: int = 1
    min_tighten: float = 0.125
    tighten: float = 1.0
    log: list = field(default_factory=list)
    _calm: int = 0

    def ladder(self) -> list[Codec]:
        if self.family not in LADDERS:
            raise ValueError(
                f"unknown adaptive family {self.family!r}: one of {', '.join(LADDERS)}"
            )
        if self.family == "stride-chunk" and self.phase == 0:
            return [Stride(stride=f, quant="int2") for f in range(1, 1 << 12)]
        out: list[Codec] = []
        if self.family in ("chunk", "stride-chunk"):
            k = self.max_chunk_k
            while k >= 1:
                out.append(
                    ChunkedTopK(
                        chunk_k=k, chunk_size=DEFAULT_CHUNK, quant="int4" if k >= 128 else "int2"
                    )
                )
                k //= 2
            return out
        d, lo = _exact(self.max_density), _exact(self.min_density)
        while d.at_least(lo):
            out.append(TopK(fraction=d, quant=self.quant))
            d = d.half()
        return out

    def choose(self, round: int, shapes: Shapes) -> Codec:
        target = self.budget_bytes * self.tighten
        for c in self.ladder():
            est = c.estimate_bytes(shapes)
            if est <= target:
                break
        self.log.append(
            {
                "round": round,
                "event": "choose",
                "codec": c.name,
                "density": c.density,
                "estimated_bytes": est,
                "budget_bytes": self.budget_bytes,
                "tighten": self.tighten,
                "target_bytes": int(target),
                "fits": est <= target,
            }
        )
        return c

    def observe(self, round: int, loss_before: float, loss_after: float, sent_bytes: int) -> None:
        rel = (loss_before - loss_after) / max(abs(loss_before), 1e-12)
        if self.family == "stride-chunk" and self.phase == 0:
            if rel < self.switch_threshold:
                self.phase = 1
            self.log.append(
                {
                    "round": round,
                    "event": "observe",
                    "rel_improvement": rel,
                    "sent_bytes": sent_bytes,
                    "phase": self.phase,
                    "tighten": self.tighten,
                }
            )
            return
        self._calm = self._calm + 1 if 0 <= rel < self.stable_threshold else 0
        tightened = loosened = False
        if self._calm >= self.patience and self.tighten > self.min_tighten:
            self.tighten = max(self.min_tighten, self.tighten / 2)
            self._calm = 0
            tightened = True
        elif rel < -self.stable_threshold and self.tighten < 1.0:
            self.tighten = min(1.0, self.tighten * 2)
            loosened = True
        self.log.append(
            {
                "round": round,
                "event": "observe",
                "rel_improvement": rel,
                "sent_bytes": sent_bytes,
                "tightened": tightened,
                "loosened": loosened,
                "tighten": self.tighten,
            }
        )
