"""The worker's torch side: a job spec from the chain -> trainer configs; one round's training
(payload, trace, the trace's states); re-execution of a revealed segment; the deterministic
aggregate of a round's accepted updates; the hardware torch sees.

Everything here is the trainer library (trainer/): ``diloco.commit_round`` for training, the
trace and the payload, ``verify_segment`` and ``quality_score`` for verification,
``network_outer_step`` for the next model. This module adds only the mapping from
the chain's JSON to those calls, so a verifier and the provider it checks derive the same
``ShardSpec`` and configs from the same chain record.

The next model of a round is computed from its own base model and its accepted updates by
``trainer.diloco.network_outer_step`` (``aggregate_payloads`` here): every decoded update is
screened (norm above 3x the round's lower median, or held-out loss worse by more than 20
milli-nats when applied alone: left out), the rest averaged with each clipped to 1.5x the
median norm (providers sorted), and one outer Nesterov SGD step (lr 0.8, momentum 0.3) is
taken whose momentum buffer travels *inside* the model bytes (part ``momentum``): the base's
buffer in, the new one out. So everything the next model depends on is the round's chain
record and blobs named there by hash; any worker, one that missed rounds or joined late
included, computes the same bytes (tests pin this). Why base-relative instead of the newest
attested model: the chain opens round r+1 while round r is verified (once round r-1 is final),
so a round's base is one or more rounds old; adding a stale update on top of a newer model
applied the same progress twice and the loss rose (measured: 5.55 -> 5.84 over 3 rounds),
while base-relative rounds form interleaved DiLoCo chains (each with its own momentum) whose
loss falls round by round.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

import trainer
from abci_app.jobs.incentives import compute_runs
from abci_app.jobs.probe import PROBE_DIM
from trainer.carry import carry_bytes
from trainer.commit import KIND_MODEL, KIND_UPDATE, Binding, decode, encode
from trainer.compression import Codec, CompressionState, codec_from_payload, load_policy
from trainer.data import Corpus, ShardSpec
from trainer.determinism import stack_id
from trainer.diloco import (
    AggregationRule,
    NetworkAggregate,
    OuterConfig,
    Worker,
    commit_round,
    network_outer_step,
)
from trainer.model import GPT, GPTConfig
from trainer.pipeline import check_island, stage_layers
from trainer.portable_init import config_from_job
from trainer.portable_init import initial_model_bytes as portable
from trainer.state import InnerConfig, check_slices, evaluate, model_payload, params_hash_of_model
from trainer.verify import (
    Challenge,
    ChallengeVerdict,
    Verdict,
    VerifyContext,
    quality_score,
    verify_challenge,
    verify_segment,
)
from trainer.verify_run import verify_run

# the network's rule (trainer.diloco; see the docstring): outer lr 0.8, Nesterov momentum 0.3,
# measured along the testnet's chains (benchmarks/network_outer.py): DiLoCo's 0.7 / 0.9 made
# the held-out loss rise by up to 0.1 nats on some steps of these short chains; 0.8 / 0.3 ends
# within 0.01 nats of the momentum-free step (node/worker/README.md)
AGGREGATION = AggregationRule(outer=OuterConfig(lr=0.8, momentum=0.3, nesterov=True))
MAX_QUALITY = 10_000
MAX_LOSS_MNATS = 10**9


class JobError(ValueError):
    """A job's spec this worker cannot train (e.g. a vocabulary other than bytes)."""


# The chain takes any model dimension up to 2^20; a worker builds every active job's model.
# Past this many parameters (4 GiB of fp32 weights, ~5x that with AdamW and the base) the job is
# skipped: a job of d_model 8192 x 64 layers made every worker allocate until the kernel killed
# it (or, under a memory limit, raise RuntimeError out of the loop, which starved every later job).
MAX_MODEL_PARAMS = 1 << 30


def gpt_num_params(cfg: GPTConfig) -> int:
    """trainer.model.GPT(cfg).num_params(), computed without building the model."""
    d, L, V, T = cfg.n_embd, cfg.n_layer, cfg.vocab_size, cfg.block_size
    return 2 * V * d + T * d + L * (12 * d * d + 13 * d) + 2 * d


@dataclass(frozen=True, slots=True)
class JobPlan:
    """What the chain's job spec fixes for the trainer."""

    job_id: int
    model: GPTConfig
    inner: InnerConfig
    H: int
    k: int
    batch_size: int
    n_shards: int
    dataset_id: str
    policy: str  # the job's compression policy (abci_app/jobs/policy.py grammar)
    tokens_per_step: int
    tolerance: float | None = (
        None  # None: exact mode (state bytes identical); else relative distance
    )
    stack: str = ""  # exact mode: the stack the job pins (trainer.determinism.stack_id); "" none

    @classmethod
    def from_job(cls, job: dict[str, Any]) -> JobPlan:
        s = job["spec"]
        m = s["model"]
        if m["vocab_size"] != 256:
            raise JobError(
                f"job {job['id']}: vocab_size {m['vocab_size']}: this trainer models bytes (256)"
            )
        ctx = int(m["context_len"])
        if int(s["tokens_per_step"]) % ctx:
            raise JobError(f"job {job['id']}: tokens_per_step must be a multiple of context_len")
        cfg = config_from_job(m)
        n = gpt_num_params(cfg)
        if n > MAX_MODEL_PARAMS:
            raise JobError(
                f"job {job['id']}: the model has {n:,} parameters; this worker trains at most "
                f"{MAX_MODEL_PARAMS:,}"
            )
        plan = cls(
            job_id=int(job["id"]),
            model=cfg,
            inner=InnerConfig(),
            H=int(s["inner_steps"]),
            k=int(s["trace_interval"]),
            batch_size=int(s["tokens_per_step"]) // ctx,
            n_shards=int(s["num_shards"]),
            dataset_id=str(s["dataset_id"]),
            policy=str(s["compression_policy"]),
            tokens_per_step=int(s["tokens_per_step"]),
            tolerance=(
                int(s.get("tolerance_ppm", 0)) / 1e6
                if s.get("determinism_mode") == "tolerance"
                else None
            ),
            stack=str(s.get("stack") or "") if s.get("determinism_mode") != "tolerance" else "",
        )
        plan.compression()  # refuse a policy the trainer cannot run now, not at the first round
        return plan

    def compression(self) -> Any:
        """The job's per-round codec chooser (trainer.compression.load_policy: ``choose(round,
        shapes)``); ``adaptive`` without a budget gets the trainer's 1/500 of float32 bytes."""
        n_params = gpt_num_params(self.model)
        try:
            return load_policy(self.policy, default_budget_bytes=max(1, 4 * n_params // 500))
        except ValueError as e:
            raise JobError(f"job {self.job_id}: compression policy {self.policy!r}: {e}") from None

    def shard_spec(self, round_: int, provider: str, shard: int) -> ShardSpec:
        """The batches of ``provider`` (bech32) in ``round_``: its assigned shard, nothing else."""
        return ShardSpec(
            dataset_id=self.dataset_id,
            seed=0,
            job=self.job_id,
            round=round_,
            provider=provider,
            n_shards=self.n_shards,
            batch_size=self.batch_size,
            block_size=self.model.block_size,
            shard=shard,
        )


# ----------------------------------------------------------------------------- the same stack


def parse_stack(stack: str) -> dict[str, str] | None:
    """The fields of a ``key=value;...`` stack id (trainer.determinism.stack_id); None if it is
    not one."""
    out: dict[str, str] = {}
    for item in stack.split(";"):
        k, eq, v = item.partition("=")
        if not eq or not k or k in out:
            return None
        out[k] = v
    return out


def worker_stack(device: str) -> str:
    """The stack this worker trains and re-executes on: ``trainer.determinism.stack_id`` of its
    device, float32, with TF32 off whatever this process's default is, since every round runs
    under ``set_determinism`` (ProviderWorker.start), which turns TF32 off."""
    fields = parse_stack(stack_id(device)) or {}
    fields["tf32"] = "off"
    return ";".join(f"{k}={v}" for k, v in fields.items())


def same_stack(pinned: str, mine: str) -> bool:
    """Whether an exact-mode job pinned to ``pinned`` re-executes bitwise here (``mine``: see
    worker_stack): the torch version, the device class and the dtype must be the same, and TF32
    too on CUDA. On CPU the TF32 field says nothing (TF32 is a CUDA math mode; a stack id minted
    in a fresh process says ``tf32=on`` because cuDNN's flag defaults to on, as the testnet's
    built-in job and ``tx job create --stack``'s recipe do). A stack that is not ``key=value``
    fields must equal ours."""
    a, b = parse_stack(pinned), parse_stack(mine)
    if a is None or b is None:
        return pinned == mine
    if not a.get("device", "").startswith("cuda"):
        a.pop("tf32", None)
        b.pop("tf32", None)
    return a == b


# ----------------------------------------------------------------------------- blob size caps

# float32 tensors per parameter in a blob of the job's model (trainer/commit.py layouts): model
# bytes hold param and, once attested, the outer momentum; a trainer state param, exp_avg and
# exp_avg_sq; the error-feedback carry a residual and the low-rank codec's warm Q (smaller)
MODEL_PARTS, STATE_PARTS, CARRY_PARTS = 2, 3, 2


def blob_cap(plan: JobPlan, parts: int) -> int:
    """An upper bound on the bytes of a canonical blob of ``plan``'s model holding ``parts``
    float32 tensors per parameter: the data, plus under 512 B of tensor table per tensor (GPT has
    fewer than 16 per layer + 16) and 64 KiB for the header and JSON meta. A peer that sends more
    for a state or a model is refused while the body streams (node/blobs/client.py: Oversize)."""
    tensors = 16 * plan.model.n_layer + 16
    return 4 * parts * gpt_num_params(plan.model) + 512 * tensors + (64 << 10)


def trace_list_size(plan: JobPlan) -> int:
    """The exact size of a round's trace list blob: H/k + 1 state hashes of 32 bytes."""
    return 32 * (plan.H // plan.k + 1)


# ----------------------------------------------------------------------------- models as blobs


def model_bytes(model: GPT) -> bytes:
    """Canonical parameter bytes (kind 3): sha256 of them is the chain's model hash."""
    return encode(model_payload(model))


def initial_model_bytes(cfg: GPTConfig, seed: int) -> bytes:
    """A job's initial model from a seed, the same bytes on every machine
    (trainer.portable_init)."""
    return portable(cfg, seed)


def load_model(buf: bytes, cfg: GPTConfig) -> GPT:
    """A GPT with the parameters of model bytes; PayloadError/JobError if they do not fit."""
    p = decode(buf, expected_kind=KIND_MODEL)
    if p.meta.get("model") != cfg.to_dict():
        raise JobError("model blob's config differs from the job's model")
    model = GPT(cfg)
    named = dict(model.named_parameters())
    if set(named) != set(p.entries):
        raise JobError("model blob's tensors do not match the job's model")
    with torch.no_grad():
        for n, t in named.items():
            part = p.entries[n].parts.get("param")
            if part is None or tuple(part.shape) != tuple(t.shape):
                raise JobError(f"model blob: {n} has the wrong shape")
            t.copy_(part)
    return model


# ----------------------------------------------------------------------------- training


@dataclass(slots=True)
class RoundWork:
    payload: bytes
    states: list[bytes]  # state bytes at steps 0, k, ..., H
    trace: list[bytes]  # sha256 of each state (the trace entries)
    loss_before: int  # milli-nats
    loss_after: int
    tokens: int
    probes: list[list[int]] | None = None  # tolerance mode: trainer.probe.trace_probes(states)


def _mnats(x: float) -> int:
    return max(0, min(MAX_LOSS_MNATS, round(x * 1000)))


def train_round(
    plan: JobPlan,
    base_bytes: bytes,
    corpus: Corpus,
    spec: ShardSpec,
    binding: Binding,
    codec: Codec,
    device: str = "cpu",
    poison: float = 1.0,
    procs: int = 1,
    corpus_path: str | Path | None = None,
    pipeline: int = 1,
    microbatches: int = 0,
) -> RoundWork:
    """One provider round (trainer.diloco.commit_round): H AdamW steps from the base model on the
    spec's assigned shard, the state every k steps, the payload compress(θ_base − θ_H + e_prev).
    Every round starts fresh (zero moments, empty carry): the start trainer.verify.verify_start
    accepts without any of this provider's history. ``poison`` scales Δ (the poison behaviour).
    ``procs`` > 1: the round trains data-parallel on an island of that many processes
    (``train_island``); ``pipeline`` > 1: each replica of the island is a pipeline of that many
    stages (``procs`` x ``pipeline`` processes, ``microbatches`` per replica and step; 0 picks
    ``default_microbatches``); still one payload, one trace, one commitment."""
    if procs > 1 or pipeline > 1:
        return train_island(
            plan,
            base_bytes,
            corpus,
            spec,
            binding,
            codec,
            procs=procs,
            device=device,
            poison=poison,
            corpus_path=corpus_path,
            pipeline=pipeline,
            microbatches=microbatches,
        )

    model = load_model(base_bytes, plan.model).to(device)
    base = {n: p.detach().clone() for n, p in model.named_parameters()}
    w = Worker(spec.provider, plan.model, plan.inner, device)
    if poison == 1.0:
        art = commit_round(w, base, corpus, spec, plan.H, plan.k, codec, binding)
        states, trace, payload, losses = art.states, art.trace, art.payload, art.losses
    else:  # an honest trace, a scaled update
        states = []
        delta, losses, trace, _ = w.train_round(
            base, corpus, spec, plan.H, plan.k, keep_states=states
        )
        payload = encode(codec.compress({n: d * poison for n, d in delta.items()}, w.cstate))
    return RoundWork(
        payload=payload,
        states=states,
        trace=list(trace),
        loss_before=_mnats(losses[0]),
        loss_after=_mnats(losses[-1]),
        tokens=plan.H * plan.tokens_per_step,
    )


class IslandError(RuntimeError):
    """The data-parallel island (torchrun) failed; the message holds the tail of its log."""


def default_microbatches(batch_size: int, replicas: int, stages: int) -> int:
    """Microbatches per replica and step for a pipeline of ``stages``: the largest divisor of
    the replica's rows (batch_size / replicas) up to 2 x stages (GPipe's bubble
    (S-1)/(M+S-1) is a third at M = 2S; more, smaller microbatches trade it for per-microbatch
    overhead). 1 when the pipeline has one stage."""
    if stages <= 1:
        return 1
    rows = max(1, batch_size // max(1, replicas))
    return max(m for m in range(1, min(rows, 2 * stages) + 1) if rows % m == 0)


def check_island_plan(plan: JobPlan, procs: int, pipeline: int, microbatches: int) -> int:
    """The microbatch count this island uses for ``plan`` (``microbatches``, or the default for
    0); JobError naming why the job cannot run on it: more stages than the model has layers, or
    a batch that does not split into procs x microbatches equal parts."""
    try:
        if pipeline > 1:
            stage_layers(plan.model.n_layer, pipeline)
            m = microbatches or default_microbatches(plan.batch_size, procs, pipeline)
            check_island(plan.batch_size, procs, m)
            return m
        check_slices(procs, plan.batch_size)
    except ValueError as e:
        flags = f"--procs {procs}" + (f" --pipeline {pipeline}" if pipeline > 1 else "")
        raise JobError(f"job {plan.job_id}: {flags}: {e}") from None
    return 1


def stage_num_params(cfg: GPTConfig, stages: int) -> list[int]:
    """Parameters of each pipeline stage (trainer.pipeline.stage_layers' split; the first
    holds the embeddings, the last the final norm and the head), without building the model."""
    d, V, T = cfg.n_embd, cfg.vocab_size, cfg.block_size
    out = []
    for s, layers in enumerate(stage_layers(cfg.n_layer, stages)):
        n = len(layers) * (12 * d * d + 13 * d)
        if s == 0:
            n += V * d + T * d
        if s == stages - 1:
            n += 2 * d + V * d
        out.append(n)
    return out


def island_memory_bytes(
    plan: JobPlan, procs: int, pipeline: int, microbatches: int = 0
) -> tuple[int, int]:
    """(the most one process of the island holds, what all of them hold together) for a round
    of ``plan`` on ``procs`` replicas of ``pipeline`` stages, by ``training_memory_bytes``'s
    rule per stage: 24 B per parameter of the stage, and the activations of its layers for its
    replica's rows (GPipe keeps every microbatch's until its backward). Rank 0 also holds, in
    host memory, the whole base model and one gathered state (16 B per parameter of the whole
    model) to write the trace and the payload: counted in the total, not per device."""
    cfg = plan.model
    rows = plan.batch_size // max(1, procs)
    per = []

    for layers, n in zip(
        stage_layers(cfg.n_layer, pipeline), stage_num_params(cfg, pipeline), strict=True
    ):
        act = 16 * 4 * rows * cfg.block_size * cfg.n_embd * len(layers)
        per.append(24 * n + act)
    total = procs * sum(per) + 16 * gpt_num_params(cfg)
    return max(per), total


def train_island(
    plan: JobPlan,
    base_bytes: bytes,
    corpus: Corpus,
    spec: ShardSpec,
    binding: Binding,
    codec: Codec,
    *,
    procs: int,
    device: str = "cpu",
    poison: float = 1.0,
    corpus_path: str | Path | None = None,
    timeout_s: float | None = None,
    pipeline: int = 1,
    microbatches: int = 0,
) -> RoundWork:
    """One round on a data-parallel island: ``torchrun --standalone --nproc_per_node procs -m
    trainer.ddp --round DIR`` (NCCL, one process per GPU, on ``cuda``; gloo processes on CPU).
    Each rank takes 1/procs of every step's batch; the ranks' gradients are summed in rank order
    (trainer/ddp.py), so the trace's states (which name ``slices = procs``) are exactly what one
    process computing the same slices reaches: the verifier re-executes a segment alone, in the
    job's determinism mode (exact mode on the island's stack). The batch size must split into
    ``procs`` equal slices.

    ``pipeline`` = S > 1: ``torchrun --nproc_per_node procs*S -m trainer.pipeline --round DIR
    --pipeline S``: each of the ``procs`` replicas is a pipeline of S stages (trainer/pipeline.py)
    taking ``microbatches`` microbatches of its rows per step; the states name the slicing
    (``slices``, ``microbatches``) and a single process re-executes them the same way."""
    m = check_island_plan(plan, procs, pipeline, microbatches)
    root = Path(trainer.__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="loconet-island-") as tmp:
        d = Path(tmp)
        if corpus_path is None:
            corpus_path = d / "corpus"
            Path(corpus_path).write_bytes(corpus.data)
        (d / "base.model").write_bytes(base_bytes)
        (d / "round.json").write_text(
            json.dumps(_island_round(plan, spec, codec, binding, corpus_path, poison, m))
        )
        rc = _run_island(d, procs * pipeline, pipeline, device, root, timeout_s)
        out = d / "out"
        if rc != 0 or not (out / "result.json").is_file():
            tail = (d / "island.log").read_bytes()[-8000:].decode(errors="replace")
            shape = f"{procs} x {pipeline} stages" if pipeline > 1 else f"{procs} processes"
            raise IslandError(f"island of {shape} failed (exit {rc}):\n{tail}")
        res = json.loads((out / "result.json").read_text())
        states = [(out / f"state{i:05d}").read_bytes() for i in range(plan.H // plan.k + 1)]
        payload = (out / "payload").read_bytes()
    trace = [hashlib.sha256(b).digest() for b in states]
    if [t.hex() for t in trace] != res["trace"]:
        raise IslandError("island's states do not match the trace it reported")
    losses = res["losses"]
    return RoundWork(
        payload=payload,
        states=states,
        trace=trace,
        loss_before=_mnats(losses[0]),
        loss_after=_mnats(losses[-1]),
        tokens=plan.H * plan.tokens_per_step,
    )


def _island_round(
    plan: JobPlan,
    spec: ShardSpec,
    codec: Codec,
    binding: Binding,
    corpus_path: str | Path,
    poison: float,
    microbatches: int,
) -> dict[str, Any]:
    """The island's round.json: what every rank trains (trainer/round_dir.py reads it)."""
    return {
        "model": plan.model.to_dict(),
        "inner": plan.inner.to_dict(),
        "spec": spec.to_dict(),
        "H": plan.H,
        "k": plan.k,
        "codec": codec.name,
        "binding": {
            "provider": binding.provider.hex(),
            "job": binding.job,
            "round": binding.round,
            "base": binding.base_model_hash.hex(),
        },
        "corpus": str(corpus_path),
        "poison": poison,
        "microbatches": microbatches,
    }


def _run_island(
    d: Path, nproc: int, pipeline: int, device: str, root: Path, timeout_s: float | None
) -> int:
    """torchrun the island on round folder ``d`` (its log in ``d/island.log``); its exit code."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        str(nproc),
        "-m",
        "trainer.pipeline" if pipeline > 1 else "trainer.ddp",
        "--round",
        str(d),
        "--device",
        "cuda" if device.startswith("cuda") else "cpu",
    ] + (["--pipeline", str(pipeline)] if pipeline > 1 else [])
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(
        [str(root)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    with open(d / "island.log", "wb") as logf:
        return subprocess.run(
            cmd,
            check=False,
            cwd=root,
            env=env,
            stdout=logf,
            stderr=subprocess.STDOUT,
            timeout=timeout_s,
        ).returncode


def random_round(plan: JobPlan) -> RoundWork:
    """The random-root cheater: no training; random bytes for the payload and every 'state'."""
    states = [os.urandom(256) for _ in range(plan.H // plan.k + 1)]
    return RoundWork(
        payload=os.urandom(4096),
        states=states,
        trace=[hashlib.sha256(b).digest() for b in states],
        loss_before=5000,
        loss_after=4000,
        tokens=plan.H * plan.tokens_per_step,
    )


def random_probes(n_entries: int) -> list[list[int]]:
    """The random-root cheater's probes (tolerance mode): random integers, nothing measured."""
    return [
        [int.from_bytes(os.urandom(5), "big") - (1 << 39) for _ in range(PROBE_DIM)]
        for _ in range(n_entries)
    ]


# ----------------------------------------------------------------------------- verification


def verify(
    plan: JobPlan,
    start: bytes,
    end: bytes,
    spec: ShardSpec,
    *,
    start_hash: bytes,
    end_hash: bytes,
    base_model_hash: bytes,
    corpus: Corpus,
    device: str = "cpu",
) -> Verdict:
    """Re-execute the k steps after ``start`` and compare with ``end``
    (trainer.verify.verify_segment, in the job's determinism mode): both states must be the revealed
    trace entries."""
    ctx = VerifyContext.for_job(
        plan, spec, corpus=corpus, base_model_hash=base_model_hash, device=device
    )
    return verify_segment(
        ctx, start, end, expected_start_hash=start_hash, expected_end_hash=end_hash
    )


def trace_list_bytes(trace: list[bytes]) -> bytes:
    """The trace list blob a provider serves: its trace entries' 32-byte state hashes, in order.
    Self-checking: the verifier recomputes the bound trace root from it (abci_app/merkle.py)."""
    return b"".join(trace)


def parse_trace_list(buf: bytes) -> list[bytes]:
    """The state hashes of a trace list blob; ValueError if it is not a whole number of hashes."""
    if not buf or len(buf) % 32:
        raise ValueError(f"trace list of {len(buf)} bytes is not a list of 32-byte hashes")
    return [bytes(buf[i : i + 32]) for i in range(0, len(buf), 32)]


def fresh_carry_bytes() -> bytes:
    """The carry bytes every network round starts with (empty error-feedback carry)."""
    return carry_bytes(CompressionState())


def verify_round(
    plan: JobPlan,
    spec: ShardSpec,
    *,
    segments: list[int],
    trace: list[bytes],
    states: dict[int, bytes],
    carry: bytes,
    payload: bytes | None,
    trace_root: bytes,
    update_root: bytes,
    binding: Binding,
    corpus: Corpus,
    device: str = "cpu",
    base_params_hash: bytes | None = None,
    hidden: dict[int, bytes] | None = None,
    base: bytes | None = None,
) -> ChallengeVerdict:
    """The full check of one challenged commitment: the served trace list gives the committed
    trace root, trace entry 0 is the pinned fresh start (base model, step 0, zero moments, empty
    carry, the assigned shard), the committed payload is compress(θ_base − θ_H + e_prev) of the
    trace's last entry (trainer.verify.verify_challenge, which checks those), and every opened
    segment re-executes in the job's determinism mode, **each run of adjacent opened segments
    through from the run's start** (trainer.verify_run.verify_run: only a run's start is
    opened, every other start is the previous segment's secret end; the state the re-execution
    reached is the next segment's start). ``states`` holds entries 0, H/k and the start of each
    run, ``hidden`` the secret entries (entry -> the opened leaf hash; ``trace`` holds that leaf
    hash there, incentives.mask_trace); ``base_params_hash`` = ``params_hash`` of the round's
    base model bytes (they may carry the outer momentum). ``base``: the round's base model
    bytes; given, entry 0 is not needed in ``states``: every network round starts fresh, so the
    verifier builds entry 0 from the base and the public metadata and checks its hash against
    the trace (trainer.verify.verify_fresh_start; a run from segment 0 starts from the built
    bytes), and the payload check takes the base's bytes. The verdict's reason is the first
    failure's, but every run is re-executed (past a failed start, payload or segment check,
    from the verifier's own reached states): an invalid vote names the real re-executed end of
    every opened segment whose run start is held (a later panel's evidence, issue 31)."""
    hidden = dict(hidden or {})
    ch = Challenge(
        segments=[],  # start, payload, trace root and served states; the runs below
        trace=list(trace),
        states=dict(states),  # verify_challenge adds the built entry 0
        carry=carry,
        trace_root=trace_root,
        update_root=update_root,
        binding=binding,
        payload=payload,
        hidden=hidden,
    )
    ctx = VerifyContext.for_job(
        plan, spec, corpus=corpus, base_model_hash=base_params_hash, device=device
    )
    out = verify_challenge(ctx, ch, H=plan.H, base=base)
    n = plan.H // plan.k
    runs = compute_runs(segments)
    if any(not 0 <= s < n for run in runs for s in run):
        return (
            out
            if not out.valid
            else ChallengeVerdict(False, "a drawn segment is outside the trace")
        )
    # the runs' context: the base hash entry 0 must carry, one model and optimizer for every run
    run_ctx = replace(
        ctx,
        base_model_hash=base_params_hash
        or (params_hash_of_model(base) if base is not None else binding.base_model_hash),
        workspace={},
    )
    for run in runs:  # every run, even past a failure: the vote names each end re-executed
        _reexecute_run(run_ctx, ch, run, states, out)
    if out.valid:
        out.reason = f"start, payload and {len(out.segments)} segment(s) check out"
    return out


def _reexecute_run(
    ctx: VerifyContext,
    ch: Challenge,
    run: list[int],
    states: dict[int, bytes],
    out: ChallengeVerdict,
) -> None:
    """Re-execute one run of adjacent opened segments into ``out.segments``; the first failure
    (of the whole challenge) names ``out``'s reason. A run whose start is not held is not
    re-executed (its segments get no verdict: the worker pads those ends)."""

    def fail(reason: str) -> None:
        if out.valid:
            out.valid, out.reason = False, reason

    first = run[0]
    start = ch.states.get(first)
    if start is None or first in ch.hidden:
        return fail(f"trace entry {first} (a run's start) was not served")
    hidden = ch.hidden
    ends = [(hidden.get(s + 1), None if s + 1 in hidden else states.get(s + 1)) for s in run]
    if any(leaf is None and end is None for leaf, end in ends):
        return fail("an opened end is neither secret nor served")
    verdicts = verify_run(ctx, start, ends, expected_start_hash=bytes(ch.trace[first]))
    for s, v in zip(run, verdicts, strict=False):
        out.segments[s] = v
        if not v.valid:
            fail(f"segment {s}: {v.reason}")


def reexecute_segment(
    plan: JobPlan, spec: ShardSpec, start: bytes, *, corpus: Corpus, device: str = "cpu"
) -> bytes | None:
    """The state k steps after ``start`` (tolerance mode: the re-execution of one segment from
    a start the provider opened, trainer.verify_run.verify_run of a one-segment run with a
    secret end); None when the start does not re-execute (not a state of the job's model)."""
    ctx = VerifyContext.for_job(plan, spec, corpus=corpus, device=device)
    (v,) = verify_run(
        replace(ctx, tolerance=plan.tolerance if plan.tolerance is not None else 0.0),
        start,
        [(bytes(32), None)],
    )
    return v.reexecuted_state or None


def quality(plan: JobPlan, base_bytes: bytes, payload: bytes, corpus: Corpus) -> int:
    """0..10000: the update's held-out loss improvement in milli-nats (trainer.verify), clamped;
    a valid segment earns at least 1. Scored on one fixed public held-out batch: the first 32
    windows of the corpus's held-out *eval* half (``heldout_batches(block, 32, 1)``; the
    adaptive compression policy only sees the other half). One batch, not four: a valid vote
    pays this for every challenge, and four batches before and after cost 4-7 training steps of
    the job's model, more than a quarter of what a 15-segment challenge re-executes
    (benchmarks/RESULTS.md *Verification*); the aggregation screen keeps its own batches."""
    heldout = corpus.heldout_batches(plan.model.block_size, 32, 1)
    try:
        q = quality_score(load_model(base_bytes, plan.model), payload, heldout)
    except (ValueError, KeyError):
        return 1
    return max(1, min(MAX_QUALITY, q))


# ----------------------------------------------------------------------------- aggregation


def decode_update(plan: JobPlan, payload: bytes) -> dict[str, torch.Tensor]:
    """Decompressed Δ of one payload; ValueError (PayloadError) if it is not a valid update."""
    shapes = {n: tuple(p.shape) for n, p in GPT(plan.model).named_parameters()}
    p = decode(payload, expected_kind=KIND_UPDATE)
    delta = codec_from_payload(p).decompress(p, shapes)
    if set(delta) != set(shapes) or any(tuple(delta[n].shape) != shapes[n] for n in shapes):
        raise ValueError("update tensors do not match the model")
    if not all(bool(torch.isfinite(t).all()) for t in delta.values()):
        raise ValueError("update has NaN or inf")
    return delta


def aggregate_payloads(
    plan: JobPlan,
    base_bytes: bytes,
    payloads: Mapping[str, bytes | None],
    corpus: Corpus,
    rule: AggregationRule = AGGREGATION,
) -> tuple[NetworkAggregate, dict[str, str]]:
    """The next model of a round: its base model bytes and its accepted participants' payloads
    (provider address hex -> payload bytes already checked against the bound update root, or
    None when they did not match) -> (``trainer.diloco.network_outer_step`` on the decoded
    updates with the job's public held-out batches, excluded: provider -> why, for payloads
    that do not decode). What every worker attests and what anyone recomputes."""
    load_model(base_bytes, plan.model)  # JobError if the base is not this job's model
    deltas: dict[str, dict[str, torch.Tensor]] = {}
    excluded: dict[str, str] = {}
    for p in sorted(payloads):
        payload = payloads[p]
        try:
            if payload is None:
                raise ValueError("payload does not match the commitment")
            deltas[p] = decode_update(plan, payload)
        except ValueError as e:
            excluded[p] = str(e)
    heldout = corpus.heldout_batches(plan.model.block_size, 32, rule.heldout_batches)
    out = network_outer_step(base_bytes, deltas, heldout, rule)
    excluded.update(out.rejected)
    return out, excluded


def params_hash(model_bytes_: bytes) -> bytes:
    """The parameters hash of model bytes (trainer.state.params_hash_of_model): what trace
    entry 0 of a round on this base must carry (the bytes may also carry the outer momentum)."""
    return params_hash_of_model(model_bytes_)


def val_loss(plan: JobPlan, model_bytes_: bytes, corpus: Corpus) -> float:
    return evaluate(
        load_model(model_bytes_, plan.model), corpus.heldout_batches(plan.model.block_size, 32, 4)
    )


# ----------------------------------------------------------------------------- hardware

_MODEL_CHARS = re.compile(r"[^A-Za-z0-9 ._+-]")


def detect_hardware() -> list[str]:
    """What torch sees, as ``MODEL:COUNT:MEMORY_MIB`` entries: the CUDA GPUs by model, or one
    ``cpu:CORES:RAM_MIB`` entry when there is none."""
    if torch.cuda.is_available():
        by_model: dict[str, list[int]] = {}
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            name = _MODEL_CHARS.sub("", props.name).strip()[:64] or "gpu"
            by_model.setdefault(name, []).append(props.total_memory >> 20)
        return [f"{m}:{len(mem)}:{min(mem)}" for m, mem in sorted(by_model.items())]
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") >> 20
    return [f"cpu:{os.cpu_count() or 1}:{max(1, ram)}"]


def training_memory_bytes(plan: JobPlan) -> int:
    """What one round's training holds, roughly: the weights, their gradients, AdamW's two
    moments, the round's base and the error-feedback residual (6 float32 copies: 24 B/param),
    plus the activations of one batch (about 16 float32 values per token, layer and width: the
    attention and MLP inputs and outputs autograd keeps)."""
    n = gpt_num_params(plan.model)
    act = 16 * 4 * plan.batch_size * plan.model.block_size * plan.model.n_embd * plan.model.n_layer
    return 24 * n + act


def available_memory_bytes(device: str) -> int:
    """The device's memory: a CUDA device's total, else the machine's available RAM
    (/proc/meminfo MemAvailable; the physical RAM where that cannot be read)."""
    if device.startswith("cuda") and torch.cuda.is_available():
        return int(torch.cuda.get_device_properties(torch.device(device)).total_memory)
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def check_hardware(registered: list[dict[str, Any]]) -> str | None:
    """None when every registered entry is present here; else why not (the worker refuses)."""
    have: dict[str, tuple[int, int]] = {}
    for e in detect_hardware():
        m, c, mem = e.rsplit(":", 2)
        have[m.lower()] = (int(c), int(mem))
    for g in registered:
        name = str(g["model"]).lower()
        if name not in have:
            return (
                f"registered hardware {g['count']}x {g['model']} is not present (torch sees "
                f"{', '.join(detect_hardware())}): run on that machine or `loconet tx provider "
                "update --gpu ...`"
            )
        n_here, mib_here = have[name]
        if int(g["count"]) > n_here or int(g["memory_mib"]) > mib_here:
            return (
                f"registered {g['count']}x {g['model']} ({g['memory_mib']} MiB) but torch sees "
                f"{n_here} with {mib_here} MiB: update the registration with `loconet tx provider "
                "update --gpu ...`"
            )
    return None
