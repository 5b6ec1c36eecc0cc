"""`provider run --pipeline S`: the worker trains its round on a pipeline-parallel island
(trainer/pipeline.py, torchrun, gloo on CPU), commits once, and a verifier worker with ONE
process re-executes the opened segment in exact mode; the flags are checked with clear errors,
and the feasibility check knows that each stage holds only its share of the model."""

from __future__ import annotations

from typing import Any

import pytest

from node.cli.main import main
from node.worker import ml
from node.worker.context import check_procs
from node.worker.worker import WorkerError
from tests.worker.test_worker_verify import JOB, judged, worker

MODEL2 = {"n_layers": 2, "n_heads": 2, "d_model": 16, "context_len": 16, "vocab_size": 256}
JOB2: dict[str, Any] = {"id": 3, "spec": dict(JOB["spec"], model=MODEL2)}  # batch 4


@pytest.mark.slow  # a torchrun island of 2 (or 4) gloo processes, then one verifier process
@pytest.mark.parametrize(
    "behaviour,procs", [("honest", 1), ("poison", 1), ("honest", 2)], ids=["2", "2-poison", "2x2"]
)
def test_pipeline_island_round_is_judged_by_a_single_process_verifier(tmp_path, behaviour, procs):
    """A 2-stage island (and a 2x2 one: 2 replicas of 2 stages) trains the round; its states name
    the slicing (1 replica of 4 microbatches: slices 4; 2 x 2: slices 2, microbatches 2), the
    verifier (one process) builds entry 0 itself and re-executes segment 0: the honest island is
    VALID, the poisoned one (honest trace, scaled update) INVALID on the payload."""
    box: dict = {}
    (valid, quality, reached, why), true_end = judged(
        tmp_path, behaviour, 0, procs=procs, job=JOB2, pipeline=2, out=box
    )
    assert box["slicing"] == ((4, 1) if procs == 1 else (2, 2))
    assert box["trace"][0].hex() not in box["fetched"]  # entry 0 built from public data
    if behaviour == "honest":
        assert valid, why
        assert reached == [true_end] and 1 <= quality <= ml.MAX_QUALITY
    else:
        assert not valid and why.startswith("payload:") and "update roots differ" in why


@pytest.mark.parametrize(
    "argv,msg",
    [
        (["--pipeline", "0"], "--pipeline must be at least 1 stage"),
        (["--pipeline", "2", "--microbatches", "-1"], "--microbatches must be at least 1"),
        (["--microbatches", "4"], "--microbatches needs --pipeline S > 1"),
    ],
)
def test_provider_run_refuses_a_bad_pipeline(tmp_path, capsys, argv, msg):
    from node.client.keys import Keyring

    Keyring(tmp_path).add("alice")
    rc = main(["provider", "run", "--home", str(tmp_path), "--from", "alice", *argv])
    err = capsys.readouterr().err
    assert rc == 1 and msg in err, err


def test_pipeline_on_cuda_needs_procs_times_stages_gpus(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    with pytest.raises(WorkerError, match=r"--procs 2 x --pipeline 2 = 4 processes.*sees 3 GPU"):
        check_procs(2, "cuda", 2)
    check_procs(1, "cuda", 3)
    check_procs(2, "cpu", 4)  # gloo processes on CPU: any count


def _round() -> dict[str, Any]:
    return {"job_id": 3, "round": 1, "windows": {"commit_deadline": 100}}


def test_infeasible_knows_island_memory(tmp_path, monkeypatch):
    """A model bigger than one GPU (by training_memory_bytes) is declined by a plain worker and
    taken by a 2-stage island whose stages each fit; a CPU island is judged by what all its
    processes hold together; more stages than layers, or a batch that does not split into the
    microbatches, are declined naming why."""
    plan = ml.JobPlan.from_job(JOB2)
    need = ml.training_memory_bytes(plan)
    per, total = ml.island_memory_bytes(plan, 1, 2)
    assert per < need < total  # a stage holds less than the whole; all of them (and rank 0) more
    gpu = (per + need) // 2  # a GPU the whole model does not fit, each stage does
    w = worker(tmp_path, "prov", "honest", lambda h: b"")
    w._plans[3] = plan
    monkeypatch.setattr(ml, "available_memory_bytes", lambda device: gpu)
    w.device = "cuda"
    why = w.infeasible(JOB2, _round(), height=10)
    assert why is not None and "training needs" in why and f"{gpu >> 20} MiB" in why
    w.cfg.pipeline = 2
    assert w.infeasible(JOB2, _round(), height=10) is None
    monkeypatch.setattr(ml, "available_memory_bytes", lambda device: per - 1)
    why = w.infeasible(JOB2, _round(), height=10)
    assert why is not None and "largest of the island's 2 stages" in why
    # on CPU the stages share the machine's RAM: the island's sum counts
    w.device = "cpu"
    monkeypatch.setattr(ml, "available_memory_bytes", lambda device: total - 1)
    why = w.infeasible(JOB2, _round(), height=10)
    assert why is not None and "island's 2 processes need" in why
    monkeypatch.setattr(ml, "available_memory_bytes", lambda device: total)
    assert w.infeasible(JOB2, _round(), height=10) is None
    w.cfg.pipeline = 3  # the model has 2 layers
    why = w.infeasible(JOB2, _round(), height=10)
    assert why is not None and "at most one stage per layer" in why and "--pipeline 3" in why
    w.cfg.pipeline, w.cfg.microbatches = 2, 3  # batch 4 does not split into 3
    why = w.infeasible(JOB2, _round(), height=10)
    assert why is not None and "does not split" in why


def test_default_microbatches_divide_the_replicas_rows():
    assert ml.default_microbatches(8, 1, 2) == 4  # up to 2S
    assert ml.default_microbatches(4, 2, 2) == 2
    assert ml.default_microbatches(6, 1, 4) == 6
    assert ml.default_microbatches(7, 1, 2) == 1  # a prime batch: one microbatch
    assert ml.default_microbatches(8, 1, 1) == 1


def test_stage_params_add_up_to_the_model():
    cfg = ml.JobPlan.from_job(JOB2).model
    for s in (1, 2):
        assert sum(ml.stage_num_params(cfg, s)) == ml.gpt_num_params(cfg)
