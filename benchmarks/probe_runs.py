"""Tolerance mode, runs of adjacent opened segments (issue 11): how far an honest verifier that
re-executes a run through from the run's start (its own reached state being the next segment's
start: the chain opens only a run's start) is from the provider, per position in the run.

For R runs of L adjacent k-step segments of an honest trace (tiny model, synthetic corpus), the
verifier re-executes each run on another numerical path ((b) 2 threads, non-deterministic
kernels; (c) float64 steps, float32 state), chained, and for the i-th segment of the run reports

- ``probe``: the probe ratio ``|p_ver - p_prov|_1 / |p_prov|_1`` (what the chain compares with
  ``min(10 x tolerance_ppm, 100,000)`` ppm: 1 % at the default job tolerance of 1,000 ppm);
- ``d_chained``: the full-state param distance of the verifier's end to the provider's, measured
  against the verifier's own segment movement (``state_distance(own start, own end, claimed)``:
  the previous segments' drift included);
- ``d_shifted``: the same after ``trainer.verify_run.shift_state`` (the verifier's displacement
  applied to the provider's opened start: what ``worker.judge_opened_ends`` judges), i.e. the
  drift of this segment alone;
- ``fails_shifted`` / ``fails_fresh``: how many ends the verifier's full check
  (``trainer.verify.judge_end`` at ``--tolerance``: every part within tolerance or within the ulp
  floor) refuses, judging the shifted end, or a fresh re-execution of the segment from the
  provider's opened start on the same path (what a verifier could do instead, at the cost of a
  second re-execution of every segment that is not a run's start).

    .venv/bin/python benchmarks/probe_runs.py --runs 6 --length 4 --k 1
"""

from __future__ import annotations

import argparse
import time

import torch

from abci_app.jobs.probe import compute_probe_distance
from trainer.data import Corpus, ShardSpec, synthetic_text
from trainer.determinism import set_determinism
from trainer.model import GPTConfig, init_model
from trainer.probe import compute_probe
from trainer.state import InnerConfig, make_inner_optimizer, run_inner_steps, state_bytes
from trainer.verify import judge_end, rerun_segment, state_distance
from trainer.verify_run import shift_state


def ratio(claimed: list[int], reached: list[int]) -> float:
    diff, norm = compute_probe_distance(claimed, reached)
    return diff / max(norm, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--length", type=int, default=4)
    ap.add_argument("--k", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=20, help="steps before the first segment")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--tolerance", type=float, default=1e-3)
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
    n = a.runs * a.length
    states = [snap(a.warmup)]
    for i in range(n):
        run_inner_steps(m, opt, icfg, corpus, spec, a.warmup + i * a.k, a.k)
        states.append(snap(a.warmup + (i + 1) * a.k))

    def rerun(start: bytes, path: str) -> bytes:
        if path == "2threads":
            torch.use_deterministic_algorithms(False)
            torch.set_num_threads(2)
            out = rerun_segment(start, spec, a.k, corpus, torch.float32)
        else:
            set_determinism(0, threads=1)
            out = rerun_segment(start, spec, a.k, corpus, torch.float64)
        set_determinism(0, threads=1)
        return out

    # rows[(path, position in the run)] = list of (probe, d_chained, d_shifted)
    rows: dict[tuple[str, int], list[tuple[float, ...]]] = {}
    for path in ("2threads", "float64"):
        for r in range(a.runs):
            first = r * a.length
            own = states[first]
            for i in range(a.length):
                s = first + i
                their_start, claimed = states[s], states[s + 1]
                end, fresh = (rerun(x, path) for x in (own, their_start))
                p = compute_probe(their_start, claimed)
                shifted = shift_state(end, own, their_start)
                row = (
                    ratio(p, compute_probe(own, end)),
                    state_distance(own, end, claimed)["param"],
                    state_distance(their_start, shifted, claimed)["param"],
                    float(not judge_end(their_start, shifted, claimed, a.tolerance).valid),
                    float(not judge_end(their_start, fresh, claimed, a.tolerance).valid),
                )
                rows.setdefault((path, i), []).append(row)
                own = end
    print(
        f"model {a.model}, k = {a.k}, {a.runs} runs of {a.length} segments, tolerance"
        f" {a.tolerance:g}: max over the runs (fails: count)"
    )
    print(
        f"{'path':10} {'position':>8} {'probe':>10} {'d_chained':>10} {'d_shifted':>10}"
        f" {'fails_shifted':>13} {'fails_fresh':>11}"
    )
    for (path, i), xs in sorted(rows.items()):
        mx = [max(x[j] for x in xs) for j in range(3)]
        f = [int(sum(x[j] for x in xs)) for j in (3, 4)]
        print(f"{path:10} {i:8d} {mx[0]:10.3e} {mx[1]:10.3e} {mx[2]:10.3e} {f[0]:13d} {f[1]:11d}")
    print(f"{time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
