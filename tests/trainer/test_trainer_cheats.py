"""Every cheat of issue 10 is rejected, in exact mode and in tolerance mode; honest work never is.

A real provider round (tiny model, H = 8, k = 2: four segments, top-k + int8 with error
feedback) is run by two workers, A and B, for two rounds (round 1 starts from A's carried
optimizer state and carry). Each test forges what the named cheat would commit and runs the
verifier entry point that must catch it (trainer/verify.py).
"""

import hashlib

import pytest
import torch

from trainer.carry import EMPTY_CARRY_HASH, carry_bytes, load_carry
from trainer.commit import KIND_STATE, Binding, decode, encode, trace_root, update_root
from trainer.compression import CompressionState, make_codec
from trainer.data import ShardSpec
from trainer.determinism import set_determinism
from trainer.diloco import Worker, commit_round, params_of
from trainer.model import init_model
from trainer.state import InnerConfig, load_state, model_hash, run_inner_steps
from trainer.verify import (
    DEFAULT_TOLERANCE,
    Carried,
    Challenge,
    VerifyContext,
    rerun_segment,
    verify_challenge,
    verify_payload,
    verify_segment,
    verify_start,
)

H, K = 8, 2
N = H // K
CODEC = "topk:0.1+int8"
ICFG = InnerConfig()
SHARD_A, SHARD_B = 5, 9
MODES = {"exact": None, "tolerance": DEFAULT_TOLERANCE}


@pytest.fixture(params=list(MODES))
def tol(request):
    return MODES[request.param]


def spec_of(corpus, cfg, provider, shard, rnd):
    return ShardSpec(
        dataset_id=corpus.id,
        seed=3,
        job=1,
        round=rnd,
        provider=provider,
        block_size=cfg.block_size,
        shard=shard,
    )


def binding(name: str, rnd: int, base_hash: bytes) -> Binding:
    return Binding(hashlib.sha256(name.encode()).digest()[:20], 1, rnd, base_hash)


@pytest.fixture(scope="module")
def run(corpus, tiny_cfg):
    """Two honest rounds of providers A and B; base of round 1 = A's round-0 end (any model
    the chain attested would do)."""
    set_determinism(0)
    base0 = params_of(init_model(tiny_cfg, 0))
    codec = make_codec(CODEC)
    out = {"codec": codec}
    workers = {n: Worker(n, tiny_cfg, ICFG, "cpu") for n in ("A", "B")}
    bases = [base0]
    for rnd in (0, 1):
        m = init_model(tiny_cfg, 0)
        with torch.no_grad():
            for n, p in m.named_parameters():
                p.copy_(bases[rnd][n])
        bh = model_hash(m)
        for name, shard in (("A", SHARD_A), ("B", SHARD_B)):
            art = commit_round(
                workers[name],
                bases[rnd],
                corpus,
                spec_of(corpus, tiny_cfg, name, shard, rnd),
                H,
                K,
                codec,
                binding(name, rnd, bh),
            )
            out[(name, rnd)] = art
        end_a = decode(out[("A", 0)].states[-1], expected_kind=KIND_STATE)
        bases.append({n: e.parts["param"].clone() for n, e in end_a.entries.items()})
    return out


def challenge(art, segments, states=None, trace=None, payload=True):
    st = dict(enumerate(art.states)) if states is None else states
    tr = art.trace if trace is None else trace
    return Challenge(
        segments=segments,
        trace=tr,
        states=st,
        carry=art.carry,
        trace_root=trace_root(tr, art.binding),
        update_root=art.update_root,
        binding=art.binding,
        payload=art.payload if payload else None,
    )


def judge(run, corpus, tiny_cfg, ch, *, name="A", shard=SHARD_A, rnd=0, tol=None, carried=None):
    return verify_challenge(
        VerifyContext(
            corpus,
            spec_of(corpus, tiny_cfg, name, shard, rnd),
            K,
            tolerance=tol,
            inner=ICFG,
            model=tiny_cfg,
        ),
        ch,
        H=H,
        codec=CODEC,
        carried=carried,
    )


def carried_a(run):
    a0 = run[("A", 0)]
    v = verify_payload(
        a0.states[-1],
        a0.carry,
        a0.states[0],
        update_root=a0.update_root,
        binding=a0.binding,
        H=H,
        codec=CODEC,
    )
    assert v.valid, v.reason
    return Carried(end_state=a0.states[-1], carry_out=v.carry_out)


def with_meta(state: bytes, **meta) -> bytes:
    p = decode(state, expected_kind=KIND_STATE)
    p.meta.update(meta)
    return encode(p)


def map_part(state: bytes, part: str, fn) -> bytes:
    p = decode(state, expected_kind=KIND_STATE)
    for e in p.entries.values():
        e.parts[part] = fn(e.parts[part].clone())
    return encode(p)


def forged_payload(run, art, delta_fn) -> tuple[bytes, bytes]:
    """(payload bytes, bound update root) of compress(delta_fn(honest delta)) with A's carry."""
    p0 = decode(art.states[0], expected_kind=KIND_STATE)
    pH = decode(art.states[-1], expected_kind=KIND_STATE)
    delta = {n: p0.entries[n].parts["param"] - pH.entries[n].parts["param"] for n in p0.entries}
    payload = encode(run["codec"].compress(delta_fn(delta), load_carry(art.carry)))
    return payload, update_root(payload, art.binding)


def check_payload(art, payload, root, tol):
    return verify_payload(
        art.states[-1],
        art.carry,
        art.states[0],
        update_root=root,
        binding=art.binding,
        H=H,
        codec=CODEC,
        payload=payload,
        tolerance=tol,
    )


# ---------------------------------------------------------------- honest work passes


def test_honest_rounds_pass_every_check(run, corpus, tiny_cfg, tol):
    for rnd in (0, 1):
        carried = carried_a(run) if rnd == 1 else None
        v = judge(
            run,
            corpus,
            tiny_cfg,
            challenge(run[("A", rnd)], list(range(N))),
            rnd=rnd,
            tol=tol,
            carried=carried,
        )
        assert v.valid, v.reason
        assert set(v.segments) == set(range(N)) and v.start.valid and v.payload.valid
    # without the payload bytes (exact re-compression against the root) it passes as well
    v = judge(
        run,
        corpus,
        tiny_cfg,
        challenge(run[("B", 0)], [1], payload=False),
        name="B",
        shard=SHARD_B,
        tol=tol,
    )
    assert v.valid, v.reason


def test_payload_check_gives_the_carry_the_next_start_names(run):
    a0, a1 = run[("A", 0)], run[("A", 1)]
    carried = carried_a(run)
    assert decode(a1.states[0]).meta["carry"] == carried.carry_out.hex() != EMPTY_CARRY_HASH.hex()
    assert hashlib.sha256(a1.carry).digest() == carried.carry_out
    # the element-wise carry (tolerance mode path) equals the provider's own
    v = check_payload(a0, a0.payload, a0.update_root, DEFAULT_TOLERANCE)
    assert v.valid and v.carry_out == carried.carry_out
    # the base may be the model bytes the chain names (kind 3) instead of trace entry 0
    from trainer.state import model_payload

    model_bytes = encode(model_payload(load_state(a0.states[0]).model))
    v = verify_payload(
        a0.states[-1],
        a0.carry,
        model_bytes,
        update_root=a0.update_root,
        binding=a0.binding,
        H=H,
        codec=CODEC,
    )
    assert v.valid and v.carry_out == carried.carry_out


# ---------------------------------------------------------------- payload cheats


def test_honest_trace_poisoned_payload(run, tol):
    art = run[("A", 0)]
    g = torch.Generator().manual_seed(1)
    payload, root = forged_payload(
        run, art, lambda d: {n: torch.randn(t.shape, generator=g) * 0.05 for n, t in d.items()}
    )
    v = check_payload(art, payload, root, tol)
    assert not v.valid and v.distance > DEFAULT_TOLERANCE


def test_honest_trace_scaled_payload(run, tol):
    art = run[("A", 0)]
    payload, root = forged_payload(run, art, lambda d: {n: 26.0 * t for n, t in d.items()})
    v = check_payload(art, payload, root, tol)
    assert not v.valid and v.distance > 1.0


def test_peer_payload_rewrapped(run, tol):
    a, b = run[("A", 0)], run[("B", 0)]
    root = update_root(b.payload, a.binding)  # B's bytes under A's binding leaf
    assert root != b.update_root
    v = check_payload(a, b.payload, root, tol)
    assert not v.valid and v.distance > DEFAULT_TOLERANCE


def test_carry_not_the_committed_one(run, tol):
    a = run[("A", 1)]
    forged = carry_bytes(CompressionState())  # "forget" the residual the payload was built with
    v = verify_payload(
        a.states[-1],
        forged,
        a.states[0],
        update_root=a.update_root,
        binding=a.binding,
        H=H,
        codec=CODEC,
        payload=a.payload,
        tolerance=tol,
    )
    assert not v.valid and "carry" in v.reason


# ---------------------------------------------------------------- start cheats


def test_made_up_start_moments(run, corpus, tiny_cfg, tol):
    a0, a1 = run[("A", 0)], run[("A", 1)]
    bh = a0.binding.base_model_hash
    # fresh round: non-zero moments, or a non-zero adam step
    fake = map_part(a0.states[0], "exp_avg", lambda t: torch.full_like(t, 1e-3))
    v = verify_start(fake, base_model_hash=bh, round=0, shard=SHARD_A, inner=ICFG, model=tiny_cfg)
    assert not v.valid and "made-up moments" in v.reason
    v = verify_start(
        with_meta(a0.states[0], adam_step=5), base_model_hash=bh, round=0, shard=SHARD_A
    )
    assert not v.valid and "adam step" in v.reason
    # carried round: moments x50, or a fresh optimizer where the previous round's state is due
    carried = carried_a(run)
    bh1 = a1.binding.base_model_hash
    fake1 = map_part(a1.states[0], "exp_avg_sq", lambda t: t * 50)
    v = verify_start(fake1, base_model_hash=bh1, round=1, shard=SHARD_A, carried=carried)
    assert not v.valid and "made-up moments" in v.reason
    assert verify_start(
        a1.states[0], base_model_hash=bh1, round=1, shard=SHARD_A, carried=carried
    ).valid
    # the whole-challenge verdict fails at the start, in both modes
    states = dict(enumerate(a1.states))
    states[0] = fake1
    trace = [hashlib.sha256(s).digest() for s in [fake1] + a1.states[1:]]
    v = judge(
        run,
        corpus,
        tiny_cfg,
        challenge(a1, [1], states=states, trace=trace),
        rnd=1,
        tol=tol,
        carried=carried,
    )
    assert not v.valid and v.reason.startswith("start")
    # moments made up mid-trace: tolerance mode checks the whole state (x50 moments, same params)
    end = map_part(a0.states[2], "exp_avg_sq", lambda t: t * 50)
    v = verify_segment(
        VerifyContext(corpus, spec_of(corpus, tiny_cfg, "A", SHARD_A, 0), K, tolerance=tol),
        a0.states[1],
        end,
    )
    assert not v.valid and v.distances["exp_avg_sq"] > 1.0 and v.distances["param"] == 0.0


def test_state_from_another_base_model(run, corpus, tiny_cfg, tol):
    a0 = run[("A", 0)]
    other = Worker("A", tiny_cfg, ICFG, "cpu")
    spec = spec_of(corpus, tiny_cfg, "A", SHARD_A, 0)
    fake = commit_round(
        other, params_of(init_model(tiny_cfg, 99)), corpus, spec, H, K, run["codec"], a0.binding
    )
    v = verify_start(
        fake.states[0], base_model_hash=a0.binding.base_model_hash, round=0, shard=SHARD_A
    )
    assert not v.valid and "base model" in v.reason
    v = judge(run, corpus, tiny_cfg, challenge(fake, [2]), tol=tol)
    assert not v.valid and "base model" in v.reason
    # honest start, but the rest of the trace continues from the other base: segment 0 catches
    # it, and so does the payload check whatever segments are drawn
    states = dict(enumerate(fake.states))
    states[0] = a0.states[0]
    trace = [a0.trace[0]] + fake.trace[1:]
    payload, root = forged_payload(run, fake, lambda d: d)
    ch = challenge(fake, [0], states=states, trace=trace)
    ch.payload, ch.update_root = payload, root
    v = judge(run, corpus, tiny_cfg, ch, tol=tol)
    assert not v.valid
    v = verify_segment(VerifyContext(corpus, spec, K, tolerance=tol), a0.states[0], fake.states[1])
    assert not v.valid


# ---------------------------------------------------------------- faked steps


def faked_trace(run, corpus, tiny_cfg, seg, make_end):
    """A's round-0 trace where segment ``seg``'s end is ``make_end(start)`` and the later
    states continue honestly from it (so every other segment re-executes exactly)."""
    a0 = run[("A", 0)]
    spec = spec_of(corpus, tiny_cfg, "A", SHARD_A, 0)
    states = list(a0.states[: seg + 1])
    states.append(make_end(states[seg]))
    ls = load_state(states[-1])
    for i in range(seg + 1, N):
        run_inner_steps(ls.model, ls.opt, ls.icfg, corpus, spec, i * K, K)
        states.append(ls.to_bytes(inner_step=(i + 1) * K))
    return states


def assert_caught(run, corpus, tiny_cfg, states, seg, tol):
    a0 = run[("A", 0)]
    trace = [hashlib.sha256(s).digest() for s in states]
    payload, root = forged_payload(
        run, type(a0)(states, trace, a0.carry, b"", a0.binding, b"", b""), lambda d: d
    )
    ch = challenge(a0, [seg], states=dict(enumerate(states)), trace=trace)
    ch.payload, ch.update_root = payload, root
    v = judge(run, corpus, tiny_cfg, ch, tol=tol)
    assert not v.valid and v.reason.startswith(f"segment {seg}"), v.reason
    # the same forged trace with another segment drawn passes: only drawing it catches it
    other = (seg + 2) % N
    ch.segments = [other]
    assert judge(run, corpus, tiny_cfg, ch, tol=tol).valid
    return v.segments[seg]


def test_skipped_steps_with_correct_trace_length(run, corpus, tiny_cfg, tol):
    spec = spec_of(corpus, tiny_cfg, "A", SHARD_A, 0)

    def one_step_of_k(start):  # K - 1 steps skipped, labelled as K
        ls = load_state(start)
        run_inner_steps(ls.model, ls.opt, ls.icfg, corpus, spec, ls.inner_step, 1)
        return with_meta(ls.to_bytes(inner_step=ls.inner_step + K), adam_step=ls.adam_step + K)

    states = faked_trace(run, corpus, tiny_cfg, 1, one_step_of_k)
    assert decode(states[2]).meta["inner_step"] == 2 * K and len(states) == N + 1
    assert_caught(run, corpus, tiny_cfg, states, 1, tol)


def test_half_batches(run, corpus, tiny_cfg, tol):
    half = ShardSpec(**{**spec_of(corpus, tiny_cfg, "A", SHARD_A, 0).to_dict(), "batch_size": 4})
    states = faked_trace(run, corpus, tiny_cfg, 2, lambda s: rerun_segment(s, half, K, corpus))
    v = assert_caught(run, corpus, tiny_cfg, states, 2, tol)
    assert v.distance > 10 * DEFAULT_TOLERANCE


def test_bf16_instead_of_fp32(run, corpus, tiny_cfg, tol):
    spec = spec_of(corpus, tiny_cfg, "A", SHARD_A, 0)
    states = faked_trace(
        run, corpus, tiny_cfg, 1, lambda s: rerun_segment(s, spec, K, corpus, torch.bfloat16)
    )
    v = assert_caught(run, corpus, tiny_cfg, states, 1, tol)
    assert v.distance > 10 * DEFAULT_TOLERANCE


def test_another_shard(run, corpus, tiny_cfg, tol):
    other = spec_of(corpus, tiny_cfg, "A", SHARD_B, 0)  # B's shard, states still say SHARD_A
    states = faked_trace(run, corpus, tiny_cfg, 0, lambda s: rerun_segment(s, other, K, corpus))
    assert_caught(run, corpus, tiny_cfg, states, 0, tol)
    # a trace honestly labelled with the other shard fails the start check (and every segment)
    a0 = run[("A", 0)]
    w = Worker("A", tiny_cfg, ICFG, "cpu")
    art = commit_round(
        w, params_of(init_model(tiny_cfg, 0)), corpus, other, H, K, run["codec"], a0.binding
    )
    v = judge(run, corpus, tiny_cfg, challenge(art, [3]), tol=tol)
    assert not v.valid and "shard" in v.reason
    v = verify_segment(
        VerifyContext(corpus, spec_of(corpus, tiny_cfg, "A", SHARD_A, 0), K, tolerance=tol),
        art.states[1],
        art.states[2],
    )
    assert not v.valid and "shard" in v.reason


def test_replayed_older_state(run, corpus, tiny_cfg, tol):
    # the segment's own start, relabelled as k steps later
    states = faked_trace(
        run,
        corpus,
        tiny_cfg,
        2,
        lambda s: with_meta(
            s,
            inner_step=decode(s).meta["inner_step"] + K,
            adam_step=decode(s).meta["adam_step"] + K,
        ),
    )
    assert_caught(run, corpus, tiny_cfg, states, 2, tol)
    # round 0's trace replayed as round 1's: wrong round, wrong base, wrong carry
    a0, a1 = run[("A", 0)], run[("A", 1)]
    replay = challenge(a0, [1])
    replay.binding, replay.update_root = a1.binding, update_root(a0.payload, a1.binding)
    replay.trace_root = trace_root(a0.trace, a1.binding)
    v = judge(run, corpus, tiny_cfg, replay, rnd=1, tol=tol, carried=carried_a(run))
    assert not v.valid and v.reason.startswith("start")


# ---------------------------------------------------------------- no false positives


def honest_segments(corpus, tiny_cfg, n, other_path: bool):
    """An honest provider's n one-step segments. ``other_path``: each step computed in float64
    and checkpointed in float32 (another numerical path, as another device would take)."""
    set_determinism(0)
    w = Worker("H", tiny_cfg, ICFG, "cpu")
    spec = spec_of(corpus, tiny_cfg, "H", 7, 0)
    if not other_path:
        art = commit_round(
            w,
            params_of(init_model(tiny_cfg, 1)),
            corpus,
            spec,
            n,
            1,
            make_codec(CODEC),
            binding("H", 0, hashlib.sha256(b"b").digest()),
        )
        return spec, art.states
    states = [
        commit_round(
            w,
            params_of(init_model(tiny_cfg, 1)),
            corpus,
            spec,
            1,
            1,
            make_codec(CODEC),
            binding("H", 0, hashlib.sha256(b"b").digest()),
        ).states[0]
    ]
    for _ in range(n):
        states.append(rerun_segment(states[-1], spec, 1, corpus, torch.float64))
    return spec, states


@pytest.mark.parametrize("mode", list(MODES))
def test_200_honest_segments_zero_false_positives(corpus, tiny_cfg, mode):
    """Exact mode: a provider on the verifier's stack. Tolerance mode: a provider on another
    numerical path (float64 steps, float32 checkpoints): no state is byte-identical."""
    n = 200
    spec, states = honest_segments(corpus, tiny_cfg, n, other_path=mode == "tolerance")
    verdicts = [
        verify_segment(
            VerifyContext(corpus, spec, 1, tolerance=MODES[mode]), states[i], states[i + 1]
        )
        for i in range(n)
    ]
    assert [i for i, v in enumerate(verdicts) if not v.valid] == []
    if mode == "tolerance":
        assert all(v.distance > 0 for v in verdicts)  # really another path, judged within tolerance
