"""DiLoCo with a dual optimizer, deterministic aggregation and one-step-delay overlap.

Start at ``simulate``: the loop below in one function, the rest called from it by name.
Per round r (W workers, H inner steps):

1. every worker loads the base θ_base (its own AdamW state carries over rounds) and
   runs H AdamW steps on its ShardSpec(seed, job, r, provider) batches;
2. pseudo-gradient Δ_i = θ_base − θ_local,i; compressed with error feedback into a
   canonical payload (trainer/commit.py), whose bytes are what is "sent";
3. the aggregator decodes every payload and screens it (``screen_updates``: norm above
   3x the round's median, or held-out loss worse when applied alone: rejected), then averages
   the rest with each update clipped to 1.5x the median norm (``robust_aggregate``; providers
   sorted by id, float32 sums in that fixed order, divided by the count);
4. outer SGD with Nesterov momentum (lr 0.7, momentum 0.9) treats the average Δ as a
   gradient: θ ← θ − lr·(nesterov momentum of Δ).

Overlap (one-step delay): round r+1's inner steps start from the last *known* base while
round r's aggregate is still in flight; round r's outer update is applied when it
arrives, i.e. after round r+1's compute. The pseudo-gradients are therefore one
outer step stale. ``simulate_allreduce`` is the synchronous data-parallel baseline.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

import torch

from trainer.carry import carry_bytes, carry_hash
from trainer.checkpoint import restore_simulation, save_simulation
from trainer.commit import KIND_MODEL, Binding, decode, encode, trace_root, update_root
from trainer.compression import (
    AdaptivePolicy,
    Codec,
    CompressionState,
    FixedPolicy,
    load_policy,
)
from trainer.data import Corpus, ShardSpec
from trainer.determinism import DetRNG, set_determinism
from trainer.model import GPT, GPTConfig, init_model
from trainer.state import (
    InnerConfig,
    evaluate,
    make_inner_optimizer,
    model_hash,
    model_payload,
    run_inner_steps,
)
from trainer.verify import quality_score


@dataclass(kw_only=True, slots=True)
class OuterConfig:
    """Outer optimizer: SGD with Nesterov momentum (DiLoCo defaults)."""

    lr: float = 0.7
    momentum: float = 0.9
    nesterov: bool = True


@dataclass(kw_only=True, slots=True)
class SimConfig:
    """One in-process DiLoCo run (no chain)."""

    workers: int = 4
    rounds: int = 10
    inner_steps: int = 50  # H
    # a compression policy (abci_app/jobs/policy.py; CLI spellings such as "int8" accepted):
    # one codec, or adaptive[:BYTES][/ladder] (no BYTES: 1/500 of the fp32 model bytes)
    compression: str = "none"
    adaptive_min_tighten: float = 0.125  # lowest budget fraction the policy may tighten to
    ef_decay: float = 1.0  # error-feedback decay (SparseLoCo: 0.95)
    overlap: bool = False
    overlap_mode: str = "eager"  # eager (start from base - own Δ) | delayed (start from base)
    seed: int = 0
    job: int = 0
    batch_size: int = 8
    n_shards: int = 16
    trace_every: int = 0  # k; 0 = no trace (faster)
    eval_batches: int = 8
    aggregation: str = "clip"  # clip (screen + norm-clipped mean) | mean (plain mean, no screening)
    norm_bound: float = 3.0  # screen: reject an update above this x the round's median norm
    clip: float = 1.5  # robust aggregation: clip each update to this x the median norm
    min_quality_mnats: int = -20  # screen: reject an update that alone worsens held-out loss more
    model: GPTConfig = field(default_factory=GPTConfig)
    inner: InnerConfig = field(default_factory=InnerConfig)
    outer: OuterConfig = field(default_factory=OuterConfig)
    device: str = "cpu"
    deterministic: bool = True
    threads: int = 1

    def to_dict(self) -> dict:
        return asdict(self)


def provider_id(i: int) -> str:
    return f"provider-{i:03d}"


def params_of(model: GPT) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def update_norm(delta: dict[str, torch.Tensor]) -> float:
    """L2 norm over all tensors (float64 sums in name order: the same on every node)."""
    return math.sqrt(sum(float(delta[n].double().pow(2).sum()) for n in sorted(delta)))


def lower_median(xs: list[float]) -> float:
    """The lower median: with two updates, the smaller one, so one outlier cannot raise it."""
    return sorted(xs)[(len(xs) - 1) // 2]


@dataclass(slots=True)
class Screening:
    """Cheap checks run on every decoded update, challenged or not (``screen_updates``)."""

    norms: dict[str, float]
    # held-out loss improvement when applied alone (milli-nats), of the updates the norm screen
    # kept and whose loss stayed finite
    qualities: dict[str, int]
    median_norm: float
    rejected: dict[str, str]  # provider -> reason

    def to_dict(self) -> dict:
        return {
            "norms": self.norms,
            "qualities": self.qualities,
            "median_norm": self.median_norm,
            "rejected": self.rejected,
        }


def screen_updates(
    updates: dict[str, dict[str, torch.Tensor]],
    base: GPT,
    heldout,
    *,
    norm_bound: float = 3.0,
    min_quality_mnats: int = -20,
) -> Screening:
    """Per update: its norm against the round's lower-median norm (> ``norm_bound`` × median is
    rejected: a scaled or huge update), and the loss on the public held-out *eval* batches after
    applying it alone to the base (``verify.quality_score``, deterministic: evaluation, not a
    verifier's opinion; below ``min_quality_mnats`` is rejected: an update that makes the model
    worse on its own, e.g. a reversed or poisoned one)."""
    provs = sorted(updates)
    norms = {p: update_norm(updates[p]) for p in provs}
    med = lower_median(list(norms.values())) if norms else 0.0
    quals: dict[str, int] = {}
    rejected: dict[str, str] = {}
    for p in provs:
        if not math.isfinite(norms[p]):
            rejected[p] = "non-finite update"
            continue
        if med > 0 and norms[p] > norm_bound * med:
            rejected[p] = f"norm {norms[p]:.4g} > {norm_bound:g} x round median {med:.4g}"
            continue
        try:
            quals[p] = quality_score(base, updates[p], heldout)
        except ValueError:
            # huge but finite (e.g. most of a round's updates scaled by 1e30, so the median is
            # huge too) overflows the loss: it raised from here and blocked every aggregate
            rejected[p] = "held-out loss not finite when applied"
            continue
        if quals[p] < min_quality_mnats:
            rejected[p] = (
                f"held-out loss worse by {-quals[p]} milli-nats when applied (limit "
                f"{-min_quality_mnats})"
            )
    return Screening(norms, quals, med, rejected)


def robust_aggregate(
    updates: dict[str, dict[str, torch.Tensor]],
    *,
    clip: float = 1.5,
    median_norm: float | None = None,
) -> dict[str, torch.Tensor]:
    """Norm-clipped mean: each update is scaled down to at most ``clip`` × the lower-median norm,
    then averaged (``aggregate``). One update can move the average by at most clip × median / W,
    whatever it holds; honest updates of similar norm pass unchanged."""
    if not updates:
        raise ValueError("aggregate: no updates")
    med = (
        median_norm
        if median_norm is not None
        else lower_median([update_norm(u) for u in updates.values()])
    )
    out: dict[str, dict[str, torch.Tensor]] = {}
    for p in sorted(updates):
        nrm = update_norm(updates[p])
        cap = clip * med
        if med > 0 and nrm > cap:
            f = cap / nrm
            out[p] = {n: t * f for n, t in updates[p].items()}
        else:
            out[p] = updates[p]
    return aggregate(out)


def aggregate(updates: dict[str, dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Average of the updates: providers sorted by id, float32 sums in that fixed order."""
    if not updates:
        raise ValueError("aggregate: no updates")
    provs = sorted(updates)
    names = sorted(updates[provs[0]])
    for p in provs:
        if sorted(updates[p]) != names:
            raise ValueError(f"aggregate: update of {p} has different tensor names")
    out: dict[str, torch.Tensor] = {}
    for n in names:
        acc = torch.zeros(updates[provs[0]][n].shape, dtype=torch.float32)
        for p in provs:
            acc.add_(updates[p][n].to(torch.float32).cpu())
        out[n] = acc / float(len(provs))
    return out


class OuterOptimizer:
    def __init__(self, model: GPT, ocfg: OuterConfig) -> None:
        self.model = model
        self.opt = torch.optim.SGD(
            model.parameters(),
            lr=ocfg.lr,
            momentum=ocfg.momentum,
            nesterov=ocfg.nesterov,
            foreach=False,
        )

    @torch.no_grad()
    def step(self, avg_delta: dict[str, torch.Tensor]) -> None:
        for n, p in self.model.named_parameters():
            p.grad = avg_delta[n].to(p.device, p.dtype).clone()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def load_momentum(self, buf: dict[str, torch.Tensor]) -> None:
        """Set the momentum buffer (e.g. the one carried in an attested model's bytes)."""
        for n, p in self.model.named_parameters():
            self.opt.state[p]["momentum_buffer"] = buf[n].to(p.device, p.dtype).clone()

    def momentum(self) -> dict[str, torch.Tensor]:
        """The momentum buffer by parameter name (zeros before the first step)."""
        out = {}
        for n, p in self.model.named_parameters():
            b = self.opt.state.get(p, {}).get("momentum_buffer")
            out[n] = (b if b is not None else torch.zeros_like(p)).detach().float().cpu().clone()
        return out


@dataclass(frozen=True, kw_only=True, slots=True)
class AggregationRule:
    """How a round's accepted updates become the next model on the network (every worker, and
    anyone recomputing an attested hash, uses these values: they are part of the protocol)."""

    outer: OuterConfig = field(default_factory=OuterConfig)
    norm_bound: float = 3.0  # screen: reject an update above this x the round's lower median norm
    clip: float = 1.5  # clip each kept update to this x the lower median norm
    min_quality_mnats: int = -20  # screen: reject an update that alone worsens held-out loss more
    heldout_batches: int = 4  # public held-out eval batches of 32 windows the screen scores on

    def outer_meta(self) -> dict:
        o = self.outer
        return {"lr": o.lr, "momentum": o.momentum, "nesterov": o.nesterov}


@dataclass(slots=True)
class NetworkAggregate:
    """``network_outer_step``'s result: the next model's canonical bytes and what was decided."""

    model: bytes
    screening: Screening | None  # None when there was no update
    kept: list[str]  # providers whose (clipped) update is in the average, sorted

    @property
    def rejected(self) -> dict[str, str]:
        return dict(self.screening.rejected) if self.screening else {}


def network_outer_step(
    base: bytes,
    updates: dict[str, dict[str, torch.Tensor]],
    heldout,
    rule: AggregationRule | None = None,
    *,
    deterministic: bool = True,
) -> NetworkAggregate:
    """The next model of a network round, from the round's base model bytes (kind 3) and its
    accepted, decoded updates (provider id -> Δ): ``screen_updates`` (norm vs the lower median,
    held-out loss of each update alone), ``robust_aggregate`` of the kept ones (norm-clipped
    mean, providers sorted), then one outer Nesterov SGD step whose momentum buffer comes from
    the base bytes (part ``momentum``; none in a job's initial model: torch's first step) and is
    written into the new model's bytes. The result depends on nothing but the arguments: dict
    order, arrival order and thread count do not matter (one intra-op thread, CPU float32,
    fixed summation order), so every worker computes the same bytes, and one that missed
    rounds gets the momentum with the model it fetches by hash. No update kept: the base
    bytes unchanged."""
    rule = rule or AggregationRule()
    if deterministic:
        set_determinism(0, threads=1)
    mp = decode(base, expected_kind=KIND_MODEL)
    cfg = GPTConfig.from_dict(mp.meta["model"])
    model = GPT(cfg)
    named = dict(model.named_parameters())
    if set(named) != set(mp.entries):
        raise ValueError("base model's tensors do not match its config")
    momentum: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for n, p in named.items():
            parts = mp.entries[n].parts
            # copy_ broadcasts and the SGD buffer broadcasts too: a part of another shape in
            # the base bytes (a tampered or foreign blob) is refused here, not half-applied
            for part in ("param", "momentum"):
                t = parts.get(part)
                if (part == "param" and t is None) or (
                    t is not None and tuple(t.shape) != tuple(p.shape)
                ):
                    got = "missing" if t is None else f"shape {tuple(t.shape)}"
                    raise ValueError(
                        f"base model's {n}/{part} is {got}, the model's {n} is {tuple(p.shape)}"
                    )
            p.copy_(parts["param"])
            if "momentum" in parts:
                momentum[n] = parts["momentum"].float().clone()
    if momentum and set(momentum) != set(named):
        raise ValueError("base model carries a momentum buffer for only some tensors")
    if not updates:
        return NetworkAggregate(bytes(base), None, [])
    screening = screen_updates(
        updates,
        model,
        heldout,
        norm_bound=rule.norm_bound,
        min_quality_mnats=rule.min_quality_mnats,
    )
    kept = {p: u for p, u in updates.items() if p not in screening.rejected}
    if not kept:
        return NetworkAggregate(bytes(base), screening, [])
    avg = robust_aggregate(kept, clip=rule.clip, median_norm=screening.median_norm)
    outer = OuterOptimizer(model, rule.outer)
    if momentum and rule.outer.momentum:
        outer.load_momentum(momentum)
    outer.step(avg)
    buf = outer.momentum() if rule.outer.momentum else None
    return NetworkAggregate(
        encode(model_payload(model, buf, rule.outer_meta() if buf is not None else None)),
        screening,
        sorted(kept),
    )


class Worker:
    """One provider: a local model, its AdamW state and its compression state."""

    def __init__(
        self, provider: str, cfg: GPTConfig, icfg: InnerConfig, device: str, ef_decay: float = 1.0
    ) -> None:
        self.provider = provider
        self.icfg = icfg
        self.device = device
        self.model = GPT(cfg).to(device)
        self.opt = make_inner_optimizer(self.model, icfg)
        self.cstate = CompressionState(ef_decay=ef_decay)

    def train_round(
        self,
        base: dict[str, torch.Tensor],
        corpus: Corpus,
        spec: ShardSpec,
        H: int,
        trace_every: int = 0,
        keep_states: list[bytes] | None = None,
        on_step: Callable[[int, float], None] | None = None,
    ):
        """H inner steps from ``base`` on the spec's (assigned) shard; the trace's states name
        the carry this round starts with (what ``compress`` will add to the update)."""
        with torch.no_grad():
            for n, p in self.model.named_parameters():
                p.copy_(base[n])
        t0 = time.perf_counter()
        losses, trace = run_inner_steps(
            self.model,
            self.opt,
            self.icfg,
            corpus,
            spec,
            0,
            H,
            trace_every=trace_every,
            device=self.device,
            carry=carry_hash(self.cstate),
            keep_states=keep_states,
            on_step=on_step,
        )
        dt = time.perf_counter() - t0
        with torch.no_grad():
            delta = {
                n: (base[n] - p.detach()).float().cpu() for n, p in self.model.named_parameters()
            }
        return delta, losses, trace, dt


@dataclass(slots=True)
class RoundArtifacts:
    """Everything a provider commits and serves for one round (``Worker.commit_round``)."""

    states: list[bytes]  # trace entries 0, k, ..., H (state bytes)
    trace: list[bytes]  # their sha256 (the trace leaves after the binding leaf)
    carry: bytes  # carry bytes the round started with (their hash is in every state)
    payload: bytes  # canonical update bytes = compress(θ_base − θ_H + e_prev)
    binding: Binding
    trace_root: bytes
    update_root: bytes
    losses: list[float] = field(default_factory=list)


def assign_shards(seed: int, job: int, round: int, n_shards: int, workers: int) -> list[int]:
    """Distinct shards for a round's workers (as the chain's draw gives ``Participant.shard``:
    a seeded permutation of the shards, worker i gets entry i)."""
    if workers > n_shards:
        raise ValueError(f"{workers} workers need at least as many shards (n_shards {n_shards})")
    return DetRNG("shards", seed, job, round).shuffle(list(range(n_shards)))[:workers]


def commit_round(
    worker: Worker,
    base: dict[str, torch.Tensor],
    corpus: Corpus,
    spec: ShardSpec,
    H: int,
    k: int,
    codec: Codec,
    binding: Binding,
) -> RoundArtifacts:
    """One provider round with its full trace kept: train H steps from ``base`` on the spec's
    shard, compress the pseudo-gradient with the worker's carry, bind both roots."""
    if H % k:
        raise ValueError(f"H = {H} must be a multiple of k = {k}")
    carry = carry_bytes(worker.cstate)
    states: list[bytes] = []
    delta, losses, trace, _ = worker.train_round(base, corpus, spec, H, k, keep_states=states)
    payload = encode(codec.compress(delta, worker.cstate))
    return RoundArtifacts(
        states=states,
        trace=trace,
        carry=carry,
        payload=payload,
        binding=binding,
        trace_root=trace_root(trace, binding),
        update_root=update_root(payload, binding),
        losses=losses,
    )


def allreduce_bytes_per_step(n_params: int, workers: int) -> int:
    """Bytes one worker sends per step in a ring AllReduce of fp32 gradients."""
    return int(2 * (workers - 1) / workers * 4 * n_params) if workers > 1 else 0


def simulate(
    corpus: Corpus,
    sim: SimConfig,
    progress: Callable[[dict], None] | None = None,
    *,
    on_step: Callable[[int, int, int, float], None] | None = None,
    checkpoint: str | Path | None = None,
    resume: bool = False,
) -> dict:
    """The DiLoCo loop (start here): W providers in one process; returns the JSON-serialisable
    log. Each round every worker trains from the base, sends its compressed pseudo-gradient,
    and the average of the decoded payloads takes one outer Nesterov step on the base.

    ``progress(record)`` after every round; ``on_step(round, worker, step, loss)`` after every
    inner step. ``checkpoint``: a safetensors file written (atomically) after every round with
    everything the next round needs (trainer/checkpoint.py); with ``resume`` the run continues
    from it, and ends where an uninterrupted run would (same model hash): ``rounds`` may grow,
    the rest of the config must be the same."""
    run = start_run(corpus, sim)
    if resume:
        resume_run(run, checkpoint)
    for r in range(run.next_round, sim.rounds):
        codec = run.policy.choose(r, run.shapes)  # this round's compression (adaptive: a budget)
        # overlap (one-step delay): start from the last known base, round r-1's average in flight
        base = run.known_base if sim.overlap else params_of(run.model)
        base_hash = model_hash(run.model)  # the round's base model: the roots are bound to it
        shards = assign_shards(sim.seed, sim.job, r, sim.n_shards, len(run.workers))
        uploads: list[Upload] = []
        decoded: dict[str, dict[str, torch.Tensor]] = {}
        for wi, w in enumerate(run.workers):
            spec = shard_spec(corpus, sim, r, w.provider, shards[wi])
            start = worker_start(run, w, base)  # the base (eager overlap: minus its own last delta)
            step_cb = None if on_step is None else partial(on_step, r, wi)
            # H inner AdamW steps on the worker's shard; delta = base - local (pseudo-gradient)
            delta, losses, trace, dt = w.train_round(
                start, corpus, spec, sim.inner_steps, sim.trace_every, on_step=step_cb
            )
            # error feedback: compress(delta + carry); the carry keeps what the payload dropped
            payload = encode(codec.compress(delta, w.cstate))
            bind = provider_binding(w.provider, sim.job, r, base_hash)
            uploads.append(Upload(w.provider, bind, payload, losses, trace, dt))
            # the receiver's path: parse the canonical bytes, then decompress
            decoded[w.provider] = codec.decompress(decode(payload), run.shapes)
        avg, screening = average_updates(run, decoded)  # screened, norm-clipped mean
        run.last_local = decoded  # eager overlap: each worker's own delta stands in next round
        outer_step(run, avg)  # Nesterov SGD on the base (overlap: round r-1's average)
        rec = record_round(run, r, codec, uploads, screening)  # evaluation, bytes, the log
        if checkpoint is not None:
            save_checkpoint(run, checkpoint, next_round=r + 1)
        if progress:
            progress(rec)
    return finish_run(run)


@dataclass(slots=True)
class Upload:
    """One worker's round as the aggregator receives it (``simulate``)."""

    provider: str
    binding: Binding  # what its roots are bound to (provider, job, round, base model hash)
    payload: bytes  # the canonical compressed update: what is "sent"
    losses: list[float]  # of its inner steps
    trace: list[bytes]  # state hashes every k steps (empty when trace_every is 0)
    compute_s: float  # wall-clock of its inner steps


@dataclass(kw_only=True, slots=True)
class SimRun:
    """What a ``simulate`` run carries from round to round (and its checkpoint holds)."""

    corpus: Corpus
    sim: SimConfig
    model: GPT  # the global model: the round's base
    outer: OuterOptimizer
    workers: list[Worker]
    heldout: list[tuple[torch.Tensor, torch.Tensor]]  # the eval batches (val loss, screening)
    # the adaptive policy steers on the other half of the held-out split, never on the eval set
    policy_set: list[tuple[torch.Tensor, torch.Tensor]]
    policy: FixedPolicy | AdaptivePolicy
    shapes: dict[str, tuple[int, ...]]
    log: dict
    next_round: int = 0
    pending: dict[str, torch.Tensor] | None = None  # overlap: the average still in flight
    last_local: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)
    known_base: dict[str, torch.Tensor] = field(default_factory=dict)  # overlap: workers start here
    tokens: int = 0
    total_bytes: int = 0  # bytes per worker so far (each round: its largest payload)
    compute_s: float = 0.0
    prev_policy_loss: float = 0.0


def start_run(corpus: Corpus, sim: SimConfig) -> SimRun:
    """A fresh run: determinism, the seeded initial model, W workers, the held-out batches,
    the compression policy and the log with the initial model's validation loss."""
    if sim.deterministic:
        set_determinism(sim.seed, threads=sim.threads)
    elif sim.threads:
        torch.set_num_threads(sim.threads)
    if sim.aggregation not in ("clip", "mean"):
        raise ValueError(f"aggregation must be clip or mean, got {sim.aggregation!r}")
    cfg = sim.model
    model = init_model(cfg, sim.seed, sim.device)
    outer = OuterOptimizer(model, sim.outer)
    workers = [
        Worker(provider_id(i), cfg, sim.inner, sim.device, sim.ef_decay) for i in range(sim.workers)
    ]
    heldout, policy_set = (
        [
            (x.to(sim.device), y.to(sim.device))
            for x, y in corpus.heldout_batches(cfg.block_size, 32, sim.eval_batches, part=part)
        ]
        for part in ("eval", "policy")
    )
    n_params = model.num_params()
    policy = load_policy(
        sim.compression,
        strict=False,
        min_tighten=sim.adaptive_min_tighten,
        default_budget_bytes=max(1, 4 * n_params // 500),
    )
    log: dict = {
        "kind": "diloco",
        "config": sim.to_dict(),
        "dataset_id": corpus.id,
        "n_params": n_params,
        "initial_model_hash": model_hash(model).hex(),
        "rounds": [],
        "val_curve": [{"tokens": 0, "val_loss": evaluate(model, heldout)}],
    }
    return SimRun(
        corpus=corpus,
        sim=sim,
        model=model,
        outer=outer,
        workers=workers,
        heldout=heldout,
        policy_set=policy_set,
        policy=policy,
        shapes={n: tuple(p.shape) for n, p in model.named_parameters()},
        log=log,
        known_base=params_of(model),
        prev_policy_loss=(
            evaluate(model, policy_set) if isinstance(policy, AdaptivePolicy) else 0.0
        ),
    )


def resume_run(run: SimRun, checkpoint: str | Path | None) -> None:
    """Load a checkpoint written by ``save_checkpoint`` into a freshly started run."""
    st = restore_simulation(checkpoint, run.sim, run.model, run.outer, run.workers, run.policy)
    run.next_round, run.log = st["next_round"], st["log"]
    run.pending, run.last_local = st["pending"], st["last_local"]
    run.known_base = st["known_base"] or run.known_base
    run.tokens, run.total_bytes, run.compute_s = st["tokens"], st["total_bytes"], st["compute_s"]
    run.prev_policy_loss = st["prev_policy_loss"]
    run.log["config"] = run.sim.to_dict()


def shard_spec(corpus: Corpus, sim: SimConfig, r: int, provider: str, shard: int) -> ShardSpec:
    """The batches of a provider's round: its assigned shard, DetRNG order (trainer/data.py)."""
    return ShardSpec(
        dataset_id=corpus.id,
        seed=sim.seed,
        job=sim.job,
        round=r,
        provider=provider,
        n_shards=sim.n_shards,
        batch_size=sim.batch_size,
        block_size=sim.model.block_size,
        shard=shard,
    )


def provider_binding(provider: str, job: int, r: int, base_hash: bytes) -> Binding:
    """What a provider's roots are bound to (leaf 0 = abci_app.merkle.binding_leaf), as on
    chain."""
    return Binding(hashlib.sha256(provider.encode()).digest()[:20], job, r, base_hash)


def worker_start(run: SimRun, w: Worker, base: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Where a worker's inner steps start: the base; with eager overlap, the base minus the
    worker's own last delta, standing in for the average still in flight."""
    sim = run.sim
    if sim.overlap and sim.overlap_mode == "eager" and w.provider in run.last_local:
        own = run.last_local[w.provider]
        return {n: base[n] - own[n] for n in base}
    return base


def average_updates(
    run: SimRun, decoded: dict[str, dict[str, torch.Tensor]]
) -> tuple[dict[str, torch.Tensor], Screening | None]:
    """The round's average delta. Aggregation "clip": every update screened (``screen_updates``:
    norm, held-out loss alone), then the norm-clipped mean of the kept ones (of all of them
    when none is kept); "mean": the plain mean, no screening."""
    sim = run.sim
    if sim.aggregation != "clip":
        return aggregate(decoded), None
    screening = screen_updates(
        decoded,
        run.model,
        run.heldout,
        norm_bound=sim.norm_bound,
        min_quality_mnats=sim.min_quality_mnats,
    )
    kept = {p: u for p, u in decoded.items() if p not in screening.rejected}
    avg = robust_aggregate(kept or decoded, clip=sim.clip, median_norm=screening.median_norm)
    return avg, screening


def outer_step(run: SimRun, avg: dict[str, torch.Tensor]) -> None:
    """One outer Nesterov SGD step with the round's average as the gradient. With overlap the
    round's average is still in flight during the next round: the previous round's is applied
    now, and the workers' next base is the model after it."""
    if not run.sim.overlap:
        run.outer.step(avg)
        return
    if run.pending is not None:
        run.outer.step(run.pending)
    run.known_base = params_of(run.model)
    run.pending = avg


def record_round(
    run: SimRun, r: int, codec: Codec, uploads: list[Upload], screening: Screening | None
) -> dict:
    """Count the round (tokens; bytes per worker = its largest payload; compute), evaluate the
    model on the held-out batches, let an adaptive policy observe the loss, and append the
    round's record (roots, sizes, losses, model hash) to the log."""
    sim = run.sim
    sizes = [len(u.payload) for u in uploads]
    compute = sum(u.compute_s for u in uploads)
    run.tokens += sim.workers * sim.inner_steps * (sim.batch_size * sim.model.block_size)
    run.total_bytes += max(sizes)
    run.compute_s += compute
    val = evaluate(run.model, run.heldout)
    if isinstance(run.policy, AdaptivePolicy):
        policy_loss = evaluate(run.model, run.policy_set)
        run.policy.observe(r, run.prev_policy_loss, policy_loss, max(sizes))
        run.prev_policy_loss = policy_loss
    train_losses = [sum(u.losses) / len(u.losses) for u in uploads]
    rec = {
        "round": r,
        "codec": codec.name,
        "val_loss": val,
        "train_loss": sum(train_losses) / len(train_losses),
        "tokens": run.tokens,
        "bytes_per_worker": max(sizes),
        "payload_sizes": sizes,
        "cum_bytes_per_worker": run.total_bytes,
        "update_roots": [update_root(u.payload, u.binding).hex() for u in uploads],
        "model_hash": model_hash(run.model).hex(),
        "compute_s": compute,
        "outer_applied": (not sim.overlap) or r > 0,
    }
    traces = {u.provider: trace_root(u.trace, u.binding).hex() for u in uploads if u.trace}
    if traces:
        rec["trace_roots"] = traces
    if screening is not None:
        rec["screening"] = screening.to_dict()
    run.log["rounds"].append(rec)
    run.log["val_curve"].append({"tokens": run.tokens, "val_loss": val})
    return rec


def save_checkpoint(run: SimRun, checkpoint: str | Path, *, next_round: int) -> None:
    """Everything the next round needs (trainer/checkpoint.py), written atomically."""
    save_simulation(
        checkpoint,
        run.sim,
        next_round,
        run.model,
        run.outer,
        run.workers,
        run.policy,
        log=run.log,
        pending=run.pending,
        last_local=run.last_local,
        known_base=run.known_base if run.sim.overlap else None,
        tokens=run.tokens,
        total_bytes=run.total_bytes,
        compute_s=run.compute_s,
        prev_policy_loss=run.prev_policy_loss,
    )


def finish_run(run: SimRun) -> dict:
    """Apply the last in-flight average (overlap) and complete the log with the final model."""
    sim, log = run.sim, run.log
    if sim.overlap and run.pending is not None:
        run.outer.step(run.pending)  # the last aggregate arrives after the last round
        log["val_curve"].append(
            {"tokens": run.tokens, "val_loss": evaluate(run.model, run.heldout)}
        )
    steps = sim.rounds * sim.inner_steps
    log.update(
        {
            "final_val_loss": log["val_curve"][-1]["val_loss"],
            "final_model_hash": model_hash(run.model).hex(),
            "tokens": run.tokens,
            "bytes_per_worker": run.total_bytes,
            "compute_s_per_step": run.compute_s / max(1, steps * sim.workers),
            "adaptive_log": run.policy.log,
        }
    )
    return log


def simulate_allreduce(
    corpus: Corpus,
    sim: SimConfig,
    steps: int,
    eval_every: int = 50,
    progress: Callable[[dict], None] | None = None,
) -> dict:
    """Synchronous data parallel: per step each worker computes a gradient on its own
    batch, gradients are averaged (fixed order, = AllReduce) and one AdamW step is taken.
    Same model, same inner hyperparameters, same batches per worker as DiLoCo round 0..
    """
    if sim.deterministic:
        set_determinism(sim.seed, threads=sim.threads)
    cfg = sim.model
    model = init_model(cfg, sim.seed, sim.device)
    opt = make_inner_optimizer(model, sim.inner)
    heldout = [
        (x.to(sim.device), y.to(sim.device))
        for x, y in corpus.heldout_batches(cfg.block_size, 32, sim.eval_batches)
    ]
    n_params = model.num_params()
    per_step_bytes = allreduce_bytes_per_step(n_params, sim.workers)
    tokens_per_step = sim.workers * sim.batch_size * cfg.block_size
    val0 = evaluate(model, heldout)
    curve = [{"tokens": 0, "val_loss": val0}]
    params = list(model.parameters())
    compute_s = 0.0
    for s in range(steps):
        t0 = time.perf_counter()
        model.train()
        grads = [torch.zeros_like(p) for p in params]
        for i in range(sim.workers):
            # the data of a DiLoCo run of H steps per round: round s // H, step s % H
            H = max(1, sim.inner_steps)
            spec = ShardSpec(
                dataset_id=corpus.id,
                seed=sim.seed,
                job=sim.job,
                round=s // H,
                provider=provider_id(i),
                n_shards=sim.n_shards,
                batch_size=sim.batch_size,
                block_size=cfg.block_size,
            )
            x, y = corpus.batch(spec, s % H, sim.device)
            model.zero_grad(set_to_none=True)
            _, loss = model(x, y)
            loss.backward()
            for g, p in zip(grads, params, strict=True):
                assert p.grad is not None  # every parameter takes part in the loss
                g.add_(p.grad)
        for g, p in zip(grads, params, strict=True):
            p.grad = g / float(sim.workers)
        if sim.inner.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(params, sim.inner.grad_clip, foreach=False)
        opt.step()
        compute_s += time.perf_counter() - t0
        if (s + 1) % eval_every == 0 or s + 1 == steps:
            val = evaluate(model, heldout)
            curve.append({"tokens": (s + 1) * tokens_per_step, "val_loss": val})
            if progress:
                progress({"step": s + 1, "val_loss": val})
    return {
        "kind": "allreduce",
        "config": sim.to_dict(),
        "dataset_id": corpus.id,
        "n_params": n_params,
        "steps": steps,
        "val_curve": curve,
        "final_val_loss": curve[-1]["val_loss"],
        "tokens": steps * tokens_per_step,
        "bytes_per_worker": per_step_bytes * steps,
        "bytes_per_step": per_step_bytes,
        # time per step of ONE worker (the W gradients were computed serially here)
        "compute_s_per_step": compute_s / max(1, steps * sim.workers),
        "final_model_hash": model_hash(model).hex(),
    }


def modelled_wallclock(
    *,
    steps: int,
    t_step: float,
    bytes_per_sync: float,
    syncs: int,
    bandwidth_bps: float,
    workers: int,
    allgather: bool,
    overlap: bool = False,
    latency_s: float = 0.0,
) -> float:
    """Wall-clock model: compute of ``steps`` steps + ``syncs`` communications.

    A ring AllReduce (baseline) moves ``bytes_per_sync`` (already the per-worker ring
    volume) over each link; an all-gather of compressed payloads (DiLoCo through the
    blob store) makes each worker download W-1 payloads of ``bytes_per_sync``.
    With overlap, each sync hides behind the next round's compute (max instead of +).
    """
    per_sync = (workers - 1 if allgather else 1) * bytes_per_sync * 8 / bandwidth_bps + latency_s
    compute = steps * t_step
    if overlap and syncs > 0:
        per_round = compute / syncs
        return syncs * max(per_round, per_sync) + min(per_round, per_sync)
    return compute + syncs * per_sync


def math_ok(x: float) -> bool:
    return math.isfinite(x)
