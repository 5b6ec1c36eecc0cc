"""Re-execution of a run of adjacent opened segments (trainer.verify_run, issue 11): only the
run's start is opened, every later start is the previous segment's secret end, so the verifier
re-executes the run through from its start; exact mode reaches the committed ends byte for byte,
a faked segment inside the run is caught there, tolerance mode carries each end's probe, and
shift_state moves a re-executed end onto the provider's start."""

import hashlib

import pytest
import torch

from abci_app.merkle import hash_leaf
from trainer.commit import KIND_STATE, decode, encode
from trainer.data import ShardSpec
from trainer.determinism import set_determinism
from trainer.model import init_model
from trainer.probe import compute_probe
from trainer.state import InnerConfig, make_inner_optimizer, model_hash
from trainer.verify import VerifyContext, make_segment, state_distance
from trainer.verify_run import shift_state, verify_run

K = 2
ICFG = InnerConfig()


@pytest.fixture(scope="module")
def trace(corpus, tiny_cfg):
    """Five trace entries (four honest K-step segments from the base model) and the spec."""
    set_determinism(0)
    spec = ShardSpec(
        dataset_id=corpus.id,
        seed=11,
        job=1,
        round=0,
        provider="prov-a",
        block_size=tiny_cfg.block_size,
    )
    base_hash = model_hash(init_model(tiny_cfg, 0))
    m = init_model(tiny_cfg, 0)
    opt = make_inner_optimizer(m, ICFG)
    states = []
    for i in range(4):
        start, end = make_segment(m, ICFG, corpus, spec, i * K, K, opt=opt)
        if not states:
            states.append(start)
        assert start == states[-1]  # the trace is continuous
        states.append(end)
    return {"spec": spec, "states": states, "base_hash": base_hash}


def _leaf(b: bytes) -> bytes:
    return hash_leaf(hashlib.sha256(b).digest())


def test_exact_run_reaches_every_committed_end(trace, corpus, tiny_cfg):
    st = trace["states"]
    ends = [(_leaf(st[i]), None) for i in (2, 3, 4)]
    vs = verify_run(
        VerifyContext(corpus, trace["spec"], K, inner=ICFG, model=tiny_cfg),
        st[1],
        ends,
        expected_start_hash=hashlib.sha256(st[1]).digest(),
    )
    assert [v.valid for v in vs] == [True] * 3
    assert [v.reexecuted_hash for v in vs] == [hashlib.sha256(st[i]).hexdigest() for i in (2, 3, 4)]
    # a public last end (entry H/k) is judged on its bytes; the run from entry 0 checks the base
    vs = verify_run(
        VerifyContext(corpus, trace["spec"], K, base_model_hash=trace["base_hash"]),
        st[0],
        [(_leaf(st[1]), None), (None, st[2])],
    )
    assert [v.valid for v in vs] == [True, True]


def test_a_faked_segment_inside_a_run_is_caught(trace, corpus):
    """The provider faked segment 2 (its committed end is other bytes) but kept segment 3
    honest from the faked state: the run stops at segment 2, whose committed leaf the
    re-execution does not reach."""
    st = trace["states"]
    p = decode(st[3], expected_kind=KIND_STATE)
    for e in p.entries.values():
        e.parts["param"] = e.parts["param"] + 1e-3
    faked = encode(p)
    vs = verify_run(
        VerifyContext(corpus, trace["spec"], K), st[1], [(_leaf(st[2]), None), (_leaf(faked), None)]
    )
    assert [v.valid for v in vs] == [True, False]
    assert "not the committed trace leaf" in vs[1].reason
    # a wrong start is refused before anything runs
    (v,) = verify_run(
        VerifyContext(corpus, trace["spec"], K),
        st[1],
        [(_leaf(st[2]), None)],
        expected_start_hash=b"x" * 32,
    )
    assert not v.valid and "start state" in v.reason


def test_tolerance_run_carries_the_probe_of_every_end(trace, corpus):
    st = trace["states"]
    ends = [(_leaf(st[2]), None), (_leaf(st[3]), None)]
    vs = verify_run(VerifyContext(corpus, trace["spec"], K, tolerance=1e-3), st[1], ends)
    assert all(v.valid for v in vs)
    assert [v.probe for v in vs] == [compute_probe(st[1], st[2]), compute_probe(st[2], st[3])]
    assert [v.reexecuted_state for v in vs] == [st[2], st[3]]


def test_tolerance_run_keeps_each_probe_for_the_opened_end_pass(trace, corpus):
    """verify_run keeps the probe of every re-executed end keyed by the start it re-ran from
    (the run's start, then its own reached states), so verify_opened_end of an end byte for
    byte the re-execution takes the shortcut; its verdicts equal the long way's (empty cache),
    and a served end later in the run (entry H/k) gets the probe from the state before it."""
    import trainer.verify as V
    from trainer.verify import verify_opened_end

    st = trace["states"]
    with V._PROBE_LOCK:
        saved = dict(V._PROBE_CACHE)
        V._PROBE_CACHE.clear()
    try:
        ends = [(_leaf(st[2]), None), (_leaf(st[3]), None), (None, st[4])]
        vs = verify_run(VerifyContext(corpus, trace["spec"], K, tolerance=1e-3), st[1], ends)
        assert all(v.valid for v in vs)
        assert [v.probe for v in vs] == [compute_probe(st[i], st[i + 1]) for i in (1, 2, 3)]
        for i in (1, 2, 3):
            h = hashlib.sha256(st[i + 1]).digest()
            assert V._recall_probe(st[i], h) == compute_probe(st[i], st[i + 1])

        def judge(i, probe):
            return verify_opened_end(
                st[i],
                vs[i - 1].reexecuted_state,
                st[i + 1],
                tolerance=1e-3,
                end_leaf=_leaf(st[i + 1]),
                claimed_probe=probe,
                tolerance_ppm=1_000,
            )

        probes = {
            "right": lambda i: compute_probe(st[i], st[i + 1]),
            "wrong": lambda i: [0] * len(vs[0].probe),
        }
        cached = {(i, n): judge(i, f(i)) for i in (1, 2) for n, f in probes.items()}
        with V._PROBE_LOCK:
            V._PROBE_CACHE.clear()
        fresh = {(i, n): judge(i, f(i)) for i in (1, 2) for n, f in probes.items()}
        for key in cached:
            assert (cached[key].valid, cached[key].reason) == (fresh[key].valid, fresh[key].reason)
        assert all(cached[(i, "right")].valid for i in (1, 2))
        assert not any(cached[(i, "wrong")].valid for i in (1, 2))
    finally:
        with V._PROBE_LOCK:
            V._PROBE_CACHE.clear()
            V._PROBE_CACHE.update(saved)


def test_shift_state_moves_a_reexecuted_end_onto_the_providers_start(trace):
    """A verifier's own start off by an offset, and its end off by the same offset: shifted
    onto the provider's start, the end is the provider's (up to float rounding) and the
    displacement distance is ~0, where the plain distance carries the whole offset."""
    st = trace["states"]

    def offset(b: bytes, x: float) -> bytes:
        p = decode(b, expected_kind=KIND_STATE)
        for e in p.entries.values():
            e.parts["param"] = e.parts["param"] + x
        return encode(p)

    own, end = offset(st[2], 1e-4), offset(st[3], 1e-4)
    shifted = shift_state(end, own, st[2])
    assert decode(shifted, expected_kind=KIND_STATE).meta == decode(end).meta
    assert state_distance(st[2], shifted, st[3])["param"] < 1e-5
    assert state_distance(own, end, st[3])["param"] > 1e-2
    a = decode(shifted, expected_kind=KIND_STATE)
    b = decode(st[3], expected_kind=KIND_STATE)
    for name, e in a.entries.items():
        assert torch.allclose(e.parts["param"], b.entries[name].parts["param"], atol=1e-6)
