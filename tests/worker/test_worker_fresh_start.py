"""Issue 29: the verifier of a challenged commitment never fetches trace entry 0. Every network
round starts fresh, so entry 0 is a function of public data (the round's base model, which the
verifier holds anyway, step 0, zero moments, the empty carry, the round, the assigned shard,
the job's configs, and the island size entry H/k names): the verifier builds it
(trainer.state.fresh_start_state) and checks its hash against the committed trace. One trainer
state (12 bytes per parameter of the job's model) less per verification, and every made-up start
still fails, in both determinism modes. Two real workers (tests/worker/test_worker_verify.py's
kit); ``fetched`` logs every blob the verifier asked its peers for."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from node.worker import ml
from tests.worker.test_worker_verify import JOB, JOB_TOL, MODEL, judged, momentum_base
from trainer.commit import KIND_STATE, decode, encode

MODES = {"exact": JOB, "tolerance": JOB_TOL}
START_CHEAT = "start: trace entry 0 is not the pinned fresh start"


def fetched_bytes(box: dict[str, Any]) -> dict[str, int]:
    """hash -> size of every blob the verifier fetched (each served by the provider)."""
    return {h: len(bytes(box["prov"].store.read(h))) for h in box["fetched"]}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("segment", [0, 1])
def test_verifier_never_fetches_entry_zero_of_a_fresh_round(tmp_path, mode, segment):
    """An honest round is VALID, and the verifier fetched exactly the trace list, entry H/k, the
    opened run's start unless it is entry 0, and the payload: entry 0 (a whole trainer state:
    parameters and both AdamW moments) never, even when segment 0 is opened and re-executed
    from it."""
    job = MODES[mode]
    box: dict = {}
    (valid, _q, reached, why), true_end = judged(tmp_path, "honest", segment, job=job, out=box)
    assert valid, why
    assert reached == [true_end] and "start, payload and 1 segment(s)" in why
    trace, submit = box["trace"], box["submit"]
    n = len(trace) - 1
    got = fetched_bytes(box)
    assert trace[0].hex() not in got
    payload_hash = submit.blob_location.rsplit("/", 1)[-1]
    list_hash = box["target"]["challenge"]["reveals"][0]["trace_list_hash"]
    want = {list_hash, trace[n].hex(), payload_hash} | ({trace[1].hex()} if segment else set())
    assert set(got) == want
    # the bytes: the trace list, one state per fetched entry (12 B/param + table and meta), the
    # payload; entry 0 would have been one more state of the same size
    params = ml.gpt_num_params(ml.config_from_job(MODEL))
    state = len(bytes(box["prov"].store.read(trace[0].hex())))
    assert 12 * params < state < 12 * params + 4096
    states = 2 if segment else 1
    assert sum(got.values()) == 32 * (n + 1) + states * state + submit.payload_size


def test_a_base_carrying_the_outer_momentum_is_built_from_too(tmp_path):
    """An attested base holds the outer momentum, which no state holds: entry 0 is built from
    its parameters, and the payload check takes the base's own bytes (the chain's hash)."""
    box: dict = {}
    (valid, _q, _reached, why), _ = judged(tmp_path, "honest", 0, with_momentum=True, out=box)
    assert valid, why
    assert box["trace"][0].hex() not in box["fetched"]
    base = momentum_base()
    assert hashlib.sha256(base).hexdigest() in box["fetched"]  # the round's base, as before


def _forge_entry_zero(monkeypatch, forge) -> None:
    """The provider commits (and serves) a trace whose entry 0 is ``forge(honest entry 0)``,
    every other state honest."""
    real = ml.train_round

    def cheat(*a: Any, **kw: Any) -> ml.RoundWork:
        work = real(*a, **kw)
        work.states[0] = forge(work.states[0])
        work.trace = [hashlib.sha256(s).digest() for s in work.states]
        return work

    monkeypatch.setattr(ml, "train_round", cheat)


def _meta(**meta: Any):
    def forge(state: bytes) -> bytes:
        p = decode(state, expected_kind=KIND_STATE)
        p.meta.update(meta)
        return encode(p)

    return forge


def _moments(state: bytes) -> bytes:
    p = decode(state, expected_kind=KIND_STATE)
    for e in p.entries.values():
        e.parts["exp_avg"] = e.parts["exp_avg"] + 1e-3
    return encode(p)


def _other_base(state: bytes) -> bytes:
    p = decode(state, expected_kind=KIND_STATE)
    for e in p.entries.values():
        e.parts["param"] = e.parts["param"] * 1.01
    return encode(p)


CHEATS = {
    "made-up-moments": _moments,
    "another-base": _other_base,
    "another-shard": _meta(shard=1),
    "another-step": _meta(inner_step=2, adam_step=2),
}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("cheat", list(CHEATS))
def test_made_up_start_is_invalid_without_fetching_it(tmp_path, monkeypatch, mode, cheat):
    """The provider committed a trace whose entry 0 is not the pinned fresh start: the verifier
    votes INVALID on the start, with the reason, and never fetched the made-up state (segment 0
    is opened: its start, the made-up entry 0, is even named on chain)."""
    _forge_entry_zero(monkeypatch, CHEATS[cheat])
    box: dict = {}
    (valid, q, _reached, why), _ = judged(tmp_path, "honest", 0, job=MODES[mode], out=box)
    assert not valid and q == 0
    assert why.startswith(START_CHEAT), why
    assert box["trace"][0].hex() not in box["fetched"]


def test_an_island_size_other_than_the_traces_is_a_wrong_start(tmp_path, monkeypatch):
    """The island size is the one field of entry 0 the chain does not fix; the verifier takes it
    from entry H/k (fetched anyway): an entry 0 naming another count than the trace's is not the
    start of this trace."""
    _forge_entry_zero(monkeypatch, _meta(slices=2))
    (valid, _q, _reached, why), _ = judged(tmp_path, "honest", 1)
    assert not valid and why.startswith(START_CHEAT) and "2 slices" not in why
