"""Byte accounting per worker and the wall-clock model of a synchronisation (pure arithmetic).

Bytes one worker puts on the wire, per synchronisation, for a payload of ``b`` bytes among W
workers:

* ``upload``: the payload once (what the old table counted);
* ``allgather``: ``(W-1) x b`` -- loconet publishes a payload as a blob and each of the W-1
  other providers fetches it (top-k / chunked payloads cannot be summed on the way, so there
  is no ring for them); the worker also downloads ``(W-1) x b``;
* ``ring``: ``2(W-1)/W x b`` -- a ring AllReduce, only for codecs whose payloads can be summed
  in the compressed domain (dense fp/bf16, DiLoCoX's low rank with a shared basis, dense low-bit
  with a shared scale); the baseline's per-step fp32 / bf16 gradient AllReduce is this.

Verification adds *reveal* bytes: a commitment is challenged with probability
``challenge_bps / 10000``; a challenged provider serves each verifier the states at trace
indices 0, H/k and i, i+1 per drawn segment i (trainer/verify.py:Challenge), each a trainer
state (parameters + AdamW moments: 12 bytes per parameter) plus the error-feedback carry
(4 bytes per parameter when the codec keeps residuals).
"""

from __future__ import annotations

import math


def ring_factor(workers: int) -> float:
    return 2 * (workers - 1) / workers if workers > 1 else 0.0


def sync_bytes(payload: float, workers: int, mode: str) -> float:
    """Bytes one worker sends for one synchronisation of a ``payload``-byte message."""
    if mode == "upload":
        return float(payload)
    if mode == "allgather":
        return float(payload) * (workers - 1)
    if mode == "ring":
        return float(payload) * ring_factor(workers)
    raise ValueError(f"mode must be upload, allgather or ring, got {mode!r}")


def reveal_bytes_per_round(
    n_params: int,
    *,
    challenge_bps: int = 500,
    segments: int = 1,
    verifiers: int = 1,
    carry: bool = True,
) -> float:
    """Expected bytes a provider serves to verifiers per round (see the module docstring)."""
    state = 12 * n_params
    per_challenge = (2 + 2 * segments) * state + (4 * n_params if carry else 0)
    return challenge_bps / 10_000 * verifiers * per_challenge


def allreduce_step_bytes(n_params: float, workers: int, bytes_per_value: int = 4) -> float:
    """Ring AllReduce of the gradients, per worker per step."""
    return ring_factor(workers) * bytes_per_value * n_params


def speedup(
    *,
    n_params: float,
    workers: int,
    t_step: float,
    H: int,
    bits_per_param: float,
    bandwidth_bps: float,
    mode: str,
    overlap: bool = True,
) -> dict:
    """DiLoCo with a codec of ``bits_per_param`` vs a bf16 ring AllReduce every step.

    AllReduce: t_step + ring(W) x 2P bytes / bw per step. DiLoCo: H steps then one sync of
    P x bits/8 bytes (``mode`` ring or allgather); with ``overlap`` the sync of a round hides
    behind the next round's compute (one-step delay): max instead of sum."""
    t_ar = t_step + allreduce_step_bytes(n_params, workers, 2) * 8 / bandwidth_bps
    t_sync = sync_bytes(n_params * bits_per_param / 8, workers, mode) * 8 / bandwidth_bps
    per_round = max(H * t_step, t_sync) if overlap else H * t_step + t_sync
    t_dl = per_round / H
    return {
        "allreduce_s_per_step": t_ar,
        "diloco_s_per_step": t_dl,
        "speedup": t_ar / t_dl,
        "bound": t_ar / t_step,
        # largest bits/param whose sync still hides behind H steps of compute
        "max_hidden_bits": H
        * t_step
        * bandwidth_bps
        / (n_params * max(sync_bytes(1, workers, mode), 1e-12)),
    }


def step_time_for(
    speedup_target: float, *, n_params: float, workers: int, bandwidth_bps: float
) -> float:
    """The longest step time at which a fully hidden sync gives ``speedup_target`` over the
    bf16 ring AllReduce: (t + t_comm) / t >= S  <=>  t <= t_comm / (S - 1)."""
    t_comm = allreduce_step_bytes(n_params, workers, 2) * 8 / bandwidth_bps
    return t_comm / (speedup_target - 1) if speedup_target > 1 else math.inf
