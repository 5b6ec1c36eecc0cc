"""Re-execution of a segment: honest passes, every cheat is rejected; quality score."""

import hashlib

import pytest
import torch

from trainer.commit import KIND_STATE, decode, encode, trace_proof, trace_root, verify_trace_entry
from trainer.compression import CompressionState, make_codec
from trainer.data import ShardSpec
from trainer.determinism import set_determinism
from trainer.model import init_model
from trainer.state import (
    InnerConfig,
    make_inner_optimizer,
    model_hash,
    run_inner_steps,
    state_bytes,
)
from trainer.verify import DEFAULT_TOLERANCE, make_segment, quality_score, verify_segment

K = 8
ICFG = InnerConfig()


@pytest.fixture(scope="module")
def setup(corpus, tiny_cfg):
    set_determinism(0)
    spec = ShardSpec(dataset_id=corpus.id, seed=11, job=1, round=0, provider="prov-a",
                     block_size=tiny_cfg.block_size)
    base = init_model(tiny_cfg, 0)
    base_hash = model_hash(base)
    m = init_model(tiny_cfg, 0)
    opt = make_inner_optimizer(m, ICFG)
    seg0 = make_segment(m, ICFG, corpus, spec, 0, K, opt=opt)  # steps 0..K-1
    seg1 = make_segment(m, ICFG, corpus, spec, K, K, opt=opt)  # steps K..2K-1
    return dict(spec=spec, base_hash=base_hash, seg0=seg0, seg1=seg1)


def forge(state: bytes, **meta) -> bytes:
    p = decode(state, expected_kind=KIND_STATE)
    p.meta.update(meta)
    return encode(p)


def map_params(state: bytes, fn) -> bytes:
    p = decode(state, expected_kind=KIND_STATE)
    for e in p.entries.values():
        e.parts["param"] = fn(e.parts["param"].clone())
    return encode(p)


def test_honest_segment_reexecutes_to_identical_hash(setup, corpus, tiny_cfg):
    s, e = setup["seg1"]
    v = verify_segment(s, setup["spec"], K, e, corpus=corpus, inner=ICFG, model=tiny_cfg,
                       expected_start_hash=hashlib.sha256(s).digest())
    assert v.valid and v.distance == 0.0 and v.reexecuted_hash == v.claimed_hash
    s0, e0 = setup["seg0"]
    v0 = verify_segment(s0, setup["spec"], K, e0, corpus=corpus, base_model_hash=setup["base_hash"])
    assert v0.valid


def test_honest_segment_passes_tolerance_mode_on_another_numerical_path(setup, corpus):
    s, _ = setup["seg1"]
    # the "provider" computed with 2 threads and non-deterministic kernels
    from trainer.state import load_state

    torch.use_deterministic_algorithms(False)
    torch.set_num_threads(2)
    try:
        ls = load_state(s)
        run_inner_steps(ls.model, ls.opt, ls.icfg, corpus, setup["spec"], K, K)
        e2 = ls.to_bytes(inner_step=2 * K)
    finally:
        set_determinism(0)
    v = verify_segment(s, setup["spec"], K, e2, corpus=corpus, tolerance=DEFAULT_TOLERANCE)
    assert v.valid, v.reason


def test_invalid_fewer_steps_than_k(setup, corpus):
    s, _ = setup["seg1"]
    from trainer.state import load_state

    ls = load_state(s)
    run_inner_steps(ls.model, ls.opt, ls.icfg, corpus, setup["spec"], K, K - 1)
    short = ls.to_bytes(inner_step=2 * K - 1)
    v = verify_segment(s, setup["spec"], K, short, corpus=corpus)
    assert not v.valid and "fewer or more steps" in v.reason
    # relabelled to look like k steps: caught by re-execution, in both modes
    relabelled = forge(short, inner_step=2 * K, adam_step=2 * K)
    assert not verify_segment(s, setup["spec"], K, relabelled, corpus=corpus).valid
    v = verify_segment(s, setup["spec"], K, relabelled, corpus=corpus, tolerance=DEFAULT_TOLERANCE)
    assert not v.valid and v.distance > DEFAULT_TOLERANCE


def test_invalid_different_shard(setup, corpus):
    s, _ = setup["seg1"]
    from trainer.state import load_state

    other = ShardSpec(**{**setup["spec"].to_dict(), "provider": "prov-b"})
    # another provider's spec gives other batches (its shard index may coincide; its batch
    # order, keyed by the provider, does not)
    x_other, _ = corpus.batch(other, K, "cpu")
    x_mine, _ = corpus.batch(setup["spec"], K, "cpu")
    assert not torch.equal(x_other, x_mine)
    ls = load_state(s)
    run_inner_steps(ls.model, ls.opt, ls.icfg, corpus, other, K, K)
    e_other = ls.to_bytes(inner_step=2 * K)
    for tol in (None, DEFAULT_TOLERANCE):
        v = verify_segment(s, setup["spec"], K, e_other, corpus=corpus, tolerance=tol)
        assert not v.valid and v.distance > DEFAULT_TOLERANCE


@pytest.mark.parametrize("cheat", ["scaled", "noised"])
def test_invalid_scaled_or_noised_end_state(setup, corpus, cheat):
    s, e = setup["seg1"]
    g = torch.Generator().manual_seed(0)
    fn = (lambda t: t * 1.001) if cheat == "scaled" else (
        lambda t: t + 1e-4 * torch.randn(t.shape, generator=g))
    bad = map_params(e, fn)
    for tol in (None, DEFAULT_TOLERANCE):
        v = verify_segment(s, setup["spec"], K, bad, corpus=corpus, tolerance=tol)
        assert not v.valid and v.distance > DEFAULT_TOLERANCE


def test_invalid_replayed_old_state(setup, corpus):
    s1, _ = setup["seg1"]
    _, e0 = setup["seg0"]  # e0 == s1: the segment's own start (an old state)
    assert not verify_segment(s1, setup["spec"], K, e0, corpus=corpus).valid
    relabelled = forge(e0, inner_step=2 * K, adam_step=2 * K)
    v = verify_segment(s1, setup["spec"], K, relabelled, corpus=corpus, tolerance=DEFAULT_TOLERANCE)
    assert not v.valid


def test_invalid_state_from_a_different_base_model(setup, corpus, tiny_cfg):
    other = init_model(tiny_cfg, 99)
    s, e = make_segment(other, ICFG, corpus, setup["spec"], 0, K)
    v = verify_segment(s, setup["spec"], K, e, corpus=corpus, base_model_hash=setup["base_hash"])
    assert not v.valid and "base model" in v.reason
    # a later segment is tied to the committed trace instead
    honest_trace = [hashlib.sha256(x).digest() for x in (setup["seg0"][0], setup["seg1"][0], setup["seg1"][1])]
    root = trace_root(honest_trace)
    assert verify_trace_entry(root, honest_trace[1], 1, 3, trace_proof(honest_trace, 1))
    assert not verify_trace_entry(root, hashlib.sha256(s).digest(), 1, 3, trace_proof(honest_trace, 1))
    v = verify_segment(s, setup["spec"], K, e, corpus=corpus, expected_start_hash=honest_trace[1])
    assert not v.valid and "trace entry" in v.reason


def test_invalid_malformed_states_and_k(setup, corpus):
    s, e = setup["seg1"]
    assert not verify_segment(s[:100], setup["spec"], K, e, corpus=corpus).valid
    assert not verify_segment(s, setup["spec"], K, e[:-1], corpus=corpus).valid
    assert not verify_segment(s, setup["spec"], 0, e, corpus=corpus).valid
    wrong_round = ShardSpec(**{**setup["spec"].to_dict(), "round": 1})
    assert not verify_segment(s, wrong_round, K, e, corpus=corpus).valid
    assert not verify_segment(s, setup["spec"], K, e, corpus=corpus,
                              inner=InnerConfig(lr=1e-2)).valid


def test_quality_score(corpus, tiny_cfg):
    set_determinism(0)
    base = init_model(tiny_cfg, 0)
    spec = ShardSpec(dataset_id=corpus.id, seed=0, job=0, round=0, provider="q",
                     block_size=tiny_cfg.block_size)
    local = init_model(tiny_cfg, 0)
    opt = make_inner_optimizer(local, ICFG)
    run_inner_steps(local, opt, ICFG, corpus, spec, 0, 30)
    delta = {n: (p0.detach() - p1.detach()) for (n, p0), (_, p1) in
             zip(base.named_parameters(), local.named_parameters())}
    payload = encode(make_codec("int8").compress(delta, CompressionState()))
    heldout = corpus.heldout_batches(tiny_cfg.block_size, 16, 2)
    good = quality_score(base, payload, heldout)
    assert isinstance(good, int) and good > 100  # the update helps by > 0.1 nat
    g = torch.Generator().manual_seed(0)
    noise = {n: torch.randn(d.shape, generator=g) * 0.2 for n, d in delta.items()}
    bad = quality_score(base, noise, heldout)
    assert bad < 0  # a random large update hurts
    from trainer.state import model_payload

    assert quality_score(encode(model_payload(base)), payload, heldout) == good
