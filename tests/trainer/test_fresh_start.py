"""Issue 29: a fresh round's trace entry 0 is a function of public data, so a verifier builds it
(trainer.state.fresh_start_state: the round's base model bytes, the round, the assigned shard,
the job's configs, the island size) and checks its hash against the committed trace
(``verify_challenge(base=...)``) instead of fetching it. The built bytes are the trainer's own
entry 0; honest rounds pass in both determinism modes (segment 0 re-executed from the built
state, a base carrying the outer momentum); every made-up start fails with entry 0 never served;
a carried start is still served and checked field by field."""

import hashlib

import pytest
import torch

from trainer.carry import EMPTY_CARRY_HASH
from trainer.commit import KIND_STATE, Binding, decode, encode, trace_root, update_root
from trainer.compression import make_codec
from trainer.data import ShardSpec
from trainer.determinism import set_determinism
from trainer.diloco import Worker, commit_round
from trainer.model import init_model
from trainer.state import InnerConfig, fresh_start_state, model_payload
from trainer.verify import (
    DEFAULT_TOLERANCE,
    Carried,
    Challenge,
    VerifyContext,
    make_segment,
    verify_challenge,
    verify_fresh_start,
)

H, K = 4, 2
N = H // K
CODEC = "topk:0.1+int8"
ICFG = InnerConfig()
SHARD, RND = 5, 3
MODES = {"exact": None, "tolerance": DEFAULT_TOLERANCE}
START_CHEAT = "start: trace entry 0 is not the pinned fresh start"


@pytest.fixture(params=list(MODES))
def tol(request):
    return MODES[request.param]


def spec_of(corpus, cfg, shard=SHARD, rnd=RND):
    return ShardSpec(
        dataset_id=corpus.id, seed=3, job=1, round=rnd, provider="A", block_size=cfg.block_size,
        shard=shard,
    )  # fmt: skip


def base_bytes(cfg, seed: int = 0, momentum: bool = False) -> bytes:
    m = init_model(cfg, seed)
    buf = None
    if momentum:  # an attested model: parameters and the outer Nesterov buffer
        g = torch.Generator().manual_seed(4)
        buf = {n: 1e-3 * torch.randn(p.shape, generator=g) for n, p in m.named_parameters()}
    outer = {"lr": 0.8, "momentum": 0.3, "nesterov": True} if momentum else None
    return encode(model_payload(m, buf, outer))


def fresh_round(corpus, cfg, base: bytes, shard=SHARD):
    """One provider round from ``base`` with a fresh AdamW and an empty carry (a network round)."""
    set_determinism(0, threads=1)
    p = decode(base)
    params = {n: e.parts["param"].clone() for n, e in p.entries.items()}
    binding = Binding(b"\x0a" * 20, 1, RND, hashlib.sha256(base).digest())
    w = Worker("A", cfg, ICFG, "cpu")
    return commit_round(
        w, params, corpus, spec_of(corpus, cfg, shard), H, K, make_codec(CODEC), binding
    )


@pytest.fixture(scope="module")
def plain(corpus, tiny_cfg):
    base = base_bytes(tiny_cfg)
    return base, fresh_round(corpus, tiny_cfg, base)


def challenge(art, segments, states, trace=None):
    tr = art.trace if trace is None else trace
    return Challenge(
        segments=segments,
        trace=list(tr),
        states=states,
        carry=art.carry,
        trace_root=trace_root(tr, art.binding),
        update_root=art.update_root,
        binding=art.binding,
        payload=art.payload,
    )


def judge(corpus, cfg, ch, base, tol, carried=None):
    return verify_challenge(
        VerifyContext(corpus, spec_of(corpus, cfg), K, tolerance=tol, inner=ICFG, model=cfg),
        ch,
        H=H,
        codec=CODEC,
        base=base,
        carried=carried,
    )


def without_entry_zero(states: list[bytes], segments: list[int]) -> dict[int, bytes]:
    """What the provider serves a verifier that builds entry 0: entry H/k and the segments'."""
    return {i: states[i] for i in {N} | {j for s in segments for j in (s, s + 1)} if i != 0}


def test_fresh_start_state_is_the_trainers_entry_zero(corpus, tiny_cfg, plain):
    base, art = plain
    built = fresh_start_state(base, tiny_cfg, ICFG, round=RND, shard=SHARD)
    assert built == art.states[0]
    # an attested base (outer momentum): the state holds its parameters only
    mbase = base_bytes(tiny_cfg, momentum=True)
    assert hashlib.sha256(mbase).digest() != hashlib.sha256(base).digest()
    assert fresh_start_state(mbase, tiny_cfg, ICFG, round=RND, shard=SHARD) == built
    # an island of 2 names slices = 2 in every state, entry 0 included (trainer.ddp writes it
    # with state_bytes(..., slices=world) before its first step, as make_segment does)
    model = init_model(tiny_cfg, 0)
    start, _ = make_segment(model, ICFG, corpus, spec_of(corpus, tiny_cfg), 0, 1, slices=2)
    assert fresh_start_state(base, tiny_cfg, ICFG, round=RND, shard=SHARD, slices=2) == start
    assert decode(start, expected_kind=KIND_STATE).meta["slices"] == 2


@pytest.mark.parametrize("segments", [[0], [1], [0, 1]])
def test_honest_fresh_round_is_valid_without_entry_zero(corpus, tiny_cfg, plain, tol, segments):
    base, art = plain
    ch = challenge(art, segments, without_entry_zero(art.states, segments))
    v = judge(corpus, tiny_cfg, ch, base, tol)
    assert v.valid, v.reason
    assert v.start.valid and v.start.reason.startswith("fresh start: entry 0 is the state built")
    assert ch.states[0] == art.states[0]  # the built state, the start of segment 0's re-execution
    assert set(v.segments) == set(segments)


def test_a_base_carrying_the_outer_momentum_is_built_from(corpus, tiny_cfg, tol):
    base = base_bytes(tiny_cfg, momentum=True)
    art = fresh_round(corpus, tiny_cfg, base)
    ch = challenge(art, [0], without_entry_zero(art.states, [0]))
    v = judge(corpus, tiny_cfg, ch, base, tol)
    assert v.valid, v.reason


def _with_meta(**meta):
    def forge(state: bytes) -> bytes:
        p = decode(state, expected_kind=KIND_STATE)
        p.meta.update(meta)
        return encode(p)

    return forge


def _parts(part: str, fn):
    def forge(state: bytes) -> bytes:
        p = decode(state, expected_kind=KIND_STATE)
        for e in p.entries.values():
            e.parts[part] = fn(e.parts[part])
        return encode(p)

    return forge


CHEATS = {
    "made-up-exp_avg": _parts("exp_avg", lambda t: t + 1e-3),
    "made-up-exp_avg_sq": _parts("exp_avg_sq", lambda t: t + 1e-6),
    "adam-step": _with_meta(adam_step=3),
    "another-step": _with_meta(inner_step=2),
    "another-shard": _with_meta(shard=SHARD + 1),
    "another-round": _with_meta(round=RND - 1),
    "another-inner-config": _with_meta(inner=dict(ICFG.to_dict(), lr=1e-2)),
    "non-empty-carry": _with_meta(carry=hashlib.sha256(b"carry").hexdigest()),
    "another-base": _parts("param", lambda t: t * 1.001),
    "island-size-only-at-entry-0": _with_meta(slices=2),
}


@pytest.mark.parametrize("cheat", list(CHEATS))
def test_made_up_start_is_invalid_without_it_being_served(corpus, tiny_cfg, plain, tol, cheat):
    """The provider committed a trace whose entry 0 is ``cheat`` of the pinned start (the rest
    honest): the start check fails on the hash alone; entry 0 is never served."""
    base, art = plain
    fake = CHEATS[cheat](art.states[0])
    assert fake != art.states[0]
    trace = [hashlib.sha256(fake).digest(), *art.trace[1:]]
    ch = challenge(art, [0], without_entry_zero(art.states, [0]), trace=trace)
    v = judge(corpus, tiny_cfg, ch, base, tol)
    assert not v.valid and v.reason.startswith(START_CHEAT), v.reason
    assert 0 not in ch.states and not v.segments  # never re-executed from


def test_a_whole_trace_on_another_shard_or_base_is_a_wrong_start(corpus, tiny_cfg, plain, tol):
    base, art = plain
    for other in (
        fresh_round(corpus, tiny_cfg, base, shard=SHARD + 1),
        fresh_round(corpus, tiny_cfg, base_bytes(tiny_cfg, seed=9)),
    ):
        other.binding = art.binding  # committed as this round's (the chain's base and shard)
        ch = challenge(other, [1], without_entry_zero(other.states, [1]))
        ch.update_root = update_root(other.payload, art.binding)
        v = judge(corpus, tiny_cfg, ch, base, tol)
        assert not v.valid and v.reason.startswith(START_CHEAT), v.reason


def test_verify_fresh_start_names_what_was_compared(tiny_cfg, plain):
    base, art = plain
    kw = {"round": RND, "shard": SHARD, "inner": ICFG, "model": tiny_cfg}
    v, built = verify_fresh_start(art.trace[0], base, **kw)
    assert v.valid and built == art.states[0] and v.reexecuted_hash == art.trace[0].hex()
    v, built = verify_fresh_start(art.trace[0], base, **dict(kw, shard=SHARD + 1))
    assert not v.valid and built == b"" and "zero moments" in v.reason
    v, _ = verify_fresh_start(art.trace[0], b"not a model", **kw)
    assert not v.valid and "cannot build the fresh start" in v.reason


def test_a_carried_start_is_still_served_and_checked_field_by_field(corpus, tiny_cfg, plain, tol):
    """verify_start keeps the carried start (the previous round's moments and carry): the base
    does not give it, so entry 0 must be served."""
    base, art = plain
    carried = Carried(end_state=art.states[-1], carry_out=EMPTY_CARRY_HASH)
    ch = challenge(art, [1], without_entry_zero(art.states, [1]))
    v = judge(corpus, tiny_cfg, ch, base, tol, carried=carried)
    assert not v.valid and v.reason == "trace entry 0 was not served"
    ch = challenge(art, [1], dict(enumerate(art.states)))
    v = judge(corpus, tiny_cfg, ch, base, tol, carried=carried)
    assert not v.valid and "carried start has adam step 0" in v.reason  # verify_start's check


def test_base_bytes_other_than_the_rounds_are_refused(corpus, tiny_cfg, plain):
    base, art = plain
    other = base_bytes(tiny_cfg, seed=9)
    ch = challenge(art, [1], without_entry_zero(art.states, [1]))
    v = judge(corpus, tiny_cfg, ch, other, None)
    assert not v.valid and "not the round's base model" in v.reason


def test_every_check_run_after_a_made_up_start_never_reexecutes_from_it(corpus, tiny_cfg, plain):
    """``stop_at_first=False`` (every check reported): segment 0 starts at the made-up entry 0,
    which is neither served nor built, so it is refused, not re-executed from the honest start."""
    base, art = plain
    fake = CHEATS["made-up-exp_avg"](art.states[0])
    trace = [hashlib.sha256(fake).digest(), *art.trace[1:]]
    ch = challenge(art, [0, 1], without_entry_zero(art.states, [0, 1]), trace=trace)
    v = verify_challenge(
        VerifyContext(corpus, spec_of(corpus, tiny_cfg), K, inner=ICFG, model=tiny_cfg),
        ch,
        H=H,
        codec=CODEC,
        base=base,
        stop_at_first=False,
    )
    assert not v.valid and v.reason.startswith(START_CHEAT)
    assert v.payload is not None and v.payload.valid  # the payload is checked on the base
    assert not v.segments[0].valid and "not the pinned start" in v.segments[0].reason
    assert v.segments[1].valid
