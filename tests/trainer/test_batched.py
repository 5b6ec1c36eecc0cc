"""The batched (vmap) benchmark simulation computes what the plain per-worker loop computes.
LOCONET_TEST_DEVICE=cuda runs it on a GPU (benchmarks/gpu_table.sh does)."""

import os

import pytest
import torch

from trainer.batched import RunConfig, lr_at, run, run_many, tokens_to_reach
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
@pytest.mark.parametrize(
    "H,compression,tol", [(3, "none", 1e-5), (3, "int8", 1e-3), (0, "none", 1e-5)]
)
def test_batched_matches_loop(corpus, H, compression, tol):
    torch.set_num_threads(1)
    rc = RunConfig(
        model=CFG,
        workers=3,
        batch_size=2,
        steps=6,
        H=H,
        seed=1,
        lr=3e-3,
        warmup=2,
        compression=compression,
        eval_every=3,
        device=DEVICE,
    )
    a = run(corpus, rc, impl="vmap")
    b = run(corpus, rc, impl="loop")
    _close(a["params"], b["params"], tol)
    assert abs(a["final_val_loss"] - b["final_val_loss"]) < 1e-4
    assert a["payload_bytes_per_worker"] == b["payload_bytes_per_worker"]
    # and training moved the model (the comparison is not between two untouched inits)
    assert a["final_val_loss"] < a["curve"][0]["val_loss"]


@pytest.mark.parametrize("H", [3, 0])
def test_run_many_equals_each_run_alone(corpus, H):
    """A table row's seeds (and an lr / outer / codec sweep) as ONE batched model: each run
    ends where the plain per-worker loop ends for it alone."""
    torch.set_num_threads(1)
    common = dict(model=CFG, workers=2, batch_size=2, steps=6, H=H, warmup=2, device=DEVICE)
    rcs = [
        RunConfig(seed=0, lr=3e-3, outer_lr=0.7, outer_momentum=0.9, **common),
        RunConfig(seed=1, lr=6e-3, outer_lr=1.0, outer_momentum=0.0, nesterov=False, **common),
        RunConfig(seed=0, lr=3e-3, outer_lr=0.5, outer_momentum=0.8, nesterov=False, **common),
        RunConfig(seed=2, lr=3e-3, compression="chunk:8/64+int2", ef_decay=0.95, **common),
    ]
    many = run_many(corpus, rcs)
    for rc, got in zip(rcs, many, strict=True):
        ref = run(corpus, rc, impl="loop")
        # int2: one float32 rounding flip is one quantization step (as int8 above)
        _close(got["params"], ref["params"], 1e-2 if rc.compression != "none" else 1e-5)
        assert got["payload_bytes_per_worker"] == ref["payload_bytes_per_worker"]
        assert [p["step"] for p in got["curve"]] == [p["step"] for p in ref["curve"]]
        assert abs(got["final_val_loss"] - ref["final_val_loss"]) < 1e-3
    # the runs really differ (seed, lr and, for DiLoCo, the outer settings change the result;
    # the baseline has no outer step, so runs 0 and 2 coincide there)
    assert len({round(r["final_val_loss"], 6) for r in many}) == (4 if H else 3)
    with pytest.raises(ValueError, match="differ in"):
        run_many(corpus, [rcs[0], RunConfig(**{**common, "steps": 7})])


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
    c = [
        {"tokens": 0, "val_loss": 5.0},
        {"tokens": 100, "val_loss": 3.0},
        {"tokens": 200, "val_loss": 2.0},
    ]
    assert tokens_to_reach(c, 2.5) == pytest.approx(150)
    assert tokens_to_reach(c, 1.0) is None


def test_compress_threads_do_not_change_the_result(corpus):
    """A round's payloads compressed in a thread pool (what a GPU run does with the host's CPU
    threads) give bit for bit the run a single thread gives; a mixed row (one run compressed,
    one not) keeps each run's payloads apart."""
    torch.set_num_threads(1)

    def go(threads: int) -> list[dict]:
        rcs = [
            RunConfig(
                model=CFG,
                workers=3,
                batch_size=2,
                steps=6,
                H=3,
                seed=s,
                compression=c,
                eval_every=3,
                device=DEVICE,
                compress_threads=threads,
            )
            for s, c in ((0, "int4"), (1, "none"), (2, "chunk:8/64+int2"))
        ]
        return run_many(corpus, rcs)

    one, four = go(1), go(4)
    for a, b in zip(one, four, strict=True):
        assert a["payload_bytes_per_worker"] == b["payload_bytes_per_worker"]
        for n in a["params"]:
            assert torch.equal(a["params"][n], b["params"][n]), n
    assert len({r["payload_bytes_per_worker"] for r in one}) == 3
