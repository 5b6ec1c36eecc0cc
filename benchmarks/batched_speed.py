"""ms per global step of trainer/batched.py: vmap vs the per-worker loop (DiLoCo H=10 and the
AllReduce baseline), tiny model, 4 workers x 8 x 32 tokens, 1 thread; two repetitions.

    .venv/bin/python benchmarks/batched_speed.py [DATA]     # --device cuda on a GPU machine
    .venv/bin/python benchmarks/batched_speed.py --steps 5   # a smoke run (gpu_table.sh --dry-run)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from trainer.batched import RunConfig, check_device, heldout_full, run
from trainer.data import Corpus, default_corpus_bytes
from trainer.model import GPTConfig


def main() -> int:
    argv = sys.argv[1:]
    opts = {"--steps": "100", "--device": "cpu"}
    for k in opts:  # an option's value is not the data file
        if k in argv:
            i = argv.index(k)
            opts[k] = argv[i + 1]
            del argv[i : i + 2]
    steps, dev = int(opts["--steps"]), opts["--device"]
    args = [a for a in argv if not a.startswith("--")]
    check_device(dev)
    torch.set_num_threads(1)
    default = Path("../shared/data/tinyshakespeare.txt")
    if args:
        corpus = Corpus.from_file(args[0])
    else:  # the shared corpus when present, else the built-in one (a clean clone in CI)
        corpus = (
            Corpus.from_file(str(default)) if default.is_file() else Corpus(default_corpus_bytes())
        )
    held = heldout_full(corpus, 32, 256, dev)[:1]

    def ms(H: int, impl: str, steps: int = steps) -> float:
        rc = RunConfig(
            model=GPTConfig.preset("tiny"),
            workers=4,
            batch_size=8,
            steps=steps,
            H=H,
            eval_every=1000,
            device=dev,
        )
        t0 = time.perf_counter()
        run(corpus, rc, impl=impl, heldout=held)
        return (time.perf_counter() - t0) / steps * 1000

    ms(10, "vmap", min(10, steps)), ms(0, "vmap", min(10, steps))  # warm up (lazy imports)
    for rep in range(2):
        for H in (10, 0):
            print(
                f"rep {rep} H={H}: vmap {ms(H, 'vmap'):.1f} ms/step, "
                f"loop {ms(H, 'loop'):.1f} ms/step",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
