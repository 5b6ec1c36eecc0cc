"""A provider's island on several GPUs: the inner steps data-parallel with torch.distributed.

One provider = one commitment, whatever its GPU count: every rank holds the same model and
AdamW state; inner step s takes the spec's batch (``Corpus.batch(spec, s)``, the same batch a
single-device provider and the verifier use), rank r computes the loss of rows
``[r·B/n, (r+1)·B/n)``, DDP hands the ranks' gradients to ``ordered_mean_hook`` (an all-gather,
then the n slice gradients summed in rank order and divided by n, the same bytes on every
rank), then every rank clips and steps identically. Rank 0 writes the state bytes / trace /
payload; the others hold the same model (the test checks their hashes agree).

**Re-execution by one process.** The island's gradient is exactly
``trainer.state.sliced_grads(model, x, y, n)``: the n slices' gradients computed one after the
other in one process and summed in the same order. Every trace state names ``slices = n``
(trainer/state.py), and ``verify_segment`` re-runs a segment as n slices, so a verifier with one
device reproduces an island's state bytes, in exact mode too, on the island's stack (same torch,
device class and dtype: ``stack_id``); tolerance mode across stacks as for any provider. DDP's
default hook (a ring all-reduce, each rank's gradient pre-divided by n) sums in the backend's
order, which no single process can replay bit for bit; the ordered all-gather costs n x the
gradient's bytes per step instead of 2(n-1)/n x, a price paid on the island's own fast links.

Backends: NCCL on CUDA (rank r on ``cuda:LOCAL_RANK``), gloo on CPU. Run under torchrun:

    torchrun --standalone --nproc_per_node 8 -m trainer.ddp --data corpus.txt --steps 50 \\
        --device cuda --out island/
    torchrun --standalone --nproc_per_node 2 -m trainer.ddp --round DIR   # one worker round

``--round DIR`` is what ``loconet provider run --procs N`` starts for each round
(node/worker/ml.py:train_island): DIR/round.json names the job's configs, the shard spec, H, k,
the codec, the binding and the corpus file; DIR/base.model holds the base model bytes; rank 0
writes DIR/out/ (the trace states, the payload, result.json). trainer/round_dir.py reads and
writes that directory for this island and the pipeline's (trainer/pipeline.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from trainer.commit import KIND_MODEL, decode
from trainer.data import Corpus, ShardSpec, synthetic_text
from trainer.determinism import set_determinism
from trainer.model import GPT, GPTConfig, init_model
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
    make_inner_optimizer,
    model_hash,
    state_bytes,
)


def ordered_mean_hook(_state, bucket) -> torch.futures.Future:
    """DDP comm hook: all-gather the ranks' gradient buckets, sum them in rank order, divide by
    the world size. Every rank gets the same bytes, and they equal ``sliced_grads``'s."""
    t = bucket.buffer()
    world = dist.get_world_size()
    parts = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(parts, t)
    acc = parts[0].clone()
    for q in parts[1:]:
        acc.add_(q)
    fut: torch.futures.Future = torch.futures.Future()
    fut.set_result(acc.div_(world))
    return fut


# DDP checks the hook's return annotation as an object (this module's are strings)
ordered_mean_hook.__annotations__["return"] = torch.futures.Future[torch.Tensor]


def wrap(model: GPT, device: str) -> torch.nn.parallel.DistributedDataParallel:
    ddp = torch.nn.parallel.DistributedDataParallel(
        model,
        device_ids=[torch.device(device).index] if device.startswith("cuda") else None,
        broadcast_buffers=False,
    )
    ddp.register_comm_hook(None, ordered_mean_hook)
    return ddp


def _step(ddp, model, opt, icfg: InnerConfig, x, y) -> float:
    """One island step on this rank's slice of the batch; returns the batch's mean loss."""
    world, rank = dist.get_world_size(), dist.get_rank()
    b = x.shape[0] // world
    model.train()
    opt.zero_grad(set_to_none=True)
    _, loss = ddp(x[rank * b : (rank + 1) * b], y[rank * b : (rank + 1) * b])
    loss.backward()  # the hook leaves (g_0 + ... + g_{n-1}) / n in every rank's .grad
    if icfg.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), icfg.grad_clip, foreach=False)
    opt.step()
    t = loss.detach().clone()
    dist.all_reduce(t)
    return float(t) / world


def _check_world(batch_size: int) -> int:
    world = dist.get_world_size()
    if batch_size % world:
        raise ValueError(f"batch size {batch_size} is not a multiple of the {world} ranks")
    return world


def island_steps(
    model,
    opt,
    icfg: InnerConfig,
    corpus: Corpus,
    spec: ShardSpec,
    start_step: int,
    n_steps: int,
    *,
    device: str,
) -> list[float]:
    """Inner steps on this rank's slice of each batch; ``model`` is the plain GPT (wrapped
    here). Returns the full-batch mean loss of each step (averaged over ranks)."""
    _check_world(spec.batch_size)
    ddp = wrap(model, device)
    return [
        _step(ddp, model, opt, icfg, *corpus.batch(spec, start_step + i, device))
        for i in range(n_steps)
    ]


def island_round(model: GPT, job: RoundJob, *, device: str):
    """One provider round on the island (``trainer.diloco.commit_round``'s artifacts): H steps
    from ``model`` (the base) with a fresh AdamW state and an empty carry, the state every k
    steps (naming ``slices`` = world size), the payload compress(θ_base − θ_H). Every rank
    trains; rank 0 returns the ``RoundArtifacts``, the others None. ``job.poison`` scales Δ (the
    worker's test behaviour)."""
    spec, icfg = job.spec, job.icfg
    world, rank = _check_world(spec.batch_size), dist.get_rank()
    base = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = make_inner_optimizer(model, icfg)
    cstate, carry, ch = fresh_carry()
    shard = spec.shard_index()
    states: list[bytes] = []

    def snap(s: int) -> None:
        if rank == 0:
            states.append(
                state_bytes(
                    model,
                    opt,
                    icfg,
                    round=spec.round,
                    inner_step=s,
                    shard=shard,
                    carry=ch,
                    slices=world,
                )
            )

    ddp = wrap(model, device)
    losses = []
    for s in range(job.H):
        if s % job.k == 0:
            snap(s)
        losses.append(_step(ddp, model, opt, icfg, *job.corpus.batch(spec, s, device)))
    snap(job.H)
    if rank != 0:
        return None
    with torch.no_grad():
        delta = {
            n: (base[n] - p.detach()).float().cpu() * job.poison
            for n, p in model.named_parameters()
        }
    return round_artifacts(job, states, delta, cstate, carry, losses)


def _load_model(buf: bytes, cfg: GPTConfig, device: str) -> GPT:
    p = decode(buf, expected_kind=KIND_MODEL)
    if p.meta.get("model") != cfg.to_dict():
        raise ValueError("base model's config differs from the round's model")
    with torch.random.fork_rng(devices=[]):
        model = GPT(cfg)
    named = dict(model.named_parameters())
    if set(named) != set(p.entries):
        raise ValueError("base model's tensors do not match the model")
    with torch.no_grad():
        for n, t in named.items():
            t.copy_(p.entries[n].parts["param"])
    return model.to(device)


def run_round_dir(d: Path, device: str) -> None:
    """``--round DIR``: one worker round (trainer/round_dir.py)."""
    job = read_round(d)
    model = _load_model(job.base_bytes(), job.cfg, device)
    art = island_round(model, job, device=device)
    if art is not None:
        write_round_out(d, art, model_hash(model))


def _parse(argv) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--round", metavar="DIR", help="train one worker round described in DIR")
    ap.add_argument("--data", help="text file (default: synthetic text, for tests)")
    ap.add_argument("--model-size", default="tiny", choices=["tiny", "small", "medium", "large"])
    ap.add_argument("--seed", type=int, default=0, help="initial model (init_model)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--shard", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="cpu (gloo) or cuda (NCCL, cuda:LOCAL_RANK)")
    ap.add_argument("--out", help="folder: rank 0 writes end.state; every rank rank<r>.json")
    a = ap.parse_args(argv)
    if not a.round and not a.out:
        ap.error("--out is required (or --round DIR)")
    return a


def run_steps(a: argparse.Namespace, device: str) -> None:
    """Without ``--round``: ``--steps`` island steps from ``init_model(--seed)`` on the
    synthetic text (or ``--data``); rank 0 writes end.state, every rank rank<r>.json (what the
    tests compare with one process)."""
    corpus = Corpus.from_file(a.data) if a.data else Corpus(synthetic_text(50_000, seed=1))
    cfg = GPTConfig.preset(a.model_size)
    icfg = InnerConfig()
    model = init_model(cfg, a.seed, device)
    opt = make_inner_optimizer(model, icfg)
    spec = ShardSpec(
        dataset_id=corpus.id,
        seed=a.seed,
        job=0,
        round=0,
        provider="island",
        n_shards=16,
        batch_size=a.batch_size,
        block_size=cfg.block_size,
        shard=a.shard,
    )
    losses = island_steps(model, opt, icfg, corpus, spec, 0, a.steps, device=device)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rank = dist.get_rank()
    if rank == 0:
        sb = state_bytes(
            model,
            opt,
            icfg,
            round=0,
            inner_step=a.steps,
            shard=a.shard,
            slices=dist.get_world_size(),
        )
        (out / "end.state").write_bytes(sb)
    (out / f"rank{rank}.json").write_text(
        json.dumps(
            {
                "rank": rank,
                "world": dist.get_world_size(),
                "losses": losses,
                "model_hash": model_hash(model).hex(),
            }
        )
    )


def main(argv=None) -> int:
    a = _parse(argv)
    device = init_group(a.device)
    try:
        set_determinism(a.seed)
        if a.round:
            run_round_dir(Path(a.round), device)
        else:
            run_steps(a, device)
        # every rank is done before any tears gloo down: a rank still inside
        # destroy_process_group when its peer has exited aborted ("terminate called without an
        # active exception", SIGABRT), and torchrun then failed the whole island
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
