"""The verifier's shortcuts give exactly the verdicts of the long way (issue 10: verifier compute).

Each shortcut in trainer/verify.py is checked against the computation it replaces:
* the re-executed state's Payload built from the live model (``_reexecuted``) encodes to the bytes
  ``LoadedState.to_bytes`` gives and holds the tensors a decode of them holds, in the same order;
* the probe ``verify_opened_end`` recalls for an opened end byte-identical to the re-execution is
  the probe it computes without the cache, and every verdict (honest, wrong probe, wrong leaf,
  another numerical path) is the same with the cache and without it;
* ``judge_end`` with the re-execution's hash and Payload and the claimed end's Payload passed in
  gives the verdict it gives from the bytes alone.
"""

import hashlib

import pytest
import torch

from abci_app.merkle import hash_leaf
from trainer import verify as V
from trainer.commit import KIND_STATE, decode
from trainer.data import ShardSpec
from trainer.determinism import set_determinism
from trainer.model import init_model
from trainer.probe import compute_probe
from trainer.state import InnerConfig, load_state, make_inner_optimizer, run_inner_steps
from trainer.verify import (
    DEFAULT_TOLERANCE,
    VerifyContext,
    make_segment,
    verify_opened_end,
    verify_segment,
)

K = 4
ICFG = InnerConfig()


@pytest.fixture(scope="module")
def seg(corpus, tiny_cfg):
    set_determinism(0)
    spec = ShardSpec(
        dataset_id=corpus.id,
        seed=5,
        job=1,
        round=0,
        provider="prov-f",
        block_size=tiny_cfg.block_size,
    )
    m = init_model(tiny_cfg, 0)
    opt = make_inner_optimizer(m, ICFG)
    make_segment(m, ICFG, corpus, spec, 0, K, opt=opt)
    s, e = make_segment(m, ICFG, corpus, spec, K, K, opt=opt)
    return spec, s, e


def _other_path(s: bytes, spec, corpus) -> bytes:
    """The same segment with 2 threads and non-deterministic kernels (an honest other stack)."""
    torch.use_deterministic_algorithms(False)
    torch.set_num_threads(2)
    try:
        ls = load_state(s)
        run_inner_steps(ls.model, ls.opt, ls.icfg, corpus, spec, ls.inner_step, K)
        out = ls.to_bytes(inner_step=ls.inner_step + K)
    finally:
        set_determinism(0, threads=1)
    return out


def _same(a: V.Verdict, b: V.Verdict) -> bool:
    return a.to_dict() == b.to_dict() and a.reexecuted_state == b.reexecuted_state


def test_reexecuted_payload_is_the_decoded_bytes(seg, corpus):
    spec, s, _ = seg
    set_determinism(0, threads=1)
    ls = load_state(s)
    run_inner_steps(ls.model, ls.opt, ls.icfg, corpus, spec, ls.inner_step, K)
    raw, pl = V._reexecuted(ls, ls.inner_step + K)
    assert raw == ls.to_bytes(inner_step=ls.inner_step + K)
    dec = decode(raw, expected_kind=KIND_STATE)
    assert list(pl.entries) == list(dec.entries) and pl.meta == dec.meta
    for name, e in dec.entries.items():
        for part, t in e.parts.items():
            assert torch.equal(pl.entries[name].parts[part], t), (name, part)
    assert compute_probe(s, pl) == compute_probe(s, raw)


def test_opened_end_verdicts_do_not_depend_on_the_probe_cache(seg, corpus):
    spec, s, e = seg
    own = verify_segment(
        VerifyContext(corpus, spec, K, tolerance=DEFAULT_TOLERANCE),
        s,
        None,
        expected_end_leaf=hash_leaf(hashlib.sha256(e).digest()),
    )
    assert own.valid and own.reexecuted_state == e
    assert V._recall_probe(s, hashlib.sha256(e).digest()) == own.probe == compute_probe(s, e)
    assert V._recall_probe(e, hashlib.sha256(e).digest()) is None  # another start: no shortcut
    other = _other_path(s, spec, corpus)
    assert other != e
    cases = {
        "honest, identical": (e, compute_probe(s, e), None),
        "honest, another path": (other, compute_probe(s, other), None),
        "wrong probe": (e, [0] * len(own.probe), None),
        "probe of another state": (e, compute_probe(s, other), None),
        "not the committed leaf": (e, compute_probe(s, e), hash_leaf(hashlib.sha256(s).digest())),
    }

    def judge(claimed, probe, leaf):
        return verify_opened_end(
            s,
            own.reexecuted_state,
            claimed,
            tolerance=DEFAULT_TOLERANCE,
            end_leaf=leaf or hash_leaf(hashlib.sha256(claimed).digest()),
            claimed_probe=probe,
            tolerance_ppm=1_000,
        )

    cached = {name: judge(*c) for name, c in cases.items()}
    with V._PROBE_LOCK:
        saved = dict(V._PROBE_CACHE)
        V._PROBE_CACHE.clear()
    try:
        fresh = {name: judge(*c) for name, c in cases.items()}
    finally:
        with V._PROBE_LOCK:
            V._PROBE_CACHE.update(saved)
    for name in cases:
        assert _same(cached[name], fresh[name]), name
    assert cached["honest, identical"].valid and cached["honest, another path"].valid
    assert not any(cached[n].valid for n in ("wrong probe", "not the committed leaf"))


def test_judge_end_with_the_known_hash_and_payload_is_the_same_verdict(seg, corpus):
    spec, s, e = seg
    other = _other_path(s, spec, corpus)
    set_determinism(0, threads=1)
    ls = load_state(s)
    run_inner_steps(ls.model, ls.opt, ls.icfg, corpus, spec, ls.inner_step, K)
    raw, pl = V._reexecuted(ls, ls.inner_step + K)
    for claimed in (e, other):
        for tol in (None, DEFAULT_TOLERANCE):
            slow = V.judge_end(s, raw, claimed, tol)
            fast = V.judge_end(
                s,
                raw,
                claimed,
                tol,
                reexec_hash=hashlib.sha256(raw).digest(),
                reexec_payload=pl,
                claimed_payload=decode(claimed, expected_kind=KIND_STATE),
            )
            assert _same(slow, fast) and slow.distances == fast.distances


def test_cache_is_bounded():
    with V._PROBE_LOCK:
        saved = dict(V._PROBE_CACHE)
        V._PROBE_CACHE.clear()
    try:

        def start(i: int) -> bytes:
            return b"start %d" % i

        for i in range(V._PROBE_CACHE_SIZE + 10):
            V._remember_probe(hashlib.sha256(start(i)).digest(), i.to_bytes(32, "big"), [i])
        assert len(V._PROBE_CACHE) == V._PROBE_CACHE_SIZE
        assert V._recall_probe(start(0), (0).to_bytes(32, "big")) is None  # evicted
        last = V._PROBE_CACHE_SIZE + 9
        assert V._recall_probe(start(last), last.to_bytes(32, "big")) == [last]
        assert V._recall_probe(start(last - 1), last.to_bytes(32, "big")) is None
    finally:
        with V._PROBE_LOCK:
            V._PROBE_CACHE.clear()
            V._PROBE_CACHE.update(saved)
