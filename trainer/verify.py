"""Verification of a provider's round: the pinned start, re-executed trace segments, and the
payload as a function of the trace. The chain checks hashes and Merkle proofs; everything that
needs torch is here. Entry points (all return a ``Verdict`` and never raise on bad input):

``verify_start(start_state, *, base_model_hash, round, shard, inner, model, carried=None)``
    Trace entry 0 must be the state the provider had to start from: the round's base model
    (params hash = the chain's base hash), inner step 0, this round, the assigned shard
    (``Participant.shard``), and either a fresh optimizer (adam step 0, zero moments, empty
    error-feedback carry) or exactly what the provider's previous round left (``Carried``:
    its end state's moments and adam step, and the carry its committed payload left).

``VerifyContext(corpus, shard_spec, k, tolerance=None, inner=None, model=None, ...)``
    What is fixed for a job's round and the same for every segment (``VerifyContext.for_job``
    builds it from the job's configs): built once, passed to each of the checks below.

``verify_segment(ctx, start_state, claimed_end_state, *, expected_start_hash=None, ...)``
    Re-runs inner steps s..s+k-1 from a revealed trace entry and compares with the next
    entry. Exact mode (``ctx.tolerance=None``): the state bytes must be identical (same stack
    only: see ``trainer.determinism.stack_id``). Tolerance mode: the metadata must be
    identical (steps, adam step, round, shard, carry, hyperparameters) and every part of the
    state — parameters, exp_avg, exp_avg_sq — within ``tolerance`` in the relative distance
        d_part = ||x_claimed − x_reexec||₂ / ||x_reexec − x_start||₂
    (the denominator is the segment's own movement, so d is scale-free), or within
    ``ULP_FLOOR`` float32 ulps of the re-execution (||x_claimed − x_reexec|| / ||ulp(x_reexec)||:
    rounding noise, which dominates d when a short segment barely moves a value).

``verify_payload(end_state, carry, base, *, update_root, binding, H, ...)``
    The "payload segment": the committed update must equal
    ``compress(θ_base − θ_H + e_prev)`` with θ_H the trace's last entry and e_prev the carry
    named by the trace's states. Re-compresses and compares the bound Merkle root with the
    committed update root (tolerance mode: or the decoded committed payload is within
    ``tolerance`` of the re-compressed one, relative). Also returns the carry the round
    leaves (``Verdict.carry_out``), which the provider's next start must name.

``verify_challenge(ctx, ch, *, H, ...)`` runs all three for one challenge (``Challenge``: the drawn
segments, the revealed states, the trace's hashes, the carry and, optionally, the payload).
In exact mode the end of each opened segment is committed but not revealed
(``compute_hidden_entries``; the provider serves ``mask_trace`` of its list): the verifier
re-executes and checks its state's hash against the opened leaf hash, and that hash is the
vote's evidence (abci_app/jobs/README.md *Evidence only re-execution yields*).

``verify_fresh_start(trace0, base, ...)``
    The start check without entry 0's bytes, for a round that starts fresh: the state a trainer
    writes before its first step is a function of public data (the round's base model bytes,
    the round, the shard, the job's configs; ``trainer.state.fresh_start_state``), so the
    verifier builds it and compares its sha256 with the committed entry 0. ``verify_challenge``
    does this when given the base model bytes (``base=``): entry 0 (12 bytes per parameter) is
    never fetched, and the payload check takes the base's bytes.

A challenge opens trace entries 0 (a carried start only) and H/k (start and payload checks, no
re-execution) and s drawn segments (re-executed: s·k of the H steps). See
abci_app/jobs/README.md for s.
"""

from __future__ import annotations

import hashlib
import math
import threading
from dataclasses import asdict, dataclass, field, replace
from typing import Protocol

import torch

from abci_app.jobs.incentives import compute_hidden_entries, mask_trace  # noqa: F401 (re-export)
from abci_app.jobs.probe import is_probe_within
from abci_app.merkle import hash_leaf, merkle_root_of_leaf_hashes
from trainer.carry import EMPTY_CARRY_HASH, carry_after, carry_hash, load_carry
from trainer.commit import (
    KIND_MODEL,
    KIND_STATE,
    KIND_UPDATE,
    Binding,
    Payload,
    PayloadError,
    decode,
    decode_meta,
    encode,
    trace_leaves,
    trace_root,
)
from trainer.commit import update_root as _root
from trainer.compression import Codec, CompressionState, codec_from_payload, make_codec
from trainer.data import Corpus, ShardSpec
from trainer.determinism import set_determinism
from trainer.model import GPT, GPTConfig
from trainer.probe import compute_probe
from trainer.state import (
    InnerConfig,
    LoadedState,
    evaluate,
    fresh_start_state,
    load_state,
    make_inner_optimizer,
    params_hash_of_model,
    params_hash_of_state,
    run_inner_steps,
    state_bytes,
    state_payload,
)

DEFAULT_TOLERANCE = 1e-3  # see README "Calibration"
ULP_FLOOR = (
    512  # a part within this many float32 ulps of the re-execution is rounding noise (README)
)
STATE_PARTS = ("param", "exp_avg", "exp_avg_sq")

# The probe of each state a tolerance-mode re-execution reached: sha256 of the reached state ->
# (sha256 of the segment's start state, the probe). ``verify_opened_end`` reads it when the opened
# end is byte for byte the re-execution (an honest provider on the verifier's stack): the probe is
# a pure function of those two states' bytes, so it is not computed again from a second decode of
# both. The start is hashed only when its end is here; a miss (another process, evicted, another
# start) computes the probe as before: the same value. Bounded, oldest out first.
_PROBE_CACHE: dict[bytes, tuple[bytes, tuple[int, ...]]] = {}
_PROBE_CACHE_SIZE = 4096
_PROBE_LOCK = threading.Lock()


def _remember_probe(start_hash: bytes, end_hash: bytes, probe: list[int]) -> None:
    """Keep the probe of the state with sha256 ``end_hash`` re-executed from the state with
    sha256 ``start_hash`` (``compute_probe`` of the two)."""
    with _PROBE_LOCK:
        _PROBE_CACHE.pop(end_hash, None)
        _PROBE_CACHE[end_hash] = (start_hash, tuple(probe))
        while len(_PROBE_CACHE) > _PROBE_CACHE_SIZE:
            del _PROBE_CACHE[next(iter(_PROBE_CACHE))]


def _recall_probe(start_state: bytes, end_hash: bytes) -> list[int] | None:
    """``compute_probe(start_state, end)`` for the end with sha256 ``end_hash`` if it was kept
    (from this very start), else None."""
    with _PROBE_LOCK:
        got = _PROBE_CACHE.get(end_hash)
    if got is None or hashlib.sha256(start_state).digest() != got[0]:
        return None
    return list(got[1])


def _reexecuted(ls: LoadedState, inner_step: int) -> tuple[bytes, Payload]:
    """The re-executed state's bytes (exactly ``ls.to_bytes(inner_step)``) and the Payload they
    encode, whose tensors are the live model's and optimizer's: the probe and the distances read
    it instead of decoding the bytes just built. Use it before the workspace is loaded again."""
    pl = state_payload(
        ls.model,
        ls.opt,
        ls.icfg,
        round=ls.round,
        inner_step=inner_step,
        shard=ls.shard,
        carry=ls.carry,
        slices=ls.slices,
        microbatches=ls.microbatches,
    )
    # in the decoded order (names sorted by their UTF-8 bytes, as ``encode`` writes them), so a
    # sum over the entries (``state_distance``) adds in the order it does on decoded bytes
    pl.entries = {n: pl.entries[n] for n in sorted(pl.entries, key=lambda s: s.encode("utf-8"))}
    return encode(pl), pl


@dataclass(slots=True)
class Verdict:
    valid: bool
    distance: float  # largest relative distance over the state parts (0.0 when bytes are identical)
    reason: str
    reexecuted_hash: str = ""
    claimed_hash: str = ""
    distances: dict = field(default_factory=dict)  # per part (tolerance mode)
    carry_out: bytes = b""  # verify_payload: hash of the carry the round leaves
    # tolerance mode: the probe of the re-executed end (trainer.probe: the vote's evidence) and
    # the re-executed state's bytes (judged against the claimed end once MsgOpenEnd opens it)
    probe: list = field(default_factory=list)
    reexecuted_state: bytes = field(default=b"", repr=False)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["carry_out"] = self.carry_out.hex()
        d.pop("reexecuted_state")
        return d


SegmentVerdict = Verdict  # the name of the first API


def _invalid(reason: str, distance: float = math.inf, **kw) -> Verdict:
    return Verdict(valid=False, distance=distance, reason=reason, **kw)


def state_distance(
    start: bytes | Payload, reexec: bytes | Payload, claimed: bytes | Payload
) -> dict[str, float]:
    """Per state part: ||x_claimed − x_reexec|| / ||x_reexec − x_start|| over all tensors
    (inf when the tensor names or shapes differ). Bytes or decoded states."""
    ps, pr, pc = (
        b if isinstance(b, Payload) else decode(b, expected_kind=KIND_STATE)
        for b in (start, reexec, claimed)
    )
    out: dict[str, float] = {}
    for part in STATE_PARTS:
        num = den = 0.0
        for name, e in pr.entries.items():
            r = e.parts[part].double()
            c = pc.entries.get(name)
            if c is None or part not in c.parts or tuple(c.parts[part].shape) != tuple(r.shape):
                num = math.inf
                break
            num += float((c.parts[part].double() - r).pow(2).sum())
            den += float((r - ps.entries[name].parts[part].double()).pow(2).sum())
        out[part] = 0.0 if num == 0.0 else math.sqrt(num) / max(math.sqrt(den), 1e-30)
    return out


def ulp_distance(reexec: bytes | Payload, claimed: bytes | Payload) -> dict[str, float]:
    """Per state part: ||x_claimed − x_reexec|| / ||ulp(x_reexec)|| — the difference in units of
    float32 spacing at the re-executed values (rounding noise is a few to a few tens of ulps)."""
    pr, pc = (
        b if isinstance(b, Payload) else decode(b, expected_kind=KIND_STATE)
        for b in (reexec, claimed)
    )
    out: dict[str, float] = {}
    inf = torch.tensor(math.inf)
    for part in STATE_PARTS:
        num = den = 0.0
        for name, e in pr.entries.items():
            r = e.parts[part]
            c = pc.entries.get(name)
            if c is None or part not in c.parts or tuple(c.parts[part].shape) != tuple(r.shape):
                num = math.inf
                break
            num += float((c.parts[part].double() - r.double()).pow(2).sum())
            a = r.abs()
            den += float((torch.nextafter(a, inf) - a).double().pow(2).sum())
        out[part] = 0.0 if num == 0.0 else math.sqrt(num) / max(math.sqrt(den), 1e-300)
    return out


def param_distance(start: bytes, reexec: bytes, claimed: bytes) -> float:
    """The parameters' relative distance (see ``state_distance``)."""
    return state_distance(start, reexec, claimed)["param"]


class JobConfigs(Protocol):
    """What a job fixes for every segment it verifies (``node.worker.ml.JobPlan`` has it)."""

    @property
    def k(self) -> int: ...
    @property
    def tolerance(self) -> float | None: ...
    @property
    def inner(self) -> InnerConfig: ...
    @property
    def model(self) -> GPTConfig: ...


@dataclass(frozen=True)
class VerifyContext:
    """What is fixed for a job's round and the same for every segment a verifier re-executes:
    the corpus, the assigned shard (``shard_spec.shard`` = Participant.shard), the segment length
    ``k``, the mode (``tolerance``: None = exact), the job's pinned hyperparameters (``inner``,
    ``model``; None = not checked), the parameters hash of the round's base model (enforced when
    a segment starts at inner step 0; None = not checked), the device, whether each call sets the
    determinism (``deterministic=False``: the caller already called ``set_determinism``, e.g.
    ``verify_challenge`` once for all segments) and the ``workspace`` (a dict kept across calls
    whose model and optimizer each start state is loaded into: ``load_state(into=...)``).
    Build it once (``for_job``) and pass it to ``verify_segment``, ``verify_run`` and
    ``verify_challenge``; ``dataclasses.replace`` gives a variant."""

    corpus: Corpus
    shard_spec: ShardSpec
    k: int
    tolerance: float | None = None
    inner: InnerConfig | None = None
    model: GPTConfig | None = None
    base_model_hash: bytes | None = None
    device: str = "cpu"
    deterministic: bool = True
    workspace: dict | None = field(default=None, compare=False)

    @classmethod
    def for_job(
        cls,
        job: JobConfigs,
        shard_spec: ShardSpec,
        *,
        corpus: Corpus,
        base_model_hash: bytes | None = None,
        device: str = "cpu",
        workspace: dict | None = None,
    ) -> VerifyContext:
        """The context of one job's round: ``k``, ``tolerance``, ``inner`` and ``model`` from the
        job's configs (``node.worker.ml.JobPlan``), the rest as given."""
        return cls(
            corpus=corpus,
            shard_spec=shard_spec,
            k=job.k,
            tolerance=job.tolerance,
            inner=job.inner,
            model=job.model,
            base_model_hash=base_model_hash,
            device=device,
            workspace=workspace,
        )


def verify_segment(
    ctx: VerifyContext,
    start_state: bytes,
    claimed_end_state: bytes | None,
    *,
    expected_start_hash: bytes | None = None,
    expected_end_hash: bytes | None = None,
    expected_end_leaf: bytes | None = None,
    claimed_hash: bytes | None = None,
    start_hash: bytes | None = None,
) -> Verdict:
    """Re-run the ``ctx.k`` steps that follow ``start_state`` and judge ``claimed_end_state``.

    The job's and round's preconditions are ``ctx``'s (``VerifyContext``). Per segment, from the
    chain: ``expected_start_hash`` / ``expected_end_hash`` (trace entries proven against the
    trace root). Never raises on bad input: returns invalid.

    Exact mode with a secret end (``claimed_end_state=None``, ``expected_end_leaf`` = the
    opened Merkle leaf hash ``hash_leaf(end state hash)``): the end state was committed but not
    revealed, so the verdict is whether the re-executed state's hash has that leaf hash, and
    ``Verdict.reexecuted_hash`` is the evidence only re-execution yields (docs/threat-model.md
    *Evidence only re-execution yields*).
    ``claimed_hash``: sha256 of ``claimed_end_state`` when the caller already computed it (it is
    only reported; the check compares the bytes); ``start_hash``: sha256 of ``start_state`` when
    the caller already computed it (a secret end in tolerance mode keys the probe it computed by
    it, for ``verify_opened_end``).
    """
    k = ctx.k
    if not isinstance(k, int) or k <= 0:
        return _invalid(f"segment length k must be a positive int, got {k!r}")
    if claimed_end_state is None:
        if expected_end_leaf is None:
            return _invalid("a secret end state (no claimed bytes) needs its opened leaf hash")
        return _verify_secret_end(
            ctx,
            start_state,
            expected_end_leaf,
            expected_start_hash=expected_start_hash,
            start_hash=start_hash,
        )
    metas = _segment_metas(start_state, claimed_end_state, expected_start_hash, expected_end_hash)
    if isinstance(metas, Verdict):
        return metas
    sm, cm = metas
    bad = _check_segment_meta(ctx, sm, cm)
    if bad is not None:
        return bad
    s0 = sm["inner_step"]  # checked: an int >= 0
    try:
        ps = decode(start_state, expected_kind=KIND_STATE)
    except PayloadError as exc:
        return _invalid(f"malformed start state: {exc}")
    if ctx.base_model_hash is not None and s0 == 0:
        if params_hash_of_state(ps) != ctx.base_model_hash:
            return _invalid("start state is not the round's base model")
    if ctx.deterministic:
        set_determinism(0, threads=1)
    try:
        ls = _load_into_workspace(ctx, ps)
    except PayloadError as exc:
        return _invalid(f"start state does not load: {exc}")
    try:
        _rerun(ctx, ls, s0)
    except ValueError as exc:
        return _invalid(f"cannot re-run segment: {exc}")
    reexec, rp = _reexecuted(ls, s0 + k)
    if claimed_hash is None:
        claimed_hash = hashlib.sha256(claimed_end_state).digest()
    v = judge_end(
        ps, reexec, claimed_end_state, ctx.tolerance, claimed_hash=claimed_hash, reexec_payload=rp
    )
    if ctx.tolerance is not None:
        v.probe = compute_probe(ps, rp)
        v.reexecuted_state = reexec
    return v


def _segment_metas(
    start_state: bytes,
    claimed_end_state: bytes,
    expected_start_hash: bytes | None,
    expected_end_hash: bytes | None,
) -> tuple[dict, dict] | Verdict:
    """The metadata of a served segment's start and claimed end, once both are the committed
    trace entries (when their hashes are given); else the invalid verdict."""
    if (
        expected_start_hash is not None
        and hashlib.sha256(start_state).digest() != expected_start_hash
    ):
        return _invalid("start state does not match the committed trace entry")
    if (
        expected_end_hash is not None
        and hashlib.sha256(claimed_end_state).digest() != expected_end_hash
    ):
        return _invalid("end state does not match the committed trace entry")
    try:
        sm = decode_meta(start_state, expected_kind=KIND_STATE)
    except PayloadError as exc:
        return _invalid(f"malformed start state: {exc}")
    try:
        cm = decode_meta(claimed_end_state, expected_kind=KIND_STATE)
    except PayloadError as exc:
        return _invalid(f"malformed claimed end state: {exc}")
    return sm, cm


def _check_segment_meta(ctx: VerifyContext, sm: dict, cm: dict) -> Verdict | None:
    """A served segment's start meta ``sm`` against the job and round (``ctx``), and its claimed
    end meta ``cm`` against what ``ctx.k`` steps from that start leave; None when they agree."""
    spec, k = ctx.shard_spec, ctx.k
    if ctx.inner is not None and sm.get("inner") != ctx.inner.to_dict():
        return _invalid("start state's inner hyperparameters differ from the job's")
    if ctx.model is not None and sm.get("model") != ctx.model.to_dict():
        return _invalid("start state's model config differs from the job's")
    if sm.get("round") != spec.round:
        return _invalid(
            f"start state is from round {sm.get('round')}, segment is round {spec.round}"
        )
    if sm.get("shard") != spec.shard_index():
        return _invalid(
            f"start state is for shard {sm.get('shard')}, the assigned shard is "
            f"{spec.shard_index()}"
        )
    s0 = sm.get("inner_step")
    if not isinstance(s0, int) or s0 < 0:
        return _invalid("start state has no inner step")
    want = {
        "inner_step": s0 + k,
        "adam_step": sm.get("adam_step", 0) + k,
        "round": sm["round"],
        "inner": sm.get("inner"),
        "model": sm.get("model"),
        "shard": sm.get("shard"),
        "carry": sm.get("carry"),
    }
    if "slices" in sm:  # a data-parallel island's trace: re-executed as that many slices
        want["slices"] = sm["slices"]
    if "microbatches" in sm:  # a data-parallel x pipeline island's: each slice split again
        want["microbatches"] = sm["microbatches"]
    for key, v in want.items():
        if cm.get(key) != v:
            return _invalid(
                f"claimed end state has {key}={cm.get(key)!r}, expected {v!r}"
                + (" (fewer or more steps than k)" if key.endswith("step") else "")
            )
    if set(cm) != set(want):
        return _invalid(f"claimed end state has unexpected meta keys {sorted(set(cm) - set(want))}")
    return None


def _check_run_start(ctx: VerifyContext, sm: dict, ps: Payload) -> Verdict | None:
    """The opened start of a secret end or of a run (meta ``sm``, decoded ``ps``) against the job
    and round (``ctx``); None when it is one of theirs (an int inner step >= 0)."""
    if ctx.inner is not None and sm.get("inner") != ctx.inner.to_dict():
        return _invalid("start state's inner hyperparameters differ from the job's")
    if ctx.model is not None and sm.get("model") != ctx.model.to_dict():
        return _invalid("start state's model config differs from the job's")
    spec = ctx.shard_spec
    if sm.get("round") != spec.round or sm.get("shard") != spec.shard_index():
        return _invalid("start state is not this round's assigned shard")
    s0 = sm.get("inner_step")
    if not isinstance(s0, int) or s0 < 0:
        return _invalid("start state has no inner step")
    if ctx.base_model_hash is not None and s0 == 0:
        if params_hash_of_state(ps) != ctx.base_model_hash:
            return _invalid("start state is not the round's base model")
    return None


def _load_into_workspace(ctx: VerifyContext, ps: Payload) -> LoadedState:
    """``load_state`` of the decoded start onto ``ctx.device``, into the workspace's model and
    optimizer when ``ctx`` has one (kept there for the next call). Raises as ``load_state``."""
    ws = ctx.workspace
    ls = load_state(ps, ctx.device, into=None if ws is None else ws.get("loaded"))
    if ws is not None:
        ws["loaded"] = ls
    return ls


def _rerun(ctx: VerifyContext, ls: LoadedState, step: int) -> None:
    """Train the loaded state ``ls`` through the ``ctx.k`` inner steps from ``step`` (as the
    slices and microbatches its state names). ValueError as ``run_inner_steps``."""
    run_inner_steps(
        ls.model,
        ls.opt,
        ls.icfg,
        ctx.corpus,
        ctx.shard_spec,
        step,
        ctx.k,
        device=ctx.device,
        slices=ls.slices,
        microbatches=ls.microbatches,
    )


def judge_end(
    start: bytes | Payload,
    reexec: bytes,
    claimed_end_state: bytes,
    tolerance: float | None,
    *,
    claimed_hash: bytes | None = None,
    reexec_hash: bytes | None = None,
    reexec_payload: Payload | None = None,
    claimed_payload: Payload | None = None,
) -> Verdict:
    """The re-executed end ``reexec`` against the claimed end bytes: identical, or (tolerance
    mode) every state part within ``tolerance`` of the segment's movement or within ULP_FLOOR
    ulps (see the module docstring). ``start`` is the segment's start state. ``reexec_hash`` /
    ``reexec_payload``: sha256 of ``reexec`` / its decoded Payload, ``claimed_payload``: the
    decoded claimed end, when the caller has them (the same verdict, without hashing or
    decoding the bytes again)."""
    rh = (reexec_hash or hashlib.sha256(reexec).digest()).hex()
    if claimed_hash is None:
        claimed_hash = hashlib.sha256(claimed_end_state).digest()
    ch = claimed_hash.hex()
    if reexec == bytes(claimed_end_state):
        return Verdict(True, 0.0, "identical state hash", rh, ch)
    try:
        ps = start if isinstance(start, Payload) else decode(start, expected_kind=KIND_STATE)
        pr = reexec_payload or decode(reexec, expected_kind=KIND_STATE)
        pcl = claimed_payload or decode(claimed_end_state, expected_kind=KIND_STATE)
        dist = state_distance(ps, pr, pcl)
        ulps = ulp_distance(pr, pcl)
    except (PayloadError, KeyError) as exc:
        return _invalid(
            f"claimed end state does not match the model's tensors: {exc}",
            reexecuted_hash=rh,
            claimed_hash=ch,
        )
    worst = max(dist.values())
    both = {**dist, **{f"{p}_ulps": u for p, u in ulps.items()}}
    if tolerance is None:
        return _invalid(
            f"end state differs from re-execution (distance {worst:.3e}, exact mode)",
            worst,
            reexecuted_hash=rh,
            claimed_hash=ch,
            distances=both,
        )
    # a part passes within tolerance of the segment's own movement, or within ULP_FLOOR float32
    # ulps of the re-execution (rounding noise: what dominates when one step barely moves a value)
    bad = [p for p in STATE_PARTS if dist[p] > tolerance and ulps[p] > ULP_FLOOR]
    if not bad:
        return Verdict(
            True,
            worst,
            f"distance {worst:.3e} <= tolerance {tolerance:.1e} or within "
            f"{ULP_FLOOR} ulps per part",
            rh,
            ch,
            distances=both,
        )
    p = bad[0]
    return Verdict(
        False,
        worst,
        f"{p}: distance {dist[p]:.3e} > tolerance {tolerance:.1e} and "
        f"{ulps[p]:.0f} ulps > {ULP_FLOOR}",
        rh,
        ch,
        distances=both,
    )


def _verify_secret_end(
    ctx: VerifyContext,
    start_state: bytes,
    end_leaf: bytes,
    *,
    expected_start_hash: bytes | None,
    start_hash: bytes | None = None,
) -> Verdict:
    """verify_segment's path for an end committed only as a leaf hash (the path the network
    runs: the worker hides every opened segment's end, in both modes). Exact mode: the
    re-executed state's hash must have that leaf hash. Tolerance mode: nothing to compare yet
    (the end is opened after the vote is committed: MsgOpenEnd); the verdict carries the probe of
    the re-executed state (the vote's evidence) and its bytes, for ``verify_opened_end``.
    The start is loaded into ``ctx.workspace``'s model and optimizer when it has one
    (``load_state(into=...)``: the same bytes as a fresh load, without rebuilding them).
    ``start_hash``: sha256 of ``start_state`` if known (the key of the probe kept for
    ``verify_opened_end``)."""
    if expected_start_hash is not None:
        start_hash = hashlib.sha256(start_state).digest()
        if start_hash != expected_start_hash:
            return _invalid("start state does not match the committed trace entry")
    try:
        sm = decode_meta(start_state, expected_kind=KIND_STATE)
        ps = decode(start_state, expected_kind=KIND_STATE)
    except PayloadError as exc:
        return _invalid(f"malformed start state: {exc}")
    bad = _check_run_start(ctx, sm, ps)
    if bad is not None:
        return bad
    s0 = sm["inner_step"]  # checked: an int >= 0
    if ctx.deterministic:
        set_determinism(0, threads=1)
    try:
        ls = _load_into_workspace(ctx, ps)
        _rerun(ctx, ls, s0)
    except (PayloadError, ValueError) as exc:
        return _invalid(f"cannot re-run segment: {exc}")
    reexec_bytes, rp = _reexecuted(ls, s0 + ctx.k)
    reexec = hashlib.sha256(reexec_bytes).digest()
    if ctx.tolerance is not None:
        probe = compute_probe(ps, rp)
        _remember_probe(start_hash or hashlib.sha256(start_state).digest(), reexec, probe)
        return Verdict(
            True,
            0.0,
            "re-executed; the end is judged once it is opened (tolerance mode)",
            reexec.hex(),
            probe=probe,
            reexecuted_state=reexec_bytes,
        )
    return _judge_secret_leaf(reexec, end_leaf)


def _judge_secret_leaf(reexec_hash: bytes, end_leaf: bytes) -> Verdict:
    """Exact mode: the re-executed state (sha256 ``reexec_hash``) against the opened leaf hash
    of a secret end."""
    if hash_leaf(reexec_hash) == bytes(end_leaf):
        return Verdict(
            True, 0.0, "re-executed end state is the committed (secret) leaf", reexec_hash.hex()
        )
    return _invalid(
        "re-executed end state is not the committed trace leaf (exact mode)",
        reexecuted_hash=reexec_hash.hex(),
        claimed_hash="leaf:" + bytes(end_leaf).hex(),
    )


def verify_opened_end(
    start_state: bytes,
    reexec_state: bytes,
    claimed_end_state: bytes,
    *,
    tolerance: float,
    end_leaf: bytes,
    claimed_probe: list[int],
    tolerance_ppm: int,
) -> Verdict:
    """Tolerance mode, once MsgOpenEnd opened a secret end: the claimed end bytes must be the
    committed leaf (``hash_leaf(sha256(bytes))`` = the opened ``end_leaf``), carry the
    re-executed state's metadata, be within ``tolerance`` of the re-execution
    (``judge_end``), and the opened probe must be the probe of the claimed end (within the
    chain's probe bound, abci_app.jobs.probe: a provider whose committed probe does not describe
    its committed state lied in one of them)."""
    ch = hashlib.sha256(claimed_end_state).digest()
    if hash_leaf(ch) != bytes(end_leaf):
        return _invalid("opened end state is not the committed trace leaf")
    same = bytes(claimed_end_state) == bytes(reexec_state)
    if same:
        # byte for byte the re-execution (same metadata, distance 0): only the opened probe is
        # left to check, against the probe of this state kept when it was re-executed (a miss
        # computes it below, as for any other end)
        own_probe = _recall_probe(start_state, ch)
        if own_probe is not None:
            if not is_probe_within(list(claimed_probe), own_probe, tolerance_ppm):
                return _invalid("the opened probe is not the probe of the opened end state")
            return judge_end(
                start_state,
                reexec_state,
                claimed_end_state,
                tolerance,
                claimed_hash=ch,
                reexec_hash=ch,
            )
    try:
        rm = decode_meta(reexec_state, expected_kind=KIND_STATE)
        cm = decode_meta(claimed_end_state, expected_kind=KIND_STATE)
    except PayloadError as exc:
        return _invalid(f"malformed opened end state: {exc}")
    if cm != rm:
        diff = sorted(k for k in set(cm) | set(rm) if cm.get(k) != rm.get(k))
        return _invalid(f"opened end state's metadata differs from the re-execution's: {diff}")
    try:
        ps = decode(start_state, expected_kind=KIND_STATE)
        pc = decode(claimed_end_state, expected_kind=KIND_STATE)  # what compute_probe decodes
        own = compute_probe(ps, pc)
    except (PayloadError, KeyError, ValueError) as exc:
        return _invalid(f"opened end state does not match the model's tensors: {exc}")
    if not is_probe_within(list(claimed_probe), own, tolerance_ppm):
        return _invalid("the opened probe is not the probe of the opened end state")
    return judge_end(
        ps,
        reexec_state,
        claimed_end_state,
        tolerance,
        claimed_hash=ch,
        reexec_hash=ch if same else None,
        claimed_payload=pc,
    )


@dataclass(frozen=True, slots=True)
class Carried:
    """What a provider's previous round (in this job) left: its trace's last state (proven
    against that round's trace root on chain) and the hash of the carry its committed payload
    left (``verify_payload(...).carry_out`` of that round)."""

    end_state: bytes
    carry_out: bytes


def verify_start(
    start_state: bytes,
    *,
    base_model_hash: bytes,
    round: int,
    shard: int,
    inner: InnerConfig | None = None,
    model: GPTConfig | None = None,
    carried: Carried | None = None,
    expected_hash: bytes | None = None,
) -> Verdict:
    """Trace entry 0 is the pinned start (see the module docstring). Exact in both modes:
    nothing is re-computed, so any difference is a wrong start (fraud)."""
    if expected_hash is not None and hashlib.sha256(start_state).digest() != expected_hash:
        return _invalid("start state does not match trace entry 0")
    try:
        p = decode(start_state, expected_kind=KIND_STATE)
    except PayloadError as exc:
        return _invalid(f"malformed start state: {exc}")
    m = p.meta
    if m.get("inner_step") != 0:
        return _invalid(f"trace entry 0 is at inner step {m.get('inner_step')!r}, not 0")
    if m.get("round") != round:
        return _invalid(f"start state is from round {m.get('round')!r}, not {round}")
    if m.get("shard") != shard:
        return _invalid(f"start state is for shard {m.get('shard')!r}, the chain assigned {shard}")
    if inner is not None and m.get("inner") != inner.to_dict():
        return _invalid("start state's inner hyperparameters differ from the job's")
    if model is not None and m.get("model") != model.to_dict():
        return _invalid("start state's model config differs from the job's")
    try:
        if params_hash_of_state(p) != base_model_hash:
            return _invalid("start state's parameters are not the round's base model")
    except (PayloadError, KeyError) as exc:
        return _invalid(f"start state has no parameters: {exc}")
    if carried is None:
        if m.get("adam_step") != 0:
            return _invalid(f"fresh start with adam step {m.get('adam_step')!r}, expected 0")
        for name, e in p.entries.items():
            for part in ("exp_avg", "exp_avg_sq"):
                if bool(e.parts[part].any()):
                    return _invalid(f"fresh start with non-zero {part} in {name} (made-up moments)")
        if m.get("carry") != EMPTY_CARRY_HASH.hex():
            return _invalid("fresh start names a non-empty error-feedback carry")
        return Verdict(True, 0.0, "fresh start: base model, step 0, zero moments, empty carry")
    try:
        prev = decode(carried.end_state, expected_kind=KIND_STATE)
    except PayloadError as exc:
        return _invalid(f"malformed previous end state: {exc}")
    if m.get("adam_step") != prev.meta.get("adam_step"):
        return _invalid(
            f"carried start has adam step {m.get('adam_step')!r}, the previous round "
            f"ended at {prev.meta.get('adam_step')!r}"
        )
    if set(p.entries) != set(prev.entries):
        return _invalid("carried start's tensors differ from the previous round's")
    for name, e in p.entries.items():
        for part in ("exp_avg", "exp_avg_sq"):
            if not torch.equal(e.parts[part], prev.entries[name].parts[part]):
                return _invalid(
                    f"carried start's {part} in {name} differs from the previous round's "
                    "end state (made-up moments)"
                )
    if m.get("carry") != carried.carry_out.hex():
        return _invalid(
            "carried start names another error-feedback carry than the previous "
            "round's payload left"
        )
    return Verdict(
        True, 0.0, "carried start: base model, step 0, previous round's moments and carry"
    )


FRESH_START = (
    "the round's base model, inner step 0, adam step 0, zero moments, the empty carry, this "
    "round, the assigned shard, the job's inner and model configs"
)


def verify_fresh_start(
    trace0: bytes,
    base: bytes,
    *,
    round: int,
    shard: int,
    inner: InnerConfig,
    model: GPTConfig,
    slices: int = 1,
    microbatches: int = 1,
) -> tuple[Verdict, bytes]:
    """The start check of a round that starts fresh, without the provider's entry 0: build the
    state it had to start from out of public data (``trainer.state.fresh_start_state``: the
    round's base model bytes ``base``, the round, the assigned shard, the job's configs, and
    ``slices`` and ``microbatches``, the island's slicing the trace's states name) and compare
    its sha256 with the committed trace entry 0 (``trace0``, 32 bytes). Exact in both modes: the
    bytes are what every honest trainer writes, so any other entry 0 (made-up moments, another
    base, shard, round or step, a non-empty carry) is a wrong start. Returns the verdict and,
    when valid, the built state (entry 0 itself: the start of a run from segment 0)."""
    try:
        built = fresh_start_state(
            base,
            model,
            inner,
            round=round,
            shard=shard,
            slices=slices,
            microbatches=microbatches,
        )
    except (PayloadError, ValueError, KeyError) as exc:
        return _invalid(f"cannot build the fresh start from the base model: {exc}"), b""
    h = hashlib.sha256(built).digest()
    if h != trace0:
        return (
            _invalid(
                f"trace entry 0 is not the pinned fresh start ({FRESH_START}"
                + (f", {slices} slices" if slices != 1 else "")
                + (f" of {microbatches} microbatches" if microbatches != 1 else "")
                + "): its hash is not that of the state built from them",
                reexecuted_hash=h.hex(),
                claimed_hash=bytes(trace0).hex(),
            ),
            b"",
        )
    return (
        Verdict(
            True,
            0.0,
            "fresh start: entry 0 is the state built from the base model (step 0, zero "
            "moments, empty carry)",
            h.hex(),
            h.hex(),
        ),
        built,
    )


def _slices_named(state: bytes) -> tuple[int, int] | None:
    """The island slicing a trace state names: (meta ``slices``, meta ``microbatches``), each 1
    when absent; None if the state has no readable meta or names no valid count."""
    try:
        m = decode_meta(state, expected_kind=KIND_STATE)
    except PayloadError:
        return None
    s = m.get("slices", 1)
    if "slices" in m and not (type(s) is int and s >= 2):
        return None
    mb = m.get("microbatches", 1)
    if "microbatches" in m and not (type(mb) is int and mb >= 2 and s >= 2):
        return None
    return s, mb


def _base(base: bytes) -> tuple[bytes, dict[str, torch.Tensor], bool]:
    """(hash, parameters, is model bytes) of canonical model bytes (kind 3: their sha256) or
    of a state (kind 2, trace entry 0: its parameters hash)."""
    if base[6:7] == bytes([KIND_MODEL]):  # the header's kind byte (decode checks the rest)
        p = decode(base, expected_kind=KIND_MODEL)
        params = {n: e.parts["param"] for n, e in p.entries.items()}
        return hashlib.sha256(base).digest(), params, True
    p = decode(base, expected_kind=KIND_STATE)
    return params_hash_of_state(p), {n: e.parts["param"] for n, e in p.entries.items()}, False


def verify_payload(
    end_state: bytes,
    carry: bytes,
    base: bytes,
    *,
    update_root: bytes,
    binding: Binding,
    H: int,
    codec: str | None = None,
    payload: bytes | None = None,
    tolerance: float | None = None,
    ef_decay: float = 1.0,
    expected_end_hash: bytes | None = None,
    base_params_hash: bytes | None = None,
) -> Verdict:
    """The payload segment: the committed update (bound root ``update_root``) must be
    ``compress(θ_base − θ_H + e_prev)``. ``end_state`` = trace entry H/k, ``carry`` = the carry
    bytes its meta names, ``base`` = the round's base model (model bytes, whose sha256 must be
    the binding's base hash; or trace entry 0, whose parameters hash must be
    ``base_params_hash``: ``trainer.state.params_hash_of_model`` of the base, which is the base
    hash itself unless the base carries the outer momentum).
    The codec is the job's (``codec``) or, under an adaptive policy, the one the committed
    ``payload`` declares (its bytes are then checked against ``update_root`` first)."""
    if expected_end_hash is not None and hashlib.sha256(end_state).digest() != expected_end_hash:
        return _invalid("end state does not match the trace's last entry")
    try:
        pe = decode(end_state, expected_kind=KIND_STATE)
    except PayloadError as exc:
        return _invalid(f"malformed end state: {exc}")
    if pe.meta.get("inner_step") != H:
        return _invalid(
            f"the trace's last state is at inner step {pe.meta.get('inner_step')!r}, not H = {H}"
        )
    if pe.meta.get("round") != binding.round:
        return _invalid(f"end state is from round {pe.meta.get('round')!r}, not {binding.round}")
    if carry_hash(carry).hex() != pe.meta.get("carry"):
        return _invalid("carry bytes do not match the carry hash the trace commits to")
    try:
        base_hash, theta0, is_model = _base(base)
        want = binding.base_model_hash if is_model else base_params_hash or binding.base_model_hash
        if base_hash != want:
            return _invalid("base is not the round's base model")
    except (PayloadError, KeyError, IndexError) as exc:
        return _invalid(f"malformed base: {exc}")
    named = _payload_codec(payload, codec, update_root, binding)
    if isinstance(named, Verdict):
        return named
    codec = named
    try:
        c = make_codec(codec)
        cin = load_carry(carry, ef_decay=ef_decay)
    except (ValueError, PayloadError) as exc:
        return _invalid(f"cannot rebuild the compression: {exc}")
    if set(theta0) != set(pe.entries):
        return _invalid("end state's tensors differ from the base model's")
    delta = {n: theta0[n] - pe.entries[n].parts["param"] for n in sorted(theta0)}
    work = load_carry(carry, ef_decay=ef_decay)
    try:
        again = encode(c.compress(delta, work))
    except (ValueError, RuntimeError) as exc:
        return _invalid(f"cannot re-compress: {exc}")
    rh = _root(again, binding)
    if rh == update_root:
        return Verdict(
            True,
            0.0,
            "payload = compress(θ_base − θ_H + e_prev): bound roots equal",
            rh.hex(),
            update_root.hex(),
            carry_out=carry_hash(work),
        )
    if tolerance is None or payload is None:
        return _invalid(
            "committed update is not compress(θ_base − θ_H + e_prev) of the trace "
            "(update roots differ)",
            reexecuted_hash=rh.hex(),
            claimed_hash=update_root.hex(),
        )
    return _payload_within_tolerance(c, again, payload, delta, cin, tolerance, rh, update_root)


def _payload_codec(
    payload: bytes | None, codec: str | None, update_root: bytes, binding: Binding
) -> str | Verdict:
    """The codec the payload is re-compressed with: the job's ``codec`` or, under an adaptive
    policy, the one the committed ``payload`` declares (its bytes checked against
    ``update_root`` first); else the invalid verdict."""
    if payload is not None:
        if _root(payload, binding) != update_root:
            return _invalid("payload bytes do not match the committed update root")
        try:
            pp = decode(payload, expected_kind=KIND_UPDATE)
        except PayloadError as exc:
            return _invalid(f"malformed committed payload: {exc}")
        if codec is not None and pp.codec != make_codec(codec).name:
            return _invalid(f"payload codec {pp.codec!r} is not the job's {codec!r}")
        codec = pp.codec
    if codec is None:
        return _invalid("no codec: pass the job's codec or the committed payload")
    return codec


def _payload_within_tolerance(
    c: Codec,
    again: bytes,
    payload: bytes,
    delta: dict[str, torch.Tensor],
    cin: CompressionState,
    tolerance: float,
    rh: bytes,
    update_root: bytes,
) -> Verdict:
    """Tolerance mode, the roots differ: the decoded committed ``payload`` against the
    re-compressed one (``again``), relative L2 distance; valid within ``tolerance``, with the
    carry the committed payload leaves (``carry_after`` of ``delta`` and the carry in ``cin``)."""
    shapes = {n: tuple(t.shape) for n, t in delta.items()}
    try:
        a = c.decompress(decode(again), shapes)
        b = c.decompress(decode(payload), shapes)
    except PayloadError as exc:
        return _invalid(f"committed payload does not decode for this model: {exc}")
    num = sum(float((b[n].double() - a[n].double()).pow(2).sum()) for n in a)
    den = sum(float(a[n].double().pow(2).sum()) for n in a)
    d = 0.0 if num == 0 else math.sqrt(num) / max(math.sqrt(den), 1e-30)
    ok = d <= tolerance
    out = carry_hash(carry_after(delta, cin, payload, shapes)) if ok else b""
    return Verdict(
        ok,
        d,
        f"payload distance {d:.3e} {'<=' if ok else '>'} tolerance {tolerance:.1e}",
        rh.hex(),
        update_root.hex(),
        carry_out=out,
    )


@dataclass(slots=True)
class Challenge:
    """What a verifier holds for one challenged commitment: the drawn segments (Participant
    .segments), the trace's state hashes (served by the provider; their bound root must be the
    committed trace root), the revealed states by trace index (0, H/k and i, i+1 for each drawn
    i, except the secret ends in ``hidden``; no entry 0 for a fresh start that
    ``verify_challenge(base=...)`` builds), the carry bytes, and optionally the committed
    payload bytes."""

    segments: list[int]
    trace: list[bytes]
    states: dict[int, bytes]
    carry: bytes
    trace_root: bytes
    update_root: bytes
    binding: Binding
    payload: bytes | None = None
    # exact mode: trace entries committed but not revealed, by index -> their leaf hash (the
    # chain's Reveal.end_leaf_hash); ``trace`` holds that leaf hash at those indexes
    hidden: dict[int, bytes] = field(default_factory=dict)


@dataclass(slots=True)
class ChallengeVerdict:
    valid: bool
    reason: str
    start: Verdict | None = None
    payload: Verdict | None = None
    segments: dict[int, Verdict] = field(default_factory=dict)


def verify_challenge(
    ctx: VerifyContext,
    ch: Challenge,
    *,
    H: int,
    codec: str | None = None,
    carried: Carried | None = None,
    ef_decay: float = 1.0,
    stop_at_first: bool = True,
    base: bytes | None = None,
) -> ChallengeVerdict:
    """Start check, payload check, then the drawn segments (cheap checks first; by default
    stop at the first failure, as one failure is enough for an invalid vote).
    ``ctx.base_model_hash``: the parameters hash of the round's base model bytes
    (``trainer.state.params_hash_of_model``), which trace entry 0 must carry; None = the
    binding's base hash (a base without outer momentum, e.g. a job's initial model), or the
    parameters hash of ``base`` when given.
    ``base``: the round's base model bytes (sha256 = the binding's base hash), which a verifier
    holds anyway. With it, a fresh start (``carried=None``) is *built*, not served: trace entry 0
    must hash to ``fresh_start_state`` of the base and the public metadata
    (``verify_fresh_start``; the island size from entry H/k's meta, the only field the chain does
    not fix), ``ch.states[0]`` is set to the built bytes (the start of a run from segment 0), and
    the payload check takes the base's own bytes. Without it, or for a carried start, entry 0 is
    served and checked field by field (``verify_start``). ``ctx.inner`` and ``ctx.model`` are
    needed to build. ``ctx.deterministic`` is not read: the determinism is set once here."""
    n = H // ctx.k
    build = base is not None and carried is None
    if base is not None and hashlib.sha256(base).digest() != ch.binding.base_model_hash:
        return ChallengeVerdict(False, "the base model bytes are not the round's base model")
    if build and (ctx.inner is None or ctx.model is None):
        return ChallengeVerdict(False, "building a fresh start needs the job's inner and model")
    base_params_hash = ctx.base_model_hash
    if base_params_hash is None and base is not None:
        try:
            base_params_hash = params_hash_of_model(base)
        except (PayloadError, KeyError) as exc:
            return ChallengeVerdict(False, f"the base model is malformed: {exc}")
    params_hash = base_params_hash or ch.binding.base_model_hash
    served = _check_served(ch, n, H % ctx.k == 0, build)
    if served is not None:
        return ChallengeVerdict(False, served)
    set_determinism(0, threads=1)  # once for every segment below
    if any(not 0 <= s < n for s in ch.segments):
        return ChallengeVerdict(False, "a drawn segment is outside the trace")
    out = ChallengeVerdict(True, "")
    out.start = _challenge_start(ctx, ch, n, params_hash, base if build else None, carried)
    if not out.start.valid:
        out.valid, out.reason = False, f"start: {out.start.reason}"
        if stop_at_first:
            return out
    out.payload = verify_payload(
        ch.states[n],
        ch.carry,
        base if base is not None else ch.states[0],
        update_root=ch.update_root,
        binding=ch.binding,
        H=H,
        codec=codec,
        payload=ch.payload,
        tolerance=ctx.tolerance,
        ef_decay=ef_decay,
        base_params_hash=params_hash,
    )
    if not out.payload.valid and out.valid:
        out.valid, out.reason = False, f"payload: {out.payload.reason}"
        if stop_at_first:
            return out
    # one model and optimizer, loaded with each segment's start state; determinism set above
    ws = ctx.workspace if ctx.workspace is not None else {}
    seg_ctx = replace(ctx, base_model_hash=params_hash, deterministic=False, workspace=ws)
    if _challenge_segments(seg_ctx, ch, out, stop_at_first) and out.valid:
        out.reason = f"start, payload and {len(out.segments)} segment(s) check out"
    return out


def _check_served(ch: Challenge, n: int, whole: bool, build: bool) -> str | None:
    """Why the served trace list and states are not the committed trace (``n`` = H/k segments,
    ``whole``: k divides H; ``build``: entry 0 is built, never served), or None."""
    if not whole or len(ch.trace) != n + 1:
        return f"trace has {len(ch.trace)} entries, expected H/k + 1 = {n + 1}"
    if any(not 0 < i < n or ch.trace[i] != leaf for i, leaf in ch.hidden.items()):
        return "served trace list does not hold the opened leaf hashes"
    if compute_masked_trace_root(ch.trace, ch.binding, set(ch.hidden)) != ch.trace_root:
        return "served trace hashes do not give the committed trace root"
    need = sorted({0, n} | {i for s in ch.segments for i in (s, s + 1)} - set(ch.hidden))
    if build:  # entry 0 is built below, never served
        need.remove(0)
    for i in need:
        if i not in ch.states:
            return f"trace entry {i} was not served"
        if hashlib.sha256(ch.states[i]).digest() != ch.trace[i]:
            return f"served state {i} is not trace entry {i}"
    return None


def _challenge_start(
    ctx: VerifyContext,
    ch: Challenge,
    n: int,
    params_hash: bytes,
    build_from: bytes | None,
    carried: Carried | None,
) -> Verdict:
    """The start check of a challenge: entry 0 built from the base model bytes ``build_from``
    (``verify_fresh_start``; ``ch.states[0]`` set to the built bytes, or removed when it is not
    the pinned start), else the served entry 0 checked field by field (``verify_start``)."""
    spec = ctx.shard_spec
    if build_from is None:
        return verify_start(
            ch.states[0],
            base_model_hash=params_hash,
            round=spec.round,
            shard=spec.shard_index(),
            inner=ctx.inner,
            model=ctx.model,
            carried=carried,
        )
    assert ctx.inner is not None and ctx.model is not None  # checked by verify_challenge
    named = _slices_named(ch.states[n])
    if named is None:
        v = _invalid(f"trace entry {n} (H/k) names no valid slice count")
    else:
        v, built = verify_fresh_start(
            ch.trace[0],
            build_from,
            round=spec.round,
            shard=spec.shard_index(),
            inner=ctx.inner,
            model=ctx.model,
            slices=named[0],
            microbatches=named[1],
        )
        if v.valid:
            ch.states[0] = built
    if not v.valid:
        ch.states.pop(0, None)  # never re-executed from: not the pinned start
    return v


def _challenge_segments(
    ctx: VerifyContext, ch: Challenge, out: ChallengeVerdict, stop_at_first: bool
) -> bool:
    """Re-execute the challenge's drawn segments into ``out.segments`` (the first failure sets
    ``out``'s verdict); False when it stopped at a failure (``stop_at_first``)."""
    for s in sorted(set(ch.segments)):
        if s not in ch.states:  # entry 0 that is not the pinned start (stop_at_first=False)
            out.segments[s] = v = _invalid(f"trace entry {s} is not the pinned start")
            if out.valid:
                out.valid, out.reason = False, f"segment {s}: {v.reason}"
            continue
        v = verify_segment(
            ctx,
            ch.states[s],
            ch.states.get(s + 1) if s + 1 not in ch.hidden else None,
            expected_end_leaf=ch.hidden.get(s + 1),
            claimed_hash=ch.trace[s + 1],  # checked above: sha256 of ch.states[s + 1]
            start_hash=None if s in ch.hidden else ch.trace[s],  # checked: sha256 of ch.states[s]
        )
        out.segments[s] = v
        if not v.valid and out.valid:
            out.valid, out.reason = False, f"segment {s}: {v.reason}"
            if stop_at_first:
                return False
    return True


def compute_masked_trace_root(
    trace: list[bytes], binding: Binding | None, hidden: set[int]
) -> bytes:
    """The bound trace root of a masked trace list (entries in ``hidden`` are leaf hashes)."""
    if not hidden:
        return trace_root(trace, binding)
    off = 1 if binding is not None else 0
    leaves = trace_leaves([bytes(32) if i in hidden else h for i, h in enumerate(trace)], binding)
    hashes = [
        bytes(trace[j - off]) if j - off in hidden else hash_leaf(d) for j, d in enumerate(leaves)
    ]
    return merkle_root_of_leaf_hashes(hashes)


def make_segment(
    model: GPT,
    icfg: InnerConfig,
    corpus: Corpus,
    spec: ShardSpec,
    start_step: int,
    k: int,
    opt=None,
    device: str = "cpu",
    carry: bytes = EMPTY_CARRY_HASH,
    slices: int = 1,
    microbatches: int = 1,
) -> tuple[bytes, bytes]:
    """(start, end) state bytes of an honest k-step segment from the given model/opt."""
    opt = opt or make_inner_optimizer(model, icfg)
    shard = spec.shard_index()

    def snap(step: int) -> bytes:
        return state_bytes(
            model,
            opt,
            icfg,
            round=spec.round,
            inner_step=step,
            shard=shard,
            carry=carry,
            slices=slices,
            microbatches=microbatches,
        )

    start = snap(start_step)
    run_inner_steps(
        model,
        opt,
        icfg,
        corpus,
        spec,
        start_step,
        k,
        device=device,
        carry=carry,
        slices=slices,
        microbatches=microbatches,
    )
    end = snap(start_step + k)
    return start, end


def calibrate_tolerance(start_state: bytes, spec: ShardSpec, k: int, corpus: Corpus) -> dict:
    """Honest cross-stack distances: re-run the segment (a) with 1 thread in deterministic
    mode (reference), (b) with 2 threads, non-deterministic mode, (c) in float64 (a
    different numerical path, standing in for different hardware) and report the largest
    part distance (``state_distance``) of (b) and (c) to (a); (d) in bfloat16 is the cheat
    "bf16 instead of fp32", reported for contrast."""
    out = {}
    set_determinism(0, threads=1)
    ref = rerun_segment(start_state, spec, k, corpus, torch.float32)
    torch.use_deterministic_algorithms(False)
    torch.set_num_threads(2)
    b = rerun_segment(start_state, spec, k, corpus, torch.float32)
    out["threads2_vs_ref"] = max(state_distance(start_state, ref, b).values())
    c = rerun_segment(start_state, spec, k, corpus, torch.float64)
    out["float64_vs_ref"] = max(state_distance(start_state, ref, c).values())
    set_determinism(0, threads=1)
    d = rerun_segment(start_state, spec, k, corpus, torch.bfloat16)
    out["bf16_vs_ref"] = max(state_distance(start_state, ref, d).values())
    return out


def rerun_segment(
    start_state: bytes, spec: ShardSpec, k: int, corpus: Corpus, dtype=torch.float32
) -> bytes:
    """Re-run k steps from a state with the model and moments in ``dtype`` (cast back to float32
    for the state bytes): another numerical path (float64) or a cheaper one (bfloat16)."""
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
    return ls.to_bytes(inner_step=s0 + k)


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
    if not math.isfinite(before - after):
        # a finite but huge update can overflow the logits: round() raised on NaN (ValueError)
        # or inf (OverflowError) from inside the caller's screen
        raise ValueError("the held-out loss is not finite after applying the update")
    return round((before - after) * 1000)
