"""Re-execution verification of a trace segment, and the quality score of an update.

``verify_segment(start_state, shard_spec, k, claimed_end_state, corpus=...)`` decodes
the revealed start state, checks what the chain pinned (start hash from the trace proof,
base model for a segment at step 0, hyperparameters, round), re-runs inner steps
s..s+k-1 on the batches ``shard_spec`` fixes for those steps, and compares the result
with the claimed end state:

* exact mode (``tolerance=None``, the default): valid iff the re-executed state bytes
  equal the claimed bytes (needs ``set_determinism()`` and the same software stack);
* tolerance mode: valid iff the metadata match and the relative distance
      d = ||θ_claimed − θ_reexec||₂ / ||θ_reexec − θ_start||₂
  (parameters only, over all tensors) is at most ``tolerance``. The denominator is the
  honest segment's own movement, so the test is scale-free. ``calibrate_tolerance``
  measures d for honest re-executions on a different numerical path; the README
  records the numbers and the default.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass

import torch

from trainer.commit import KIND_MODEL, KIND_STATE, KIND_UPDATE, PayloadError, decode
from trainer.compression import codec_from_payload
from trainer.data import Corpus, ShardSpec
from trainer.determinism import set_determinism
from trainer.model import GPT, GPTConfig
from trainer.state import (
    InnerConfig,
    evaluate,
    load_state,
    params_hash_of_state,
    run_inner_steps,
    state_bytes,
)

DEFAULT_TOLERANCE = 1e-3  # see README "Calibration"


@dataclass(slots=True)
class SegmentVerdict:
    valid: bool
    distance: float  # relative parameter distance (0.0 when bytes are identical)
    reason: str
    reexecuted_hash: str = ""
    claimed_hash: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def _invalid(reason: str, distance: float = math.inf, **kw) -> SegmentVerdict:
    return SegmentVerdict(valid=False, distance=distance, reason=reason, **kw)


def param_distance(start: bytes, reexec: bytes, claimed: bytes) -> float:
    """||θ_claimed − θ_reexec|| / ||θ_reexec − θ_start|| over all parameters."""
    ps, pr, pc = (decode(b, expected_kind=KIND_STATE) for b in (start, reexec, claimed))
    num = den = 0.0
    for name, e in pr.entries.items():
        r = e.parts["param"].double()
        if name not in pc.entries or tuple(pc.entries[name].parts["param"].shape) != tuple(r.shape):
            return math.inf
        num += float((pc.entries[name].parts["param"].double() - r).pow(2).sum())
        den += float((r - ps.entries[name].parts["param"].double()).pow(2).sum())
    if num == 0.0:
        return 0.0
    return math.sqrt(num) / max(math.sqrt(den), 1e-30)


def verify_segment(
    start_state: bytes,
    shard_spec: ShardSpec,
    k: int,
    claimed_end_state: bytes,
    *,
    corpus: Corpus,
    tolerance: float | None = None,
    expected_start_hash: bytes | None = None,
    base_model_hash: bytes | None = None,
    inner: InnerConfig | None = None,
    model: GPTConfig | None = None,
    device: str = "cpu",
    deterministic: bool = True,
) -> SegmentVerdict:
    """Re-run the k steps that follow ``start_state`` and judge ``claimed_end_state``.

    Preconditions the caller (verifier) gets from the chain: ``expected_start_hash``
    (the trace entry proven against the trace root), ``base_model_hash`` (the round's
    base model; enforced when the segment starts at inner step 0), ``inner``/``model``
    (the job's pinned hyperparameters). Never raises on bad input: returns invalid.
    """
    if not isinstance(k, int) or k <= 0:
        return _invalid(f"segment length k must be a positive int, got {k!r}")
    if expected_start_hash is not None and hashlib.sha256(start_state).digest() != expected_start_hash:
        return _invalid("start state does not match the committed trace entry")
    try:
        ps = decode(start_state, expected_kind=KIND_STATE)
    except PayloadError as exc:
        return _invalid(f"malformed start state: {exc}")
    try:
        pc = decode(claimed_end_state, expected_kind=KIND_STATE)
    except PayloadError as exc:
        return _invalid(f"malformed claimed end state: {exc}")
    sm, cm = ps.meta, pc.meta
    if inner is not None and sm.get("inner") != inner.to_dict():
        return _invalid("start state's inner hyperparameters differ from the job's")
    if model is not None and sm.get("model") != model.to_dict():
        return _invalid("start state's model config differs from the job's")
    if sm.get("round") != shard_spec.round:
        return _invalid(f"start state is from round {sm.get('round')}, segment is round {shard_spec.round}")
    s0 = sm.get("inner_step")
    if not isinstance(s0, int) or s0 < 0:
        return _invalid("start state has no inner step")
    if base_model_hash is not None and s0 == 0 and params_hash_of_state(start_state) != base_model_hash:
        return _invalid("start state is not the round's base model")
    want = {"inner_step": s0 + k, "adam_step": sm.get("adam_step", 0) + k, "round": sm["round"],
            "inner": sm.get("inner"), "model": sm.get("model")}
    for key, v in want.items():
        if cm.get(key) != v:
            return _invalid(f"claimed end state has {key}={cm.get(key)!r}, expected {v!r}"
                            + (" (fewer or more steps than k)" if key.endswith("step") else ""))
    if deterministic:
        set_determinism(0, threads=1)
    try:
        ls = load_state(start_state, device)
    except PayloadError as exc:
        return _invalid(f"start state does not load: {exc}")
    try:
        run_inner_steps(ls.model, ls.opt, ls.icfg, corpus, shard_spec, s0, k, device=device)
    except ValueError as exc:
        return _invalid(f"cannot re-run segment: {exc}")
    reexec = state_bytes(ls.model, ls.opt, ls.icfg, round=ls.round, inner_step=s0 + k)
    rh = hashlib.sha256(reexec).hexdigest()
    ch = hashlib.sha256(claimed_end_state).hexdigest()
    if reexec == bytes(claimed_end_state):
        return SegmentVerdict(True, 0.0, "identical state hash", rh, ch)
    dist = param_distance(start_state, reexec, claimed_end_state)
    if tolerance is None:
        return _invalid(f"end state differs from re-execution (distance {dist:.3e}, exact mode)",
                        dist, reexecuted_hash=rh, claimed_hash=ch)
    ok = dist <= tolerance
    return SegmentVerdict(ok, dist, f"distance {dist:.3e} {'<=' if ok else '>'} tolerance {tolerance:.1e}", rh, ch)


def make_segment(model: GPT, icfg: InnerConfig, corpus: Corpus, spec: ShardSpec, start_step: int,
                 k: int, opt=None, device: str = "cpu") -> tuple[bytes, bytes]:
    """(start, end) state bytes of an honest k-step segment from the given model/opt."""
    from trainer.state import make_inner_optimizer

    opt = opt or make_inner_optimizer(model, icfg)
    start = state_bytes(model, opt, icfg, round=spec.round, inner_step=start_step)
    run_inner_steps(model, opt, icfg, corpus, spec, start_step, k, device=device)
    end = state_bytes(model, opt, icfg, round=spec.round, inner_step=start_step + k)
    return start, end


def calibrate_tolerance(start_state: bytes, spec: ShardSpec, k: int, corpus: Corpus) -> dict:
    """Honest cross-stack distances: re-run the segment (a) with 1 thread in deterministic
    mode (reference), (b) with 2 threads, non-deterministic mode, (c) in float64 (a
    different numerical path, standing in for different hardware) and report the
    distances of (b) and (c) to (a)."""
    out = {}
    set_determinism(0, threads=1)
    ref = _rerun(start_state, spec, k, corpus, torch.float32)
    torch.use_deterministic_algorithms(False)
    torch.set_num_threads(2)
    b = _rerun(start_state, spec, k, corpus, torch.float32)
    out["threads2_vs_ref"] = param_distance(start_state, ref, b)
    c = _rerun(start_state, spec, k, corpus, torch.float64)
    out["float64_vs_ref"] = param_distance(start_state, ref, c)
    set_determinism(0, threads=1)
    return out


def _rerun(start_state: bytes, spec: ShardSpec, k: int, corpus: Corpus, dtype) -> bytes:
    ls = load_state(start_state)
    if dtype != torch.float32:
        ls.model.to(dtype)
        for st in ls.opt.state.values():
            for key in ("exp_avg", "exp_avg_sq"):
                st[key] = st[key].to(dtype)
    s0 = ls.inner_step
    run_inner_steps(ls.model, ls.opt, ls.icfg, corpus, spec, s0, k)
    ls.model.float()
    for st in ls.opt.state.values():
        for key in ("exp_avg", "exp_avg_sq"):
            st[key] = st[key].float()
    return state_bytes(ls.model, ls.opt, ls.icfg, round=ls.round, inner_step=s0 + k)


def quality_score(base: GPT | bytes, update: bytes | dict, heldout) -> int:
    """Loss improvement (milli-nats, an int) on ``heldout`` batches from applying one
    update as θ = θ_base − Δ (lr 1, no momentum). Positive = the update helps.

    ``base``: a GPT or canonical model bytes (kind 3); ``update``: canonical update
    payload bytes (kind 1) or a dict of decompressed Δ tensors.
    """
    if isinstance(base, (bytes, bytearray)):
        mp = decode(base, expected_kind=KIND_MODEL)
        model = GPT(GPTConfig.from_dict(mp.meta["model"]))
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(mp.entries[n].parts["param"])
    else:
        model = base
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    if isinstance(update, (bytes, bytearray)):
        payload = decode(update, expected_kind=KIND_UPDATE)
        delta = codec_from_payload(payload).decompress(payload, shapes)
    else:
        delta = update
    before = evaluate(model, heldout)
    saved = {n: p.detach().clone() for n, p in model.named_parameters()}
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.sub_(delta[n].to(p.dtype))
    after = evaluate(model, heldout)
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(saved[n])
    return int(round((before - after) * 1000))
