"""What tests/trainer/test_ddp.py and test_pipeline.py share: an island started under torchrun
(real gloo processes) and the single-process run that its steps mode is compared with."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from trainer.data import Corpus, ShardSpec, synthetic_text
from trainer.determinism import set_determinism
from trainer.model import GPT, GPTConfig, init_model
from trainer.state import InnerConfig, make_inner_optimizer

ROOT = Path(__file__).resolve().parents[2]


def torchrun(module: str, nproc: int, *args: str) -> None:
    """``torchrun --standalone --nproc_per_node nproc -m module args`` from the repository, one
    thread per process; fails the test with the island's log tail."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        str(nproc),
        "-m",
        module,
        *args,
    ]
    # no limit of its own: torch's import alone took 40 s on a loaded machine, and a hard 240 s
    # failed there; pytest-timeout's (pyproject.toml) ends a hung run, and run() kills the child
    p = subprocess.run(cmd, check=False, cwd=ROOT, env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]


@dataclass
class SingleRun:
    """The start of the island's steps mode (``trainer.ddp``/``trainer.pipeline`` without
    ``--round``: tiny model, seed 0, synthetic text, shard 3) on one process."""

    corpus: Corpus
    cfg: GPTConfig
    model: GPT
    icfg: InnerConfig
    opt: torch.optim.AdamW
    spec: ShardSpec


def single_run(batch_size: int) -> SingleRun:
    set_determinism(0)
    corpus = Corpus(synthetic_text(50_000, seed=1))
    cfg = GPTConfig.preset("tiny")
    model = init_model(cfg, 0)
    icfg = InnerConfig()
    spec = ShardSpec(
        dataset_id=corpus.id,
        seed=0,
        job=0,
        round=0,
        provider="island",
        n_shards=16,
        batch_size=batch_size,
        block_size=cfg.block_size,
        shard=3,
    )
    return SingleRun(corpus, cfg, model, icfg, make_inner_optimizer(model, icfg), spec)
