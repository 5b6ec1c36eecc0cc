"""Cheap checks on every update: norm bound vs the round's median, held-out loss when applied,
norm-clipped mean; the adaptive policy never sees the eval set; the chain's shard is the shard."""

import pytest
import torch

from trainer.data import Corpus, ShardSpec, synthetic_text
from trainer.determinism import set_determinism
from trainer.diloco import (
    SimConfig,
    Worker,
    aggregate,
    assign_shards,
    lower_median,
    params_of,
    robust_aggregate,
    screen_updates,
    simulate,
    update_norm,
)
from trainer.model import GPTConfig, init_model
from trainer.state import InnerConfig

ICFG = InnerConfig()


@pytest.fixture(scope="module")
def round_updates(corpus, tiny_cfg):
    """Three honest providers' pseudo-gradients of one round (12 steps, distinct shards)."""
    set_determinism(0)
    base_model = init_model(tiny_cfg, 0)
    base = params_of(base_model)
    out = {}
    for i, shard in enumerate(assign_shards(0, 1, 0, 16, 3)):
        w = Worker(f"p{i}", tiny_cfg, ICFG, "cpu")
        spec = ShardSpec(
            dataset_id=corpus.id,
            seed=0,
            job=1,
            round=0,
            provider=f"p{i}",
            block_size=tiny_cfg.block_size,
            shard=shard,
        )
        out[f"p{i}"] = w.train_round(base, corpus, spec, 12)[0]
    heldout = corpus.heldout_batches(tiny_cfg.block_size, 16, 2)
    return base_model, out, heldout


def test_honest_updates_pass_the_screen_and_are_not_clipped(round_updates):
    base, ups, heldout = round_updates
    sc = screen_updates(ups, base, heldout)
    assert sc.rejected == {} and all(q > 0 for q in sc.qualities.values())
    # nothing to clip: the clipped mean is the mean
    assert max(sc.norms.values()) < 1.5 * sc.median_norm
    a, b = robust_aggregate(ups), aggregate(ups)
    assert all(torch.equal(a[n], b[n]) for n in a)


def test_scaled_update_is_rejected_by_the_norm_bound(round_updates):
    base, ups, heldout = round_updates
    bad = dict(ups, p1={n: 26 * t for n, t in ups["p1"].items()})
    sc = screen_updates(bad, base, heldout)
    assert set(sc.rejected) == {"p1"} and "norm" in sc.rejected["p1"]
    # two updates only: the lower median is the honest one, so the outlier cannot raise it
    sc2 = screen_updates({"p0": ups["p0"], "p1": bad["p1"]}, base, heldout)
    assert set(sc2.rejected) == {"p1"}


def test_poisoned_update_of_honest_norm_is_rejected_by_the_held_out_loss(round_updates):
    base, ups, heldout = round_updates
    g = torch.Generator().manual_seed(0)
    noise = {n: torch.randn(t.shape, generator=g) for n, t in ups["p2"].items()}
    f = update_norm(ups["p2"]) / update_norm(noise)
    bad = dict(ups, p2={n: t * f for n, t in noise.items()})  # the norm bound cannot see it
    sc = screen_updates(bad, base, heldout)
    assert sc.norms["p2"] < 3 * sc.median_norm
    assert set(sc.rejected) == {"p2"} and "held-out loss" in sc.rejected["p2"]
    assert sc.qualities["p2"] < -20


def test_one_update_under_the_bound_moves_the_average_at_most_clip_times_median(round_updates):
    _, ups, _ = round_updates
    g = torch.Generator().manual_seed(0)
    med = sorted(update_norm(u) for u in ups.values())[1]
    noise = {n: torch.randn(t.shape, generator=g) for n, t in ups["p0"].items()}
    scale = 2.9 * med / update_norm(noise)  # just under the 3x norm bound
    bad = dict(ups, p0={n: t * scale for n, t in noise.items()})
    m2 = lower_median([update_norm(u) for u in bad.values()])
    assert update_norm(ups["p1"]) <= 1.5 * m2 and update_norm(ups["p2"]) <= 1.5 * m2
    rest = {n: (ups["p1"][n] + ups["p2"][n]) / 3 for n in ups["p1"]}
    got = robust_aggregate(bad)
    # the outsider's share of the average is clipped to 1.5 x median / W
    assert update_norm({n: got[n] - rest[n] for n in got}) <= 1.5 * m2 / 3 * 1.0001
    plain = aggregate(bad)
    assert update_norm({n: plain[n] - rest[n] for n in plain}) == pytest.approx(
        2.9 * med / 3, rel=1e-4
    )


def test_simulation_logs_the_screening_and_policy_never_sees_the_eval_set(monkeypatch):
    corpus = Corpus(synthetic_text(60_000, seed=3))
    seen = []
    import trainer.diloco as d

    real = d.evaluate

    def spy(model, batches):
        seen.append(batches[0][0][0, :8].tolist())
        return real(model, batches)

    monkeypatch.setattr(d, "evaluate", spy)
    sim = SimConfig(
        workers=2,
        rounds=2,
        inner_steps=4,
        compression="adaptive",
        model=GPTConfig.preset("tiny"),
        eval_batches=1,
    )
    log = simulate(corpus, sim)
    assert all(r["screening"]["rejected"] == {} for r in log["rounds"])
    eval_first = corpus.heldout_batches(sim.model.block_size, 32, 1)[0][0][0, :8].tolist()
    policy_first = corpus.heldout_batches(sim.model.block_size, 32, 1, part="policy")[0][0][
        0, :8
    ].tolist()
    assert eval_first != policy_first and eval_first in seen and policy_first in seen
    ev, pol = corpus.heldout_part("eval"), corpus.heldout_part("policy")
    assert len(ev) + len(pol) == len(corpus.heldout)  # two disjoint halves


def test_chain_shard_is_the_shard(corpus):
    shards = assign_shards(5, 2, 7, 16, 8)
    assert len(set(shards)) == 8 and all(0 <= s < 16 for s in shards)
    spec = ShardSpec(dataset_id=corpus.id, seed=5, job=2, round=7, provider="p", shard=shards[3])
    assert spec.shard_index() == shards[3]
    lo, hi = corpus.shard_bounds(spec)
    assert all(lo <= o < hi for o in corpus.batch_offsets(spec, 0))
    with pytest.raises(ValueError):
        ShardSpec(dataset_id=corpus.id, seed=5, job=2, round=7, provider="p", shard=16)
    with pytest.raises(ValueError):
        assign_shards(0, 0, 0, 4, 5)
