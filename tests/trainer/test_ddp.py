"""A provider with several devices: its island trains data-parallel (DDP, gloo on CPU, 2
processes under torchrun), ends where a single-device provider ends to float rounding, and is
re-executed bit for bit by ONE process computing the same two slices (exact-mode verification)."""

import json
from pathlib import Path

import pytest
import torch

from tests.trainer.island_run import single_run, torchrun
from trainer.model import init_model
from trainer.state import (
    load_state,
    make_inner_optimizer,
    run_inner_steps,
    state_bytes,
)
from trainer.verify import VerifyContext, verify_segment


def _torchrun(out: Path, steps: int) -> None:
    torchrun(
        "trainer.ddp",
        2,
        "--steps",
        str(steps),
        "--batch-size",
        "4",
        "--shard",
        "3",
        "--out",
        str(out),
    )


@pytest.mark.slow  # two torchrun processes importing torch: ~10 s of CPU
def test_ddp_island_gloo_two_processes_matches_single_device(tmp_path):
    steps = 3
    _torchrun(tmp_path / "run", steps)
    r0 = json.loads((tmp_path / "run" / "rank0.json").read_text())
    r1 = json.loads((tmp_path / "run" / "rank1.json").read_text())
    assert r0["world"] == 2
    # one island, one model: both ranks hold the same bytes, rank 0's state is the commitment
    assert r0["model_hash"] == r1["model_hash"]
    ddp = load_state((tmp_path / "run" / "end.state").read_bytes())
    assert ddp.inner_step == steps and ddp.shard == 3

    # the same steps on one device, full batch
    one = single_run(4)
    corpus, cfg, model, icfg, spec = one.corpus, one.cfg, one.model, one.icfg, one.spec
    losses, _ = run_inner_steps(model, one.opt, icfg, corpus, spec, 0, steps)
    init = dict(init_model(cfg, 0).named_parameters())
    for n, p in model.named_parameters():
        q = dict(ddp.model.named_parameters())[n]
        # float rounding only (the ranks' half-batch means summed by gloo); AdamW's first steps
        # amplify it on parameters whose gradient is ~0 (the attention key bias), hence 1e-5
        assert (p - q).abs().max().item() < 1e-5, n
        assert (p - q).norm().item() <= 1e-4 * p.norm().item(), n
        assert not torch.equal(q, init[n]), n  # the island did train
    assert all(abs(a - b) < 1e-5 for a, b in zip(losses, r0["losses"], strict=True))

    # one verifier process re-executes the island's steps as 2 slices: the same bytes
    start = state_bytes(
        init_model(cfg, 0),
        make_inner_optimizer(init_model(cfg, 0), icfg),
        icfg,
        round=0,
        inner_step=0,
        shard=3,
        slices=2,
    )
    end = (tmp_path / "run" / "end.state").read_bytes()
    v = verify_segment(VerifyContext(corpus, spec, steps, tolerance=None), start, end)
    assert v.valid and v.reason == "identical state hash", v.reason
    # a tampered end state is refused (exact mode)
    bad = load_state(end)
    with torch.no_grad():
        next(bad.model.parameters()).mul_(1.001)
    v = verify_segment(VerifyContext(corpus, spec, steps, tolerance=None), start, bad.to_bytes())
    assert not v.valid
    # the island's slicing is part of what is re-executed: the same steps on the full batch
    # (no slices) differ in the last bits, so an island trace claimed as single-device fails
    fake = load_state(end)
    fake.slices = 1
    start1 = state_bytes(
        init_model(cfg, 0),
        make_inner_optimizer(init_model(cfg, 0), icfg),
        icfg,
        round=0,
        inner_step=0,
        shard=3,
    )
    v = verify_segment(VerifyContext(corpus, spec, steps, tolerance=None), start1, fake.to_bytes())
    assert not v.valid and "exact mode" in v.reason
