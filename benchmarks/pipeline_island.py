"""Pipeline-parallel provider islands (trainer/pipeline.py, issue 35): step time and memory per
stage for a model above a per-process memory budget, and the measured pipeline bubble against
the schedule's formula.

Each configuration runs under torchrun (``-m trainer.pipeline --seed -1 --no-state``: every rank
draws its own stage, nobody builds the whole model) for ``--steps`` inner steps; the first step
(shape inference, allocator warm-up) is dropped and the median of the rest reported.

* memory: each process's peak resident set during training minus its resident set before it
  built anything (after torch's import and the process group: that baseline, ~the same in every
  process, is no part of the model's cost). ``--budget-mib`` is the per-process budget the
  report checks: the single-process run (1 stage) must exceed it, each stage must fit it.
* bubble: a stage's busy time is the time inside its ``forward_one_chunk`` and
  ``backward_one_chunk`` (compute only; waits for its neighbours are outside them), so its idle
  fraction is 1 − busy/step. The measured bubble is the mean over stages; GPipe's formula,
  for S equal stages and free communication, is (S−1)/(M+S−1).

    .venv/bin/python benchmarks/pipeline_island.py --stages 2 --microbatches 1,2,4,8 \\
        --budget-mib 200 --record

``--device cuda`` runs the stages on GPUs (NCCL, one GPU per stage, memory from
``torch.cuda.max_memory_allocated``); it stops with one sentence where torch sees fewer GPUs
than stages (NCCL takes one process per GPU). ``--record`` appends the table to
benchmarks/RESULTS.md with the command and the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MODEL = {"block_size": 64, "n_layer": 8, "n_head": 6, "n_embd": 384}


def run(
    stages: int, micro: int, steps: int, batch: int, model: dict, device: str, schedule: str
) -> list[dict]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    with tempfile.TemporaryDirectory(prefix="pipeline-bench-") as tmp:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            str(stages),
            "-m",
            "trainer.pipeline",
            "--pipeline",
            str(stages),
            "--schedule",
            schedule,
            "--model",
            json.dumps(model),
            "--seed",
            "-1",
            "--steps",
            str(steps),
            "--batch-size",
            str(batch),
            "--microbatches",
            str(micro),
            "--device",
            device,
            "--no-state",
            "--out",
            tmp,
        ]
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        if p.returncode != 0:
            sys.exit(f"torchrun failed ({p.returncode}):\n{p.stdout[-2000:]}{p.stderr[-3000:]}")
        return [json.loads((Path(tmp) / f"rank{r}.json").read_text()) for r in range(stages)]


def summarize(ranks: list[dict], device: str) -> dict:
    step = statistics.median(
        max(r["step_s"][i] for r in ranks) for i in range(1, len(ranks[0]["step_s"]))
    )
    idle = []
    for r in ranks:
        fr = [1 - c / s for c, s in zip(r["compute_s"][1:], r["step_s"][1:], strict=True)]
        idle.append(statistics.median(fr))
    if device == "cuda":
        mem = [r["cuda_peak_bytes"] for r in ranks]
    else:
        mem = [r["peak_rss_train_bytes"] - r["rss_start_bytes"] for r in ranks]
    return {
        "step_s": step,
        "bubble": sum(idle) / len(idle),
        "mem_mib": [m / 2**20 for m in mem],
        "params": [r["stage_params"] for r in ranks],
    }


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--microbatches", default="1,2,4,8", help="comma-separated M values")
    ap.add_argument("--schedule", choices=["gpipe", "1f1b"], default="gpipe")
    ap.add_argument("--steps", type=int, default=4, help="per configuration (the first dropped)")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--model", default=json.dumps(MODEL), help="GPTConfig fields as JSON")
    ap.add_argument("--budget-mib", type=float, default=200.0, help="per-process memory budget")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--record", action="store_true", help="append to benchmarks/RESULTS.md")
    a = ap.parse_args()
    if a.device == "cuda":
        import torch  # lazy: the islands run in torchrun's processes; here only to count GPUs

        if not torch.cuda.is_available() or torch.cuda.device_count() < a.stages:
            n = torch.cuda.device_count() if torch.cuda.is_available() else 0
            print(
                f"--device cuda needs one GPU per stage: {a.stages} stages, torch sees {n} "
                "GPU(s) (NCCL takes one process per GPU)",
                file=sys.stderr,
            )
            return 2
    model = json.loads(a.model)
    if a.steps < 2:
        ap.error("--steps must be at least 2 (the first is dropped)")
    ms = [int(x) for x in a.microbatches.split(",")]
    single = summarize(run(1, 1, a.steps, a.batch_size, model, a.device, a.schedule), a.device)
    rows = []
    for m in ms:
        ranks = run(a.stages, m, a.steps, a.batch_size, model, a.device, a.schedule)
        s = summarize(ranks, a.device)
        formula = (a.stages - 1) / (m + a.stages - 1)
        rows.append((m, s, formula))
    unit = "GPU peak allocated" if a.device == "cuda" else "peak RSS over baseline"
    lines = [
        f"model {model} ({sum(single['params']):,} parameters), batch {a.batch_size}, "
        f"{a.schedule}, {a.device}, budget {a.budget_mib:.0f} MiB per process ({unit})",
        "",
        "| run | M | step s | memory per stage MiB | fits budget | bubble measured | formula |",
        "|---|---|---|---|---|---|---|",
        f"| 1 process | 1 | {single['step_s']:.3f} | {single['mem_mib'][0]:.0f} | "
        f"{'yes' if single['mem_mib'][0] <= a.budget_mib else 'no'} | - | - |",
    ]
    for m, s, f in rows:
        mem = " / ".join(f"{x:.0f}" for x in s["mem_mib"])
        fits = "yes" if max(s["mem_mib"]) <= a.budget_mib else "no"
        lines.append(
            f"| {a.stages} stages | {m} | {s['step_s']:.3f} | {mem} | {fits} | "
            f"{s['bubble']:.2f} | {f:.2f} |"
        )
    table = "\n".join(lines)
    print(table)
    if a.record:
        cmd = "python benchmarks/pipeline_island.py " + " ".join(sys.argv[1:])
        machine = f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}"
        with open(ROOT / "benchmarks" / "RESULTS.md", "a") as f:
            f.write(
                "\n## Pipeline-parallel islands: memory per stage and the bubble "
                "(`benchmarks/pipeline_island.py`, issue 35)\n\n"
                f"`{cmd}` on {machine}.\n\n{table}\n"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
