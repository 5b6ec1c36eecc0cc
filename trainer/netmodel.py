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

Verification adds *reveal* bytes (``verification_bytes_per_challenge``): a commitment is
challenged with probability ``challenge_bps / 10000``; each verifier of its panel (the first
panel's ``verifiers`` plus, with probability ``audit_bps / 10000``, ``audit_verifiers`` more)
fetches what ``node/worker/ml.py:verify_round`` needs: the trace list (32 bytes an entry), the
trace's last entry (a trainer state: parameters + AdamW moments, 12 bytes per parameter) for the
payload check, the start of each run of adjacent opened segments (12 B/param each: a run's later
starts are the re-execution's own states), the committed payload, and, only for a round that
starts from a carried state, entry 0 and the carry (a fresh start is rebuilt from the base model
the verifier holds; an empty carry has nothing to fetch).

``round_traffic_per_worker`` adds everything a participant sends and receives in a round (its
payload served to the other participants and their payloads fetched, its reveals served and, on
average over its rounds as a verifier, as many fetched, the base model when it sat out the
previous round, its txs) and sets it against per-step fp32 ring AllReduce for the same tokens,
counted the same way (sent and received): ``2 x H x 2(W-1)/W x 4P``.
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


STATE_BYTES_PER_PARAM = 12  # float32 parameters + AdamW exp_avg + exp_avg_sq
TRACE_LEAF_BYTES = 32


def verification_bytes_per_challenge(
    n_params: float,
    *,
    runs: int = 1,
    payload_bytes: float = 0.0,
    trace_entries: int = 0,
    fresh: bool = True,
    carry: bool = False,
) -> float:
    """Bytes one verifier fetches for one challenged commitment (module docstring): the last
    trace entry and each run's start (12 B/param each), the payload, the trace list; a carried
    start adds entry 0 (12 B/param) and a non-empty carry (4 B/param)."""
    state = STATE_BYTES_PER_PARAM * n_params
    out = (1 + runs) * state + payload_bytes + TRACE_LEAF_BYTES * trace_entries
    if not fresh:
        out += state
    if carry:
        out += 4 * n_params
    return out


def reveal_bytes_per_round(
    n_params: float,
    *,
    challenge_bps: int = 500,
    segments: int = 1,
    verifiers: int = 1,
    audit_bps: int = 0,
    audit_verifiers: int = 0,
    payload_bytes: float = 0.0,
    trace_entries: int = 0,
    fresh: bool = True,
    carry: bool = False,
) -> float:
    """Expected bytes a provider serves to its verifiers per round: ``challenge_bps`` x the
    expected panel (``verifiers`` + ``audit_bps``/10⁴ x ``audit_verifiers``) x one verifier's
    fetch. ``segments`` opened segments are counted as that many runs (the worst case: none
    adjacent)."""
    panel = verifiers + audit_bps / 10_000 * audit_verifiers
    return (
        challenge_bps
        / 10_000
        * panel
        * verification_bytes_per_challenge(
            n_params,
            runs=segments,
            payload_bytes=payload_bytes,
            trace_entries=trace_entries,
            fresh=fresh,
            carry=carry,
        )
    )


def round_traffic_per_worker(
    n_params: float,
    *,
    workers: int,
    H: int,
    payload_bytes: float,
    mode: str = "allgather",
    reveal_bytes: float = 0.0,
    model_bytes: float = 0.0,
    model_download_share: float = 0.0,
    tx_bytes: float = 0.0,
) -> dict[str, float]:
    """Everything one participant of a ``workers``-participant round sends and receives, by
    kind, against per-step fp32 ring AllReduce for the same H steps (sent and received):
    ``payloads`` (its payload to the W-1 others and theirs to it, ``sync_bytes`` each way),
    ``verification`` (``reveal_bytes`` served, and as many fetched as a verifier on average),
    ``models`` (the base model, ``model_bytes``, in a ``model_download_share`` of its rounds),
    ``txs``; ``total``, ``allreduce`` and ``reduction`` = allreduce / total."""
    payloads = 2 * sync_bytes(payload_bytes, workers, mode)
    verification = 2 * reveal_bytes
    models = model_download_share * model_bytes
    total = payloads + verification + models + tx_bytes
    allreduce = 2 * H * allreduce_step_bytes(n_params, workers, 4)
    return {
        "payloads": payloads,
        "verification": verification,
        "models": models,
        "txs": float(tx_bytes),
        "total": total,
        "allreduce": allreduce,
        "reduction": allreduce / total if total else math.inf,
    }


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
    extra_bytes: float = 0.0,
) -> dict:
    """DiLoCo with a codec of ``bits_per_param`` vs a bf16 ring AllReduce every step.

    AllReduce: t_step + ring(W) x 2P bytes / bw per step. DiLoCo: H steps then one sync of
    P x bits/8 bytes (``mode`` ring or allgather) plus ``extra_bytes`` a round on the same link
    (the verification a worker serves and fetches, model downloads: ``round_traffic_per_worker``
    counts them both ways, which a full-duplex link carries at once, so half of them are
    counted here); with ``overlap`` the transfers of a round hide behind the next round's
    compute (one-step delay): max instead of sum."""
    t_ar = t_step + allreduce_step_bytes(n_params, workers, 2) * 8 / bandwidth_bps
    t_sync = (
        (sync_bytes(n_params * bits_per_param / 8, workers, mode) + extra_bytes / 2)
        * 8
        / bandwidth_bps
    )
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
