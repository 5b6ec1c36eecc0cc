"""Commitment hashing speed: merkle_root_of_bytes vs hashlib.sha256 on the same bytes.

    .venv/bin/python benchmarks/hash_bench.py                  # 64 MiB, best of 7
    .venv/bin/python benchmarks/hash_bench.py --mib 256 --repeats 5 --record

Hashes one --mib MiB payload (1 MiB chunks, the update-root layout) with
  * hashlib.sha256 over the whole buffer (one thread: the reference),
  * merkle_root_of_bytes as providers and verifiers call it (memoryview chunks, leaves
    hashed on one thread per core for payloads >= PARALLEL_MIN_BYTES),
  * merkle_root_of_bytes(workers=1) (zero-copy, one thread),
  * the previous implementation (copy each chunk, then 0x00 + chunk: two copies per chunk),
interleaved, and prints GB/s (10^9 bytes/s) of the best of --repeats runs of each (the
best run is the least disturbed one on a shared machine) and the ratio to hashlib.
--record appends the table to benchmarks/RESULTS.md with the command and the machine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

from abci_app.merkle import CHUNK_SIZE, hash_node, merkle_root_of_bytes

ROOT = Path(__file__).resolve().parent.parent


def copying_root(data: bytes) -> bytes:
    """The implementation before zero-copy hashing (kept here as the baseline)."""
    level = [
        hashlib.sha256(b"\x00" + bytes(data[i : i + CHUNK_SIZE])).digest()
        for i in range(0, len(data), CHUNK_SIZE)
    ]
    while len(level) > 1:
        nxt = [hash_node(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--mib", type=int, default=64, help="payload size in MiB (default 64)")
    ap.add_argument("--repeats", type=int, default=7, help="runs of each, best kept (default 7)")
    ap.add_argument(
        "--record", action="store_true", help="append the figures to benchmarks/RESULTS.md"
    )
    ap.add_argument("-o", "--output", choices=("text", "json"), default="text")
    args = ap.parse_args()
    if args.mib < 1 or args.repeats < 1:
        ap.error("--mib and --repeats must be at least 1 (e.g. --mib 64 --repeats 7)")

    data = os.urandom(args.mib << 20)
    cases: dict[str, Callable[[], bytes]] = {
        "hashlib.sha256 (whole buffer)": lambda: hashlib.sha256(data).digest(),
        "merkle_root_of_bytes (default threads)": lambda: merkle_root_of_bytes(data),
        "merkle_root_of_bytes (workers=1)": lambda: merkle_root_of_bytes(data, workers=1),
        "previous (copy per chunk)": lambda: copying_root(data),
    }
    assert merkle_root_of_bytes(data) == merkle_root_of_bytes(data, workers=1) == copying_root(data)
    load_before = os.getloadavg()[0]
    best = {name: float("inf") for name in cases}
    for _ in range(args.repeats):
        for name, fn in cases.items():
            t = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t)
    load_after = os.getloadavg()[0]
    gbps = {name: len(data) / s / 1e9 for name, s in best.items()}
    ref = gbps["hashlib.sha256 (whole buffer)"]
    rows = [
        {"case": n, "GB/s": round(g, 3), "vs hashlib": round(g / ref, 2)} for n, g in gbps.items()
    ]
    machine = (
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load average {load_before:.1f} before / {load_after:.1f} after"
    )
    if args.output == "json":
        print(
            json.dumps(
                {"mib": args.mib, "repeats": args.repeats, "machine": machine, "rows": rows},
                indent=2,
            )
        )
    else:
        print(f"{args.mib} MiB, best of {args.repeats}; {machine}")
        for r in rows:
            print(f"  {r['case']:<42} {r['GB/s']:6.3f} GB/s  {r['vs hashlib']:.2f}x hashlib")
    if args.record:
        cmd = " ".join(["benchmarks/hash_bench.py", *sys.argv[1:]])
        with open(ROOT / "benchmarks" / "RESULTS.md", "a") as f:
            f.write(
                f"\n### hash_bench ({time.strftime('%Y-%m-%d')}, {machine})\n\n`{cmd}`\n\n"
                "| case | GB/s | vs hashlib |\n|---|---|---|\n"
                + "".join(f"| {r['case']} | {r['GB/s']} | {r['vs hashlib']} |\n" for r in rows)
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
