"""The DiLoCo table with seeds, tuned baselines, κ and per-worker byte columns (issue 15).

Runs on ``trainer/batched.py``: a row's seeds x its W workers are ONE vmapped model
(``run_many``; the baseline's seeds one model of W x B sequences each), and the rows run in
``--jobs`` processes (default 2, one torch thread each). Every row is run for each seed (init
AND data order); a DiLoCo row's
gap is paired: gap_s = (L_diloco,s - L_allreduce,s) / L_allreduce,s against the baseline of the
same seed (same init, same batches), reported as mean ± sample std over seeds.

1. AllReduce: the lr swept (``--ar-lrs``), warmup + cosine; the best mean lr is the baseline.
2. DiLoCo, no compression: outer lr x momentum swept (``--outer``), inner AdamW on the same
   warmup + cosine over the global step (peak ``--inner-lr``); the best mean pair is used for
   the codec rows unless a codec names its own (``codec@lr:momentum:ef``).
3. Codec rows (``--codecs``).
κ: tokens the DiLoCo run needs to reach its seed's AllReduce final loss / AllReduce's tokens
(interpolated between per-round evaluations; "> m" when it never does within its m x budget);
with ``--kappa-mult M`` the best uncompressed DiLoCo row is also run at M x the steps (its own
schedule) so a κ above 1 can be measured.

Bytes one worker sends over the whole run (trainer/netmodel.py): fp32 ring AllReduce
2(W-1)/W x 4P per step (the reference of "reduction"); DiLoCo: ``upload`` (one payload per
round) and ``sync``: a ring (x 2(W-1)/W) only for payloads a ring can add in flight (dense
fp32 / fp16: ``netmodel.is_ring_reducible``), an all-gather (x (W-1) receivers, what loconet's
blobs cost) for everything else -- int8 / int4 / int2 (per-block scales), low rank, stride,
top-k, chunks; the losses are measured with the exact mean of every decoded payload, which is
what an all-gather delivers. ``reveal``: expected verification bytes (challenge_bps 500, 1
segment, 1 verifier, states of 12 B/param). ``other``: the round's txs, the blob fetches' HTTP
heads and the base-model downloads (8 B/param) of the ``--sitout-share`` of participants that
sat out the base's round (``netmodel.round_overhead_bytes``). Reduction = AllReduce bytes /
sync bytes; then with the reveals, then with reveals and other bytes (the whole round).

Evaluation: the whole eval half of the held-out split, every ``--eval-rounds`` outer rounds and
at the end (κ interpolates between them). ``OUT/progress.jsonl`` gets each finished row,
``OUT/partial.jsonl`` a line per evaluation of every row (a run cut off still shows its curves).
The data: ``--data``, else ../shared/data/tinyshakespeare.txt next to the repository when
present, else the built-in corpus (stdlib sources), so it runs anywhere.

    nice -n 10 .venv/bin/python benchmarks/diloco_seeds.py --quick        # CI-sized, minutes
    # the table at the issue's budget (60 rounds of H 100, 3 seeds; RESULTS.md gives its CPU time)
    nice -n 10 .venv/bin/python benchmarks/diloco_seeds.py \\
        --data ../shared/data/tinyshakespeare.txt --steps 6000 --H 100 --seeds 0,1,2 \\
        --ar-lrs 3e-3,6e-3,1.2e-2 --outer 0.7:0.9,1.0:0.0 \\
        --codecs "int4@0.7:0.9:1,chunk:64/4096+int2@0.7:0.9:1,chunk:8/4096+int2@0.7:0.9:1" \\
        --eval-rounds 3 --jobs 2 --results benchmarks/RESULTS.md
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import statistics
import sys
import time
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.diloco_table import write_section as _write_section
from trainer.batched import RunConfig, check_device, heldout_full, run_many, tokens_to_reach
from trainer.data import Corpus, default_corpus_bytes
from trainer.model import GPTConfig
from trainer.netmodel import (
    HTTP_BYTES_PER_FETCH,
    TX_BYTES_PER_ROUND,
    allreduce_step_bytes,
    is_ring_reducible,
    reveal_bytes_per_round,
    round_overhead_bytes,
    sync_bytes,
)

HEAD = "## Trainer: DiLoCo table with seeds (issue 15)"
ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"

_CACHE: dict = {}  # per process: the corpus and its held-out windows, built once


def _corpus(data: str | None) -> Corpus:
    if ("corpus", data) not in _CACHE:
        _CACHE[("corpus", data)] = (
            Corpus.from_file(data) if data else Corpus(default_corpus_bytes())
        )
    return _CACHE[("corpus", data)]


def _init(data: str | None, threads: int, device: str) -> None:
    torch.set_num_threads(threads)
    if device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True  # a benchmark, not a verifiable run
    _CACHE["data"], _CACHE["device"] = data, device


def _task(rcs: list, label: str = "", partial: str | None = None) -> tuple[list[dict], float]:
    """One table row (its seeds batched): results without parameters, and this process's CPU
    seconds spent on it. ``partial``: a file that gets a line per evaluation (step, the seeds'
    held-out losses), so a run cut off by a deadline still shows how far each row got."""
    data, device = _CACHE["data"], _CACHE["device"]
    corpus = _corpus(data)
    key = ("held", data, rcs[0].model.block_size)
    if key not in _CACHE:
        _CACHE[key] = heldout_full(corpus, rcs[0].model.block_size, 256, device)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    c0 = ru.ru_utime + ru.ru_stime

    def on_eval(step: int, losses: list[float]) -> None:
        if partial:
            with open(partial, "a") as f:
                f.write(json.dumps({"run": label, "step": step, "val_loss": losses}) + "\n")

    res = run_many(corpus, rcs, heldout=_CACHE[key], on_eval=on_eval)
    for r in res:
        r.pop("params")
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return res, ru.ru_utime + ru.ru_stime - c0


class Pool:
    """Rows run in ``jobs`` processes (spawned, one torch thread each unless --threads), or
    inline when jobs is 1."""

    def __init__(self, a, jobs: int) -> None:
        self.ex = None
        self.partial = str(Path(a.out) / "partial.jsonl")
        if jobs > 1:
            self.ex = ProcessPoolExecutor(
                jobs,
                mp_context=mp.get_context("spawn"),
                initializer=_init,
                initargs=(a.data, a.threads, a.device),
            )
        else:
            _init(a.data, a.threads, a.device)

    def submit(self, label: str, rcs: list):
        if self.ex is not None:
            return self.ex.submit(_task, rcs, label, self.partial)
        f: Future = Future()
        f.set_result(_task(rcs, label, self.partial))
        return f

    def close(self) -> None:
        if self.ex is not None:
            self.ex.shutdown(wait=True)


SITOUT_SHARE = 0.5  # the testnet's job draws 2 of its 4 providers a round: a participant sat out
# the round that made its base half the time, and fetches that base (8 B/param)


def byte_columns(
    *,
    upload: float,
    rounds: int,
    n_params: int,
    workers: int,
    codec: str,
    allreduce: float,
    sitout_share: float = SITOUT_SHARE,
) -> dict:
    """A DiLoCo row's byte columns per worker for the whole run (module docstring): upload,
    sync (ring only for a ring-reducible codec, else all-gather), reveal, other; reductions
    against ``allreduce`` (fp32 ring AllReduce bytes for the row's tokens)."""
    ring = is_ring_reducible(codec)
    ag = sync_bytes(upload, workers, "allgather")
    sync = sync_bytes(upload, workers, "ring") if ring else ag
    rev = rounds * reveal_bytes_per_round(n_params)
    other = rounds * round_overhead_bytes(n_params, workers, sitout_share).total
    return {
        "codec": codec,
        "sync_mode": "ring" if ring else "all-gather",
        "bytes_upload": upload,
        "bytes_allgather": ag,
        "bytes_ring": sync if ring else None,
        "bytes_sync": sync,
        "bytes_reveal": rev,
        "bytes_other": other,
        "sitout_share": sitout_share,
        "reduction": allreduce / sync,
        "reduction_with_reveal": allreduce / (sync + rev),
        "reduction_round": allreduce / (sync + rev + other),
    }


def recount(res: dict, sitout_share: float = SITOUT_SHARE) -> dict:
    """A saved table's DiLoCo rows with their byte columns counted again by ``byte_columns``
    from what the run recorded (each seed's config: codec, steps; its payload bytes and rounds):
    how the recorded tables were corrected without training again."""
    P, W = res["n_params"], res["workers"]
    for r in res["rows"]:
        if r["group"] == "a":
            continue
        r0 = next(iter(r["runs"].values()))
        r.update(
            byte_columns(
                upload=r0["payload_bytes_per_worker"],
                rounds=r0["rounds"],
                n_params=P,
                workers=W,
                codec=r0["config"]["compression"],
                allreduce=res["allreduce_bytes"] * r.get("steps_mult", 1.0),
                sitout_share=sitout_share,
            )
        )
    return res


def ms(xs: list[float]) -> tuple[float, float]:
    return statistics.mean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


# long: a flat table of the benchmark's flags, each with its help text
def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--data",
        help="text file (default: ../shared/data/tinyshakespeare.txt next to the repository "
        "when present, else the built-in corpus of stdlib sources)",
    )
    ap.add_argument("--model-size", default="tiny", choices=["tiny", "small", "medium", "large"])
    ap.add_argument("--n-layer", type=int, help="override the preset's layers (bigger GPU models)")
    ap.add_argument("--n-embd", type=int, help="override the preset's width")
    ap.add_argument("--n-head", type=int, help="override the preset's heads")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--steps", type=int, default=6000, help="inner steps per worker")
    ap.add_argument("--H", type=int, default=100)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--warmup-frac", type=float, default=0.05)
    ap.add_argument("--ar-lrs", default="1.5e-3,3e-3,6e-3")
    ap.add_argument("--inner-lr", type=float, default=3e-3)
    ap.add_argument(
        "--outer",
        default="0.7:0.9,1.0:0.9,0.5:0.8",
        help="lr:momentum[:inner lr] entries (the inner lr defaults to --inner-lr)",
    )
    ap.add_argument(
        "--codecs",
        default="int4,stride:1+int2,lowrank:4+int8,"
        "chunk:64/4096+int2@1.0:0:0.95,chunk:8/4096+int2@1.0:0:0.95",
    )
    ap.add_argument("--kappa-mult", type=float, default=0.0)
    ap.add_argument(
        "--kappa-outer",
        metavar="LR:MOM[:INNER_LR]",
        help="the κ row's outer settings, given up front so it runs alongside the sweeps "
        "(default: the best --outer entry, after they finish)",
    )
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument(
        "--compress-threads",
        type=int,
        help="threads compressing a round's payloads in each process (the codecs run on the "
        "CPU; default 1 on cpu, the host's CPU count / --jobs on cuda)",
    )
    ap.add_argument(
        "--sitout-share",
        type=float,
        default=SITOUT_SHARE,
        help="the fraction of a round's participants that sat out the base's round and "
        f"download the base model, 8 B/param (default {SITOUT_SHARE}: the testnet job draws 2 "
        "of 4 providers)",
    )
    ap.add_argument(
        "--estimate",
        action="store_true",
        help="before the table: time one outer round of each kind of row and print a per-row "
        "and whole-table time estimate",
    )
    ap.add_argument("--estimate-only", action="store_true", help="print the time estimate and stop")
    ap.add_argument(
        "--budget-s",
        type=float,
        default=0.0,
        help="estimate first (--estimate) and, when the table would take longer than this "
        "many seconds, lower --steps (a multiple of H) so it fits",
    )
    ap.add_argument(
        "--jobs", type=int, default=2, help="rows run in this many processes (default 2: 2 cores)"
    )
    ap.add_argument(
        "--eval-rounds",
        type=int,
        default=1,
        help="DiLoCo: evaluate the whole held-out set every N outer rounds (and at the end)",
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help="CI-sized: 2 seeds, 240 steps, H 20, one AR lr, one outer pair, two codecs",
    )
    ap.add_argument("--out", default="benchmarks/diloco_seeds_out")
    ap.add_argument("--results", help="RESULTS.md: write / replace this table's section")
    ap.add_argument("--from-json", help="re-render a saved OUT/table.json (no training)")
    return ap.parse_args(argv)


def settle_flags(a: argparse.Namespace) -> None:
    """The flags a run derives: --quick's sizes, the device checked, the compress threads,
    the shared corpus when present."""
    if a.quick:
        a.steps, a.H, a.seeds = 240, 20, "0,1"
        a.ar_lrs, a.outer = "3e-3", "0.7:0.9"
        a.codecs = "int4,chunk:64/4096+int2@1.0:0:0.95"
    check_device(a.device)
    if a.compress_threads is None:
        a.compress_threads = (
            max(1, (os.cpu_count() or 1) // max(1, a.jobs)) if a.device.startswith("cuda") else 1
        )
    if a.data is None and DEFAULT_DATA.is_file():
        a.data = str(DEFAULT_DATA)  # the shared corpus when present, else the built-in one


def model_config(a: argparse.Namespace) -> GPTConfig:
    cfg = GPTConfig.preset(a.model_size)
    if a.n_layer:
        cfg.n_layer = a.n_layer
    if a.n_embd:
        cfg.n_embd = a.n_embd
    if a.n_head:
        cfg.n_head = a.n_head
    return cfg


OuterEntry = tuple[float, float, float]  # outer lr, momentum, inner lr


@dataclass
class Pending:
    """Phase 1's submitted rows: the AllReduce lr sweep, the outer sweep, the κ row when its
    outer settings were given, the codec rows ((codec, outer lr, momentum, ef decay, future);
    lr and momentum None: the best outer pair, submitted in phase 2)."""

    ar: dict[float, Any]
    outer: dict[OuterEntry, Any]
    kappa: Any
    kappa_o: OuterEntry | None
    codecs: list[tuple[str, float | None, float | None, float, Any]]


class Table:
    """One run of the table: its settings, the process pool, and the rows as collected."""

    def __init__(self, a: argparse.Namespace, cfg: GPTConfig, seeds: list[int]) -> None:
        self.a, self.cfg, self.seeds, self.W = a, cfg, seeds, a.workers
        self.t0 = time.time()
        self.outdir = Path(a.out)
        self.outdir.mkdir(parents=True, exist_ok=True)
        self.pool: Pool | None = None
        self.rows: list[dict] = []
        self.base: dict = {}  # the baseline AllReduce row's runs, by seed
        self.P = 0
        self.ar_bytes = 0.0

    def log(self, m: str) -> None:
        print(f"[{time.time() - self.t0:7.1f}s] {m}", file=sys.stderr, flush=True)

    def rc(self, **kw) -> RunConfig:
        a = self.a
        d = {
            "model": self.cfg,
            "workers": self.W,
            "batch_size": a.batch_size,
            "steps": a.steps,
            "warmup": int(a.warmup_frac * a.steps),
            "device": a.device,
            "compress_threads": a.compress_threads,
        }
        d.update(kw)
        if d.get("H"):
            d["eval_every"] = a.eval_rounds * d["H"]
        return RunConfig(**d)

    def submit(self, label: str, **kw):
        """One table row: its seeds as ONE batched model (trainer.batched.run_many)."""
        assert self.pool is not None
        return self.pool.submit(label, [self.rc(seed=s, **kw) for s in self.seeds])

    def diloco(self, label: str, olr: float, mom: float, ilr: float | None = None, **kw):
        """A DiLoCo row at H with outer lr / momentum (Nesterov when momentum > 0) and inner lr
        (default --inner-lr)."""
        return self.submit(
            label,
            H=self.a.H,
            lr=ilr or self.a.inner_lr,
            outer_lr=olr,
            outer_momentum=mom,
            nesterov=mom > 0,
            **kw,
        )

    def kappa(self, kappa_o: OuterEntry):
        """The κ row: DiLoCo at ``kappa_o`` for --kappa-mult x the steps."""
        a = self.a
        st = int(a.steps * a.kappa_mult)
        return self.diloco(
            f"DiLoCo kappa x{a.kappa_mult:g}", *kappa_o, steps=st, warmup=int(a.warmup_frac * st)
        )

    def outer_entry(self, text: str) -> OuterEntry:
        v = [float(x) for x in text.split(":")]
        return v[0], v[1], v[2] if len(v) > 2 else self.a.inner_lr

    def onames(self, olr: float, mom: float, ilr: float) -> str:
        return f"outer {olr:g}/{mom:g}" + (f", inner lr {ilr:g}" if ilr != self.a.inner_lr else "")

    def collect(self, label: str, fut) -> dict:
        """A row's results by seed, each logged and appended to progress.jsonl."""
        res, cpu = fut.result()
        out = {}
        for s, r in zip(self.seeds, res, strict=True):
            out[s] = r
            self.log(f"{label} seed {s}: {r['final_val_loss']:.4f}")
            with open(self.outdir / "progress.jsonl", "a") as f:  # survives a cut-off run
                f.write(
                    json.dumps(
                        {
                            "run": label,
                            "seed": s,
                            "final_val_loss": r["final_val_loss"],
                            "payload_bytes_per_worker": r["payload_bytes_per_worker"],
                            "curve": r["curve"],
                            "elapsed_s": r["elapsed_s"],
                            "cpu_s": cpu,
                            "batched_runs": r["batched_runs"],
                        }
                    )
                    + "\n"
                )
        self.log(
            f"{label}: {res[0]['elapsed_s']:.0f} s wall, {cpu:.0f} s CPU "
            f"({len(self.seeds)} seeds batched)"
        )
        return out

    def drow(self, group: str, label: str, rs: dict, codec: str, steps_mult: float = 1.0):
        """A DiLoCo row: its loss, its gap and κ paired with each seed's baseline, its bytes.
        Returns the mean gap."""
        seeds, base = self.seeds, self.base
        gaps = [
            100 * (rs[s]["final_val_loss"] - base[s]["final_val_loss"]) / base[s]["final_val_loss"]
            for s in seeds
        ]
        kap = []
        for s in seeds:
            t = tokens_to_reach(rs[s]["curve"], base[s]["final_val_loss"])
            kap.append(None if t is None else t / base[s]["tokens"])
        m, sd = ms([r["final_val_loss"] for r in rs.values()])
        g, gsd = ms(gaps)
        r0 = rs[seeds[0]]
        self.rows.append(
            {
                "group": group,
                "run": label,
                "loss": m,
                "loss_sd": sd,
                "gap": g,
                "gap_sd": gsd,
                "gaps": gaps,
                "kappa": kap,
                "steps_mult": steps_mult,
                **byte_columns(
                    upload=r0["payload_bytes_per_worker"],
                    rounds=r0["rounds"],
                    n_params=self.P,
                    workers=self.W,
                    codec=codec,
                    allreduce=self.ar_bytes * steps_mult,  # the κ row runs m x the steps
                    sitout_share=self.a.sitout_share,
                ),
                "runs": rs,
            }
        )
        return g


def estimate_first(a: argparse.Namespace, t: Table) -> bool:
    """--estimate / --estimate-only / --budget-s: print the time estimate and, over the
    budget, lower --steps. True when the run stops there (--estimate-only)."""
    if not (a.estimate or a.estimate_only or a.budget_s):
        return False
    text, wall = estimate(a, t.rc, t.seeds)
    print(text, flush=True)
    if a.estimate_only:
        return True
    if a.budget_s and wall > a.budget_s:
        steps = max(2 * a.H, int(a.steps * a.budget_s / wall) // a.H * a.H)
        print(
            f"the estimate ({wall:,.0f} s) is over --budget-s {a.budget_s:g}: --steps "
            f"lowered from {a.steps} to {steps} ({steps // a.H} rounds of H = {a.H}) so "
            "the table finishes; its header gives the steps it ran",
            flush=True,
        )
        a.steps = steps
    return False


def submit_phase1(t: Table) -> Pending:
    """Phase 1 (in parallel): the AllReduce lr sweep, the outer sweep, codec rows that name
    their own outer settings (and the κ row when --kappa-outer names its settings)."""
    a = t.a
    ar_f = {
        lr: t.submit(f"AllReduce lr {lr:g}", H=0, lr=lr) for lr in map(float, a.ar_lrs.split(","))
    }
    outer_f = {}
    for entry in a.outer.split(","):
        olr, mom, ilr = t.outer_entry(entry)
        outer_f[(olr, mom, ilr)] = t.diloco(
            f"DiLoCo H={a.H} {t.onames(olr, mom, ilr)}", olr, mom, ilr
        )
    kappa_f = kappa_o = None
    if a.kappa_mult > 1 and a.kappa_outer:
        kappa_o = t.outer_entry(a.kappa_outer)
        kappa_f = t.kappa(kappa_o)
    codec_items: list[tuple[str, float | None, float | None, float, Any]] = []
    for item in filter(None, a.codecs.split(",")):  # --codecs "": no codec rows
        c, _, o = item.partition("@")
        if o:
            olr, mom, ef = map(float, o.split(":"))
            fut = t.diloco(
                f"DiLoCo {c} {olr:g}/{mom:g}/ef {ef:g}",
                olr,
                mom,
                compression=c,
                ef_decay=ef,
            )
            codec_items.append((c, olr, mom, ef, fut))
        else:
            codec_items.append((c, None, None, 1.0, None))
    return Pending(ar_f, outer_f, kappa_f, kappa_o, codec_items)


def collect_allreduce(t: Table, ar_f: dict[float, Any]) -> float:
    """The AllReduce rows (group a); the best lr's runs become the baseline. Returns that lr."""
    ar = {lr: t.collect(f"AllReduce lr {lr:g}", f) for lr, f in ar_f.items()}
    best_lr = min(ar, key=lambda lr: statistics.mean(r["final_val_loss"] for r in ar[lr].values()))
    t.base = ar[best_lr]
    t.P = next(iter(t.base.values()))["n_params"]
    t.ar_bytes = t.a.steps * allreduce_step_bytes(t.P, t.W, 4)
    for lr, rs in ar.items():
        m, sd = ms([r["final_val_loss"] for r in rs.values()])
        t.rows.append(
            {
                "group": "a",
                "run": f"AllReduce lr {lr:g}" + (" (baseline)" if lr == best_lr else ""),
                "loss": m,
                "loss_sd": sd,
                "runs": rs,
            }
        )
    return best_lr


def collect_outer(t: Table, outer_f: dict[OuterEntry, Any]) -> OuterEntry:
    """The outer sweep's rows (group b); returns the entry of the smallest mean gap."""
    a = t.a
    best: tuple[float, float, float, float] | None = None
    for (olr, mom, ilr), fut in outer_f.items():
        rs = t.collect(f"DiLoCo H={a.H} {t.onames(olr, mom, ilr)}", fut)
        label = f"DiLoCo H={a.H}, outer lr {olr:g}, momentum {mom:g}" + (
            f", inner lr {ilr:g}" if ilr != a.inner_lr else ""
        )
        g = t.drow("b", label, rs, "none")
        if best is None or g < best[0]:
            best = (g, olr, mom, ilr)
    if best is None:
        raise SystemExit("--outer lists no LR:MOMENTUM pair")
    return best[1], best[2], best[3]


def finish_rows(t: Table, p: Pending, best: OuterEntry) -> None:
    """Phase 2: the rows that use the best outer pair (the κ row unless given, the codecs
    without their own pair), then the κ and codec rows collected (groups κ and c)."""
    a = t.a
    olr_b, mom_b, ilr_b = best
    if a.kappa_mult > 1 and p.kappa is None:
        p.kappa_o = best
        p.kappa = t.kappa(best)
    for i, (c, _, _, ef, fut) in enumerate(p.codecs):
        if fut is None:
            fut = t.diloco(
                f"DiLoCo {c} {olr_b:g}/{mom_b:g}/ef {ef:g}",
                olr_b,
                mom_b,
                ilr_b,
                compression=c,
                ef_decay=ef,
            )
            p.codecs[i] = (c, olr_b, mom_b, ef, fut)
    if p.kappa is not None:
        assert p.kappa_o is not None
        rs = t.collect(f"DiLoCo kappa x{a.kappa_mult:g}", p.kappa)
        t.drow(
            "κ",
            f"DiLoCo H={a.H}, {t.onames(*p.kappa_o)}, {a.kappa_mult:g}x the steps",
            rs,
            "none",
            a.kappa_mult,
        )
    for c, c_olr, c_mom, ef, fut in p.codecs:
        assert c_olr is not None and c_mom is not None  # every codec row has its pair by now
        rs = t.collect(f"DiLoCo {c} {c_olr:g}/{c_mom:g}/ef {ef:g}", fut)
        t.drow(
            "c", f"DiLoCo H={a.H} + {c}, outer lr {c_olr:g}, momentum {c_mom:g}, EF {ef:g}", rs, c
        )


def write_table(t: Table, corpus: Corpus, best_lr: float) -> str:
    """OUT/table.json and OUT/table.md (and the RESULTS.md section); returns the markdown."""
    a = t.a
    elapsed = time.time() - t.t0
    cpu_s = sum(
        getattr(resource.getrusage(w), f)
        for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
        for f in ("ru_utime", "ru_stime")
    )
    res = {
        "command": " ".join(sys.argv),
        "dataset_id": corpus.id,
        "n_params": t.P,
        "workers": t.W,
        "steps": a.steps,
        "H": a.H,
        "seeds": t.seeds,
        "batch_size": a.batch_size,
        "model": t.cfg.to_dict(),
        "device": a.device,
        "allreduce_bytes": t.ar_bytes,
        "best_ar_lr": best_lr,
        "elapsed_s": elapsed,
        "cpu_s": cpu_s,
        "jobs": a.jobs,
        "eval_rounds": a.eval_rounds,
        "rows": t.rows,
        "machine": f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end",
    }
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.json").write_text(json.dumps(res, indent=1, default=str))
    md = render(res, a.quick)
    (out / "table.md").write_text(md)
    if a.results:
        write_section(Path(a.results), md)
    return md


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.from_json:
        md = render(recount(json.loads(Path(a.from_json).read_text()), a.sitout_share), a.quick)
        if a.results:
            write_section(Path(a.results), md)
        print(md)
        return 0
    settle_flags(a)
    corpus = _corpus(a.data)
    t = Table(a, model_config(a), [int(s) for s in a.seeds.split(",")])
    if estimate_first(a, t):
        return 0
    t.pool = Pool(a, a.jobs)
    pending = submit_phase1(t)
    # phase 2 (after the sweeps): the rows that use the best outer pair (codecs, the κ row)
    best_lr = collect_allreduce(t, pending.ar)
    finish_rows(t, pending, collect_outer(t, pending.outer))
    t.pool.close()
    print(write_table(t, corpus, best_lr))
    return 0


def estimate(a, rc, seeds: list[int]) -> tuple[str, float]:
    """Time one outer round (H steps and one evaluation, its seeds batched, in this process)
    of each kind of row -- AllReduce, uncompressed DiLoCo, each codec -- and scale it to the
    row's rounds: a per-row estimate and the table's (rows / --jobs), printed before it starts.
    An upper bound on the steps (start-up is in the round; rows evaluate every --eval-rounds
    rounds, not every round)."""
    _init(a.data, a.threads, a.device)
    rounds = a.steps // a.H
    codecs = [c.partition("@")[0] for c in a.codecs.split(",") if c]
    kinds = [("AllReduce", {"H": 0}), ("DiLoCo fp32", {"H": a.H})]
    kinds += [(f"DiLoCo {c}", {"H": a.H, "compression": c}) for c in dict.fromkeys(codecs)]
    per: dict[str, float] = {}
    for name, kw in kinds:
        rcs = [rc(seed=s, **{**kw, "steps": a.H, "warmup": 0, "eval_every": a.H}) for s in seeds]
        t0 = time.perf_counter()
        _task(rcs)
        per[name] = (time.perf_counter() - t0) * rounds
    n_ar, n_outer = len(a.ar_lrs.split(",")), len(a.outer.split(","))
    total = per["AllReduce"] * n_ar + per["DiLoCo fp32"] * (n_outer + max(0.0, a.kappa_mult))
    total += sum(per[f"DiLoCo {c}"] for c in codecs)
    n_rows = n_ar + n_outer + len(codecs) + (1 if a.kappa_mult > 1 else 0)
    wall = total / max(1, min(a.jobs, n_rows))
    lines = [
        f"time estimate on {a.device} ({rounds} rounds of H = {a.H}, {len(seeds)} seeds "
        "batched a row; one round timed per kind, x rounds):"
    ]
    lines += [f"  {k}: ~{v:,.0f} s a row" for k, v in per.items()]
    lines.append(
        f"  the table: {n_rows} rows, ~{total:,.0f} s of row time, ~{wall:,.0f} s wall in "
        f"{min(a.jobs, n_rows)} process(es)"
    )
    return "\n".join(lines), wall


def _k(ks, mult):
    """κ per seed; "> m" where the run (m x the steps) never reached the baseline's loss."""
    return " / ".join(f"{k:.2f}" if k is not None else f"> {mult:g}" for k in ks)


def _ar_equiv(res: dict, row: dict) -> str:
    """Per seed: the fraction of its tokens at which the seed's baseline first reaches this row's
    final loss (from the baseline's curve): "how much AllReduce this row is worth"."""
    base = next(r for r in res["rows"] if r["group"] == "a" and "(baseline)" in r["run"])
    out = []
    for s in res["seeds"]:
        b = base["runs"].get(str(s), base["runs"].get(s))
        r = row["runs"].get(str(s), row["runs"].get(s))
        t = tokens_to_reach(b["curve"], r["final_val_loss"])
        out.append("—" if t is None else f"{t / b['tokens']:.2f}")
    return " / ".join(out)


def _sitout(res: dict) -> float:
    return next((r["sitout_share"] for r in res["rows"] if "sitout_share" in r), SITOUT_SHARE)


def render(res: dict, quick: bool) -> str:
    W, P = res["workers"], res["n_params"]
    m = res["model"]
    cpu = f", {res['cpu_s']:.0f} s CPU in {res['jobs']} processes" if "cpu_s" in res else ""
    evals = (
        f"every {res['eval_rounds']} outer rounds and at the end"
        if res.get("eval_rounds", 1) > 1
        else "after every outer round"
    )
    L = [HEAD, ""]
    if quick:
        L += [
            "**REDUCED RUN (`--quick`): too few steps and seeds to decide the 2 % question; it "
            "shows the machinery works, not the answer.**",
            "",
        ]
    L += [
        f"Command: `{res['command']}` on {res['device']} ({res.get('machine', '')}; "
        f"{res['elapsed_s']:.0f} s wall{cpu}). Dataset `{res['dataset_id'][:16]}…`; model "
        f"{P:,} parameters ({m['n_layer']} layers, width {m['n_embd']}, context "
        f"{m['block_size']}); {W} workers x {res['batch_size']} sequences; {res['steps']} steps "
        f"per worker (= {res['steps'] // res['H']} outer rounds of H = {res['H']}); seeds "
        f"{res['seeds']} (init and data order), each row's seeds batched as one model; warmup + "
        "cosine on the global step for AllReduce and DiLoCo's inner AdamW; evaluation on the "
        f"whole eval half of the held-out split, DiLoCo {evals}. Gap: paired per seed against "
        f"that seed's baseline (AllReduce lr {res['best_ar_lr']:g}), mean ± sd (per seed in "
        "brackets). κ: tokens to reach the seed's AllReduce final loss / AllReduce's tokens "
        "(> m: not reached in m x the budget). AR-equivalent: the fraction of its tokens at "
        "which the seed's AllReduce first reaches the row's final loss. Bytes one worker sends "
        "for the whole run (`trainer/netmodel.py`): fp32 ring AllReduce "
        f"{res['allreduce_bytes']:,.0f} B; sync = the payloads through a ring (x 2(W-1)/W) only "
        "for dense fp32 / fp16, which a ring can add in flight, and through an all-gather "
        "(x W-1) for everything else (int8 / int4 / int2 carry per-block scales, low rank its "
        "own factors, chunks / top-k / stride their own values; the losses are the exact mean "
        "of the decoded payloads, i.e. an all-gather); reveal = expected verification bytes "
        "(5 % challenged, 1 segment, 1 verifier, 12 B/param states); other = txs "
        f"({TX_BYTES_PER_ROUND} B a round), blob-fetch HTTP heads ({HTTP_BYTES_PER_FETCH} B a "
        f"fetch) and base-model downloads (8 B/param) by a share {_sitout(res):g} of the "
        "participants, those that sat out the base's round (the testnet job's 2-of-4 "
        "draw). Reductions: fp32 AllReduce / sync, / (sync + reveal), / (sync + reveal + "
        "other) = the whole round.",
        "",
        "| | run | val loss (mean ± sd) | gap to AllReduce | κ per seed | AR-equivalent | "
        "upload B | sync B | sync | reveal B | other B | reduction (sync) | + reveal | "
        "whole round |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in res["rows"]:
        if r["group"] == "a":
            L.append(
                f"| a | {r['run']} | {r['loss']:.4f} ± {r['loss_sd']:.4f} "
                "| | | | | | | | | 1x | | |"
            )
            continue
        gaps = ", ".join(f"{g:+.1f}" for g in r["gaps"])
        L.append(
            f"| {r['group']} | {r['run']} | {r['loss']:.4f} ± {r['loss_sd']:.4f} | "
            f"{r['gap']:+.2f} ± {r['gap_sd']:.2f} % [{gaps}] | "
            f"{_k(r['kappa'], r['steps_mult'])} | {_ar_equiv(res, r)} | "
            f"{r['bytes_upload']:,.0f} | {r['bytes_sync']:,.0f} | {r['sync_mode']} | "
            f"{r['bytes_reveal']:,.0f} | {r['bytes_other']:,.0f} | {r['reduction']:,.0f}x | "
            f"{r['reduction_with_reveal']:,.0f}x | {r['reduction_round']:,.0f}x |"
        )
    # at equal tokens: the κ row spends m x the baseline's tokens, so it does not count here
    ok = [r for r in res["rows"] if r["group"] in ("b", "c") and r["gap"] <= 2.0]
    b = max(ok, key=lambda r: r["reduction"], default=None)
    L += [
        "",
        "Best reduction within a 2 % mean gap at the baseline's tokens: "
        + (
            f"**{b['run']}**, {b['reduction']:,.0f}x in sync bytes "
            f"({b['reduction_round']:,.0f}x for the whole round) at {b['gap']:+.2f} %."
            if b
            else "**none**."
        ),
        "",
    ]
    return "\n".join(L)


def write_section(path: Path, md: str) -> None:
    _write_section(path, md, HEAD)


if __name__ == "__main__":
    sys.exit(main())
