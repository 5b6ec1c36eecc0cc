"""Byte accounting per worker and the wall-clock model of a synchronisation (pure arithmetic).

Bytes one worker puts on the wire, per synchronisation, for a payload of ``b`` bytes among W
workers:

* ``upload``: the payload once (what the old table counted);
* ``allgather``: ``(W-1) x b`` -- loconet publishes a payload as a blob and each of the W-1
  other providers fetches it (top-k / chunked payloads cannot be summed on the way, so there
  is no ring for them); the worker also downloads ``(W-1) x b``;
* ``ring``: ``2(W-1)/W x b`` -- a ring AllReduce, only for payloads that a ring can add in
  flight: dense floats (fp32, fp16 / bf16; ``is_ring_reducible``), as the baseline's per-step
  fp32 / bf16 gradient AllReduce does. Every other codec is an all-gather: int8 / int4 / int2
  carry each worker's own block scales (codes with different scales cannot be added, and a sum
  of W int4 codes needs 4 + log2(W) bits), low rank carries each worker's own factors, stride /
  top-k / chunks each worker's own values (and indices); the table's losses are measured with
  the exact mean of every decoded payload, i.e. what an all-gather delivers.

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
from dataclasses import dataclass

RING_QUANTS = ("fp32", "fp16", "bf16")  # float payloads: a ring adds them in flight


def is_ring_reducible(codec: str) -> bool:
    """True only for dense float payloads (``none`` / ``dense`` / ``dense+fp16``): the one kind
    a ring AllReduce can sum on the way. Quantized (per-block scales), low-rank (per-worker
    factors), strided, top-k and chunked payloads are all-gathered. ``codec`` is any spelling
    ``trainer.compression.make_codec`` accepts (``int4`` = ``dense+int4``)."""
    # lazy: node.client.market_msgs imports this module on every CLI command; the codecs load torch
    from trainer.compression import make_codec

    c = make_codec(codec)
    return c.policy.family == "dense" and c.quant in RING_QUANTS


def sync_mode(codec: str) -> str:
    """``ring`` for a ring-reducible codec, else ``allgather``."""
    return "ring" if is_ring_reducible(codec) else "allgather"


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


# Measured on a live 4-validator network (benchmarks/traffic.py, RESULTS.md *Whole-round
# traffic*; raw run benchmarks/traffic_runs/h500_k50_10rounds.json, 20 participant-rounds):
TX_BYTES_PER_ROUND = 930  # signed txs a participant broadcasts a round (commit + attest; a
#   challenged round adds its reveal): mean 929.6 B, 853-2,317 B
HTTP_BYTES_PER_FETCH = 528  # request + response heads of one blob fetch (21,667 B / 41 fetches)
MODEL_BYTES_PER_PARAM = 8  # a base-model blob: float32 parameters + the outer momentum


@dataclass(frozen=True, slots=True)
class Overhead:
    """A participant's bytes a round besides its payload and reveals, counted as the table's
    other columns are (bytes one worker sends; what one worker downloads from a peer that peer
    sends, so per worker on average sent = received): ``txs`` (its signed txs),
    ``blob_heads`` (the HTTP heads of the W-1 payload fetches it serves or makes, half each
    way: (W-1) x ``HTTP_BYTES_PER_FETCH``), ``models`` (the base model, 8 B/param, fetched by
    the ``sitout_share`` of participants that sat out the base's round and so could not
    aggregate it themselves)."""

    txs: float
    blob_heads: float
    models: float

    @property
    def total(self) -> float:
        return self.txs + self.blob_heads + self.models


def round_overhead_bytes(n_params: float, workers: int, sitout_share: float) -> Overhead:
    """The uncounted bytes of one round per participant (``Overhead``). ``sitout_share``: the
    fraction of a round's participants that did not take part in the round that made its base
    (0 when the same W train every round; 1 - N/M when N of M providers are drawn uniformly)."""
    if not 0.0 <= sitout_share <= 1.0:
        raise ValueError(f"sitout_share must be in [0, 1], got {sitout_share}")
    return Overhead(
        txs=float(TX_BYTES_PER_ROUND),
        blob_heads=float((workers - 1) * HTTP_BYTES_PER_FETCH),
        models=sitout_share * MODEL_BYTES_PER_PARAM * n_params,
    )


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
