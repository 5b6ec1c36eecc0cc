"""The batched (vmap) benchmark simulation computes what the plain per-worker loop computes.
LOCONET_TEST_DEVICE=cuda runs it on a GPU (benchmarks/gpu_table.sh does)."""

import os

import pytest
import torch

from trainer.batched import RunConfig, lr_at, run, tokens_to_reach
from trainer.data import Corpus, synthetic_text
from trainer.model import GPTConfig

CFG = GPTConfig(block_size=16, n_layer=1, n_head=2, n_embd=16)
DEVICE = os.environ.get("LOCONET_TEST_DEVICE", "cpu")


@pytest.fixture(scope="module")
def corpus():
    return Corpus(synthetic_text(20_000, seed=3))


def _close(a, b, tol):
    for n in a:
        d = (a[n] - b[n]).abs().max().item()
        assert d <= tol * (1 + a[n].abs().max().item()), (n, d)


# int8: a float32 difference in the last bits can move a value across an int8 rounding
# boundary, one quantization step (absmax/127 of a block of Δ) times the outer lr
@pytest.mark.parametrize("H,compression,tol", [(3, "none", 1e-5), (3, "int8", 1e-3),
                                               (0, "none", 1e-5)])
def test_batched_matches_loop(corpus, H, compression, tol):
    torch.set_num_threads(1)
    rc = RunConfig(model=CFG, workers=3, batch_size=2, steps=6, H=H, seed=1, lr=3e-3, warmup=2,
                   compression=compression, eval_every=3, device=DEVICE)
    a = run(corpus, rc, impl="vmap")
    b = run(corpus, rc, impl="loop")
    _close(a["params"], b["params"], tol)
    assert abs(a["final_val_loss"] - b["final_val_loss"]) < 1e-4
    assert a["payload_bytes_per_worker"] == b["payload_bytes_per_worker"]
    # and training moved the model (the comparison is not between two untouched inits)
    assert a["final_val_loss"] < a["curve"][0]["val_loss"]


def test_seed_changes_init_and_data(corpus):
    rc = RunConfig(model=CFG, workers=2, batch_size=2, steps=2, H=0, seed=0)
    a = run(corpus, rc)
    rc.seed = 1
    b = run(corpus, rc)
    assert a["curve"][0]["val_loss"] != b["curve"][0]["val_loss"]


def test_schedule_warmup_then_cosine():
    rc = RunConfig(model=CFG, steps=100, warmup=10, lr=1.0, min_lr_frac=0.1)
    assert lr_at(rc, 0) == pytest.approx(0.1)
    assert lr_at(rc, 9) == pytest.approx(1.0)
    assert lr_at(rc, 10) == pytest.approx(1.0)
    assert lr_at(rc, 99) == pytest.approx(0.1)
    assert all(lr_at(rc, s) >= lr_at(rc, s + 1) for s in range(10, 99))


def test_tokens_to_reach_interpolates():
    c = [{"tokens": 0, "val_loss": 5.0}, {"tokens": 100, "val_loss": 3.0},
         {"tokens": 200, "val_loss": 2.0}]
    assert tokens_to_reach(c, 2.5) == pytest.approx(150)
    assert tokens_to_reach(c, 1.0) is None
