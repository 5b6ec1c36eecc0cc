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
    s = {
        "model": {"n_layers": 1, "n_heads": 2, "d_model": 16, "context_len": 16, "vocab_size": 256},
        "inner_steps": 6,
        "trace_interval": 3,
        "tokens_per_step": 64,
        "num_shards": 4,
        "dataset_id": CORPUS.id,
        "compression_policy": "dense+int8",
        "compression_params": {},
    }
    s.update(spec)
    return {"id": 7, "spec": s}


@pytest.fixture(autouse=True)
def deterministic():
    set_determinism(0, threads=1)


def test_plan_from_the_chain_job():
    plan = ml.JobPlan.from_job(job())
    assert (plan.H, plan.k, plan.batch_size, plan.model.block_size, plan.model.n_embd) == (
        6,
        3,
        4,
        16,
        16,
    )
    spec = plan.shard_spec(2, "loco1xyz", 3)
    # the chain's shard, not a draw
    assert spec.shard_index() == 3 and spec.round == 2 and spec.job == 7
    with pytest.raises(ml.JobError, match="vocab_size"):
        ml.JobPlan.from_job(
            job(
                model={
                    "n_layers": 1,
                    "n_heads": 2,
                    "d_model": 16,
                    "context_len": 16,
                    "vocab_size": 50,
                }
            )
        )
    with pytest.raises(ml.JobError, match="multiple of context_len"):
        ml.JobPlan.from_job(job(tokens_per_step=70))


def test_the_jobs_policy_is_what_the_trainer_runs():
    plan = ml.JobPlan.from_job(job(compression_policy="topk:0.05+int4"))
    assert codec(plan).name == "topk:0.05+int4"
    with pytest.raises(ml.JobError, match="compression policy"):
        ml.JobPlan.from_job(job(compression_policy="zstd"))


def codec(plan, round_=0):
    shapes = {
        n: tuple(p.shape)
        for n, p in ml.load_model(
            ml.initial_model_bytes(plan.model, 0), plan.model
        ).named_parameters()
    }
    return plan.compression().choose(round_, shapes)


def train(plan, base, spec, poison=1.0):
    binding = Binding(
        hashlib.sha256(spec.provider.encode()).digest()[:20],
        plan.job_id,
        spec.round,
        hashlib.sha256(base).digest(),
    )
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
        v = ml.verify(
            plan,
            a.states[s],
            a.states[s + 1],
            spec,
            start_hash=a.trace[s],
            end_hash=a.trace[s + 1],
            base_model_hash=hashlib.sha256(base).digest(),
            corpus=CORPUS,
        )
        assert v.valid, v.reason
    # another provider's batches, or a skipped segment, do not re-execute to the claimed state
    other = plan.shard_spec(0, "loco1prov", 2)
    assert not ml.verify(
        plan,
        a.states[0],
        a.states[1],
        other,
        start_hash=a.trace[0],
        end_hash=a.trace[1],
        base_model_hash=hashlib.sha256(base).digest(),
        corpus=CORPUS,
    ).valid
    assert not ml.verify(
        plan,
        a.states[0],
        a.states[0],
        spec,
        start_hash=a.trace[0],
        end_hash=a.trace[0],
        base_model_hash=hashlib.sha256(base).digest(),
        corpus=CORPUS,
    ).valid
    # the random-root cheater's states are not states at all
    r = ml.random_round(plan)
    v = ml.verify(
        plan,
        r.states[0],
        r.states[1],
        spec,
        start_hash=r.trace[0],
        end_hash=r.trace[1],
        base_model_hash=hashlib.sha256(base).digest(),
        corpus=CORPUS,
    )
    assert not v.valid and "malformed" in v.reason
    assert ml.quality(plan, base, a.payload, CORPUS) >= 1
    # poison: the same honest trace, an update 10x larger
    p = train(plan, base, spec, poison=10.0)
    assert p.trace == a.trace and p.payload != a.payload


def updates(plan, base, round_, n, poison=None):
    """Payloads of n providers trained on ``base`` in ``round_`` (provider ``poison`` scaled)."""
    out = {}
    for i in range(n):
        spec = plan.shard_spec(round_, f"p{i}", i)
        out[f"{i:040x}"] = train(plan, base, spec, poison=10.0 if i == poison else 1.0).payload
    return out


def test_aggregate_is_order_free_screened_clipped_and_nesterov():
    """The network's rule (trainer.diloco.network_outer_step): screen, norm-clipped mean in
    provider order, one outer Nesterov step whose buffer is written into the model bytes."""
    from trainer.diloco import robust_aggregate

    plan = ml.JobPlan.from_job(job(compression_policy="dense"))
    base = ml.initial_model_bytes(plan.model, 0)
    pays = updates(plan, base, 0, 3)
    one, ex1 = ml.aggregate_payloads(plan, base, pays, CORPUS)
    two, ex2 = ml.aggregate_payloads(plan, base, dict(reversed(list(pays.items()))), CORPUS)
    torch.set_num_threads(2)  # the rule fixes its own thread count: the caller's does not matter
    three, _ = ml.aggregate_payloads(plan, base, pays, CORPUS)
    assert one.model == two.model == three.model and ex1 == ex2 == {}
    assert one.kept == sorted(pays)
    deltas = {p: ml.decode_update(plan, b) for p, b in pays.items()}
    g = robust_aggregate(deltas, clip=1.5, median_norm=one.screening.median_norm)
    lr, mu = ml.AGGREGATION.outer.lr, ml.AGGREGATION.outer.momentum
    from trainer.commit import decode

    got, parent = decode(one.model), decode(base)
    assert got.meta["outer"] == {"lr": lr, "momentum": mu, "nesterov": True}
    for n, e in got.entries.items():
        # first outer step: buffer = g, θ ← θ − lr·(g + μ·g)
        assert torch.equal(e.parts["momentum"], g[n])
        want = parent.entries[n].parts["param"] - lr * (g[n] + mu * g[n])
        assert torch.allclose(e.parts["param"], want, atol=1e-6)
    assert ml.val_loss(plan, one.model, CORPUS) < ml.val_loss(plan, base, CORPUS)
    # a payload that does not match its commitment (None) is left out, the rest is the same
    four, ex4 = ml.aggregate_payloads(plan, base, {**pays, "ff" * 20: None}, CORPUS)
    assert four.model == one.model and set(ex4) == {"ff" * 20}
    # nothing to aggregate: the base is the next model
    none, _ = ml.aggregate_payloads(plan, base, {}, CORPUS)
    assert none.model == base


def test_a_poisoned_scaled_update_is_screened_out_of_the_aggregate():
    """The poison behaviour (honest trace, update x10) unchallenged: its norm is above 3x the
    round's lower median, so the aggregate is the one of the honest updates alone."""
    plan = ml.JobPlan.from_job(job(compression_policy="dense"))
    base = ml.initial_model_bytes(plan.model, 0)
    pays = updates(plan, base, 0, 3, poison=1)
    bad = f"{1:040x}"
    out, excluded = ml.aggregate_payloads(plan, base, pays, CORPUS)
    assert set(excluded) == {bad} and "median" in excluded[bad] and bad not in out.kept
    honest = {p: b for p, b in pays.items() if p != bad}
    assert out.model == ml.aggregate_payloads(plan, base, honest, CORPUS)[0].model
    # the plain mean the worker used before would have let it through
    from trainer.diloco import aggregate

    deltas = {p: ml.decode_update(plan, b) for p, b in pays.items()}
    plain = aggregate(deltas)
    assert max(float(plain[n].abs().max()) for n in plain) > 2 * max(
        float(ml.decode_update(plan, honest[p])[n].abs().max()) for p in honest for n in plain
    )


def test_clipping_bounds_a_large_update_the_screen_lets_through():
    """An update 2x the median (below the 3x screen) is clipped to 1.5x the median norm."""
    from trainer.diloco import AggregationRule, network_outer_step, update_norm

    plan = ml.JobPlan.from_job(job(compression_policy="dense"))
    base = ml.initial_model_bytes(plan.model, 0)
    deltas = {p: ml.decode_update(plan, b) for p, b in updates(plan, base, 0, 3).items()}
    big = min(deltas)
    deltas[big] = {n: t * 2.0 for n, t in deltas[big].items()}
    rule = AggregationRule(min_quality_mnats=-(10**6))  # the loss screen off: clipping alone
    heldout = CORPUS.heldout_batches(plan.model.block_size, 32, 4)
    out = network_outer_step(base, deltas, heldout, rule)
    assert out.kept == sorted(deltas)
    med = out.screening.median_norm
    assert update_norm(deltas[big]) > 1.5 * med
    capped = {
        **deltas,
        big: {n: t * (1.5 * med / update_norm(deltas[big])) for n, t in deltas[big].items()},
    }
    from trainer.diloco import aggregate

    g = aggregate(capped)
    from trainer.commit import decode

    for n, e in decode(out.model).entries.items():
        assert torch.allclose(e.parts["momentum"], g[n], atol=1e-7)


def test_a_late_joiner_reproduces_the_attested_hash_with_the_momentum():
    """Two rounds on one chain: round 1's model depends on the outer momentum round 0 left,
    which travels inside round 0's model bytes; a worker that saw nothing of round 0 fetches
    those bytes by hash and computes round 1's model to the same bytes. Trace entry 0 of a
    round on that base verifies against its parameters hash."""
    from trainer.commit import Payload, decode, encode

    plan = ml.JobPlan.from_job(job(compression_policy="dense"))
    init = ml.initial_model_bytes(plan.model, 0)
    m0 = ml.aggregate_payloads(plan, init, updates(plan, init, 0, 2), CORPUS)[0].model
    pays1 = updates(plan, m0, 2, 2)
    m1 = ml.aggregate_payloads(plan, m0, pays1, CORPUS)[0].model
    # the late joiner: fresh process state, only m0's bytes (by hash) and round 1's payloads
    torch.set_num_threads(2)
    fetched = bytes(m0)
    assert hashlib.sha256(fetched).digest() == hashlib.sha256(m0).digest()
    again = ml.aggregate_payloads(plan, fetched, dict(reversed(list(pays1.items()))), CORPUS)
    assert hashlib.sha256(again[0].model).digest() == hashlib.sha256(m1).digest()
    # without the momentum the result differs: it is state, and it is carried
    p0 = decode(m0)
    stripped = encode(
        Payload(
            kind=p0.kind,
            codec=p0.codec,
            meta={"model": p0.meta["model"]},
            entries={
                n: type(e)(dtype=e.dtype, shape=e.shape, parts={"param": e.parts["param"]})
                for n, e in p0.entries.items()
            },
        )
    )
    assert ml.aggregate_payloads(plan, stripped, pays1, CORPUS)[0].model != m1
    # the momentum-carrying base's parameters hash is what a state starting from it carries
    assert ml.params_hash(stripped) == hashlib.sha256(stripped).digest() == ml.params_hash(m0)
    assert ml.params_hash(m0) != hashlib.sha256(m0).digest()


def test_bad_updates_are_refused():
    plan = ml.JobPlan.from_job(job())
    with pytest.raises(ValueError):
        ml.decode_update(plan, b"LOCO garbage")
    other = ml.JobPlan.from_job(
        job(
            model={"n_layers": 2, "n_heads": 2, "d_model": 16, "context_len": 16, "vocab_size": 256}
        )
    )
    base2 = ml.initial_model_bytes(other.model, 0)
    foreign = train(other, base2, other.shard_spec(0, "p", 0)).payload
    with pytest.raises(ValueError, match="do not match"):
        ml.decode_update(plan, foreign)
    with pytest.raises(ml.JobError):
        ml.load_model(base2, plan.model)


def test_hardware_check_refuses_what_torch_does_not_see():
    here = ml.detect_hardware()
    model, count, mem = here[0].rsplit(":", 2)
    assert (
        ml.check_hardware([{"model": model, "count": int(count), "memory_mib": int(mem)}]) is None
    )
    why = ml.check_hardware([{"model": "H100", "count": 8, "memory_mib": 81920}])
    if not torch.cuda.is_available():
        assert why is not None and "H100" in why and "provider update" in why
    why = ml.check_hardware([{"model": model, "count": int(count) + 64, "memory_mib": int(mem)}])
    assert why is not None and "torch sees" in why


def test_invalid_base_with_a_tampered_momentum_part():
    """The outer momentum travels inside the model bytes: a base whose momentum part has
    another shape than its parameter (torch would broadcast it into the SGD buffer and fail
    inside the step with a RuntimeError) is refused with a ValueError naming the tensor, the
    same on every worker; NaN/inf parts are refused by decode; an extra part is ignored by
    every worker alike."""
    from trainer.commit import Payload, decode, encode
    from trainer.diloco import network_outer_step

    plan = ml.JobPlan.from_job(job(compression_policy="dense"))
    init = ml.initial_model_bytes(plan.model, 0)
    m0 = ml.aggregate_payloads(plan, init, updates(plan, init, 0, 2), CORPUS)[0].model
    p0 = decode(m0)
    first = min(p0.entries)

    def tampered(part: str, fn) -> bytes:
        entries = {
            n: type(e)(
                dtype=e.dtype,
                shape=e.shape,
                parts={**e.parts, part: fn(e.parts[part])} if n == first else dict(e.parts),
            )
            for n, e in p0.entries.items()
        }
        return encode(Payload(kind=p0.kind, codec=p0.codec, meta=p0.meta, entries=entries))

    pays1 = updates(plan, m0, 2, 2)
    heldout = CORPUS.heldout_batches(plan.model.block_size, 32, 4)
    deltas = {p: ml.decode_update(plan, b) for p, b in pays1.items()}
    for fn in (
        lambda t: t.reshape(-1)[:1].clone(),
        lambda t: t.unsqueeze(0).repeat(2, *([1] * t.dim())),
    ):
        bad = tampered("momentum", fn)
        with pytest.raises(ValueError, match=f"{first}/momentum"):
            ml.aggregate_payloads(plan, bad, pays1, CORPUS)
        with pytest.raises(ValueError, match=f"{first}/momentum"):
            network_outer_step(bad, deltas, heldout)
    # a param part of another shape would broadcast through copy_: refused too
    with pytest.raises(ValueError, match=f"{first}/param"):
        network_outer_step(tampered("param", lambda t: t.reshape(-1)[:1].clone()), deltas, heldout)
    with pytest.raises(ValueError, match="NaN or inf"):
        ml.aggregate_payloads(
            plan, tampered("momentum", lambda t: torch.full_like(t, float("nan"))), pays1, CORPUS
        )


def test_invalid_huge_finite_updates_do_not_block_the_aggregate():
    """An update scaled by 1e30 is finite (decode lets it through) but overflows the held-out
    loss: the screen computed that loss for every update first and round() raised on the NaN,
    so one such participant made every honest worker's aggregate fail (no attestation). Now:
    one huge update of three is left out by its norm; two of three (the median huge too) by
    their non-finite loss; every worker computes the same bytes."""
    from trainer.commit import decode
    from trainer.diloco import network_outer_step

    plan = ml.JobPlan.from_job(job(compression_policy="dense"))
    init = ml.initial_model_bytes(plan.model, 0)
    heldout = CORPUS.heldout_batches(plan.model.block_size, 32, 4)
    deltas = {p: ml.decode_update(plan, b) for p, b in updates(plan, init, 0, 3).items()}
    provs = sorted(deltas)

    def huge(d):
        return {n: t * 1e30 for n, t in d.items()}

    one = {**deltas, provs[0]: huge(deltas[provs[0]])}
    out = network_outer_step(init, one, heldout)
    assert out.kept == provs[1:] and "norm" in out.screening.rejected[provs[0]]
    honest = {p: deltas[p] for p in provs[1:]}
    assert out.model == network_outer_step(init, honest, heldout).model
    two = {**one, provs[1]: huge(deltas[provs[1]])}
    out2 = network_outer_step(init, two, heldout)
    assert out2.kept == provs[2:]
    assert all("not finite" in out2.screening.rejected[p] for p in provs[:2])
    assert out2.model == network_outer_step(init, two, heldout).model
    # the verifier's quality score says so with a ValueError (ml.quality: 1), never OverflowError
    from trainer.verify import quality_score

    with pytest.raises(ValueError, match="not finite"):
        quality_score(init, huge(deltas[provs[0]]), heldout)
    assert all(
        bool(torch.isfinite(t).all())
        for e in decode(out2.model).entries.values()
        for t in e.parts.values()
    )
