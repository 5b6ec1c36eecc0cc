"""A job must never cost an honest provider running the reference worker anything (issue 31,
item 1): before it trains a round it is drawn in, the worker checks that it can do the work by
the job's own terms and declines in time (MsgDeclineRound, free) when it cannot: a job its
trainer refuses (here: a vocabulary it does not model), a model whose training does not fit the
device's memory, a round its measured speed cannot finish before the commit window closes, and
inputs (base model, dataset) that cannot be fetched. Before, the first case was skipped in
silence (a missed commit, slashed) and the others trained into a missed deadline."""

from __future__ import annotations

import time
from typing import Any

from node.worker import ml
from node.worker.train import INPUT_TRIES
from node.worker.worker import ProviderWorker
from tests.worker.test_worker_stack import MODEL, Stand, job


def real(st: Stand) -> Stand:
    """The Stand with the worker's own commit path (the Stand records commits otherwise)."""
    st.w.do_commit = ProviderWorker.do_commit.__get__(st.w)  # type: ignore[method-assign]
    return st


def declines(st: Stand) -> list[Any]:
    return [m for m in st.sent if m.WhichOneof("sum") == "decline_round"]


def test_a_job_the_trainer_refuses_is_declined_not_ignored(tmp_path) -> None:
    st = Stand(tmp_path, job("", "tolerance"))
    j = job("", "tolerance")
    j["spec"]["model"] = dict(MODEL, vocab_size=1000)  # this trainer models bytes only
    st.w._plans.clear()
    rounds = {"rounds": [st.commit_round(rn=1)]}
    st.w.nodes.query_json = lambda *a, **k: rounds  # type: ignore[method-assign]
    st.w._job(j, height=50)
    assert 3 in st.w._unfit and "vocab_size" in st.w._unfit[3]
    (d,) = declines(st)
    assert (d.decline_round.job_id, d.decline_round.round) == (3, 1)
    st.close()


def test_a_model_that_does_not_fit_the_device_is_declined(tmp_path, monkeypatch) -> None:
    st = real(Stand(tmp_path, job("", "tolerance")))
    monkeypatch.setattr(ml, "available_memory_bytes", lambda device: 1 << 10)  # 1 KiB
    r = st.commit_round()
    st.w._round(job("", "tolerance"), r, height=50)
    assert len(declines(st)) == 1 and st.w._training is None  # nothing trained
    st.close()


def test_the_estimate_of_training_memory_grows_with_the_model() -> None:
    small = ml.JobPlan.from_job(job("", "tolerance"))
    j = job("", "tolerance")
    j["spec"]["model"] = dict(MODEL, d_model=64, n_layers=4)
    big = ml.JobPlan.from_job(j)
    assert ml.training_memory_bytes(big) > ml.training_memory_bytes(small) > 0
    assert ml.available_memory_bytes("cpu") > 1 << 20


def test_a_round_the_measured_speed_cannot_finish_in_the_window_is_declined(tmp_path) -> None:
    st = real(Stand(tmp_path, job("", "tolerance")))
    st.w._heights = [(40, 0.0), (45, 50.0), (50, 100.0)]  # blocks every 10 s
    assert st.w.block_s() == 10.0
    r = st.commit_round()  # commit window: commitments up to 99, height 50: ~480 s left
    st.w._step_s[3] = 100.0  # 4 steps x 100 s: fits
    assert st.w.infeasible(job("", "tolerance"), r, 50) is None
    st.w._step_s[3] = 200.0  # 4 x 200 s = 800 s: does not
    why = st.w.infeasible(job("", "tolerance"), r, 50)
    assert why is not None and "800 s" in why and "480 s left" in why
    st.w._round(job("", "tolerance"), r, height=50)
    assert len(declines(st)) == 1 and st.w._training is None
    st.close()


def test_inputs_that_cannot_be_fetched_are_retried_then_declined(tmp_path) -> None:
    st = real(Stand(tmp_path, job("", "tolerance")))

    def unreachable(*a: Any, **k: Any) -> bytes:
        raise OSError("no blob source answers")

    st.w._base = unreachable  # type: ignore[method-assign]
    j, r = job("", "tolerance"), st.commit_round()
    tries = 0
    while tries < 2 * INPUT_TRIES:
        tries += 1
        st.w._round(j, r, height=50)  # starts the training task
        deadline = time.monotonic() + 30
        while st.w._training is not None and not st.w._training[1].done():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        st.w._backoff.clear()  # the retry backoff is not what this test is about
        st.w._round(j, r, height=50)  # collects the failure
        st.w._backoff.clear()
        if declines(st):
            break
    assert tries == INPUT_TRIES, tries
    assert len(declines(st)) == 1
    st.close()
