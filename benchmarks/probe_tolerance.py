"""Tolerance-mode probes on the real trainer (CPU): how far an honest verifier's probe is from
the provider's, and how far a lazy verifier's best guesses are (docs/threat-model.md
*Evidence only re-execution yields*). Prints a table and the largest ratios; the figures are
recorded in benchmarks/RESULTS.md (*Tolerance-mode probes*).

For each of N consecutive k-step segments of an honest trace (tiny model, synthetic corpus):

- honest: the provider's end (deterministic, 1 thread) vs a verifier's re-execution on another
  numerical path: (b) 2 threads, non-deterministic kernels; (c) float64 steps, float32 state;
  the probe ratio ``|p_ver - p_prov|_1 / |p_prov|_1`` (what the chain compares with
  tolerance_ppm / 10^6) next to the full-state param distance ``d``;
- lazy (no re-execution, public data only): (z) all zeros; (x) the previous segment's probe
  (extrapolating the last public step: both its states are public when the segment before is
  opened); (s) the previous probe scaled by the best least-squares factor (an oracle: it needs
  the answer); (h) half the steps' displacement when k >= 2 (re-executing k/2 steps, then
  doubling) and (b16) a bf16 re-execution (the cheap cheat).

    .venv/bin/python benchmarks/probe_tolerance.py --segments 24 --k 1
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from abci_app.jobs.probe import PPM, PROBE_DIM, PROBE_FLOOR, compute_probe_distance
from trainer.data import Corpus, ShardSpec, synthetic_text
from trainer.determinism import set_determinism
from trainer.model import GPTConfig, init_model
from trainer.probe import compute_probe
from trainer.state import InnerConfig, make_inner_optimizer, run_inner_steps, state_bytes
from trainer.verify import STATE_PARTS, rerun_segment, state_distance


def ratio(claimed: list[int], reached: list[int]) -> float:
    """|claimed - reached|_1 / |claimed|_1 (the chain accepts it when x 10^6 <= tolerance_ppm
    plus the floor's share, ``floor_share``)."""
    diff, norm = compute_probe_distance(claimed, reached)
    return diff / max(norm, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--segments", type=int, default=24)
    ap.add_argument("--k", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=20, help="steps before the first segment")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--json", default="", help="write the rows here")
    a = ap.parse_args()
    t0 = time.time()
    cfg = GPTConfig.preset(a.model)
    corpus = Corpus(synthetic_text(120_000, seed=7))
    spec = ShardSpec(
        dataset_id=corpus.id, seed=11, job=1, round=0, provider="p", block_size=cfg.block_size
    )
    icfg = InnerConfig()
    set_determinism(0, threads=1)
    m = init_model(cfg, 0)
    opt = make_inner_optimizer(m, icfg)

    def snap(step: int) -> bytes:
        return state_bytes(m, opt, icfg, round=0, inner_step=step, shard=spec.shard_index())

    run_inner_steps(m, opt, icfg, corpus, spec, 0, a.warmup)
    states = [snap(a.warmup)]
    for i in range(a.segments + 1):
        run_inner_steps(m, opt, icfg, corpus, spec, a.warmup + i * a.k, a.k)
        states.append(snap(a.warmup + (i + 1) * a.k))
    rows = []
    for i in range(1, a.segments + 1):
        start, end, prev = states[i], states[i + 1], states[i - 1]
        p = compute_probe(start, end)
        torch.use_deterministic_algorithms(False)
        torch.set_num_threads(2)
        b = rerun_segment(start, spec, a.k, corpus, torch.float32)
        c = rerun_segment(start, spec, a.k, corpus, torch.float64)
        set_determinism(0, threads=1)
        b16 = rerun_segment(start, spec, a.k, corpus, torch.bfloat16)
        row = {
            "segment": i,
            "floor_share": PROBE_FLOOR * PROBE_DIM / max(sum(abs(x) for x in p), 1),
            "honest_2threads": ratio(p, compute_probe(start, b)),
            "honest_float64": ratio(p, compute_probe(start, c)),
            "d_param_2threads": state_distance(start, end, b)["param"],
            "d_param_float64": state_distance(start, end, c)["param"],
            "lazy_zeros": ratio(p, [0] * PROBE_DIM),
            "lazy_prev_step": ratio(p, compute_probe(prev, start)),
            "cheat_bf16": ratio(p, compute_probe(start, b16)),
        }
        q = compute_probe(prev, start)
        num = sum(x * y for x, y in zip(p, q, strict=True))
        den = sum(y * y for y in q) or 1
        row["lazy_prev_scaled_oracle"] = ratio(p, [round(y * num / den) for y in q])
        if a.k >= 2:
            h = rerun_segment(start, spec, a.k // 2, corpus, torch.float32)
            row["cheat_half_steps_doubled"] = ratio(p, [2 * x for x in compute_probe(start, h)])
        rows.append(row)
    keys = [k for k in rows[0] if k != "segment"]
    print(f"model {a.model}, k = {a.k}, {a.segments} segments after {a.warmup} steps")
    print(f"{'figure':28} {'min':>10} {'median':>10} {'max':>10}")
    for k in keys:
        xs = sorted(r[k] for r in rows)
        print(f"{k:28} {xs[0]:10.3e} {xs[len(xs) // 2]:10.3e} {xs[-1]:10.3e}")
    print(f"(state parts judged by the full check: {', '.join(STATE_PARTS)}; chain: ratio x 10^6")
    print(f" <= tolerance_ppm, floor {PROBE_FLOOR} units x {PROBE_DIM}; {PPM} ppm = 1)")
    print(f"{time.time() - t0:.0f} s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
