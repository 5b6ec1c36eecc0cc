"""Re-execution of a segment: honest passes, every cheat is rejected; quality score."""

import hashlib
from dataclasses import replace

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
)
from trainer.verify import (
    DEFAULT_TOLERANCE,
    VerifyContext,
    make_segment,
    quality_score,
    verify_segment,
)

K = 8
ICFG = InnerConfig()


@pytest.fixture(scope="module")
def setup(corpus, tiny_cfg):
    set_determinism(0)
    spec = ShardSpec(
        dataset_id=corpus.id,
        seed=11,
        job=1,
        round=0,
        provider="prov-a",
        block_size=tiny_cfg.block_size,
    )
    base = init_model(tiny_cfg, 0)
    base_hash = model_hash(base)
    m = init_model(tiny_cfg, 0)
    opt = make_inner_optimizer(m, ICFG)
    seg0 = make_segment(m, ICFG, corpus, spec, 0, K, opt=opt)  # steps 0..K-1
    seg1 = make_segment(m, ICFG, corpus, spec, K, K, opt=opt)  # steps K..2K-1
    return {"spec": spec, "base_hash": base_hash, "seg0": seg0, "seg1": seg1}


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
    v = verify_segment(
        VerifyContext(corpus, setup["spec"], K, inner=ICFG, model=tiny_cfg),
        s,
        e,
        expected_start_hash=hashlib.sha256(s).digest(),
    )
    assert v.valid and v.distance == 0.0 and v.reexecuted_hash == v.claimed_hash
    s0, e0 = setup["seg0"]
    v0 = verify_segment(
        VerifyContext(corpus, setup["spec"], K, base_model_hash=setup["base_hash"]), s0, e0
    )
    assert v0.valid


def test_secret_end_is_judged_by_its_leaf_hash(setup, corpus, tiny_cfg):
    """Exact mode with the end committed but not revealed: the verifier re-executes, checks its
    state's hash against the opened leaf hash, and that hash is its evidence; a wrong leaf is
    invalid, and a secret end cannot be judged in tolerance mode."""
    from abci_app.merkle import hash_leaf

    s, e = setup["seg1"]
    true_end = hashlib.sha256(e).digest()
    v = verify_segment(
        VerifyContext(corpus, setup["spec"], K, inner=ICFG),
        s,
        None,
        expected_end_leaf=hash_leaf(true_end),
    )
    assert v.valid and v.reexecuted_hash == true_end.hex(), v.reason
    # the leaf of another state (the start: what a lazy verifier could name) is not it
    bad = verify_segment(
        VerifyContext(corpus, setup["spec"], K),
        s,
        None,
        expected_end_leaf=hash_leaf(hashlib.sha256(s).digest()),
    )
    assert not bad.valid and bad.reexecuted_hash == true_end.hex()
    tol = verify_segment(
        VerifyContext(corpus, setup["spec"], K, tolerance=DEFAULT_TOLERANCE),
        s,
        None,
        expected_end_leaf=hash_leaf(true_end),
    )
    # tolerance mode: nothing to compare yet (the end is opened after the vote); the verdict
    # carries the probe of the re-executed end, the vote's evidence, and its bytes
    from trainer.probe import compute_probe

    assert tol.valid and tol.reexecuted_state == e, tol.reason
    assert tol.probe == compute_probe(s, e)


def test_opened_end_is_judged_in_tolerance_mode(setup, corpus):
    """Tolerance mode, once MsgOpenEnd opened the end: an honest end from another numerical
    path passes; a scaled end, an end that is not the committed leaf, or an opened probe that is
    not the probe of the opened end (a provider whose probe and state disagree) does not."""
    from abci_app.merkle import hash_leaf
    from trainer.probe import compute_probe
    from trainer.verify import verify_opened_end

    s, e = setup["seg1"]
    own = verify_segment(
        VerifyContext(corpus, setup["spec"], K, tolerance=DEFAULT_TOLERANCE),
        s,
        None,
        expected_end_leaf=hash_leaf(hashlib.sha256(e).digest()),
    )
    e2 = _on_another_path(s, setup, corpus)

    def judge(claimed, probe=None, leaf=None):
        return verify_opened_end(
            s,
            own.reexecuted_state,
            claimed,
            tolerance=DEFAULT_TOLERANCE,
            end_leaf=leaf or hash_leaf(hashlib.sha256(claimed).digest()),
            claimed_probe=compute_probe(s, claimed) if probe is None else probe,
            tolerance_ppm=1_000,
        )

    assert judge(e2).valid, judge(e2).reason
    scaled = map_params(e2, lambda t: t * 1.001)
    assert not judge(scaled).valid
    assert not judge(e2, leaf=hash_leaf(hashlib.sha256(e).digest() + b"")[::-1]).valid
    assert not judge(e2, probe=[0] * len(own.probe)).valid


def _on_another_path(s: bytes, setup, corpus) -> bytes:
    """The end of segment 1 computed with 2 threads and non-deterministic kernels."""
    from trainer.state import load_state

    torch.use_deterministic_algorithms(False)
    torch.set_num_threads(2)
    try:
        ls = load_state(s)
        run_inner_steps(ls.model, ls.opt, ls.icfg, corpus, setup["spec"], K, K)
        return ls.to_bytes(inner_step=2 * K)
    finally:
        set_determinism(0)


def test_honest_segment_passes_tolerance_mode_on_another_numerical_path(setup, corpus):
    s, _ = setup["seg1"]
    # the "provider" computed with 2 threads and non-deterministic kernels
    e2 = _on_another_path(s, setup, corpus)
    v = verify_segment(VerifyContext(corpus, setup["spec"], K, tolerance=DEFAULT_TOLERANCE), s, e2)
    assert v.valid, v.reason


def test_invalid_fewer_steps_than_k(setup, corpus):
    s, _ = setup["seg1"]
    from trainer.state import load_state

    ls = load_state(s)
    run_inner_steps(ls.model, ls.opt, ls.icfg, corpus, setup["spec"], K, K - 1)
    short = ls.to_bytes(inner_step=2 * K - 1)
    v = verify_segment(VerifyContext(corpus, setup["spec"], K), s, short)
    assert not v.valid and "fewer or more steps" in v.reason
    # relabelled to look like k steps: caught by re-execution, in both modes
    relabelled = forge(short, inner_step=2 * K, adam_step=2 * K)
    assert not verify_segment(VerifyContext(corpus, setup["spec"], K), s, relabelled).valid
    v = verify_segment(
        VerifyContext(corpus, setup["spec"], K, tolerance=DEFAULT_TOLERANCE), s, relabelled
    )
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
        v = verify_segment(VerifyContext(corpus, setup["spec"], K, tolerance=tol), s, e_other)
        assert not v.valid and v.distance > DEFAULT_TOLERANCE


@pytest.mark.parametrize("cheat", ["scaled", "noised"])
def test_invalid_scaled_or_noised_end_state(setup, corpus, cheat):
    s, e = setup["seg1"]
    g = torch.Generator().manual_seed(0)
    fn = (
        (lambda t: t * 1.001)
        if cheat == "scaled"
        else (lambda t: t + 1e-4 * torch.randn(t.shape, generator=g))
    )
    bad = map_params(e, fn)
    for tol in (None, DEFAULT_TOLERANCE):
        v = verify_segment(VerifyContext(corpus, setup["spec"], K, tolerance=tol), s, bad)
        assert not v.valid and v.distance > DEFAULT_TOLERANCE


def test_invalid_replayed_old_state(setup, corpus):
    s1, _ = setup["seg1"]
    _, e0 = setup["seg0"]  # e0 == s1: the segment's own start (an old state)
    assert not verify_segment(VerifyContext(corpus, setup["spec"], K), s1, e0).valid
    relabelled = forge(e0, inner_step=2 * K, adam_step=2 * K)
    v = verify_segment(
        VerifyContext(corpus, setup["spec"], K, tolerance=DEFAULT_TOLERANCE), s1, relabelled
    )
    assert not v.valid


def test_invalid_state_from_a_different_base_model(setup, corpus, tiny_cfg):
    other = init_model(tiny_cfg, 99)
    s, e = make_segment(other, ICFG, corpus, setup["spec"], 0, K)
    v = verify_segment(
        VerifyContext(corpus, setup["spec"], K, base_model_hash=setup["base_hash"]), s, e
    )
    assert not v.valid and "base model" in v.reason
    # a later segment is tied to the committed trace instead
    honest_trace = [
        hashlib.sha256(x).digest() for x in (setup["seg0"][0], setup["seg1"][0], setup["seg1"][1])
    ]
    root = trace_root(honest_trace)
    assert verify_trace_entry(root, honest_trace[1], 1, 3, trace_proof(honest_trace, 1))
    assert not verify_trace_entry(
        root, hashlib.sha256(s).digest(), 1, 3, trace_proof(honest_trace, 1)
    )
    v = verify_segment(
        VerifyContext(corpus, setup["spec"], K), s, e, expected_start_hash=honest_trace[1]
    )
    assert not v.valid and "trace entry" in v.reason


def test_invalid_malformed_states_and_k(setup, corpus):
    s, e = setup["seg1"]
    assert not verify_segment(VerifyContext(corpus, setup["spec"], K), s[:100], e).valid
    assert not verify_segment(VerifyContext(corpus, setup["spec"], K), s, e[:-1]).valid
    assert not verify_segment(VerifyContext(corpus, setup["spec"], 0), s, e).valid
    wrong_round = ShardSpec(**{**setup["spec"].to_dict(), "round": 1})
    assert not verify_segment(VerifyContext(corpus, wrong_round, K), s, e).valid
    assert not verify_segment(
        VerifyContext(corpus, setup["spec"], K, inner=InnerConfig(lr=1e-2)), s, e
    ).valid


def test_quality_score(corpus, tiny_cfg):
    set_determinism(0)
    base = init_model(tiny_cfg, 0)
    spec = ShardSpec(
        dataset_id=corpus.id, seed=0, job=0, round=0, provider="q", block_size=tiny_cfg.block_size
    )
    local = init_model(tiny_cfg, 0)
    opt = make_inner_optimizer(local, ICFG)
    run_inner_steps(local, opt, ICFG, corpus, spec, 0, 30)
    delta = {
        n: (p0.detach() - p1.detach())
        for (n, p0), (_, p1) in zip(base.named_parameters(), local.named_parameters(), strict=True)
    }
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


def test_sliced_segment_is_reexecuted_as_its_slices(setup, corpus, tiny_cfg):
    """A data-parallel island's trace (states naming slices=2) re-executes bit for bit in one
    process; dropping or changing the slice count, or an impossible count, is refused."""
    spec = setup["spec"]
    m = init_model(tiny_cfg, 0)
    s, e = make_segment(m, ICFG, corpus, spec, 0, 2, slices=2)
    assert decode(e, expected_kind=KIND_STATE).meta["slices"] == 2
    v = verify_segment(VerifyContext(corpus, spec, 2), s, e)
    assert v.valid and v.reason == "identical state hash"
    # the same steps unsliced differ in the last bits: a sliced claim is not a 1-slice claim
    m1 = init_model(tiny_cfg, 0)
    _, e1 = make_segment(m1, ICFG, corpus, spec, 0, 2)
    p1, p2 = decode(e1), decode(e)
    assert "slices" not in p1.meta
    assert any(
        not torch.equal(p1.entries[n].parts["param"], p2.entries[n].parts["param"])
        for n in p1.entries
    )
    v = verify_segment(VerifyContext(corpus, spec, 2), s, e1)
    assert not v.valid and "slices" in v.reason
    v = verify_segment(VerifyContext(corpus, spec, 2), s, forge(e, slices=4))
    assert not v.valid and "slices" in v.reason
    bad = forge(s, slices=3)  # the batch (8 rows) does not split into 3 equal slices
    v = verify_segment(VerifyContext(corpus, spec, 2), bad, forge(e, slices=3))
    assert not v.valid and "cannot re-run" in v.reason
    v = verify_segment(VerifyContext(corpus, spec, 2), forge(s, slices=1), forge(e, slices=1))
    assert not v.valid and "does not load" in v.reason


def test_a_reused_workspace_reexecutes_like_a_fresh_load(setup, corpus):
    """verify_challenge loads every segment's start into one model and optimizer: the result is
    the bytes a fresh load gives, whatever the previous segment left (moments, step, grads),
    and a fresh start (adam step 0) after a used one gets a fresh optimizer."""
    from trainer.state import load_state

    spec = setup["spec"]
    (s0, e0), (s1, e1) = setup["seg0"], setup["seg1"]
    ws: dict = {}
    for start, end, k in ((s1, e1, K), (s0, e0, K), (s1, e1, K)):  # step K, then 0 (fresh)
        v = verify_segment(VerifyContext(corpus, spec, k, workspace=ws, inner=ICFG), start, end)
        assert v.valid and v.reason == "identical state hash", v.reason
        assert "loaded" in ws
    reused = ws["loaded"]
    again = load_state(s0, into=reused)
    assert again.model is reused.model and again.opt is reused.opt
    assert again.to_bytes() == load_state(s0).to_bytes() == s0
    # a state of another model config is not loaded into it
    other = load_state(s0, into=None)
    assert other.model is not reused.model


@pytest.mark.parametrize("tol", [None, DEFAULT_TOLERANCE], ids=["exact", "tolerance"])
def test_a_secret_end_with_a_workspace_gives_the_verdict_of_a_fresh_load(setup, corpus, tol):
    """The network's path (the worker hides every opened segment's end, so verify_segment goes
    to _verify_secret_end) reuses the workspace's model and optimizer like the revealed-end path:
    the same verdict, evidence (re-executed hash), probe and re-executed bytes as without one,
    whatever the previous segment left, a fresh start after a used one included; a wrong leaf
    is still invalid with the same evidence."""
    from abci_app.merkle import hash_leaf

    spec = setup["spec"]
    (s0, e0), (s1, e1) = setup["seg0"], setup["seg1"]
    ws: dict = {}
    models = set()
    cases = [(s1, e1, True), (s0, e0, True), (s1, e1, False), (s1, e1, True), (s0, e0, False)]
    for start, end, right in cases:
        leaf = hash_leaf(hashlib.sha256(end if right else start).digest())
        ctx = VerifyContext(corpus, spec, K, tolerance=tol, inner=ICFG)
        fresh = verify_segment(ctx, start, None, expected_end_leaf=leaf)
        reused = verify_segment(replace(ctx, workspace=ws), start, None, expected_end_leaf=leaf)
        assert reused.to_dict() == fresh.to_dict(), (reused.reason, fresh.reason)
        assert reused.reexecuted_state == fresh.reexecuted_state
        assert reused.reexecuted_hash == hashlib.sha256(end).hexdigest()
        # exact mode judges the leaf; tolerance mode defers to the opened end (valid for now)
        assert reused.valid == (right or tol is not None), reused.reason
        if tol is not None:
            assert reused.reexecuted_state == end and reused.probe
        models.add(id(ws["loaded"].model))
    assert len(models) == 1  # one model for every segment: the workspace was used


def test_a_state_with_a_nan_is_refused_by_name():
    """decode checks a float32-only state in one pass, and names the tensor when it fails."""
    from trainer.commit import PayloadError
    from trainer.model import GPT, GPTConfig

    cfg = GPTConfig.preset("tiny")
    m = GPT(cfg)
    from trainer.state import state_bytes

    good = state_bytes(m, make_inner_optimizer(m, ICFG), ICFG, round=0, inner_step=0, shard=0)
    p = decode(good, expected_kind=KIND_STATE)
    name = sorted(p.entries)[3]
    p.entries[name].parts["exp_avg_sq"] = p.entries[name].parts["exp_avg_sq"].clone()
    p.entries[name].parts["exp_avg_sq"].view(-1)[0] = float("nan")
    with pytest.raises(PayloadError, match=f"{name}/exp_avg_sq: contains NaN"):
        decode(encode(p), expected_kind=KIND_STATE)
    assert decode(encode(p), expected_kind=KIND_STATE, check_finite=False).entries[name]
