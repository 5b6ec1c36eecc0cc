"""Fast DiLoCo / AllReduce simulation for benchmarks: the W workers as ONE batched model.

``trainer/diloco.py:simulate`` runs the protocol as the chain sees it (canonical payloads,
update roots, traces, screening, one ``GPT`` module per worker, DetRNG batches). This module is
the *measurement* path of ``benchmarks/diloco_seeds.py``: the same inner AdamW / outer Nesterov
SGD / codecs, but

* the W workers' parameters are stacked along a leading axis and one inner step of all W is
  one call of ``vmap(grad_and_value(functional_call(GPT)))`` (per-worker gradients, per-worker
  gradient clipping, per-worker AdamW state);
* the AllReduce baseline is one large-batch forward over the W workers' batches concatenated
  (the mean of W equal-size batch losses, so its gradient is the AllReduce average);
* batches come from a seeded ``torch.Generator`` (worker i samples offsets in the i-th of W
  contiguous shards of the training split): ``seed`` sets both the initial model and the data
  order, and the baseline of a seed sees exactly the batches its DiLoCo runs see (paired runs);
* the learning rate follows linear warmup + cosine over the *global* step (the baseline's step;
  DiLoCo's inner step r·H + h), the same schedule for both;
* evaluation is on the whole ``eval`` half of the held-out split.

``impl="loop"`` runs the same computation the plain way (W ``GPT`` modules, ``torch.optim.AdamW``
with ``foreach=False``, ``clip_grad_norm_``, ``torch.optim.SGD`` Nesterov, per-worker backward
passes); ``tests/trainer/test_batched.py`` checks both give the same model within float
tolerance. Not included here (they live in ``simulate``): overlap, adaptive policies, screening /
robust aggregation (this is the plain mean), traces and update roots.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad_and_value, vmap

from trainer.commit import decode, encode
from trainer.compression import CompressionState, make_codec
from trainer.data import Corpus
from trainer.model import GPT, GPTConfig, init_model


@dataclass(kw_only=True, slots=True)
class RunConfig:
    """One run. ``H = 0``: the AllReduce baseline (one AdamW step per global step)."""

    model: GPTConfig
    workers: int = 4
    batch_size: int = 8  # sequences per worker per step
    steps: int = 600  # inner steps per worker (= global steps of the baseline)
    H: int = 50
    seed: int = 0  # initial model AND data order
    lr: float = 3e-3  # peak inner / baseline AdamW lr
    warmup: int = 0  # linear warmup steps (global)
    schedule: str = "cosine"  # cosine (to min_lr_frac x lr at the last step) | constant
    min_lr_frac: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    outer_lr: float = 0.7
    outer_momentum: float = 0.9
    nesterov: bool = True
    compression: str = "none"  # a codec (make_codec spelling: int8, chunk:64/4096+int2, ...)
    ef_decay: float = 1.0
    eval_every: int = 0  # global steps between evaluations (0: every round; baseline: steps//20)
    eval_batch: int = 256
    device: str = "cpu"
    # threads compressing a round's payloads (the M runs x W workers, one payload a thread at a
    # time; the codecs run on the CPU): the results do not depend on it (tested). A GPU run
    # sets it to the host's CPU count (benchmarks/gpu_table.sh): one thread compressed a 25.6 M
    # parameter model's 12 int4 payloads in ~10 s a round
    compress_threads: int = 1

    def to_dict(self) -> dict:
        d = asdict(self)
        d["model"] = self.model.to_dict()
        return d


def check_device(device: str) -> None:
    """``--device cuda`` on a machine without a visible CUDA device: one sentence naming the
    fix, not torch's driver error."""
    if not device.startswith("cuda"):
        return
    if not torch.cuda.is_available():
        raise SystemExit(
            f"--device {device}: torch {torch.__version__} sees no CUDA device on this machine "
            f"(torch.cuda.is_available() is False; built for CUDA {torch.version.cuda}): run it "
            "on a machine with an NVIDIA GPU and its driver, or use --device cpu"
        )
    idx = device.partition(":")[2]
    if idx and (not idx.isdigit() or int(idx) >= torch.cuda.device_count()):
        raise SystemExit(
            f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s), "
            f"numbered from 0: use --device cuda:0 .. cuda:{torch.cuda.device_count() - 1}"
        )


def lr_at(rc: RunConfig, step: int) -> float:
    """The learning rate of global step ``step`` (0-based)."""
    if rc.warmup and step < rc.warmup:
        return rc.lr * (step + 1) / rc.warmup
    if rc.schedule == "constant":
        return rc.lr
    if rc.schedule != "cosine":
        raise ValueError(f"schedule must be cosine or constant, got {rc.schedule!r}")
    span = max(1, rc.steps - rc.warmup - 1)
    t = min(1.0, (step - rc.warmup) / span)
    lo = rc.min_lr_frac * rc.lr
    return lo + 0.5 * (rc.lr - lo) * (1.0 + math.cos(math.pi * t))


class Batches:
    """Worker i's batch of global step s: ``batch_size`` offsets drawn (seeded generator) in
    the i-th of W contiguous shards of the training split. All offsets are drawn up front."""

    def __init__(self, corpus: Corpus, rc: RunConfig) -> None:
        self.train = corpus.train.long()
        T, W = rc.model.block_size, rc.workers
        self.T = T
        size = len(self.train) // W
        if size < T + 2:
            raise ValueError("the training split is too short for this many workers")
        g = torch.Generator().manual_seed(1_000_003 * rc.seed + 17)
        offs = torch.randint(0, size - T - 1, (rc.steps, W, rc.batch_size), generator=g)
        self.offs = offs + (torch.arange(W) * size).view(1, W, 1)
        self.ar = torch.arange(T + 1)

    def get(self, step: int, device: str = "cpu"):
        """(x, y) of shape (W, B, T)."""
        idx = self.offs[step].unsqueeze(-1) + self.ar  # (W, B, T+1)
        seq = self.train[idx]
        return seq[..., :-1].contiguous().to(device), seq[..., 1:].contiguous().to(device)


def heldout_full(corpus: Corpus, block_size: int, batch: int, device: str):
    """Every non-overlapping window of the eval half of the held-out split."""
    held = corpus.heldout_part("eval").long()
    n = (len(held) - 1) // block_size
    if n == 0:
        raise ValueError("held-out split is shorter than one context")
    idx = (torch.arange(n) * block_size).unsqueeze(1) + torch.arange(block_size + 1)
    seq = held[idx]
    xs, ys = seq[:, :-1].contiguous(), seq[:, 1:].contiguous()
    return [
        (xs[i : i + batch].to(device), ys[i : i + batch].to(device)) for i in range(0, n, batch)
    ]


def _loss(model: GPT):
    def f(params, x, y):
        _, loss = functional_call(model, params, (x, y))
        return loss

    return f


@torch.no_grad()
def evaluate_params(model: GPT, params: dict, batches) -> float:
    tot, n = 0.0, 0
    for x, y in batches:
        logits, _ = functional_call(model, params, (x,))
        tot += float(
            F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1), reduction="sum")
        )
        n += y.numel()
    return tot / n


def _clip(grads: dict, max_norm: float, stacked: bool) -> None:
    if max_norm <= 0:
        return
    if stacked:
        sq = sum(g.pow(2).flatten(1).sum(1) for g in grads.values())  # (W,)
        coef = (max_norm / (sq.sqrt() + 1e-6)).clamp(max=1.0)
        for g in grads.values():
            g.mul_(coef.view(-1, *([1] * (g.dim() - 1))))
    else:
        norm = sum(g.pow(2).sum() for g in grads.values()).sqrt()
        coef = (max_norm / (norm + 1e-6)).clamp(max=1.0)
        for g in grads.values():
            g.mul_(coef)


class _Outer:
    """SGD with (Nesterov) momentum, as torch.optim.SGD(foreach=False)."""

    def __init__(self, rc: RunConfig) -> None:
        self.rc = rc
        self.buf: dict | None = None

    @torch.no_grad()
    def step(self, params: dict, g: dict) -> None:
        rc = self.rc
        mom = rc.outer_momentum
        if mom:
            if self.buf is None:
                self.buf = {n: g[n].clone() for n in g}
            else:
                for n, gn in g.items():
                    self.buf[n].mul_(mom).add_(gn)
            g = {n: g[n].add(self.buf[n], alpha=mom) for n in g} if rc.nesterov else self.buf
        for n, p in params.items():
            p.add_(g[n], alpha=-rc.outer_lr)


def _compress_one(codec, d: dict, st: CompressionState, shapes) -> tuple[dict, int]:
    """One worker's Δ through the codec's canonical bytes: (decoded Δ, payload bytes)."""
    b = encode(codec.compress(d, st))
    return codec.decompress(decode(b), shapes), len(b)


def _compress(
    codec, deltas: list[dict], states: list[CompressionState], shapes, threads: int = 1
) -> tuple[list, int]:
    """Each worker's Δ through the codec's canonical bytes; (decoded Δs, largest payload).
    ``threads`` > 1: the payloads in a thread pool (each payload's computation is unchanged,
    so the result is the same; torch releases the GIL in the codecs' tensor ops)."""
    res = _pool([(codec, d, st, shapes) for d, st in zip(deltas, states, strict=True)], threads)
    return [r[0] for r in res], max((r[1] for r in res), default=0)


def _pool(jobs: list[tuple], threads: int) -> list[tuple[dict, int]]:
    """``_compress_one`` of each job, in order; in a pool of ``threads`` when > 1."""
    if threads > 1 and len(jobs) > 1:
        with ThreadPoolExecutor(min(threads, len(jobs))) as ex:
            return list(ex.map(lambda j: _compress_one(*j), jobs))
    return [_compress_one(*j) for j in jobs]


SHARED = (
    "model",
    "workers",
    "batch_size",
    "steps",
    "H",
    "warmup",
    "schedule",
    "min_lr_frac",
    "beta1",
    "beta2",
    "eps",
    "weight_decay",
    "grad_clip",
    "eval_every",
    "eval_batch",
    "device",
    "compress_threads",
)


def _col(vals: list[float], reps: int, like: torch.Tensor, dims: int) -> torch.Tensor:
    """Per-model scalars as a column that broadcasts over a stacked tensor of ``dims`` dims."""
    t = torch.tensor(vals, dtype=like.dtype, device=like.device).repeat_interleave(reps)
    return t.view(-1, *([1] * (dims - 1)))


class _AdamStacked:
    """AdamW over stacked parameters, one learning rate per stacked model (``_Adam`` with a
    vector lr); the step count and betas are shared."""

    def __init__(self, params: dict, rc: RunConfig) -> None:
        self.rc = rc
        self.m = {n: torch.zeros_like(p) for n, p in params.items()}
        self.v = {n: torch.zeros_like(p) for n, p in params.items()}
        self.t = 0

    @torch.no_grad()
    def step(self, params: dict, grads: dict, lrs: list[float], reps: int) -> None:
        rc = self.rc
        self.t += 1
        bc1 = 1 - rc.beta1**self.t
        bc2 = 1 - rc.beta2**self.t
        for n, p in params.items():
            g = grads[n]
            lr = _col(lrs, reps, p, p.dim())
            p.mul_(1 - lr * rc.weight_decay)
            self.m[n].lerp_(g, 1 - rc.beta1)
            self.v[n].mul_(rc.beta2).addcmul_(g, g, value=1 - rc.beta2)
            denom = (self.v[n].sqrt() / math.sqrt(bc2)).add_(rc.eps)
            p.sub_(self.m[n] / denom * (lr / bc1))


class _OuterStacked:
    """SGD with (Nesterov) momentum per stacked model (``_Outer`` with per-model lr, momentum
    and Nesterov flag; momentum 0 is plain SGD, as torch.optim.SGD)."""

    def __init__(self, rcs: list[RunConfig]) -> None:
        self.rcs = rcs
        self.buf: dict | None = None

    @torch.no_grad()
    def step(self, params: dict, g: dict) -> None:
        if self.buf is None:
            self.buf = {n: g[n].clone() for n in g}
        else:
            for n, gn in g.items():
                mom = _col([rc.outer_momentum for rc in self.rcs], 1, gn, gn.dim())
                self.buf[n].mul_(mom).add_(gn)
        for n, p in params.items():
            d = p.dim()
            mom = _col([rc.outer_momentum for rc in self.rcs], 1, p, d)
            nest = _col([float(rc.nesterov) for rc in self.rcs], 1, p, d)
            has = _col([float(rc.outer_momentum != 0) for rc in self.rcs], 1, p, d)
            upd = nest * (g[n] + mom * self.buf[n]) + (1 - nest) * self.buf[n]
            upd = has * upd + (1 - has) * g[n]
            p.sub_(upd * _col([rc.outer_lr for rc in self.rcs], 1, p, d))


@torch.no_grad()
def _evaluate_stacked(model: GPT, params: dict, batches) -> list[float]:
    """Mean held-out loss of each of the M stacked models (one vmapped forward per batch)."""
    M = next(iter(params.values())).shape[0]
    fwd = vmap(lambda p, x: functional_call(model, p, (x,))[0], in_dims=(0, None))
    tot = torch.zeros(M, dtype=torch.float64)
    n = 0
    for x, y in batches:
        logits = fwd(params, x)  # (M, b, T, V)
        V = logits.size(-1)
        ce = F.cross_entropy(logits.reshape(-1, V), y.repeat(M, 1, 1).reshape(-1), reduction="none")
        tot += ce.view(M, -1).double().sum(1).cpu()
        n += y.numel()
    return [float(t) / n for t in tot]


def run(corpus: Corpus, rc: RunConfig, impl: str = "vmap", heldout=None) -> dict:
    """One run (DiLoCo if ``rc.H`` else AllReduce); returns the curve and the final loss."""
    if impl not in ("vmap", "loop"):
        raise ValueError(f"impl must be vmap or loop, got {impl!r}")
    if impl == "loop":
        return _run_loop(corpus, rc, heldout)
    return run_many(corpus, [rc], heldout)[0]


def run_many(corpus: Corpus, rcs: list[RunConfig], heldout=None, on_eval=None) -> list[dict]:
    """Several runs as ONE batched model: M runs (e.g. the seeds of a table row, or an lr
    sweep) x W workers stacked along the leading axis, one vmapped forward/backward per global
    step. The runs may differ in ``seed`` (init and data order), ``lr``, the outer optimizer
    (lr, momentum, Nesterov), ``compression`` and ``ef_decay``; everything else (``SHARED``)
    must be equal. Each run computes what ``run`` computes for it alone (tested).
    ``on_eval(step, losses)`` after each evaluation (the M held-out losses): partial results."""
    st = _stack(corpus, rcs, heldout, on_eval)
    rc = rcs[0]
    t0 = time.perf_counter()
    if rc.H == 0:
        _allreduce_stacked(st)
        rounds, payload = 0, [0] * len(rcs)
    else:
        rounds, payload = _diloco_stacked(st)
    elapsed = time.perf_counter() - t0
    return [
        {
            "config": o.to_dict(),
            "impl": "vmap",
            "n_params": st.model.num_params(),
            "rounds": rounds,
            "curve": st.curves[i],
            "final_val_loss": st.curves[i][-1]["val_loss"],
            "tokens": rc.steps * st.tok_per_step,
            "payload_bytes_per_worker": payload[i],
            "elapsed_s": elapsed,
            "batched_runs": len(rcs),
            "params": {n: st.gparams[n][i].detach().cpu() for n in st.names},
        }
        for i, o in enumerate(rcs)
    ]


@dataclass(kw_only=True, slots=True)
class _Stack:
    """``run_many``'s M runs x W workers: the module ``functional_call`` runs, each run's global
    parameters stacked (M, ...), their batches, the held-out set and the curves so far."""

    rcs: list[RunConfig]
    model: GPT  # its own parameters are not trained: the stacked ones are passed in
    names: list[str]
    shapes: dict[str, tuple[int, ...]]
    gparams: dict[str, torch.Tensor]  # (M, ...)
    data: list[Batches]  # run i's batches
    heldout: list
    curves: list[list[dict]]
    tok_per_step: int  # tokens of one global step (W workers)
    on_eval: Callable[[int, list[float]], None] | None

    def batch(self, s: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(x, y) of global step ``s``, shape (M, W, B, T)."""
        xs, ys = zip(*(d.get(s, self.rcs[0].device) for d in self.data), strict=True)
        return torch.stack(xs), torch.stack(ys)

    def record(self, step: int) -> None:
        """Evaluate the M global models and append to their curves."""
        vs = _evaluate_stacked(self.model, self.gparams, self.heldout)
        for i, v in enumerate(vs):
            self.curves[i].append({"step": step, "tokens": step * self.tok_per_step, "val_loss": v})
        if self.on_eval is not None:
            self.on_eval(step, vs)


def _stack(corpus: Corpus, rcs: list[RunConfig], heldout, on_eval) -> _Stack:
    """The M runs' initial models stacked, their batches (one ``Batches`` per seed), the
    held-out set and the curves with the initial loss."""
    if not rcs:
        raise ValueError("run_many: no runs")
    rc = rcs[0]
    for o in rcs[1:]:
        diff = [k for k in SHARED if getattr(o, k) != getattr(rc, k)]
        if diff:
            raise ValueError(f"run_many: runs differ in {diff} (only per-run fields may differ)")
    dev = rc.device
    inits = [init_model(rc.model, o.seed, dev) for o in rcs]
    model = inits[0]
    model.train()
    names = [n for n, _ in model.named_parameters()]
    heldout = (
        heldout
        if heldout is not None
        else heldout_full(corpus, rc.model.block_size, rc.eval_batch, dev)
    )
    by_seed: dict[int, Batches] = {}
    for o in rcs:
        if o.seed not in by_seed:
            by_seed[o.seed] = Batches(corpus, o)
    gparams = {
        n: torch.stack([dict(m.named_parameters())[n].detach() for m in inits]).clone()
        for n in names
    }
    v0 = _evaluate_stacked(model, gparams, heldout)
    return _Stack(
        rcs=rcs,
        model=model,
        names=names,
        shapes={n: tuple(p.shape) for n, p in model.named_parameters()},
        gparams=gparams,
        data=[by_seed[o.seed] for o in rcs],
        heldout=heldout,
        curves=[[{"step": 0, "tokens": 0, "val_loss": v}] for v in v0],
        tok_per_step=rc.workers * rc.batch_size * rc.model.block_size,
        on_eval=on_eval,
    )


def _allreduce_stacked(st: _Stack) -> None:
    """The AllReduce baseline of every run: per global step one forward over the W workers'
    batches concatenated, clipped, one AdamW step."""
    rc, rcs = st.rcs[0], st.rcs
    M, W, B, T = len(rcs), rc.workers, rc.batch_size, rc.model.block_size
    every = rc.eval_every or max(1, rc.steps // 20)
    fg = vmap(grad_and_value(_loss(st.model)))
    opt = _AdamStacked(st.gparams, rc)
    for s in range(rc.steps):
        x, y = st.batch(s)
        g, _ = fg(st.gparams, x.reshape(M, W * B, T), y.reshape(M, W * B, T))
        _clip(g, rc.grad_clip, stacked=True)
        opt.step(st.gparams, g, [lr_at(o, s) for o in rcs], 1)
        if (s + 1) % every == 0 or s + 1 == rc.steps:
            st.record(s + 1)


def _diloco_stacked(st: _Stack) -> tuple[int, list[int]]:
    """The DiLoCo loop of every run at once: each round the M x W workers take their run's
    base, run H inner AdamW steps, their pseudo-gradients (base - local) are compressed with
    error feedback and averaged per run, and each run's outer step updates its base.
    Returns (rounds, payload bytes per worker of each run)."""
    rc, rcs, names, gparams = st.rcs[0], st.rcs, st.names, st.gparams
    M, W, B, T, H = len(rcs), rc.workers, rc.batch_size, rc.model.block_size, rc.H
    rounds = rc.steps // H
    every = max(1, (rc.eval_every or H) // H)  # rounds between evaluations
    codecs = [make_codec(o.compression) for o in rcs]
    cstates = [[CompressionState(ef_decay=o.ef_decay) for _ in range(W)] for o in rcs]
    outer = _OuterStacked(rcs)
    fg = vmap(grad_and_value(_loss(st.model)))
    local = {n: gparams[n].repeat_interleave(W, dim=0) for n in names}  # (M*W, ...)
    opt = _AdamStacked(local, rc)  # one AdamW state per worker, carried across rounds
    payload = [0] * M
    for r in range(rounds):
        with torch.no_grad():  # every worker takes its run's base
            for n in names:
                local[n].copy_(gparams[n].repeat_interleave(W, dim=0))
        for h in range(H):  # H inner AdamW steps, all M x W workers in one vmapped call
            s = r * H + h
            x, y = st.batch(s)
            g, _ = fg(local, x.reshape(M * W, B, T), y.reshape(M * W, B, T))
            _clip(g, rc.grad_clip, stacked=True)
            opt.step(local, g, [lr_at(o, s) for o in rcs], W)
        deltas = [  # pseudo-gradients, deltas[run][worker] = base - local
            [
                {n: (gparams[n][mi] - local[n][mi * W + i]).float().cpu() for n in names}
                for i in range(W)
            ]
            for mi in range(M)
        ]
        avg, sizes = _average_stacked(st, deltas, codecs, cstates)  # compressed, averaged
        payload = [p + z for p, z in zip(payload, sizes, strict=True)]
        stacked = {n: torch.stack([avg[i][n] for i in range(M)]).to(rc.device) for n in names}
        outer.step(gparams, stacked)  # each run's outer step on its base
        if (r + 1) % every == 0 or r + 1 == rounds:
            st.record((r + 1) * H)
    return rounds, payload


def _average_stacked(
    st: _Stack, deltas: list[list[dict]], codecs: list, cstates: list[list[CompressionState]]
) -> tuple[list[dict], list[int]]:
    """Each run's W pseudo-gradients through its codec's canonical bytes (error feedback in
    ``cstates``; dense runs are not compressed, their payload size is counted) and averaged:
    (each run's average, each run's largest payload)."""
    rcs, names, W = st.rcs, st.names, st.rcs[0].workers
    # every compressed run's W payloads in one pool (M x W jobs), each job as alone
    jobs = [
        (codecs[mi], d, cs, st.shapes)
        for mi, o in enumerate(rcs)
        if o.compression not in ("none", "dense")
        for d, cs in zip(deltas[mi], cstates[mi], strict=True)
    ]
    done = iter(_pool(jobs, rcs[0].compress_threads))
    avgs, sizes = [], []
    for mi, o in enumerate(rcs):
        if o.compression not in ("none", "dense"):
            got = [next(done) for _ in range(W)]
            decoded, size = [g[0] for g in got], max(g[1] for g in got)
        else:
            decoded = deltas[mi]
            size = len(encode(codecs[mi].compress(decoded[0], CompressionState())))
        sizes.append(size)
        # sum() of tensors is a tensor (typeshed says int | tensor: it starts from 0)
        avgs.append({n: cast(torch.Tensor, sum(d[n] for d in decoded)) / W for n in names})
    return avgs, sizes


def _adamw(rc: RunConfig, params) -> torch.optim.AdamW:
    """The reference's inner (and baseline) optimizer."""
    return torch.optim.AdamW(
        params,
        lr=rc.lr,
        betas=(rc.beta1, rc.beta2),
        eps=rc.eps,
        weight_decay=rc.weight_decay,
        foreach=False,
    )


def _run_loop(corpus: Corpus, rc: RunConfig, heldout=None) -> dict:
    """The plain reference for one run: W ``GPT`` modules, ``torch.optim.AdamW``
    (``foreach=False``), ``clip_grad_norm_``, ``torch.optim.SGD`` Nesterov, per-worker backward
    passes; the AllReduce baseline averages the W per-worker gradients."""
    dev = rc.device
    model = init_model(rc.model, rc.seed, dev)
    model.train()
    heldout = (
        heldout
        if heldout is not None
        else heldout_full(corpus, rc.model.block_size, rc.eval_batch, dev)
    )
    data = Batches(corpus, rc)
    gparams = {n: p.detach().clone() for n, p in model.named_parameters()}
    curve = [{"step": 0, "tokens": 0, "val_loss": evaluate_params(model, gparams, heldout)}]
    t0 = time.perf_counter()
    if rc.H == 0:
        gparams = _loop_allreduce(rc, model, data, heldout, curve)
        rounds, payload_bytes = 0, 0
    else:
        rounds, payload_bytes = _loop_diloco(rc, model, gparams, data, heldout, curve)
    elapsed = time.perf_counter() - t0
    return {
        "config": rc.to_dict(),
        "impl": "loop",
        "n_params": model.num_params(),
        "rounds": rounds,
        "curve": curve,
        "final_val_loss": curve[-1]["val_loss"],
        "tokens": rc.steps * rc.workers * rc.batch_size * rc.model.block_size,
        "payload_bytes_per_worker": payload_bytes,
        "elapsed_s": elapsed,
        "params": {n: p.detach().cpu() for n, p in gparams.items()},
    }


def _loop_allreduce(rc: RunConfig, model: GPT, data: Batches, heldout, curve: list[dict]) -> dict:
    """The reference AllReduce baseline: per step the W per-worker gradients averaged, clipped,
    one AdamW step; returns the final parameters (``curve`` grows with the evaluations)."""
    dev, W = rc.device, rc.workers
    tok_per_step = W * rc.batch_size * rc.model.block_size
    every = rc.eval_every or max(1, rc.steps // 20)
    m = init_model(rc.model, rc.seed, dev)
    opt_t = _adamw(rc, m.parameters())
    ps = list(m.parameters())
    for s in range(rc.steps):
        x, y = data.get(s, dev)
        acc = [torch.zeros_like(p) for p in ps]
        for i in range(W):  # per-worker gradients, averaged (the AllReduce)
            m.zero_grad(set_to_none=True)
            m(x[i], y[i])[1].backward()
            for a, p in zip(acc, ps, strict=True):
                assert p.grad is not None  # every parameter is in the loss
                a.add_(p.grad)
        for a, p in zip(acc, ps, strict=True):
            p.grad = a / W
        if rc.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(ps, rc.grad_clip, foreach=False)
        for grp in opt_t.param_groups:
            grp["lr"] = lr_at(rc, s)
        opt_t.step()
        if (s + 1) % every == 0 or s + 1 == rc.steps:
            gparams = {n: p.detach().clone() for n, p in m.named_parameters()}
            curve.append(
                {
                    "step": s + 1,
                    "tokens": (s + 1) * tok_per_step,
                    "val_loss": evaluate_params(model, gparams, heldout),
                }
            )
    return {n: p.detach().clone() for n, p in m.named_parameters()}


def _loop_diloco(
    rc: RunConfig, model: GPT, gparams: dict, data: Batches, heldout, curve: list[dict]
) -> tuple[int, int]:
    """The reference DiLoCo loop: each round every worker takes the base ``gparams``, runs H
    AdamW steps on its batches, its pseudo-gradient (base - local) is compressed with error
    feedback, the decoded ones are averaged and the outer Nesterov step updates ``gparams`` in
    place. Returns (rounds, payload bytes per worker)."""
    dev, W, H = rc.device, rc.workers, rc.H
    tok_per_step = W * rc.batch_size * rc.model.block_size
    names = list(gparams)
    shapes = {n: tuple(p.shape) for n, p in gparams.items()}
    rounds = rc.steps // H
    every = max(1, (rc.eval_every or H) // H)
    codec = make_codec(rc.compression)
    cstates = [CompressionState(ef_decay=rc.ef_decay) for _ in range(W)]
    outer = _Outer(rc)
    ms = [GPT(rc.model).to(dev) for _ in range(W)]
    opts = [_adamw(rc, mi.parameters()) for mi in ms]
    payload_bytes = 0
    for r in range(rounds):
        deltas = []
        for i, (mi, oi) in enumerate(zip(ms, opts, strict=True)):
            with torch.no_grad():
                for n, p in mi.named_parameters():
                    p.copy_(gparams[n])
            ps = list(mi.parameters())
            for h in range(H):
                s = r * H + h
                x, y = data.get(s, dev)
                mi.zero_grad(set_to_none=True)
                mi(x[i], y[i])[1].backward()
                if rc.grad_clip > 0:
                    torch.nn.utils.clip_grad_norm_(ps, rc.grad_clip, foreach=False)
                for grp in oi.param_groups:
                    grp["lr"] = lr_at(rc, s)
                oi.step()
            deltas.append(
                {n: (gparams[n] - p.detach()).float().cpu() for n, p in mi.named_parameters()}
            )
        if rc.compression not in ("none", "dense"):
            deltas, size = _compress(codec, deltas, cstates, shapes, rc.compress_threads)
        else:
            size = len(encode(codec.compress(deltas[0], CompressionState())))
        payload_bytes += size
        avg = {n: (cast(torch.Tensor, sum(d[n] for d in deltas)) / W).to(dev) for n in names}
        outer.step(gparams, avg)
        if (r + 1) % every == 0 or r + 1 == rounds:
            curve.append(
                {
                    "step": (r + 1) * H,
                    "tokens": (r + 1) * H * tok_per_step,
                    "val_loss": evaluate_params(model, gparams, heldout),
                }
            )
    return rounds, payload_bytes


def tokens_to_reach(curve: list[dict], target: float) -> float | None:
    """Tokens at which a curve first reaches ``target`` (linear interpolation between
    evaluations); None if it never does."""
    prev = None
    for pt in curve:
        if pt["val_loss"] <= target:
            if prev is None:
                return float(pt["tokens"])
            a, b = prev["val_loss"], pt["val_loss"]
            f = (a - target) / (a - b) if a != b else 1.0
            return prev["tokens"] + f * (pt["tokens"] - prev["tokens"])
        prev = pt
    return None
