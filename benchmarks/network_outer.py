"""The network's outer step: held-out loss along one chain of attested models, per outer rule.

    nice -n 10 .venv/bin/python benchmarks/network_outer.py --steps 6 \
        --results benchmarks/RESULTS.md

What runs (no chain, CPU, the testnet's built-in job: node/testnet_market.BUILTIN_JOB, the
built-in corpus): from the job's initial model, ``--steps`` outer steps; at each, 2 providers
train H inner steps on distinct shards (``ml.train_round``, the worker's own call) and the next
model is ``ml.aggregate_payloads`` (screen, clipped mean, outer step with the momentum carried in
the model bytes) under each outer rule. This is one of the testnet's interleaved chains (a
round's base is the model attested two rounds before). Printed: the held-out loss
(``ml.val_loss``) after each step, per rule, for ``--offsets`` shard assignments.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import sys
import time
from pathlib import Path

import torch

from node.local.testnet_market import BUILTIN_JOB
from node.worker import ml
from trainer.commit import Binding
from trainer.data import Corpus, default_corpus_bytes
from trainer.determinism import set_determinism
from trainer.diloco import AggregationRule, OuterConfig

RULES = {
    "lr 0.7, Nesterov 0.9 (DiLoCo's)": OuterConfig(lr=0.7, momentum=0.9, nesterov=True),
    "lr 1.0, no momentum (before)": OuterConfig(lr=1.0, momentum=0.0, nesterov=False),
    "lr 0.7, Nesterov 0.5": OuterConfig(lr=0.7, momentum=0.5, nesterov=True),
    "lr 0.8, Nesterov 0.3 (the network's)": OuterConfig(lr=0.8, momentum=0.3, nesterov=True),
}


def chain(plan, corpus, codec, init: bytes, steps: int, offset: int, outer: OuterConfig):
    rule = AggregationRule(outer=outer)
    base, losses = init, [ml.val_loss(plan, init, corpus)]
    for r in range(steps):
        pays = {}
        for i in range(2):
            prov = f"p{i}"
            spec = plan.shard_spec(2 * r, prov, (2 * r + i + offset) % plan.n_shards)
            bind = Binding(
                hashlib.sha256(prov.encode()).digest()[:20],
                plan.job_id,
                2 * r,
                hashlib.sha256(base).digest(),
            )
            pays[f"{i:040x}"] = ml.train_round(plan, base, corpus, spec, bind, codec).payload
        base = ml.aggregate_payloads(plan, base, pays, corpus, rule)[0].model
        losses.append(ml.val_loss(plan, base, corpus))
    return losses


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="example: nice -n 10 .venv/bin/python benchmarks/network_outer.py --steps 6",
    )
    ap.add_argument("--steps", type=int, default=6, help="outer steps along the chain")
    ap.add_argument("--offsets", default="0,3", help="shard assignments (comma-separated)")
    ap.add_argument("--results", help="append the table to this RESULTS.md")
    a = ap.parse_args()
    t0 = time.perf_counter()
    set_determinism(0, threads=1)
    corpus = Corpus(default_corpus_bytes(400_000))
    job = {"id": 1, "spec": dict(BUILTIN_JOB, dataset_id=corpus.id, num_shards=8)}
    plan = ml.JobPlan.from_job(job)
    init = ml.initial_model_bytes(plan.model, 0)
    shapes = {n: tuple(p.shape) for n, p in ml.load_model(init, plan.model).named_parameters()}
    codec = plan.compression().choose(0, shapes)
    rows = []
    for off in (int(x) for x in a.offsets.split(",")):
        for name, outer in RULES.items():
            losses = chain(plan, corpus, codec, init, a.steps, off, outer)
            rows.append((off, name, losses))
            print(f"offset {off} {name:38s} {[round(x, 3) for x in losses]}", flush=True)
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    md = [
        f"### network_outer ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
        "",
        f"Command: `nice -n 10 .venv/bin/python benchmarks/network_outer.py --steps {a.steps} "
        f"--offsets {a.offsets} --results benchmarks/RESULTS.md` ({time.perf_counter() - t0:.0f} s "
        f"wall; {platform.machine()}, {torch.get_num_threads()} torch thread, "
        f"{platform.python_version()}; load average {load}). The testnet's job (2-layer d=32 "
        f"GPT, H = {plan.H}, 2 providers per round, {plan.policy}); held-out loss (nats) after "
        "each outer step of one chain; a flat step is one where the screen kept no update.",
        "",
        "| shards offset | outer rule | "
        + " | ".join(f"step {i}" for i in range(a.steps + 1))
        + " |",
        "|---|---|" + "---|" * (a.steps + 1),
    ]
    for off, name, losses in rows:
        md.append(f"| {off} | {name} | " + " | ".join(f"{x:.3f}" for x in losses) + " |")
    text = "\n".join(md) + "\n"
    print(text)
    if a.results:
        p = Path(a.results)
        p.write_text(p.read_text().rstrip() + "\n\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
