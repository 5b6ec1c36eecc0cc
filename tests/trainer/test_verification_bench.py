"""benchmarks/verification.py on the network's path (issue 29): its challenges never serve trace
entry 0 of a fresh round (the verifier builds it from the base model, ``ml.verify_round(...,
base=...)``), its defaults are the shipped ones read from node/client/market_msgs.py, and a tiny
end to end run finds no honest rejection and every cheat caught in both determinism modes, writing
its
own section without touching the older *Verification* one."""

import dataclasses
import hashlib
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import verification as vb  # noqa: E402
from node.client import market_msgs  # noqa: E402
from node.worker import ml  # noqa: E402
from trainer.commit import Binding, encode  # noqa: E402
from trainer.compression import make_codec  # noqa: E402
from trainer.data import ShardSpec  # noqa: E402
from trainer.determinism import set_determinism  # noqa: E402
from trainer.diloco import Worker, commit_round, params_of  # noqa: E402
from trainer.model import init_model  # noqa: E402
from trainer.state import InnerConfig, model_hash, model_payload  # noqa: E402

N = 4


@pytest.fixture(scope="module")
def honest(corpus, tiny_cfg):
    set_determinism(0, threads=1)
    m0 = init_model(tiny_cfg, 0)
    bind = Binding(hashlib.sha256(b"A").digest()[:20], 1, 0, model_hash(m0))
    spec = ShardSpec(
        dataset_id=corpus.id, seed=3, job=1, round=0, provider="A",
        block_size=tiny_cfg.block_size, shard=5,
    )  # fmt: skip
    art = commit_round(
        Worker("A", tiny_cfg, InnerConfig(), "cpu"), params_of(m0), corpus, spec, N, 1,
        make_codec(vb.CODEC), bind,
    )  # fmt: skip
    plan = ml.JobPlan(
        job_id=1, model=tiny_cfg, inner=InnerConfig(), H=N, k=1, batch_size=spec.batch_size,
        n_shards=spec.n_shards, dataset_id=corpus.id, policy=vb.CODEC,
        tokens_per_step=spec.batch_size * tiny_cfg.block_size,
    )  # fmt: skip
    return art, spec, plan, encode(model_payload(m0))


def test_entry_zero_is_built_never_served(honest, corpus):
    art, spec, plan, base = honest
    ch = vb.network_challenge([0], art)
    assert 0 not in ch.states and N in ch.states
    mine = vb.committed(art.states, art.binding, make_codec(vb.CODEC), art.carry)
    assert mine == dataclasses.replace(art, losses=[])  # the provider's own commit
    for tol in (None, 1e-3):
        p = dataclasses.replace(plan, tolerance=tol)
        for segs in ([0], [N - 1], [1]):
            jv = vb.judge(p, spec, art, segs, base=base, corpus=corpus)
            assert jv.valid, jv.reason
    # without the base (the old path) the same challenge fails loudly: entry 0 is not served
    v = ml.verify_round(
        plan, spec, segments=ch.segments, trace=ch.trace, states=ch.states, carry=ch.carry,
        payload=ch.payload, trace_root=ch.trace_root, update_root=ch.update_root,
        binding=ch.binding, corpus=corpus, hidden=ch.hidden,
    )  # fmt: skip
    assert not v.valid and "trace entry 0" in v.reason


def test_end_to_end_at_the_shipped_defaults(tmp_path, monkeypatch, capsys):
    old = "## Verification (`benchmarks/verification.py`)\n\nolder figures\n"
    res = tmp_path / "RESULTS.md"
    res.write_text(f"# Results\n\n{old}\n## Other\n\nkept\n")
    argv = [
        "verification.py", "--n", "6", "--rounds", "3000", "--judged", "2", "--judged-faked",
        "2", "--honest-rounds", "3", "--honest-sample", "2", "--compute", "tiny:1", "--reps",
        "1", "-o", "json", "--results", str(res),
    ]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    assert vb.main() == 0
    o = json.loads(capsys.readouterr().out)
    cf = o["config"]
    assert (cf["s"], cf["challenge_bps"]) == (
        market_msgs.DEFAULT_SEGMENTS_PER_CHALLENGE,
        market_msgs.DEFAULT_CHALLENGE_BPS,
    )
    assert cf["fs_bps"] == [100, 1_000, 10_000] and cf["modes"] == ["exact", "tolerance"]
    for r in o["honest"]:
        assert r["rejected_segments"] == r["rejected_rounds"] == r["network_rejected"] == 0
        assert r["network_rounds"] == 3
    for r in o["start_payload"]:
        assert r["failed"] == r["judged"] == 2, r
    for r in o["faked_steps"]:
        assert r["faked_rejected"] == r["faked_segments"] and r["honest_rejected"] == 0
        assert r["network_agree"] == r["network_judged"] > 0, r
    assert {r["mode"] for r in o["faked_steps"]} == {"exact", "tolerance"}
    text = res.read_text()
    assert old in text and "## Other\n\nkept" in text
    assert text.rstrip().split("\n## ")[-1].startswith(vb.HEAD[3:])
    # a second write replaces its own section, nothing else
    vb.write_section(res, f"{vb.HEAD}\n\nnewer figures\n")
    text = res.read_text()
    assert text.count(vb.HEAD) == 1 and old in text and "## Other\n\nkept" in text
    assert text.endswith(f"{vb.HEAD}\n\nnewer figures\n")
