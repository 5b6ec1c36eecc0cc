"""ml.verify_round on runs of adjacent opened segments (issue 11): the verifier holds entries 0,
H/k and each run's start only (every other opened start is the previous segment's secret end),
re-executes each run through, and judges every end of it; a provider that faked a segment inside
a run (and committed to the faked trace) is refused at that segment, and the rest of the run is
still re-executed from the verifier's own reached state."""

from __future__ import annotations

import hashlib

from abci_app.jobs.incentives import compute_hidden_entries, mask_trace
from abci_app.merkle import hash_leaf
from node.worker import ml
from tests.worker.test_worker_verify import DATA, JOB4, MODEL
from trainer.commit import KIND_STATE, Binding, decode, encode, trace_root, update_root
from trainer.data import Corpus
from trainer.determinism import set_determinism


def _challenge(states: list[bytes], segs: list[int], binding: Binding, work: ml.RoundWork):
    trace = [hashlib.sha256(s).digest() for s in states]
    n = len(trace) - 1
    hidden = compute_hidden_entries(segs, n)
    held = {0, n} | {s for s in segs if s not in hidden}
    return {
        "segments": segs,
        "trace": mask_trace(trace, hidden),
        "states": {i: states[i] for i in held},
        "carry": ml.fresh_carry_bytes(),
        "payload": work.payload,
        "trace_root": trace_root(trace, binding),
        "update_root": update_root(work.payload, binding),
        "binding": binding,
        "hidden": {i: hash_leaf(trace[i]) for i in hidden},
    }


def test_runs_are_reexecuted_through_and_a_faked_inner_segment_is_refused():
    set_determinism(0, threads=1)
    plan = ml.JobPlan.from_job(JOB4)
    base = ml.initial_model_bytes(ml.config_from_job(MODEL), 0)
    corpus = Corpus(DATA)
    spec = plan.shard_spec(1, "prov", 2)
    binding = Binding(b"\x01" * 20, 3, 1, hashlib.sha256(base).digest())
    codec = plan.compression().choose(
        1, {n: tuple(p.shape) for n, p in ml.load_model(base, plan.model).named_parameters()}
    )
    work = ml.train_round(plan, base, corpus, spec, binding, codec)
    assert len(work.states) == 5
    kw = {"corpus": corpus, "base_params_hash": ml.params_hash(base)}
    # honest: two runs ({0} and {2, 3}: the second ends at H/k), every end reached
    v = ml.verify_round(plan, spec, **_challenge(work.states, [0, 2, 3], binding, work), **kw)
    assert v.valid, v.reason
    assert "start, payload and 3 segment(s)" in v.reason
    assert [v.segments[s].reexecuted_hash for s in (0, 2, 3)] == [
        hashlib.sha256(work.states[i]).hexdigest() for i in (1, 3, 4)
    ]
    # the provider faked entry 2 (the end of segment 1, the start of segment 2) and committed to
    # that trace: the run {1, 2} is refused at segment 1, the verifier never starts from the fake;
    # it goes on from its own reached state, so segment 2's verdict names the true end (issue 31)
    p = decode(work.states[2], expected_kind=KIND_STATE)
    for e in p.entries.values():
        e.parts["param"] = e.parts["param"] * 1.01
    faked = [*work.states[:2], encode(p), *work.states[3:]]
    v = ml.verify_round(plan, spec, **_challenge(faked, [1, 2], binding, work), **kw)
    assert not v.valid and v.reason.startswith("segment 1:")
    assert "not the committed trace leaf" in v.reason
    assert [v.segments[s].reexecuted_hash for s in (1, 2)] == [
        hashlib.sha256(work.states[i]).hexdigest() for i in (2, 3)
    ]
    assert v.segments[2].valid  # its committed end is the honest one, reached from the true start
