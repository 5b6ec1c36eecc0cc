"""A provider's island split into pipeline stages (and data-parallel replicas of the pipeline).

One provider = one commitment, whatever its shape. ``--pipeline S`` splits the job's GPT
(trainer/model.py) into S stages, one process each: stage 0 holds the embeddings (``wte``,
``wpe``) and the first blocks, the last stage the last blocks, the final norm ``ln_f`` and the
head ``lm_head`` (the GPT ties no weights: the head is its own matrix, so no parameter lives on
two stages), the blocks split as evenly as the layer count allows (``stage_layers``). A stage's
parameters keep the full model's names (``h.3.attn.c_attn.weight``), so its AdamW state and the
trace's states are the single-process model's, entry for entry.

The world is D x S processes under torchrun (``--nproc_per_node D*S``): rank = d·S + s is
stage s of replica d. Each replica is one pipeline (its own process group; activations and their
gradients travel between neighbouring stages by ``torch.distributed.pipelining``'s
``PipelineStage`` point-to-point ops, NCCL on CUDA, gloo on CPU); each stage's D copies form a
data-parallel group. Inner step s takes the spec's batch (``Corpus.batch(spec, s)``, what every
provider and verifier uses); replica d takes rows ``[d·B/D, (d+1)·B/D)`` and the schedule
(GPipe, or 1F1B) splits them into M equal microbatches, runs them through the stages and
accumulates each stage's parameter gradients over the microbatches *in microbatch order*
(``scale_grads=False``: nothing is divided yet). The D replicas' sums are all-gathered per
stage and added in rank order, then divided by D·M: exactly
``trainer.state.sliced_grads(model, x, y, slices, microbatches)`` of one process. Gradient
clipping needs the global norm: every stage computes its parameters' norms as
``clip_grad_norm_`` does, the stages exchange them, and each stage takes the norm of the whole
list (in the model's parameter order) and scales its own gradients (``clip_grads_with_norm_``):
the same bytes as one process's ``clip_grad_norm_(model.parameters())``. AdamW
(``foreach=False``) updates each parameter alone, so each stage steps its own.

**What the trace names.** A pipeline of one replica (D = 1) computes the gradient of M slices:
its states name ``slices = M`` (as a data-parallel island of M ranks would: the same bytes). With
D > 1 they name ``slices = D`` and ``microbatches = M``. ``verify_segment`` re-executes a segment
on one process with that slicing (trainer/state.py), so a single-process verifier reproduces an
island's states bit for bit on the island's stack (exact mode), within the tolerance on another.

**What is written.** At each trace point the stages of replica 0 send their entries (parameter,
exp_avg, exp_avg_sq, on the CPU) to global rank 0 (``gather_object``), which encodes the state
of the whole model (``trainer.state`` layout), and at the end the payload compress(θ_base − θ_H)
from the base it read and the gathered final parameters. Rank 0 thus holds one full state (12
bytes per parameter, in host memory) while it writes it; no process ever holds the whole model's
training state (parameters, gradients, two moments and activations) on its device.

Run under torchrun (S = 2 on 2 CPU processes, or 2 x 2 on 4):

    torchrun --standalone --nproc_per_node 2 -m trainer.pipeline --pipeline 2 --steps 5 \\
        --out run/
    torchrun --standalone --nproc_per_node 4 -m trainer.pipeline --round DIR --pipeline 2

``--round DIR`` is what ``loconet provider run --pipeline S [--procs D]`` starts for each round
(node/worker/ml.py:train_island): DIR/round.json as for trainer/ddp.py plus ``microbatches``;
rank 0 writes DIR/out/ (the trace states, the payload, result.json), the files ddp.py writes:
trainer/round_dir.py reads and writes the directory for both.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from trainer.carry import EMPTY_CARRY_HASH
from trainer.commit import KIND_MODEL, Entry, Payload, decode, encode
from trainer.data import Corpus, ShardSpec, synthetic_text
from trainer.determinism import set_determinism
from trainer.model import GPT, Block, GPTConfig, init_model
from trainer.round_dir import (
    RoundJob,
    fresh_carry,
    init_group,
    read_round,
    round_artifacts,
    write_round_out,
)
from trainer.state import (
    InnerConfig,
    _adam_step,
    _state_payload,
    check_slices,
    make_inner_optimizer,
)

SCHEDULES = ("gpipe", "1f1b")


def stage_layers(n_layer: int, stages: int) -> list[range]:
    """The blocks of each of ``stages`` stages: consecutive, the first ``n_layer % stages``
    stages one block more than the rest. Every stage has at least one block."""
    if type(stages) is not int or stages < 1:
        raise ValueError(f"the pipeline needs at least 1 stage, got {stages!r}")
    if stages > n_layer:
        raise ValueError(
            f"{stages} stages for a model of {n_layer} layers: at most one stage per layer"
        )
    q, r = divmod(n_layer, stages)
    out, lo = [], 0
    for s in range(stages):
        hi = lo + q + (1 if s < r else 0)
        out.append(range(lo, hi))
        lo = hi
    return out


def slicing(replicas: int, microbatches: int) -> tuple[int, int]:
    """(slices, microbatches) the trace's states name for D replicas of M microbatches each:
    (M, 1) for one replica (one level of slicing), else (D, M)."""
    if replicas == 1:
        return microbatches, 1
    return replicas, microbatches


class StageModule(nn.Module):
    """Stage ``stage`` of ``stages``: the GPT's modules it holds, under the GPT's names, and the
    GPT's forward for them (``GPT.forward`` without the loss: the schedule applies
    ``loss_fn`` on the last stage)."""

    def __init__(self, cfg: GPTConfig, stage: int, stages: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.first, self.last = stage == 0, stage == stages - 1
        if self.first:
            self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
            self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.h = nn.ModuleDict(
            {str(i): Block(cfg) for i in stage_layers(cfg.n_layer, stages)[stage]}
        )
        if self.last:
            self.ln_f = nn.LayerNorm(cfg.n_embd)
            self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.first:  # x: (B, T) byte values
            pos = torch.arange(x.shape[1], device=x.device)
            x = self.wte(x) + self.wpe(pos)  # (B, T, C)
        for block in self.h.values():
            x = block(x)
        if self.last:
            x = self.lm_head(self.ln_f(x))  # (B, T, vocab)
        return x


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """GPT.forward's loss, on the last stage's output."""
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def gpt_param_names(cfg: GPTConfig) -> list[str]:
    """The GPT's parameter names in ``model.parameters()`` order (built on the meta device)."""
    with torch.device("meta"):
        return [n for n, _ in GPT(cfg).named_parameters()]


def build_stage(
    cfg: GPTConfig, stage: int, stages: int, params: Mapping[str, torch.Tensor], device: str
) -> StageModule:
    """Stage ``stage`` with its parameters copied from ``params`` (name -> tensor, the full
    model's names; extra names are ignored)."""
    with torch.random.fork_rng(devices=[]):  # building draws an init we overwrite
        mod = StageModule(cfg, stage, stages)
    with torch.no_grad():
        for n, p in mod.named_parameters():
            if n not in params:
                raise ValueError(f"the base model has no {n}")
            p.copy_(params[n])
    return mod.to(device)


@dataclass(slots=True)
class Topology:
    """Rank = replica·S + stage; the groups every rank created in the same order."""

    stages: int
    replicas: int
    rank: int
    pp_group: Any  # this replica's pipeline
    dp_group: Any  # this stage's replicas (None for one replica)

    @property
    def stage(self) -> int:
        return self.rank % self.stages

    @property
    def replica(self) -> int:
        return self.rank // self.stages

    @property
    def first(self) -> bool:
        return self.stage == 0

    @property
    def last(self) -> bool:
        return self.stage == self.stages - 1


def make_topology(stages: int) -> Topology:
    world, rank = dist.get_world_size(), dist.get_rank()
    if stages < 1 or world % stages:
        raise ValueError(f"{world} processes do not make replicas of {stages} stages")
    d = world // stages
    pp = dp = None
    for r in range(d):  # every rank creates every group, in the same order
        g = dist.new_group([r * stages + s for s in range(stages)])
        if r == rank // stages:
            pp = g
    if d > 1:
        for s in range(stages):
            g = dist.new_group([r * stages + s for r in range(d)])
            if s == rank % stages:
                dp = g
    return Topology(stages=stages, replicas=d, rank=rank, pp_group=pp, dp_group=dp)


def make_schedule(mod: StageModule, topo: Topology, microbatches: int, device: str, kind: str):
    # lazy: seconds to import, and node.worker.ml loads this module on every worker for
    # stage_layers and check_island; only a pipeline rank builds a schedule
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    if kind not in SCHEDULES:
        raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, not {kind!r}")
    stage = PipelineStage(mod, topo.stage, topo.stages, torch.device(device), group=topo.pp_group)
    cls = ScheduleGPipe if kind == "gpipe" else Schedule1F1B
    # scale_grads=False: the microbatches' gradients stay summed in order; divided below by D·M
    return cls(stage, microbatches, loss_fn=loss_fn, scale_grads=False)


class PipelineTrainer:
    """This rank's stage, its optimizer and schedule: ``step`` runs one island inner step."""

    def __init__(
        self,
        mod: StageModule,
        icfg: InnerConfig,
        topo: Topology,
        microbatches: int,
        device: str,
        schedule: str = "gpipe",
    ) -> None:
        self.mod, self.icfg, self.topo, self.m = mod, icfg, topo, microbatches
        self.device = device
        self.opt = make_inner_optimizer(mod, icfg)  # type: ignore[arg-type]  # any module
        self.sched = make_schedule(mod, topo, microbatches, device, schedule)
        self.compute_s = 0.0  # time in this stage's forward/backward (the bubble's complement)
        st = self.sched._stage  # time the stage's compute, not its waits for its neighbours
        for name in ("forward_one_chunk", "backward_one_chunk"):
            f = getattr(st, name)
            setattr(st, name, self._timed(f))

    def _timed(self, f):
        def g(*a, **kw):
            t0 = time.perf_counter()
            try:
                return f(*a, **kw)
            finally:
                self.compute_s += time.perf_counter() - t0

        return g

    def step(self, x: torch.Tensor, y: torch.Tensor) -> float:
        """One inner step on the batch (x, y); returns the batch's mean loss, summed as
        ``sliced_grads`` sums it (every rank gets it)."""
        topo, m = self.topo, self.m
        b = x.shape[0] // topo.replicas
        xs = x[topo.replica * b : (topo.replica + 1) * b]
        ys = y[topo.replica * b : (topo.replica + 1) * b]
        self.mod.train()
        self.opt.zero_grad(set_to_none=True)
        losses: list[torch.Tensor] = []
        if topo.first and topo.last:
            self.sched.step(xs, target=ys, losses=losses)
        elif topo.first:
            self.sched.step(xs)
        elif topo.last:
            self.sched.step(target=ys, losses=losses)
        else:
            self.sched.step()
        params: list[torch.Tensor] = list(self.mod.parameters())
        if any(p.grad is None for p in params):
            raise RuntimeError("a stage parameter has no gradient")
        n = topo.replicas * m
        for p in params:
            g = p.grad
            assert g is not None
            if topo.replicas > 1:  # the replicas' sums, added in rank order
                parts = [torch.empty_like(g) for _ in range(topo.replicas)]
                dist.all_gather(parts, g.contiguous(), group=topo.dp_group)
                g = parts[0].clone()
                for q in parts[1:]:
                    g.add_(q)
                p.grad = g
            g.div_(n)
        if self.icfg.grad_clip > 0:
            self._clip(params)
        self.opt.step()
        # the step's loss: every replica's microbatch losses, in (replica, microbatch) order
        mine = [float(v.detach()) for v in losses] if topo.last else []
        got: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(got, mine)
        tot = 0.0
        for vals in got:
            for v in vals:
                tot += v
        return tot / n

    def _clip(self, params: list[torch.Tensor]) -> None:
        """``clip_grad_norm_(model.parameters(), grad_clip, foreach=False)`` of the whole
        model, across the stages: the per-parameter norms, gathered in stage order (the model's
        parameter order), the norm of them all, every stage scaling its own gradients."""
        norms = [torch.linalg.vector_norm(p.grad, 2.0) for p in params]
        local = torch.stack(norms).cpu()
        got: list[Any] = [None] * self.topo.stages
        dist.all_gather_object(got, local, group=self.topo.pp_group)
        total = torch.linalg.vector_norm(torch.cat(got).to(self.device), 2.0)
        torch.nn.utils.clip_grads_with_norm_(params, self.icfg.grad_clip, total, foreach=False)

    def entries(self) -> dict[str, tuple[torch.Tensor, dict[str, torch.Tensor]]]:
        """This stage's (parameter, AdamW state) by the full model's names, on the CPU."""
        out = {}
        for n, p in self.mod.named_parameters():
            st = self.opt.state.get(p, {})
            out[n] = (
                p.detach().cpu(),
                {k: st[k].detach().cpu() for k in ("exp_avg", "exp_avg_sq") if k in st},
            )
        return out

    def gather_entries(self) -> dict[str, tuple[torch.Tensor, dict[str, torch.Tensor]]] | None:
        """Replica 0's stages send their entries to global rank 0, which returns all of them
        (the others None). Call on replica 0's ranks only."""
        mine = self.entries()
        got: list[Any] | None = [None] * self.topo.stages if self.topo.rank == 0 else None
        dist.gather_object(mine, got, dst=0, group=self.topo.pp_group)
        if got is None:
            return None
        merged: dict[str, tuple[torch.Tensor, dict[str, torch.Tensor]]] = {}
        for part in got:
            merged.update(part)
        return merged


def _encode_state(
    merged: Mapping[str, tuple[torch.Tensor, Mapping[str, torch.Tensor]]],
    cfg: GPTConfig,
    icfg: InnerConfig,
    *,
    adam_step: int,
    round: int,
    inner_step: int,
    shard: int,
    carry: bytes,
    slices: int,
    microbatches: int,
) -> bytes:
    names = gpt_param_names(cfg)
    if set(names) != set(merged):
        raise RuntimeError("the stages' parameters are not the model's")
    return encode(
        _state_payload(
            ((n, merged[n][0], merged[n][1]) for n in names),
            cfg,
            icfg,
            adam_step=adam_step,
            round=round,
            inner_step=inner_step,
            shard=shard,
            carry=carry,
            slices=slices,
            microbatches=microbatches,
        )
    )


def _params_model_hash(params: Mapping[str, torch.Tensor], cfg: GPTConfig) -> bytes:
    """``model_hash`` of a GPT holding ``params`` (the same canonical bytes)."""
    entries = {
        n: Entry(dtype=torch.float32, shape=tuple(t.shape), parts={"param": t.float().cpu()})
        for n, t in params.items()
    }
    p = Payload(kind=KIND_MODEL, codec="raw", meta={"model": cfg.to_dict()}, entries=entries)
    return hashlib.sha256(encode(p)).digest()


def check_island(batch_size: int, replicas: int, microbatches: int) -> None:
    """The batch splits into ``replicas`` x ``microbatches`` equal parts."""
    check_slices(replicas, batch_size)
    check_slices(replicas * microbatches, batch_size)


def island_round(
    tr: PipelineTrainer,
    base: Mapping[str, torch.Tensor] | None,
    job: RoundJob,
    *,
    device: str,
):
    """One provider round on the pipeline island (``trainer.diloco.commit_round``'s artifacts):
    H steps from the base (the stages were built from it) with a fresh AdamW state and an empty
    carry, the whole model's state every k steps, the payload compress(θ_base − θ_H). Every rank
    trains; rank 0 (``base``: the full base parameters) returns the ``RoundArtifacts`` and the
    final model's hash, the others None. ``job.poison`` scales Δ (the worker's test behaviour)."""
    topo, cfg, spec = tr.topo, job.cfg, job.spec
    check_island(spec.batch_size, topo.replicas, tr.m)
    slices, micro = slicing(topo.replicas, tr.m)
    cstate, carry, ch = fresh_carry()
    shard = spec.shard_index()
    states: list[bytes] = []
    last: dict[str, torch.Tensor] = {}

    def snap(s: int) -> None:
        if topo.replica != 0:
            return
        merged = tr.gather_entries()
        if merged is None:
            return
        states.append(
            _encode_state(
                merged,
                cfg,
                job.icfg,
                adam_step=_adam_step(tr.opt),
                round=spec.round,
                inner_step=s,
                shard=shard,
                carry=ch,
                slices=slices,
                microbatches=micro,
            )
        )
        last.clear()
        last.update({n: v[0] for n, v in merged.items()})

    losses = []
    for s in range(job.H):
        if s % job.k == 0:
            snap(s)
        losses.append(tr.step(*job.corpus.batch(spec, s, device)))
    snap(job.H)
    if topo.rank != 0:
        return None
    assert base is not None
    names = gpt_param_names(cfg)
    with torch.no_grad():
        delta = {n: (base[n].float().cpu() - last[n].float()) * job.poison for n in names}
    art = round_artifacts(job, states, delta, cstate, carry, losses)
    return art, _params_model_hash({n: last[n] for n in names}, cfg)


def _base_params(buf: bytes, cfg: GPTConfig) -> dict[str, torch.Tensor]:
    p = decode(buf, expected_kind=KIND_MODEL)
    if p.meta.get("model") != cfg.to_dict():
        raise ValueError("base model's config differs from the round's model")
    if set(p.entries) != set(gpt_param_names(cfg)):
        raise ValueError("base model's tensors do not match the model")
    return {n: e.parts["param"] for n, e in p.entries.items()}


def run_round_dir(d: Path, device: str, stages: int, schedule: str) -> None:
    """``--round DIR``: one worker round (trainer/round_dir.py); round.json's ``microbatches``
    is the count per replica and step."""
    job = read_round(d)
    if job.microbatches < 1:
        raise ValueError("round.json names no microbatches (the pipeline needs them)")
    topo = make_topology(stages)
    params = _base_params(job.base_bytes(), job.cfg)
    mod = build_stage(job.cfg, topo.stage, stages, params, device)
    base = params if topo.rank == 0 else None
    if topo.rank != 0:
        del params  # only this stage's share stays
    tr = PipelineTrainer(mod, job.icfg, topo, job.microbatches, device, schedule)
    got = island_round(tr, base, job, device=device)
    if got is None:
        return
    art, mhash = got
    shape = {"stages": stages, "replicas": topo.replicas, "microbatches": tr.m}
    write_round_out(d, art, mhash, shape)


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return _peak_rss_bytes()


def _parse(argv) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--round", metavar="DIR", help="train one worker round described in DIR")
    ap.add_argument("--pipeline", type=int, required=True, metavar="S", help="stages")
    ap.add_argument("--schedule", choices=SCHEDULES, default="gpipe")
    ap.add_argument("--data", help="text file (default: synthetic text, for tests)")
    ap.add_argument("--model-size", default="tiny", choices=["tiny", "small", "medium", "large"])
    ap.add_argument(
        "--model", metavar="JSON", help="GPTConfig fields as JSON (overrides --model-size)"
    )
    ap.add_argument("--seed", type=int, default=0, help="initial model (init_model)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--microbatches", type=int, default=2, help="per replica and step")
    ap.add_argument("--shard", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="cpu (gloo) or cuda (NCCL, cuda:LOCAL_RANK)")
    ap.add_argument(
        "--out", help="folder: rank 0 writes end.state; every rank rank<r>.json (times, memory)"
    )
    ap.add_argument("--no-state", action="store_true", help="skip end.state (benchmarks)")
    a = ap.parse_args(argv)
    if not a.round and not a.out:
        ap.error("--out is required (or --round DIR)")
    return a


def _initial_stage(
    a: argparse.Namespace, cfg: GPTConfig, topo: Topology, device: str
) -> StageModule:
    """This rank's stage of the starting model. ``--seed`` >= 0: init_model's weights (the
    whole model drawn on every rank, then cut: for tests, which compare with one process);
    ``--seed -1``: each rank draws its stage alone (the benchmark's model too big for one
    process)."""
    if a.seed >= 0:
        full = init_model(cfg, a.seed)
        params = {n: p.detach() for n, p in full.named_parameters()}
        return build_stage(cfg, topo.stage, a.pipeline, params, device)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1234 + topo.stage)
        return StageModule(cfg, topo.stage, a.pipeline).to(device)


@dataclass(slots=True)
class StepTimes:
    """What ``_timed_steps`` measured on this rank (rank<r>.json's fields)."""

    losses: list[float]
    step_s: list[float]
    compute_s: list[float]
    peak_train: int  # peak RSS before rank 0 gathers the whole state
    cuda_peak: int | None


def _timed_steps(
    tr: PipelineTrainer, corpus: Corpus, spec: ShardSpec, steps: int, device: str
) -> StepTimes:
    """``steps`` island steps, each timed from a barrier (the whole step, and this stage's own
    forward/backward), and the memory peaks of the training."""
    cuda = device.startswith("cuda")
    losses, times, computes = [], [], []
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    for s in range(steps):
        x, y = corpus.batch(spec, s, device)
        dist.barrier()
        c0, t0 = tr.compute_s, time.perf_counter()
        losses.append(tr.step(x, y))
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        computes.append(tr.compute_s - c0)
    return StepTimes(
        losses=losses,
        step_s=times,
        compute_s=computes,
        peak_train=_peak_rss_bytes(),
        cuda_peak=torch.cuda.max_memory_allocated() if cuda else None,
    )


def _write_end_state(
    a: argparse.Namespace, tr: PipelineTrainer, cfg: GPTConfig, spec: ShardSpec
) -> None:
    """Replica 0's stages gather the whole state to rank 0, which writes end.state (unless
    ``--no-state``)."""
    topo = tr.topo
    merged = tr.gather_entries() if topo.replica == 0 and not a.no_state else None
    if merged is None:
        return
    slices, micro = slicing(topo.replicas, a.microbatches)
    (Path(a.out) / "end.state").write_bytes(
        _encode_state(
            merged,
            cfg,
            tr.icfg,
            adam_step=_adam_step(tr.opt),
            round=0,
            inner_step=a.steps,
            shard=spec.shard_index(),
            carry=EMPTY_CARRY_HASH,
            slices=slices,
            microbatches=micro,
        )
    )


def run_steps(a: argparse.Namespace, device: str) -> None:
    """Without ``--round``: ``--steps`` island steps from ``--seed``'s model on the synthetic
    text (or ``--data``), timed; rank 0 writes end.state, every rank rank<r>.json (times,
    memory: what the tests and benchmarks/pipeline_island.py read)."""
    rss0 = _rss_bytes()
    corpus = Corpus.from_file(a.data) if a.data else Corpus(synthetic_text(50_000, seed=1))
    cfg = GPTConfig.from_dict(json.loads(a.model)) if a.model else GPTConfig.preset(a.model_size)
    topo = make_topology(a.pipeline)
    check_island(a.batch_size, topo.replicas, a.microbatches)
    mod = _initial_stage(a, cfg, topo, device)
    tr = PipelineTrainer(mod, InnerConfig(), topo, a.microbatches, device, a.schedule)
    spec = ShardSpec(
        dataset_id=corpus.id,
        seed=max(a.seed, 0),
        job=0,
        round=0,
        provider="island",
        n_shards=16,
        batch_size=a.batch_size,
        block_size=cfg.block_size,
        shard=a.shard,
    )
    t = _timed_steps(tr, corpus, spec, a.steps, device)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    _write_end_state(a, tr, cfg, spec)
    (out / f"rank{topo.rank}.json").write_text(
        json.dumps(
            {
                "rank": topo.rank,
                "stage": topo.stage,
                "replica": topo.replica,
                "world": dist.get_world_size(),
                "stage_params": sum(p.numel() for p in mod.parameters()),
                "losses": t.losses,
                "step_s": t.step_s,
                "compute_s": t.compute_s,
                "rss_start_bytes": rss0,
                "peak_rss_train_bytes": t.peak_train,
                "cuda_peak_bytes": t.cuda_peak,
            }
        )
    )


def main(argv=None) -> int:
    a = _parse(argv)
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print("--device cuda: torch sees no CUDA device", file=sys.stderr)
        return 2
    device = init_group(a.device)
    try:
        set_determinism(a.seed)
        if a.round:
            run_round_dir(Path(a.round), device, a.pipeline, a.schedule)
        else:
            run_steps(a, device)
        _leave()
    finally:  # reached on an error only (_leave does not return)
        dist.destroy_process_group()
    return 0


def _leave() -> NoReturn:
    """Every rank's outputs are written: wait for all of them, then exit without tearing the
    process groups down. trainer/ddp.py's barrier-then-destroy was not enough with the pipeline's
    subgroups: 1 run in ~10 of a 2 x 2 island on a loaded 2-core machine had a rank abort inside
    gloo's teardown ("terminate called without an active exception", SIGABRT) after every rank
    had passed the barrier, and torchrun then failed the whole island. The files are closed and
    the streams flushed here; the sockets close with the process."""
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
