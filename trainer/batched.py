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
from dataclasses import asdict, dataclass

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

    def to_dict(self) -> dict:
        d = asdict(self)
        d["model"] = self.model.to_dict()
        return d


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
    return [(xs[i:i + batch].to(device), ys[i:i + batch].to(device)) for i in range(0, n, batch)]


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
        tot += float(F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1),
                                     reduction="sum"))
        n += y.numel()
    return tot / n


class _Adam:
    """AdamW over a dict of (optionally stacked) tensors, as torch.optim.AdamW(foreach=False)."""

    def __init__(self, params: dict, rc: RunConfig) -> None:
        self.rc = rc
        self.m = {n: torch.zeros_like(p) for n, p in params.items()}
        self.v = {n: torch.zeros_like(p) for n, p in params.items()}
        self.t = 0

    @torch.no_grad()
    def step(self, params: dict, grads: dict, lr: float) -> None:
        rc = self.rc
        self.t += 1
        bc1 = 1 - rc.beta1 ** self.t
        bc2 = 1 - rc.beta2 ** self.t
        for n, p in params.items():
            g = grads[n]
            p.mul_(1 - lr * rc.weight_decay)
            self.m[n].lerp_(g, 1 - rc.beta1)
            self.v[n].mul_(rc.beta2).addcmul_(g, g, value=1 - rc.beta2)
            denom = (self.v[n].sqrt() / math.sqrt(bc2)).add_(rc.eps)
            p.addcdiv_(self.m[n], denom, value=-lr / bc1)


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
                for n in g:
                    self.buf[n].mul_(mom).add_(g[n])
            g = {n: g[n].add(self.buf[n], alpha=mom) for n in g} if rc.nesterov else self.buf
        for n, p in params.items():
            p.add_(g[n], alpha=-rc.outer_lr)


def _compress(codec, deltas: list[dict], states: list[CompressionState], shapes) -> tuple[list, int]:
    """Each worker's Δ through the codec's canonical bytes; (decoded Δs, largest payload)."""
    out, size = [], 0
    for d, st in zip(deltas, states):
        b = encode(codec.compress(d, st))
        size = max(size, len(b))
        out.append(codec.decompress(decode(b), shapes))
    return out, size


def run(corpus: Corpus, rc: RunConfig, impl: str = "vmap", heldout=None) -> dict:
    """One run (DiLoCo if ``rc.H`` else AllReduce); returns the curve and the final loss."""
    if impl not in ("vmap", "loop"):
        raise ValueError(f"impl must be vmap or loop, got {impl!r}")
    dev = rc.device
    model = init_model(rc.model, rc.seed, dev)
    model.train()
    names = [n for n, _ in model.named_parameters()]
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    n_params = model.num_params()
    heldout = heldout if heldout is not None else heldout_full(corpus, rc.model.block_size,
                                                                rc.eval_batch, dev)
    data = Batches(corpus, rc)
    W, B, T = rc.workers, rc.batch_size, rc.model.block_size
    gparams = {n: p.detach().clone() for n, p in model.named_parameters()}
    curve = [{"step": 0, "tokens": 0, "val_loss": evaluate_params(model, gparams, heldout)}]
    tok_per_step = W * B * T
    t0 = time.perf_counter()
    payload_bytes = 0
    if rc.H == 0:
        every = rc.eval_every or max(1, rc.steps // 20)
        if impl == "vmap":
            fg = grad_and_value(_loss(model))
            opt = _Adam(gparams, rc)
            for s in range(rc.steps):
                x, y = data.get(s, dev)
                g, _ = fg(gparams, x.reshape(W * B, T).contiguous(), y.reshape(W * B, T).contiguous())
                _clip(g, rc.grad_clip, stacked=False)
                opt.step(gparams, g, lr_at(rc, s))
                if (s + 1) % every == 0 or s + 1 == rc.steps:
                    curve.append({"step": s + 1, "tokens": (s + 1) * tok_per_step,
                                  "val_loss": evaluate_params(model, gparams, heldout)})
        else:
            m = init_model(rc.model, rc.seed, dev)
            opt_t = torch.optim.AdamW(m.parameters(), lr=rc.lr, betas=(rc.beta1, rc.beta2),
                                      eps=rc.eps, weight_decay=rc.weight_decay, foreach=False)
            ps = list(m.parameters())
            for s in range(rc.steps):
                x, y = data.get(s, dev)
                acc = [torch.zeros_like(p) for p in ps]
                for i in range(W):  # per-worker gradients, averaged (the AllReduce)
                    m.zero_grad(set_to_none=True)
                    m(x[i], y[i])[1].backward()
                    for a, p in zip(acc, ps):
                        a.add_(p.grad)
                for a, p in zip(acc, ps):
                    p.grad = a / W
                if rc.grad_clip > 0:
                    torch.nn.utils.clip_grad_norm_(ps, rc.grad_clip, foreach=False)
                for grp in opt_t.param_groups:
                    grp["lr"] = lr_at(rc, s)
                opt_t.step()
                if (s + 1) % every == 0 or s + 1 == rc.steps:
                    gparams = {n: p.detach().clone() for n, p in m.named_parameters()}
                    curve.append({"step": s + 1, "tokens": (s + 1) * tok_per_step,
                                  "val_loss": evaluate_params(model, gparams, heldout)})
            gparams = {n: p.detach().clone() for n, p in m.named_parameters()}
        rounds = 0
    else:
        H = rc.H
        rounds = rc.steps // H
        codec = make_codec(rc.compression)
        cstates = [CompressionState(ef_decay=rc.ef_decay) for _ in range(W)]
        outer = _Outer(rc)
        if impl == "vmap":
            fg = vmap(grad_and_value(_loss(model)))
            local = {n: p.unsqueeze(0).repeat(W, *([1] * p.dim())) for n, p in gparams.items()}
            opt = _Adam(local, rc)  # one AdamW state per worker (stacked), carried across rounds
        else:
            ms = [GPT(rc.model).to(dev) for _ in range(W)]
            opts = [torch.optim.AdamW(mi.parameters(), lr=rc.lr, betas=(rc.beta1, rc.beta2),
                                      eps=rc.eps, weight_decay=rc.weight_decay, foreach=False)
                    for mi in ms]
        for r in range(rounds):
            if impl == "vmap":
                with torch.no_grad():
                    for n in names:
                        local[n].copy_(gparams[n].unsqueeze(0).expand_as(local[n]))
                for h in range(H):
                    s = r * H + h
                    x, y = data.get(s, dev)
                    g, _ = fg(local, x, y)
                    _clip(g, rc.grad_clip, stacked=True)
                    opt.step(local, g, lr_at(rc, s))
                deltas = [{n: (gparams[n] - local[n][i]).float().cpu() for n in names}
                          for i in range(W)]
            else:
                deltas = []
                for i, (mi, oi) in enumerate(zip(ms, opts)):
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
                    deltas.append({n: (gparams[n] - p.detach()).float().cpu()
                                   for n, p in mi.named_parameters()})
            if rc.compression not in ("none", "dense"):
                deltas, size = _compress(codec, deltas, cstates, shapes)
            else:
                size = len(encode(codec.compress(deltas[0], CompressionState())))
            payload_bytes += size
            avg = {n: (sum(d[n] for d in deltas) / W).to(dev) for n in names}
            outer.step(gparams, avg)
            curve.append({"step": (r + 1) * H, "tokens": (r + 1) * H * tok_per_step,
                          "val_loss": evaluate_params(model, gparams, heldout)})
    elapsed = time.perf_counter() - t0
    return {"config": rc.to_dict(), "impl": impl, "n_params": n_params, "rounds": rounds,
            "curve": curve, "final_val_loss": curve[-1]["val_loss"],
            "tokens": rc.steps * tok_per_step, "payload_bytes_per_worker": payload_bytes,
            "elapsed_s": elapsed, "params": {n: p.detach().cpu() for n, p in gparams.items()}}


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
