"""Invariant simulation, long run (Cosmos-simulation style; the short run is in the suite).

    .venv/bin/python benchmarks/simulate.py                          # 10,000 blocks, seed 0
    .venv/bin/python benchmarks/simulate.py --blocks 2000 --seed 7 --max-seconds 600
    nice -n 19 .venv/bin/python benchmarks/simulate.py --record      # + benchmarks/RESULTS.md

Random valid and invalid txs across every module (bank, staking, slashing through absent
validators and double-sign evidence, providers, jobs with rounds through every phase), every
module invariant after every block, two apps in lockstep (the second on a SQLite file, reopened
every --restart-every blocks) agreeing on every response. The driver is tests/kits/simkit.py (over
the test kits chainkit, stakekit and marketkit). A violation or divergence stops the run with
exit status 1 and names the seed and height; rerun with that seed and --blocks to reproduce.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from abci_app.errors import InvariantBroken  # noqa: E402
from tests.kits.simkit import SimConfig, SimStats, Simulation, SimulationFailure  # noqa: E402


class _Stop(Exception):
    pass


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--blocks", type=int, default=10_000, help="blocks to simulate (default 10000)")
    ap.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    ap.add_argument("--validators", type=int, default=4, help="genesis validators (default 4)")
    ap.add_argument("--accounts", type=int, default=16, help="funded accounts (default 16)")
    ap.add_argument(
        "--ops-per-block",
        type=int,
        default=6,
        help="random txs per block: 0..N, plus market duties",
    )
    ap.add_argument(
        "--restart-every",
        type=int,
        default=500,
        help="reopen the second app from its file every N blocks (0: never)",
    )
    ap.add_argument(
        "--staged-invariants",
        action="store_true",
        help="also check the invariants inside FinalizeBlock (the committed state is checked "
        "every block anyway)",
    )
    ap.add_argument(
        "--second-invariants-every",
        type=int,
        default=100,
        metavar="N",
        help="the second app's invariants every N blocks (default 100; the first app's run every "
        "block, and both apps' app hashes, which commit to the whole state, are compared "
        "every block)",
    )
    ap.add_argument(
        "--max-seconds",
        type=float,
        default=0,
        help="stop after this long and report the blocks done (0: no limit)",
    )
    ap.add_argument(
        "--progress-every",
        type=int,
        default=500,
        help="print a progress line every N blocks (0: quiet)",
    )
    ap.add_argument(
        "--record", action="store_true", help="append the figures to benchmarks/RESULTS.md"
    )
    ap.add_argument("-o", "--output", choices=("text", "json"), default="text")
    args = ap.parse_args()
    if args.blocks < 1 or args.validators < 1 or args.accounts < 4:
        ap.error(
            "need --blocks >= 1, --validators >= 1 and --accounts >= 4 (e.g. --blocks 10000 "
            "--validators 4)"
        )
    return args


def run(args: argparse.Namespace) -> tuple[SimStats, str]:
    """The simulation (until --blocks, --max-seconds or a failure); its stats and the failure
    ("" when none)."""
    tmp = tempfile.TemporaryDirectory(prefix="loconet-sim-")
    cfg = SimConfig(
        seed=args.seed,
        blocks=args.blocks,
        validators=args.validators,
        accounts=args.accounts,
        ops_per_block=args.ops_per_block,
        disk=Path(tmp.name) / "second.db",
        restart_every=args.restart_every,
        staged_invariants=args.staged_invariants,
        second_invariants_every=max(1, args.second_invariants_every),
    )
    t0 = time.perf_counter()

    def progress(st: SimStats, done: int) -> None:
        if args.progress_every and done % args.progress_every == 0 and args.output == "text":
            el = time.perf_counter() - t0
            print(
                f"  block {done:>6}  txs {st.txs:>7} ({st.ok} ok)  {done / el:6.1f} blocks/s",
                flush=True,
            )
        if args.max_seconds and time.perf_counter() - t0 > args.max_seconds:
            raise _Stop

    sim = Simulation(cfg)
    failure = ""
    try:
        sim.run(progress)
    except _Stop:
        pass
    except (SimulationFailure, InvariantBroken) as e:
        failure = f"{type(e).__name__}: {e}"
    finally:
        sim.close()
        tmp.cleanup()
    st = sim.stats
    st.seconds = time.perf_counter() - t0
    st.compared = sim.app.compared
    return st, failure


def figures_of(args: argparse.Namespace, st: SimStats, failure: str, machine: str) -> dict:
    ops = st.ops()
    return {
        "seed": args.seed,
        "blocks_asked": args.blocks,
        "blocks": st.blocks,
        "txs": st.txs,
        "accepted": st.ok,
        "rejected": st.txs - st.ok,
        "responses_compared": st.compared,
        "restarts": st.restarts,
        "rejected_tx_checks": st.rejected_checks,
        "seconds": round(st.seconds, 1),
        "blocks_per_s": round(st.blocks / st.seconds, 1) if st.seconds else 0.0,
        "rounds_by_phase": {str(p): n for p, n in sorted(st.phases.items())},
        "ops": {k: {"accepted": a, "rejected": r} for k, (a, r) in ops.items()},
        "events": dict(sorted(st.events.items())),
        "violations": 1 if failure else 0,
        "failure": failure,
        "machine": machine,
    }


def print_text(args: argparse.Namespace, st: SimStats, figures: dict, failure: str) -> None:
    print(
        f"seed {args.seed}: {st.blocks} of {args.blocks} blocks in {st.seconds:.0f} s "
        f"({figures['blocks_per_s']} blocks/s); {figures['machine']}"
    )
    print(
        f"  txs {st.txs}: {st.ok} accepted, {st.txs - st.ok} rejected; {st.compared} "
        f"responses compared; {st.restarts} restarts of the second app; {st.rejected_checks} "
        "blocks rerun without their rejected txs"
    )
    print(
        "  rounds reaching commit/reveal/verdict/attest: "
        + "/".join(str(st.phases[p]) for p in (1, 3, 4, 5))
    )
    for k in (
        "round.finalized",
        "job.closed:completed",
        "job.closed:cancelled",
        "verdict.decided:fraud",
        "provider.slashed:missed_commit",
        "provider.slashed:missed_reveal",
        "validator.jailed:downtime",
        "validator.jailed:double_sign",
        "validator.unjailed",
        "provider.unbonded",
    ):
        print(f"  {k:<32} {st.events[k]}")
    print("  " + ("VIOLATION " + failure if failure else "0 violations, 0 divergences"))


def record(args: argparse.Namespace, st: SimStats, failure: str, machine: str) -> None:
    """--record: the run's row appended to benchmarks/RESULTS.md."""
    cmd = " ".join(["benchmarks/simulate.py", *sys.argv[1:]])
    with open(ROOT / "benchmarks" / "RESULTS.md", "a") as f:
        f.write(
            "\n"
            f"### simulate ({time.strftime('%Y-%m-%d')}, {machine})\n"
            "\n"
            f"`{cmd}`\n"
            "\n"
            "| seed | blocks | txs (accepted / rejected) | responses compared | restarts | "
            "rounds finalized | fraud / missed commit / missed reveal | validator jails "
            "(downtime / double sign) | seconds | result |\n"
            "|---|---|---|---|---|---|---|---|---|---|\n"
            f"| {args.seed} | {st.blocks} | {st.txs} ({st.ok} / {st.txs - st.ok}) | "
            f"{st.compared} | {st.restarts} | {st.events['round.finalized']} | "
            f"{st.events['verdict.decided:fraud']} / "
            f"{st.events['provider.slashed:missed_commit']} / "
            f"{st.events['provider.slashed:missed_reveal']} | "
            f"{st.events['validator.jailed:downtime']} / "
            f"{st.events['validator.jailed:double_sign']} | {st.seconds:.0f} | "
            f"{'VIOLATION: ' + failure[:200] if failure else '0 violations, 0 divergences'} "
            "|\n"
        )


def main() -> int:
    args = parse_args()
    st, failure = run(args)
    load = os.getloadavg()[0]
    machine = (
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, load "
        f"average {load:.1f} at the end"
    )
    figures = figures_of(args, st, failure, machine)
    if args.output == "json":
        print(json.dumps(figures, indent=2))
    else:
        print_text(args, st, figures, failure)
    if args.record:
        record(args, st, failure, machine)
    return 1 if failure else 0


if __name__ == "__main__":
    sys.exit(main())
