"""`make demo` on a busy machine: run ``scripts/demo.py --busy N`` R times and print one line per
run (exit status, wall seconds, the 1-minute load average at its end, the demo's verdict line)
and the tally. A run passes when the demo exits 0: its own check of the story on the chain (the
cheater proven fraudulent, slashed and jailed; every honest provider's commitments accepted and
paid, none slashed; every model attested by >= 2/3 of the accepted stake; all rounds finalized).

    .venv/bin/python benchmarks/demo_busy.py --busy 4 --runs 5

Record the tally and the machine in benchmarks/RESULTS.md (*make demo on a busy machine*). Each
run's whole output is kept in ``.loconet-demo-busy/run-K.log``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / ".loconet-demo-busy"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description="run the demo R times with N CPU burners beside it",
        epilog="example: .venv/bin/python benchmarks/demo_busy.py --busy 4 --runs 5",
    )
    p.add_argument("--busy", type=int, default=4, help="CPU-burning processes (default 4)")
    p.add_argument("--runs", type=int, default=5, help="demo runs (default 5)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per run (default 1800)")
    a = p.parse_args(argv)
    LOGS.mkdir(exist_ok=True)
    passed = 0
    print(f"{a.runs} run(s) of scripts/demo.py --busy {a.busy} on {os.cpu_count()} cores")
    for k in range(1, a.runs + 1):
        log = LOGS / f"run-{k}.log"
        t0 = time.monotonic()
        with log.open("w") as f:
            try:
                rc = subprocess.run(
                    [sys.executable, "scripts/demo.py", "--busy", str(a.busy)],
                    cwd=ROOT,
                    stdout=f,
                    stderr=subprocess.STDOUT,
                    timeout=a.timeout,
                    check=False,
                ).returncode
            except subprocess.TimeoutExpired:
                rc = -1
        secs = time.monotonic() - t0
        load1 = os.getloadavg()[0]
        text = log.read_text(errors="replace")
        verdict = next(
            (ln.strip() for ln in reversed(text.splitlines()) if ln.startswith("demo ")), ""
        )
        passed += rc == 0
        print(
            f"run {k}: rc {rc}  {secs:5.0f} s  load {load1:5.1f}  {verdict[:120]}  ({log})",
            flush=True,
        )
    print(f"passed {passed}/{a.runs}")
    return 0 if passed == a.runs else 1


if __name__ == "__main__":
    sys.exit(main())
