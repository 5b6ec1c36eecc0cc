"""The worker's trainer calls (node/worker/ml.py): the chain's job -> trainer configs, a round's
training is reproducible and every segment of its trace re-executes to the same bytes, a cheat
is refused by re-execution, and the aggregate is the same model whoever computes it."""

import hashlib

import pytest
import torch

from node.worker import ml
from trainer.commit import Binding
from trainer.data import Corpus, synthetic_text
from trainer.determinism import set_determinism

CORPUS = Corpus(synthetic_text(60_000))


def job(**spec):
    s = {"model": {"n_layers": 1, "n_heads": 2, "d_model": 16, "context_len": 16, "vocab_size": 256},
         "inner_steps": 6, "trace_interval": 3, "tokens_per_step": 64, "num_shards": 4,
         "dataset_id": CORPUS.id, "compression_policy": "dense+int8", "compression_params": {}}
    s.update(spec)
    return {"id": 7, "spec": s}


@pytest.fixture(autouse=True)
def deterministic():
    set_determinism(0, threads=1)


def test_plan_from_the_chain_job():
    plan = ml.JobPlan.from_job(job())
    assert (plan.H, plan.k, plan.batch_size, plan.model.block_size, plan.model.n_embd) == (6, 3, 4, 16, 16)
    spec = plan.shard_spec(2, "loco1xyz", 3)
    assert spec.shard_index() == 3 and spec.round == 2 and spec.job == 7  # the chain's shard, not a draw
    with pytest.raises(ml.JobError, match="vocab_size"):
        ml.JobPlan.from_job(job(model={"n_layers": 1, "n_heads": 2, "d_model": 16, "context_len": 16, "vocab_size": 50}))
    with pytest.raises(ml.JobError, match="multiple of context_len"):
        ml.JobPlan.from_job(job(tokens_per_step=70))


def test_the_jobs_policy_is_what_the_trainer_runs():
    plan = ml.JobPlan.from_job(job(compression_policy="topk:0.05+int4"))
    assert codec(plan).name == "topk:0.05+int4"
    with pytest.raises(ml.JobError, match="compression policy"):
        ml.JobPlan.from_job(job(compression_policy="zstd"))


def codec(plan, round_=0):
    shapes = {n: tuple(p.shape) for n, p in ml.load_model(ml.initial_model_bytes(plan.model, 0), plan.model).named_parameters()}
    return plan.compression().choose(round_, shapes)


def train(plan, base, spec, poison=1.0):
    binding = Binding(hashlib.sha256(spec.provider.encode()).digest()[:20], plan.job_id, spec.round,
                      hashlib.sha256(base).digest())
    return ml.train_round(plan, base, CORPUS, spec, binding, codec(plan), poison=poison)


def test_round_is_reproducible_and_every_segment_verifies():
    plan = ml.JobPlan.from_job(job())
    base = ml.initial_model_bytes(plan.model, 0)
    spec = plan.shard_spec(0, "loco1prov", 1)
    a = train(plan, base, spec)
    b = train(plan, base, spec)
    assert a.payload == b.payload and a.trace == b.trace and len(a.trace) == plan.H // plan.k + 1
    assert a.trace == [hashlib.sha256(s).digest() for s in a.states] and a.tokens == 6 * 64
    for s in range(len(a.states) - 1):
        v = ml.verify(plan, a.states[s], a.states[s + 1], spec, start_hash=a.trace[s], end_hash=a.trace[s + 1],
                      base_model_hash=hashlib.sha256(base).digest(), corpus=CORPUS)
        assert v.valid, v.reason
    # another provider's batches, or a skipped segment, do not re-execute to the claimed state
    other = plan.shard_spec(0, "loco1prov", 2)
    assert not ml.verify(plan, a.states[0], a.states[1], other, start_hash=a.trace[0], end_hash=a.trace[1],
                         base_model_hash=hashlib.sha256(base).digest(), corpus=CORPUS).valid
    assert not ml.verify(plan, a.states[0], a.states[0], spec, start_hash=a.trace[0], end_hash=a.trace[0],
                         base_model_hash=hashlib.sha256(base).digest(), corpus=CORPUS).valid
    # the random-root cheater's states are not states at all
    r = ml.random_round(plan)
    v = ml.verify(plan, r.states[0], r.states[1], spec, start_hash=r.trace[0], end_hash=r.trace[1],
                  base_model_hash=hashlib.sha256(base).digest(), corpus=CORPUS)
    assert not v.valid and "malformed" in v.reason
    assert ml.quality(plan, base, a.payload, CORPUS) >= 1
    # poison: the same honest trace, an update 10x larger
    p = train(plan, base, spec, poison=10.0)
    assert p.trace == a.trace and p.payload != a.payload


def test_aggregate_is_order_free_and_is_parent_minus_the_mean():
    plan = ml.JobPlan.from_job(job(compression_policy="dense"))
    base = ml.initial_model_bytes(plan.model, 0)
    ups = {f"{i:040x}": ml.decode_update(plan, train(plan, base, plan.shard_spec(0, f"p{i}", i)).payload)
           for i in range(3)}
    one = ml.next_model(plan, base, ups)
    two = ml.next_model(plan, base, dict(reversed(list(ups.items()))))
    assert one == two
    got, parent = ml.load_model(one, plan.model), ml.load_model(base, plan.model)
    for n, p in got.named_parameters():
        mean = sum(u[n] for u in (ups[k] for k in sorted(ups))) / 3
        assert torch.allclose(p, dict(parent.named_parameters())[n] - ml.OUTER_LR * mean, atol=1e-6)
    assert ml.val_loss(plan, one, CORPUS) < ml.val_loss(plan, base, CORPUS)


def test_bad_updates_are_refused():
    plan = ml.JobPlan.from_job(job())
    with pytest.raises(ValueError):
        ml.decode_update(plan, b"LOCO garbage")
    other = ml.JobPlan.from_job(job(model={"n_layers": 2, "n_heads": 2, "d_model": 16, "context_len": 16,
                                           "vocab_size": 256}))
    base2 = ml.initial_model_bytes(other.model, 0)
    foreign = train(other, base2, other.shard_spec(0, "p", 0)).payload
    with pytest.raises(ValueError, match="do not match"):
        ml.decode_update(plan, foreign)
    with pytest.raises(ml.JobError):
        ml.load_model(base2, plan.model)


def test_hardware_check_refuses_what_torch_does_not_see():
    here = ml.detect_hardware()
    model, count, mem = here[0].rsplit(":", 2)
    assert ml.check_hardware([{"model": model, "count": int(count), "memory_mib": int(mem)}]) is None
    why = ml.check_hardware([{"model": "H100", "count": 8, "memory_mib": 81920}])
    if not torch.cuda.is_available():
        assert why is not None and "H100" in why and "provider update" in why
    why = ml.check_hardware([{"model": model, "count": int(count) + 64, "memory_mib": int(mem)}])
    assert why is not None and "torch sees" in why
