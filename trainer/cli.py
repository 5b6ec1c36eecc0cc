"""`loconet train ...`: simulate DiLoCo without a chain, and re-execute a saved segment.

``register(subparsers)`` adds the ``train`` group to the node's CLI; ``main(argv)``
runs it alone: ``python -m trainer.cli train simulate --help``.

The trainer modules (torch) and matplotlib are imported inside the functions that use them
(``# lazy``): the node's CLI builds its parser with ``register`` on every command, and a command
that does not train must not load torch (tests/cli/test_node_layering.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from abci_app.jobs.policy import PolicyError

SIMULATE_EXAMPLE = """example:
  loconet train simulate --data ../shared/data/tinyshakespeare.txt --workers 4 \\
      --rounds 10 --inner-steps 50 --compression topk:0.01+int4 --overlap --out runs/demo
  loconet train simulate ... --out runs/demo --rounds 20 --resume   # go on from the checkpoint
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
    from trainer.data import Corpus, default_corpus_bytes  # lazy: torch (module docstring)

    if path:
        return Corpus.from_file(path)
    return Corpus(default_corpus_bytes())


def write_atomic(path: Path, data: bytes) -> None:
    """``path`` holds ``data`` complete or not at all (temp file, fsync, rename): a run killed
    mid-write left half a log.json or segment under the name `train verify` reads."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _error(a: argparse.Namespace, msg: str) -> None:
    """``error: msg`` on stderr; with -o json, {"error": msg} on stdout (as the node CLI does)."""
    if getattr(a, "output", "text") == "json":
        print(json.dumps({"error": msg}))
    else:
        print(f"error: {msg}", file=sys.stderr)


def _add_output(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-o",
        "--output",
        choices=["text", "json"],
        default="text",
        help="text (progress on stderr) or json (one JSON document on stdout)",
    )


def register(subparsers) -> None:
    """Add the ``train`` command group (simulate, verify) to an argparse subparsers."""
    train = subparsers.add_parser(
        "train",
        help="DiLoCo trainer: simulate and verify",
        description="DiLoCo trainer tools (no chain needed).",
    )
    sub = train.add_subparsers(dest="train_cmd", metavar="{simulate,verify}")
    sub.required = True

    add_simulate(sub)
    add_verify(sub)


def add_simulate(sub) -> None:
    """``train simulate`` and its flags."""
    s = sub.add_parser(
        "simulate",
        help="run W providers in one process, without a chain",
        description="Run W DiLoCo providers in one process and log/plot the run.",
        epilog=SIMULATE_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    s.add_argument("--data", help="text file to train on (default: built-in corpus)")
    s.add_argument("--workers", type=int, default=4)
    s.add_argument("--rounds", type=int, default=10)
    s.add_argument("--inner-steps", type=int, default=50, help="H, inner AdamW steps per round")
    s.add_argument(
        "--compression",
        default="dense",
        help="compression policy, e.g. topk:0.01+int4 (default dense; see below)",
    )
    s.add_argument(
        "--overlap", action="store_true", help="one-step-delay overlap of sync and compute"
    )
    s.add_argument("--out", help="folder for log.json, plots and a verifiable segment")
    s.add_argument("--model-size", default="small", choices=["tiny", "small", "medium", "large"])
    s.add_argument("--batch-size", type=int, default=8)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument(
        "--trace-every", type=int, default=0, help="k: state hash every k steps (0: off)"
    )
    s.add_argument("--inner-lr", type=float, default=3e-3)
    s.add_argument("--outer-lr", type=float, default=0.7)
    s.add_argument("--outer-momentum", type=float, default=0.9)
    s.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op CPU threads (default 1: bitwise reproducible reductions)",
    )
    s.add_argument(
        "--device",
        default="cpu",
        help="cpu (default), cuda, cuda:N, mps or auto (cuda when available, else cpu)",
    )
    s.add_argument(
        "--checkpoint",
        metavar="PATH",
        help="safetensors checkpoint written after every round (default with --out: "
        "OUT/checkpoint.safetensors)",
    )
    s.add_argument(
        "--resume",
        action="store_true",
        help="continue from --checkpoint (same flags; --rounds may grow): ends where an "
        "uninterrupted run ends, same model hash",
    )
    _add_output(s)
    s.set_defaults(func=cmd_simulate)


def add_verify(sub) -> None:
    """``train verify`` and its flags."""
    v = sub.add_parser(
        "verify",
        help="re-execute a saved segment and judge its end state",
        description="Re-run the k steps of a saved segment and compare end states.",
        epilog=VERIFY_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    v.add_argument(
        "--segment", required=True, help="folder with start.state, end.state, segment.json"
    )
    v.add_argument("--data", help="the dataset file (must hash to the segment's dataset id)")
    v.add_argument(
        "--tolerance",
        type=float,
        default=None,
        help="relative distance allowed (default: exact byte equality)",
    )
    v.add_argument(
        "--device",
        default="cpu",
        help="cpu (default), cuda, cuda:N, mps or auto; exact mode only matches a "
        "provider on the same stack (device class included), so re-execute on "
        "another device with --tolerance",
    )
    _add_output(v)
    v.set_defaults(func=cmd_verify)


def resolve_device(name: str) -> str:
    """``auto`` -> cuda if available else cpu; a device this machine lacks is refused."""
    import torch  # lazy: only when a command runs (module docstring)

    name = name.strip().lower()
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        return name
    if name == "cuda" or name.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise ValueError(
                f"--device {name}: no CUDA device here (torch {torch.__version__}, "
                f"built for CUDA {torch.version.cuda or 'none'}); use --device cpu or auto"
            )
        idx = int(name.split(":", 1)[1]) if ":" in name and name.split(":", 1)[1].isdigit() else 0
        if idx >= torch.cuda.device_count():
            raise ValueError(
                f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s)"
            )
        return name
    if name == "mps":
        if not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise ValueError("--device mps: no Apple GPU here; use --device cpu or auto")
        return name
    raise ValueError(f"--device {name!r}: write cpu, cuda, cuda:N, mps or auto")


class StepProgress:
    """Per-step progress with ETA on stderr: a rich bar on a terminal, else a line every 5 s."""

    def __init__(self, total: int, first_round: int, rounds: int, enabled: bool) -> None:
        self.total, self.done, self.rounds = total, 0, rounds
        self.enabled = enabled
        self.t0 = time.monotonic()
        self.next_line = self.t0 + 5
        self.bar = None
        if enabled and sys.stderr.isatty():
            # rich only for a terminal (a log file gets plain lines)
            self.bar = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("steps"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                TextColumn("{task.fields[loss]}"),
                console=Console(stderr=True),
                transient=True,
            )
            self.task = self.bar.add_task(f"round {first_round + 1}/{rounds}", total=total, loss="")
            self.bar.start()

    def step(self, r: int, wi: int, s: int, loss: float) -> None:
        self.done += 1
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(
                self.task,
                advance=1,
                description=f"round {r + 1}/{self.rounds} worker {wi}",
                loss=f"loss {loss:.4f}",
            )
            return
        now = time.monotonic()
        if now >= self.next_line or self.done == self.total:
            self.next_line = now + 5
            rate = self.done / max(now - self.t0, 1e-9)
            eta = (self.total - self.done) / rate if rate > 0 else 0.0
            print(
                f"step {self.done}/{self.total} ({100 * self.done // max(1, self.total)}%)  round "
                f"{r + 1}/{self.rounds} worker {wi} step {s + 1}  loss {loss:.4f}  {rate:.1f} "
                f"steps/s  ETA {_hms(eta)}",
                file=sys.stderr,
                flush=True,
            )

    def round_done(self, rec: dict) -> None:
        """A round's line above the bar: val and train loss, bytes sent, codec, model hash."""
        self.say(
            f"round {rec['round'] + 1:4d}/{self.rounds}  val {rec['val_loss']:.4f}  "
            f"train {rec['train_loss']:.4f}  sent {rec['bytes_per_worker']:>10,d} B/worker  "
            f"[{rec['codec']}]  model {rec['model_hash'][:12]}"
        )

    def say(self, line: str) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.console.print(line, highlight=False)
        else:
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _hms(seconds: float) -> str:
    s = int(seconds + 0.5)
    return (
        f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s"
        if s >= 3600
        else f"{s // 60}m{s % 60:02d}s"
    )


class FlagError(ValueError):
    """A flag ``train simulate`` refuses before training (printed as ``error: ...``, exit 2)."""


def cmd_simulate(a: argparse.Namespace) -> int:
    """``train simulate``: check the flags, run ``diloco.simulate`` with a progress bar, write
    log.json, the plots and a segment under --out, and print the summary."""
    from trainer.checkpoint import CheckpointError  # lazy: torch (module docstring)
    from trainer.diloco import simulate  # lazy: torch

    try:
        device, corpus, checkpoint = check_simulate_flags(a)
        sim = sim_config(a, device)
        if a.output == "text":
            print(run_header(a, corpus, device, checkpoint), file=sys.stderr)
        first = checkpoint_next_round(checkpoint) if a.resume else 0
    except (FlagError, CheckpointError) as exc:
        _error(a, f"{exc}")
        return 2
    steps = max(0, a.rounds - first) * a.workers * a.inner_steps
    bar = StepProgress(steps, first, a.rounds, a.output == "text")
    try:
        log = simulate(
            corpus, sim, bar.round_done, on_step=bar.step, checkpoint=checkpoint, resume=a.resume
        )
    except CheckpointError as exc:
        _error(a, f"{exc}")
        return 2
    finally:
        bar.close()
    if a.out:
        write_run(Path(a.out), log, corpus, sim, a.data)
    if a.output == "text":
        print(summary_line(a, log, checkpoint), file=sys.stderr)
    else:
        print(json.dumps(log))
    return 0


def check_simulate_flags(a: argparse.Namespace):
    """(device, corpus, checkpoint path or None) of ``train simulate``'s flags, or a
    ``FlagError`` naming the flag. Sets ``a.compression`` to its canonical spelling (the run
    and its log use it)."""
    from trainer.compression.registry import canonical_spelling  # lazy: torch

    try:  # fail early, with the accepted forms
        a.compression = canonical_spelling(a.compression)
    except PolicyError as exc:
        raise FlagError(f"--compression: {exc}") from None
    for flag, v in (
        ("--workers", a.workers),
        ("--rounds", a.rounds),
        ("--inner-steps", a.inner_steps),
        ("--batch-size", a.batch_size),
        ("--threads", a.threads),
    ):
        if v < 1:
            raise FlagError(f"{flag} must be at least 1, got {v}")
    for flag, x, ok in (  # nan or a negative rate reached torch: "Invalid learning rate" traceback
        ("--inner-lr", a.inner_lr, 0 < a.inner_lr < 1e6),
        ("--outer-lr", a.outer_lr, 0 < a.outer_lr < 1e6),
        ("--outer-momentum", a.outer_momentum, 0 <= a.outer_momentum < 1),
    ):
        if not ok:
            what = "in [0, 1)" if flag == "--outer-momentum" else "a positive number"
            raise FlagError(f"{flag} must be {what}, got {x}")
    if a.out and Path(a.out).exists() and not Path(a.out).is_dir():
        # found only after the whole run, when the log was written
        raise FlagError(f"--out {a.out} is a file: give a folder (it is created if missing)")
    try:
        device = resolve_device(a.device)
    except ValueError as exc:
        raise FlagError(f"{exc}") from None
    try:
        corpus = _corpus(a.data)
    except OSError as exc:
        raise FlagError(
            f"--data {a.data}: {exc.strerror or exc}; give a readable text file (or no --data for "
            "the built-in corpus)"
        ) from None
    except ValueError as exc:
        raise FlagError(f"--data {a.data}: {exc}") from None
    checkpoint = a.checkpoint or (str(Path(a.out) / "checkpoint.safetensors") if a.out else None)
    if a.resume and checkpoint is None:
        raise FlagError("--resume needs --checkpoint PATH or --out DIR")
    return device, corpus, checkpoint


def sim_config(a: argparse.Namespace, device: str):
    """The ``SimConfig`` of ``train simulate``'s flags."""
    from trainer.diloco import OuterConfig, SimConfig  # lazy: torch
    from trainer.model import GPTConfig  # lazy: torch
    from trainer.state import InnerConfig  # lazy: torch

    return SimConfig(
        workers=a.workers,
        rounds=a.rounds,
        inner_steps=a.inner_steps,
        compression=a.compression,
        overlap=a.overlap,
        seed=a.seed,
        batch_size=a.batch_size,
        trace_every=a.trace_every,
        model=GPTConfig.preset(a.model_size),
        inner=InnerConfig(lr=a.inner_lr),
        outer=OuterConfig(lr=a.outer_lr, momentum=a.outer_momentum),
        threads=a.threads,
        device=device,
    )


def run_header(a: argparse.Namespace, corpus, device: str, checkpoint: str | None) -> str:
    """The line ``train simulate`` starts with: dataset, model, the run's shape, device."""
    return (
        f"dataset {corpus.id} ({len(corpus.data)} bytes), model {a.model_size}, "
        f"{a.workers} workers x {a.rounds} rounds x H={a.inner_steps}, "
        f"compression {a.compression}{', overlap' if a.overlap else ''}, device {device}, "
        f"{a.threads} thread(s)" + (f", resuming from {checkpoint}" if a.resume else "")
    )


def checkpoint_next_round(checkpoint: str | None) -> int:
    """The round a checkpoint resumes at (``CheckpointError`` when it is missing or foreign)."""
    from trainer.checkpoint import load  # lazy: torch

    return int(load(str(checkpoint))[1]["next_round"])


def write_run(out: Path, log: dict, corpus, sim, data_path: str | None) -> None:
    """--out: log.json, the plots and provider 0's first segment; the log printed with -o json
    then names the folder (``out``)."""
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "log.json", json.dumps(log, indent=1).encode())
    plot_run(log, out)
    save_segment(out / "segment", corpus, sim, data_path)
    log["out"] = str(out)


def summary_line(a: argparse.Namespace, log: dict, checkpoint: str | None) -> str:
    """The line ``train simulate`` ends with: final loss, bytes, model hash, what it wrote."""
    return (
        f"final val loss {log['final_val_loss']:.4f}; {log['bytes_per_worker']:,d} bytes sent "
        f"per worker; final model {log['final_model_hash'][:16]}"
        + (f"; wrote {a.out}/log.json, plots, segment/, checkpoint.safetensors" if a.out else "")
        + (f"; checkpoint {checkpoint}" if checkpoint and not a.out else "")
    )


def save_segment(folder: Path, corpus, sim, data_path: str | None, k: int = 10) -> None:
    """Provider 0's first k steps of round 0, exactly as the simulation ran them."""
    from trainer.data import ShardSpec  # lazy: torch (module docstring)
    from trainer.determinism import set_determinism  # lazy: torch
    from trainer.diloco import assign_shards, provider_id  # lazy: torch
    from trainer.model import init_model  # lazy: torch
    from trainer.verify import make_segment  # lazy: torch

    set_determinism(sim.seed, threads=1)
    k = min(k, sim.inner_steps)
    spec = ShardSpec(
        dataset_id=corpus.id,
        seed=sim.seed,
        job=sim.job,
        round=0,
        provider=provider_id(0),
        n_shards=sim.n_shards,
        batch_size=sim.batch_size,
        block_size=sim.model.block_size,
        shard=assign_shards(sim.seed, sim.job, 0, sim.n_shards, sim.workers)[0],
    )
    start, end = make_segment(init_model(sim.model, sim.seed), sim.inner, corpus, spec, 0, k)
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / "start.state", start)
    write_atomic(folder / "end.state", end)
    meta = {"shard_spec": spec.to_dict(), "k": k, "data": data_path}
    write_atomic(folder / "segment.json", json.dumps(meta, indent=1).encode())


def cmd_verify(a: argparse.Namespace) -> int:
    from trainer.data import ShardSpec  # lazy: torch (module docstring)
    from trainer.verify import VerifyContext, verify_segment  # lazy: torch

    seg = Path(a.segment)
    try:
        meta = json.loads((seg / "segment.json").read_text())
        start = (seg / "start.state").read_bytes()
        end = (seg / "end.state").read_bytes()
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: [[[[... (a traceback)
        _error(
            a,
            f"cannot read segment {seg}: {exc} (make one with `loconet train simulate --out DIR`)",
        )
        return 2
    try:  # a hand-edited segment.json: KeyError / TypeError tracebacks
        spec = ShardSpec.from_dict(meta["shard_spec"])
        k = int(meta["k"])
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
    except (KeyError, TypeError, ValueError) as exc:
        _error(a, f"{seg / 'segment.json'} is not a segment description ({exc!r})")
        return 2
    if a.tolerance is not None and not 0 <= a.tolerance < 1e9:  # nan, inf, negative
        _error(a, f"--tolerance must be a non-negative number, got {a.tolerance}")
        return 2
    corpus = _corpus(a.data or meta.get("data"))
    if corpus.id != spec.dataset_id:
        _error(
            a,
            f"dataset {corpus.id[:16]} is not the segment's {spec.dataset_id[:16]}: "
            "pass the same --data file",
        )
        return 2
    try:
        device = resolve_device(a.device)
    except ValueError as exc:
        _error(a, str(exc))
        return 2
    ctx = VerifyContext(corpus, spec, k, tolerance=a.tolerance, device=device)
    v = verify_segment(ctx, start, end)
    if a.output == "json":
        print(json.dumps(v.to_dict()))
    else:
        print(f"{'VALID' if v.valid else 'INVALID'}: {v.reason} (distance {v.distance:.3e})")
    return 0 if v.valid else 1


def _settings(log: dict) -> str:
    c = log["config"]
    m = c.get("model", {})
    size = (
        f"{log.get('n_params', 0) / 1e6:.2f}M params"
        if log.get("n_params")
        else f"d_model {m.get('d_model')}"
    )
    return (
        f"{c['workers']} workers, H={c['inner_steps']}, "
        f"{c['compression']}{', overlap' if c.get('overlap') else ''}, {size}, batch "
        f"{c['batch_size']}, seed {c['seed']}"
    )


def plot_run(log: dict, out: Path) -> None:
    """``val_loss.png``: validation (after each round; round 0 = the initial model) and train
    loss (mean over the round's inner steps) by round; ``bytes_per_round.png``: bytes each
    worker sent per round on a log axis with 1-2-5 ticks. Rounds are numbered from 1, as the
    console counts them; the run's settings are in the titles."""
    import matplotlib  # lazy: only with --out (module docstring)

    matplotlib.use("Agg")
    settings = _settings(log)
    plot_loss(log, out / "val_loss.png", settings)
    plot_bytes(log, out / "bytes_per_round.png", settings)


def plot_loss(log: dict, path: Path, settings: str) -> None:
    """Validation loss after each round (0 = the initial model), train loss of each round, and
    with overlap the final model as one more point."""
    import matplotlib.pyplot as plt  # lazy: only with --out (module docstring)
    from matplotlib.ticker import MaxNLocator  # lazy: as above

    rounds = log["rounds"]
    xs = [r["round"] + 1 for r in rounds]
    overlap = bool(log["config"].get("overlap"))
    fig, ax = plt.subplots(figsize=(7, 5.6))
    ax.plot(
        [0] + xs,
        [log["val_curve"][0]["val_loss"]] + [r["val_loss"] for r in rounds],
        marker="o",
        label="validation (held-out, after the round)"
        + ("\n(overlap: each round's update lands a round later)" if overlap else ""),
    )
    ax.plot(
        xs,
        [r["train_loss"] for r in rounds],
        marker="s",
        linestyle="--",
        label="train (mean over the round's inner steps)",
    )
    final = log.get("final_val_loss")
    if rounds and final is not None and final != rounds[-1]["val_loss"]:
        # with --overlap the last round's update lands after the run: the final model (what
        # the console's "final val loss" and final model hash are) is one more point
        ax.plot(
            [xs[-1]],
            [final],
            marker="*",
            markersize=13,
            linestyle="none",
            color="C2",
            label=f"final model (last round's update applied after the run): {final:.3f}",
        )
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(-0.3, max(xs + [1]) + 0.3)
    tokens = log.get("tokens") or (rounds[-1]["tokens"] if rounds else 0)
    ax.set_xlabel(f"round (0 = initial model; {tokens:,d} tokens in all)")
    ax.set_ylabel("loss (nats per byte)")
    ax.set_title(f"DiLoCo loss by round\n{settings}", fontsize=10)
    ax.grid(alpha=0.3)
    # under the axes: inside, it covered the curve's first rounds
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), fontsize=9, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _human(v: float, _pos: object = None) -> str:
    """Bytes as 1.23 MB (the byte plot's ticks and labels)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if v >= scale:
            return f"{v / scale:.3g} {unit}"
    return f"{v:.3g} B"


def plot_bytes(log: dict, path: Path, settings: str) -> None:
    """Bytes each worker sent per round, log axis with 1-2-5 ticks."""
    import matplotlib.pyplot as plt  # lazy: only with --out (module docstring)
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter  # lazy

    rounds = log["rounds"]
    xs = [r["round"] + 1 for r in rounds]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    sizes = [r["bytes_per_worker"] for r in rounds]
    bars = ax.bar(xs, sizes, width=0.6)
    if len(xs) <= 20:
        ax.bar_label(bars, labels=[_human(v) for v in sizes], fontsize=8, padding=2)
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(_human))
    ax.yaxis.set_minor_formatter(NullFormatter())
    if sizes:
        lo, hi = min(sizes), max(sizes)
        ax.set_ylim(lo / 2, hi * 3)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(0.4, max(xs + [1]) + 0.6)
    ax.set_xlabel("round")
    ax.set_ylabel("bytes sent per worker (log scale)")
    ax.set_title(
        f"Bytes per round per worker (total {_human(sum(sizes))})\n{settings}", fontsize=10
    )
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
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
        _error(a, f"{exc}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
