"""ms per global step of trainer/batched.py: vmap vs the per-worker loop (DiLoCo H=10 and the
AllReduce baseline), tiny model, 4 workers x 8 x 32 tokens, 1 thread; two repetitions.

    .venv/bin/python benchmarks/batched_speed.py [DATA]
"""
import time, torch, sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from trainer.batched import RunConfig, run, heldout_full
from trainer.data import Corpus
from trainer.model import GPTConfig
torch.set_num_threads(1)
c = Corpus.from_file(sys.argv[1] if len(sys.argv) > 1 else "../shared/data/tinyshakespeare.txt")
held = heldout_full(c, 32, 256, 'cpu')[:1]
def t(H, impl, steps=100):
    rc = RunConfig(model=GPTConfig.preset("tiny"), workers=4, batch_size=8, steps=steps, H=H, eval_every=1000)
    s = time.perf_counter(); run(c, rc, impl=impl, heldout=held); return (time.perf_counter() - s) / steps * 1000
t(10, "vmap", 10); t(0, "vmap", 10)  # warm (lazy imports)
for rep in range(2):
    for H in (10, 0):
        print(f"rep {rep} H={H}: vmap {t(H, 'vmap'):.1f} ms/step, loop {t(H, 'loop'):.1f} ms/step", flush=True)
