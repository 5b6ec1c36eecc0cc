"""A provider's pipeline-parallel island (trainer/pipeline.py): the job's GPT split into stages
across real processes (torchrun, gloo on CPU), microbatches through GPipe or 1F1B, and D
data-parallel replicas of the pipeline. The island's trace states and payload are byte for byte
what ONE process computes with the same slicing (``sliced_grads(slices, microbatches)``), so its
commitment is a single process's and a single-process verifier re-executes its segments in
exact mode; a corrupted island state fails that re-execution."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
import torch

from tests.trainer.island_run import single_run, torchrun
from trainer.carry import EMPTY_CARRY_HASH
from trainer.commit import Binding, PayloadError, encode, trace_root, update_root
from trainer.compression import CompressionState, make_codec
from trainer.data import Corpus, ShardSpec, synthetic_text
from trainer.determinism import set_determinism
from trainer.model import GPT, GPTConfig, init_model
from trainer.pipeline import StageModule, gpt_param_names, slicing, stage_layers
from trainer.state import (
    InnerConfig,
    check_microbatches,
    fresh_start_state,
    load_state,
    make_inner_optimizer,
    run_inner_steps,
    sliced_grads,
    state_bytes,
)
from trainer.verify import VerifyContext, verify_segment


def _torchrun(nproc: int, *args: str) -> None:
    torchrun("trainer.pipeline", nproc, *args)


def test_stage_split_is_consecutive_balanced_and_bounded():
    assert stage_layers(5, 2) == [range(3), range(3, 5)]
    assert stage_layers(4, 4) == [range(i, i + 1) for i in range(4)]
    assert stage_layers(6, 1) == [range(6)]
    with pytest.raises(ValueError, match="at most one stage per layer"):
        stage_layers(2, 3)
    with pytest.raises(ValueError, match="at least 1 stage"):
        stage_layers(2, 0)


@pytest.mark.parametrize("stages", [2, 3])
def test_stages_hold_the_models_parameters_once_under_its_names(stages):
    """Every GPT parameter lives on exactly one stage, by the GPT's own name (no tied weights:
    the head is not the embedding), in the GPT's parameter order stage after stage (the order the
    cross-stage gradient norm is taken in)."""
    cfg = GPTConfig(block_size=8, n_layer=3, n_head=2, n_embd=8)
    names = [[n for n, _ in StageModule(cfg, s, stages).named_parameters()] for s in range(stages)]
    flat = [n for part in names for n in part]
    assert flat == gpt_param_names(cfg) == [n for n, _ in GPT(cfg).named_parameters()]
    assert "wte.weight" in names[0] and "lm_head.weight" in names[-1]


def test_slicing_named_by_the_trace():
    assert slicing(1, 4) == (4, 1)  # one replica: one level of slicing, as a DP island of 4
    assert slicing(2, 2) == (2, 2)
    assert slicing(3, 1) == (3, 1)  # replicas of one microbatch: trainer/ddp.py's naming
    check_microbatches(2, 2, 8)
    with pytest.raises(ValueError, match="needs slices > 1"):
        check_microbatches(1, 2, 8)
    with pytest.raises(ValueError, match="does not split"):
        check_microbatches(2, 3, 8)


def test_two_level_slicing_is_one_level_when_either_is_one():
    """sliced_grads(n, 1) and the pipeline's (1 replica of m microbatches = slices m) are the
    existing one-level slicing; (2, 2) adds each slice's microbatch sums first, a different
    order of the same sum: equal to float rounding, not bit for bit."""
    set_determinism(0)
    cfg = GPTConfig.preset("tiny")
    corpus = Corpus(synthetic_text(20_000, seed=3))
    spec = ShardSpec(
        dataset_id=corpus.id,
        seed=0,
        job=0,
        round=0,
        provider="p",
        n_shards=4,
        batch_size=8,
        block_size=cfg.block_size,
        shard=1,
    )
    x, y = corpus.batch(spec, 0)

    def grads(slices: int, micro: int) -> list[torch.Tensor]:
        m = init_model(cfg, 0)
        sliced_grads(m, x, y, slices, micro)
        return [p.grad.clone() for p in m.parameters()]  # type: ignore[union-attr]

    four, two_by_two = grads(4, 1), grads(2, 2)
    pairs = list(zip(four, two_by_two, strict=True))
    assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in pairs)
    assert any(not torch.equal(a, b) for a, b in pairs)  # really another order of the sum
    with pytest.raises(PayloadError, match="microbatches"):
        fresh_start_state(
            state_bytes_model(cfg), cfg, InnerConfig(), round=0, shard=0, microbatches=2
        )


def state_bytes_model(cfg: GPTConfig) -> bytes:
    from trainer.state import model_payload

    return encode(model_payload(init_model(cfg, 0)))


def _single_process_end(steps: int, batch: int, slices: int, micro: int) -> tuple[bytes, list]:
    """trainer.pipeline main's run (tiny model, seed 0, synthetic text, shard 3) on one
    process, slicing each step's batch as the island does."""
    one = single_run(batch)
    model, opt, icfg = one.model, one.opt, one.icfg
    losses, _ = run_inner_steps(
        model, opt, icfg, one.corpus, one.spec, 0, steps, slices=slices, microbatches=micro
    )
    end = state_bytes(
        model, opt, icfg, round=0, inner_step=steps, shard=3, slices=slices, microbatches=micro
    )
    return end, losses


@pytest.mark.slow  # torchrun processes importing torch
@pytest.mark.parametrize(
    "nproc,batch,micro,schedule",
    [(2, 4, 2, "gpipe"), (2, 8, 4, "1f1b"), (4, 8, 2, "gpipe")],
    ids=["2-stage-gpipe", "2-stage-1f1b", "2x2-dp-pp"],
)
def test_island_end_state_is_a_single_processs_bit_for_bit(tmp_path, nproc, batch, micro, schedule):
    """2 stages (GPipe, 1F1B) and 2 replicas x 2 stages, gloo, in real processes: the end state
    rank 0 writes is the exact bytes one process reaches slicing the batch the same way, and
    the losses are the same floats."""
    steps = 3
    _torchrun(
        nproc,
        "--pipeline",
        "2",
        "--schedule",
        schedule,
        "--steps",
        str(steps),
        "--batch-size",
        str(batch),
        "--microbatches",
        str(micro),
        "--shard",
        "3",
        "--out",
        str(tmp_path),
    )
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(nproc)]
    slices, mb = slicing(nproc // 2, micro)
    end, losses = _single_process_end(steps, batch, slices, mb)
    assert (tmp_path / "end.state").read_bytes() == end
    assert all(r["losses"] == losses for r in ranks)
    ls = load_state(end)
    assert (ls.slices, ls.microbatches) == (slices, mb) and ls.inner_step == steps
    # each stage held its share: the two stages' parameters add up to the model's
    assert ranks[0]["stage_params"] + ranks[1]["stage_params"] == ls.model.num_params()
    assert 0 < ranks[0]["stage_params"] < ls.model.num_params()


MODEL = {"n_layers": 2, "n_heads": 2, "d_model": 16, "context_len": 16, "vocab_size": 256}


def _plan(data: bytes):
    from node.worker import ml

    job: dict[str, Any] = {
        "id": 7,
        "spec": {
            "model": MODEL,
            "inner_steps": 4,
            "trace_interval": 2,
            "tokens_per_step": 64,  # batch 4
            "num_shards": 4,
            "dataset_id": Corpus(data).id,
            "compression_policy": "dense+int8",
            "determinism_mode": "exact",
        },
    }
    return ml.JobPlan.from_job(job)


@pytest.mark.slow  # a 2-stage torchrun island, then one-process re-execution of its segments
def test_worker_island_round_commits_what_one_process_commits_and_verifies_alone(tmp_path):
    """ml.train_island(pipeline=2) (what `provider run --pipeline 2` runs each round): the
    states, the trace root and the update root are exactly those of one process training the
    round with the same slicing; verify_segment on ONE process accepts every segment in exact
    mode, and a state with one parameter nudged by 1e-6 fails it."""
    from node.worker import ml

    data = synthetic_text(30_000, seed=5)
    corpus = Corpus(data)
    plan = _plan(data)
    base = ml.initial_model_bytes(plan.model, 0)
    spec = plan.shard_spec(1, "loco1island", 2)
    binding = Binding(b"\x07" * 20, plan.job_id, 1, hashlib.sha256(base).digest())
    codec = make_codec("dense+int8")
    set_determinism(0, threads=1)
    work = ml.train_island(
        plan, base, corpus, spec, binding, codec, procs=1, pipeline=2, microbatches=2
    )

    # one process, the same round: slices = 2 (1 replica x 2 microbatches)
    model = ml.load_model(base, plan.model)
    theta0 = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = make_inner_optimizer(model, plan.inner)
    kept: list[bytes] = []
    _, trace = run_inner_steps(
        model,
        opt,
        plan.inner,
        corpus,
        spec,
        0,
        plan.H,
        trace_every=plan.k,
        keep_states=kept,
        carry=EMPTY_CARRY_HASH,
        slices=2,
    )
    delta = {n: (theta0[n] - p.detach()).float() for n, p in model.named_parameters()}
    payload = encode(codec.compress(delta, CompressionState()))
    assert work.states == kept and work.trace == trace
    assert work.payload == payload
    assert trace_root(work.trace, binding) == trace_root(trace, binding)
    assert update_root(work.payload, binding) == update_root(payload, binding)
    assert load_state(work.states[0]).slices == 2
    assert work.states[0] == fresh_start_state(
        base, plan.model, plan.inner, round=1, shard=spec.shard_index(), slices=2
    )

    for i in range(len(work.states) - 1):  # every segment, re-executed by this one process
        v = verify_segment(VerifyContext(corpus, spec, plan.k), work.states[i], work.states[i + 1])
        assert v.valid, v.reason
    bad = load_state(work.states[1])
    with torch.no_grad():
        next(bad.model.parameters()).view(-1)[0] += 1e-6
    forged = bad.to_bytes()
    v = verify_segment(VerifyContext(corpus, spec, plan.k), work.states[0], forged)
    assert not v.valid, v.reason
