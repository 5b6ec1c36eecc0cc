"""A provider's island on several GPUs: the inner steps data-parallel with torch.distributed.

One provider = one commitment, whatever its GPU count: every rank holds the same model and
AdamW state; inner step s takes the spec's batch (``Corpus.batch(spec, s)``, the same batch a
single-device provider and the verifier use), rank r computes the loss of rows
``[r·B/n, (r+1)·B/n)``, DDP averages the gradients (= the full batch's mean gradient, since the
slices are equal), then every rank clips and steps identically. Rank 0 writes the state bytes
/ trace; the others hold the same model (the test checks their hashes agree).

Backends: NCCL on CUDA (rank r on ``cuda:LOCAL_RANK``), gloo on CPU. Run under torchrun:

    torchrun --standalone --nproc_per_node 8 -m trainer.ddp --data corpus.txt --steps 50 \\
        --device cuda --out island/

Determinism: DDP sums the ranks' gradients in the backend's order, and each rank's loss is a mean
over its slice, so the result equals the single-device step to float rounding, not bit for bit:
a multi-GPU provider belongs in a ``tolerance``-mode job (trainer/determinism.py), or in an exact
job whose stack pins the same world size and backend. Within one world size and backend a
rerun is bitwise reproducible on CPU/gloo (set_determinism; tested).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from trainer.data import Corpus, ShardSpec, synthetic_text
from trainer.determinism import set_determinism
from trainer.model import GPTConfig, init_model
from trainer.state import InnerConfig, make_inner_optimizer, model_hash, state_bytes


def island_steps(model, opt, icfg: InnerConfig, corpus: Corpus, spec: ShardSpec, start_step: int,
                 n_steps: int, *, device: str) -> list[float]:
    """Inner steps on this rank's slice of each batch; ``model`` is the plain GPT (wrapped
    here). Returns the full-batch mean loss of each step (averaged over ranks)."""
    world, rank = dist.get_world_size(), dist.get_rank()
    if spec.batch_size % world:
        raise ValueError(f"batch size {spec.batch_size} is not a multiple of the {world} ranks")
    b = spec.batch_size // world
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[torch.device(device).index] if device.startswith("cuda") else None,
        broadcast_buffers=False)
    losses = []
    for i in range(n_steps):
        x, y = corpus.batch(spec, start_step + i, device)
        x, y = x[rank * b:(rank + 1) * b], y[rank * b:(rank + 1) * b]
        model.train()
        opt.zero_grad(set_to_none=True)
        _, loss = ddp(x, y)
        loss.backward()  # DDP all-reduces (averages) the gradients here
        if icfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), icfg.grad_clip, foreach=False)
        opt.step()
        t = loss.detach().clone()
        dist.all_reduce(t)
        losses.append(float(t) / world)
    return losses


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", help="text file (default: synthetic text, for tests)")
    ap.add_argument("--model-size", default="tiny", choices=["tiny", "small", "medium", "large"])
    ap.add_argument("--seed", type=int, default=0, help="initial model (init_model)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--shard", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="cpu (gloo) or cuda (NCCL, cuda:LOCAL_RANK)")
    ap.add_argument("--out", required=True, help="folder: rank 0 writes end.state; every rank rank<r>.json")
    a = ap.parse_args(argv)
    cuda = a.device.startswith("cuda")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = f"cuda:{local}" if cuda else "cpu"
    if cuda:
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if cuda else "gloo")
    try:
        set_determinism(a.seed)
        corpus = Corpus.from_file(a.data) if a.data else Corpus(synthetic_text(50_000, seed=1))
        cfg = GPTConfig.preset(a.model_size)
        icfg = InnerConfig()
        model = init_model(cfg, a.seed, device)
        opt = make_inner_optimizer(model, icfg)
        spec = ShardSpec(dataset_id=corpus.id, seed=a.seed, job=0, round=0, provider="island",
                         n_shards=16, batch_size=a.batch_size, block_size=cfg.block_size,
                         shard=a.shard)
        losses = island_steps(model, opt, icfg, corpus, spec, 0, a.steps, device=device)
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        rank = dist.get_rank()
        if rank == 0:
            sb = state_bytes(model, opt, icfg, round=0, inner_step=a.steps, shard=a.shard)
            (out / "end.state").write_bytes(sb)
        (out / f"rank{rank}.json").write_text(json.dumps(
            {"rank": rank, "world": dist.get_world_size(), "losses": losses,
             "model_hash": model_hash(model).hex()}))
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
