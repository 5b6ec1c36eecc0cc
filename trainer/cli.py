"""`loconet train ...`: simulate DiLoCo without a chain, and re-execute a saved segment.

``register(subparsers)`` adds the ``train`` group to the node's CLI; ``main(argv)``
runs it alone: ``python -m trainer.cli train simulate --help``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SIMULATE_EXAMPLE = """example:
  loconet train simulate --data ../shared/data/tinyshakespeare.txt --workers 4 \\
      --rounds 10 --inner-steps 50 --compression topk:0.01+int4 --overlap --out runs/demo
compression (the job policy grammar, abci_app/jobs/policy.py): dense[+q] (none, fp16, int8,
  int4 for short) | topk:D[+q] | lowrank:R[+q] | chunk:K/C[+q] | stride:F[+q] |
  adaptive[:BYTES][/topk[+q]|/chunk|/stride-chunk]   (q = fp16|int8|int4, int2 for chunk and
  stride, int1 for stride; no q = fp32; D an exact decimal such as 0.01).
Without --data a built-in corpus (Python stdlib sources) is used; its sha256 is printed as the
dataset id."""

VERIFY_EXAMPLE = """example:
  loconet train simulate --rounds 2 --inner-steps 20 --out runs/demo   # writes runs/demo/segment
  loconet train verify --segment runs/demo/segment
  loconet train verify --segment runs/demo/segment --tolerance 1e-4 -o json"""


def _corpus(path: str | None):
    from trainer.data import Corpus, default_corpus_bytes

    if path:
        return Corpus.from_file(path)
    return Corpus(default_corpus_bytes())


def _add_output(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", choices=["text", "json"], default="text",
                   help="text (progress on stderr) or json (one JSON document on stdout)")


def register(subparsers) -> None:
    """Add the ``train`` command group (simulate, verify) to an argparse subparsers."""
    train = subparsers.add_parser("train", help="DiLoCo trainer: simulate and verify",
                                  description="DiLoCo trainer tools (no chain needed).")
    sub = train.add_subparsers(dest="train_cmd", metavar="{simulate,verify}")
    sub.required = True

    s = sub.add_parser("simulate", help="run W providers in one process, without a chain",
                       description="Run W DiLoCo providers in one process and log/plot the run.",
                       epilog=SIMULATE_EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("--data", help="text file to train on (default: built-in corpus)")
    s.add_argument("--workers", type=int, default=4)
    s.add_argument("--rounds", type=int, default=10)
    s.add_argument("--inner-steps", type=int, default=50, help="H, inner AdamW steps per round")
    s.add_argument("--compression", default="dense",
                   help="compression policy, e.g. topk:0.01+int4 (default dense; see below)")
    s.add_argument("--overlap", action="store_true", help="one-step-delay overlap of sync and compute")
    s.add_argument("--out", help="folder for log.json, plots and a verifiable segment")
    s.add_argument("--model-size", default="small", choices=["tiny", "small", "medium", "large"])
    s.add_argument("--batch-size", type=int, default=8)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--trace-every", type=int, default=0, help="k: state hash every k steps (0: off)")
    s.add_argument("--inner-lr", type=float, default=3e-3)
    s.add_argument("--outer-lr", type=float, default=0.7)
    s.add_argument("--outer-momentum", type=float, default=0.9)
    s.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    _add_output(s)
    s.set_defaults(func=cmd_simulate)

    v = sub.add_parser("verify", help="re-execute a saved segment and judge its end state",
                       description="Re-run the k steps of a saved segment and compare end states.",
                       epilog=VERIFY_EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    v.add_argument("--segment", required=True, help="folder with start.state, end.state, segment.json")
    v.add_argument("--data", help="the dataset file (must hash to the segment's dataset id)")
    v.add_argument("--tolerance", type=float, default=None,
                   help="relative distance allowed (default: exact byte equality)")
    _add_output(v)
    v.set_defaults(func=cmd_verify)


def cmd_simulate(a: argparse.Namespace) -> int:
    from abci_app.jobs.policy import PolicyError
    from trainer.compression.registry import canonical_spelling
    from trainer.diloco import OuterConfig, SimConfig, simulate
    from trainer.model import GPTConfig
    from trainer.state import InnerConfig

    try:  # fail early, with the accepted forms; run (and log) the canonical spelling
        a.compression = canonical_spelling(a.compression)
    except PolicyError as exc:
        print(f"error: --compression: {exc}", file=sys.stderr)
        return 2
    corpus = _corpus(a.data)
    sim = SimConfig(workers=a.workers, rounds=a.rounds, inner_steps=a.inner_steps,
                    compression=a.compression, overlap=a.overlap, seed=a.seed,
                    batch_size=a.batch_size, trace_every=a.trace_every,
                    model=GPTConfig.preset(a.model_size), inner=InnerConfig(lr=a.inner_lr),
                    outer=OuterConfig(lr=a.outer_lr, momentum=a.outer_momentum), threads=a.threads)
    text = a.output == "text"
    if text:
        print(f"dataset {corpus.id} ({len(corpus.data)} bytes), model {a.model_size}, "
              f"{a.workers} workers x {a.rounds} rounds x H={a.inner_steps}, "
              f"compression {a.compression}{', overlap' if a.overlap else ''}", file=sys.stderr)

    def progress(rec: dict) -> None:
        if text:
            print(f"round {rec['round'] + 1:4d}/{a.rounds}  val {rec['val_loss']:.4f}  "
                  f"train {rec['train_loss']:.4f}  sent {rec['bytes_per_worker']:>10,d} B/worker  "
                  f"[{rec['codec']}]  model {rec['model_hash'][:12]}", file=sys.stderr, flush=True)

    log = simulate(corpus, sim, progress)
    if a.out:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "log.json").write_text(json.dumps(log, indent=1))
        plot_run(log, out)
        save_segment(out / "segment", corpus, sim, a.data)
        log["out"] = str(out)
    if text:
        print(f"final val loss {log['final_val_loss']:.4f}; {log['bytes_per_worker']:,d} bytes sent "
              f"per worker; final model {log['final_model_hash'][:16]}"
              + (f"; wrote {a.out}/log.json, plots, segment/" if a.out else ""), file=sys.stderr)
    else:
        print(json.dumps(log))
    return 0


def save_segment(folder: Path, corpus, sim, data_path: str | None, k: int = 10) -> None:
    """Provider 0's first k steps of round 0, exactly as the simulation ran them."""
    from trainer.data import ShardSpec
    from trainer.determinism import set_determinism
    from trainer.diloco import assign_shards, provider_id
    from trainer.model import init_model
    from trainer.verify import make_segment

    set_determinism(sim.seed, threads=1)
    k = min(k, sim.inner_steps)
    spec = ShardSpec(dataset_id=corpus.id, seed=sim.seed, job=sim.job, round=0,
                     provider=provider_id(0), n_shards=sim.n_shards, batch_size=sim.batch_size,
                     block_size=sim.model.block_size,
                     shard=assign_shards(sim.seed, sim.job, 0, sim.n_shards, sim.workers)[0])
    start, end = make_segment(init_model(sim.model, sim.seed), sim.inner, corpus, spec, 0, k)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "start.state").write_bytes(start)
    (folder / "end.state").write_bytes(end)
    (folder / "segment.json").write_text(json.dumps(
        {"shard_spec": spec.to_dict(), "k": k, "data": data_path}, indent=1))


def cmd_verify(a: argparse.Namespace) -> int:
    from trainer.data import ShardSpec
    from trainer.verify import verify_segment

    seg = Path(a.segment)
    try:
        meta = json.loads((seg / "segment.json").read_text())
        start = (seg / "start.state").read_bytes()
        end = (seg / "end.state").read_bytes()
    except (OSError, ValueError) as exc:
        print(f"error: cannot read segment {seg}: {exc} (make one with "
              "`loconet train simulate --out DIR`)", file=sys.stderr)
        return 2
    spec = ShardSpec.from_dict(meta["shard_spec"])
    corpus = _corpus(a.data or meta.get("data"))
    if corpus.id != spec.dataset_id:
        print(f"error: dataset {corpus.id[:16]} is not the segment's {spec.dataset_id[:16]}: "
              "pass the same --data file", file=sys.stderr)
        return 2
    v = verify_segment(start, spec, int(meta["k"]), end, corpus=corpus, tolerance=a.tolerance)
    if a.output == "json":
        print(json.dumps(v.to_dict()))
    else:
        print(f"{'VALID' if v.valid else 'INVALID'}: {v.reason} (distance {v.distance:.3e})")
    return 0 if v.valid else 1


def plot_run(log: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curve = log["val_curve"]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([c["tokens"] for c in curve], [c["val_loss"] for c in curve], marker="o")
    ax.set_xlabel("tokens (all workers)")
    ax.set_ylabel("validation loss (nats/byte)")
    ax.set_title("validation loss vs tokens")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "val_loss.png", dpi=100)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.bar([r["round"] for r in log["rounds"]], [r["bytes_per_worker"] for r in log["rounds"]])
    ax.set_xlabel("round")
    ax.set_ylabel("bytes sent per worker")
    ax.set_yscale("log")
    ax.set_title("bytes per round")
    fig.tight_layout()
    fig.savefig(out / "bytes_per_round.png", dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="loconet", description="loconet trainer CLI")
    sub = parser.add_subparsers(dest="cmd", metavar="train")
    sub.required = True
    register(sub)
    a = parser.parse_args(argv)
    try:
        return int(a.func(a))
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
