"""State-sync snapshot cost at scale (issue 12 item 5): take, verify, restore.

    .venv/bin/python benchmarks/snapshot_bench.py --keys 10000,100000 --record

For each size: a store of N random accounts-like pairs (21-byte keys, 40-byte values, written
in blocks of 20,000), then the node's own path: ``Snapshotter.take`` of the last height (size
pass + chunk passes + files), every chunk read back and checked by ``Restore.apply`` (the
subtree rebuilt against the metadata that folds to the app hash), and ``Restore.finish`` into a
fresh store (one stage + commit of the whole state, the root checked once more). CPU seconds of
this process (``time.process_time``) and wall seconds; peak RSS is the process's high-water mark
so far (sizes run in the order given), read once after the take (store load + take) and once at
the end (+ verify + restore). --record appends the table to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from abci_app.pb import abci  # noqa: E402
from abci_app.snapshots import CHUNK_BYTES, FORMAT, Restore, Snapshotter  # noqa: E402
from abci_app.store import MerkleStore  # noqa: E402

BLOCK = 20_000


def run(n: int, chunk_bytes: int, tmp: Path) -> dict[str, float | int | bool]:
    src = MerkleStore(tmp / f"src-{n}.db")
    rng = random.Random(n)
    h = 0
    for start in range(0, n, BLOCK):
        h += 1
        src.stage(h, {rng.randbytes(21): rng.randbytes(40) for _ in range(min(BLOCK, n - start))})
        src.commit()
    snaps = Snapshotter(src, tmp / f"snaps-{n}", interval=0, chunk_bytes=chunk_bytes)
    c0, w0 = time.process_time(), time.perf_counter()
    snap = snaps.take(h)
    take_cpu, take_wall = time.process_time() - c0, time.perf_counter() - w0
    rss_take = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    size = sum(p.stat().st_size for p in (tmp / f"snaps-{n}" / str(h)).iterdir())
    restore = Restore(snap, src.app_hash)
    c0 = time.process_time()
    for i in range(snap.chunks):
        resp, _ = restore.apply(i, snaps.load_chunk(h, FORMAT, i), "bench")
        if resp.result != abci.ResponseApplySnapshotChunk.ACCEPT:
            raise SystemExit(f"chunk {i} was refused: the snapshot path is broken")
    verify_cpu = time.process_time() - c0
    dst = MerkleStore(tmp / f"dst-{n}.db")
    c0, w0 = time.process_time(), time.perf_counter()
    done = restore.finish(dst)
    restore_cpu, restore_wall = time.process_time() - c0, time.perf_counter() - w0
    same = done.result == abci.ResponseApplySnapshotChunk.ACCEPT and dst.app_hash == src.app_hash
    src.close()
    dst.close()
    return {
        "keys": n,
        "chunks": snap.chunks,
        "snapshot_MiB": round(size / 2**20, 1),
        "take_cpu_s": round(take_cpu, 2),
        "take_wall_s": round(take_wall, 2),
        "verify_chunks_cpu_s": round(verify_cpu, 2),
        "restore_cpu_s": round(restore_cpu, 2),
        "restore_wall_s": round(restore_wall, 2),
        "same_app_hash": same,
        "peak_rss_after_take_MB": rss_take,
        "peak_rss_MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
    }


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--keys", default="10000,100000", help="state sizes, comma-separated")
    ap.add_argument("--chunk-bytes", type=int, default=CHUNK_BYTES, help="target chunk size")
    ap.add_argument(
        "--record", action="store_true", help="append the figures to benchmarks/RESULTS.md"
    )
    ap.add_argument("-o", "--output", choices=("text", "json"), default="text")
    args = ap.parse_args()
    try:
        sizes = [int(x) for x in args.keys.split(",")]
    except ValueError:
        ap.error("--keys takes whole numbers separated by commas, e.g. --keys 10000,100000")
    if min(sizes) < 1 or args.chunk_bytes < 1:
        ap.error("--keys and --chunk-bytes must be at least 1")
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="snapbench-") as d:
        rows = []
        for n in sizes:
            rows.append(run(n, args.chunk_bytes, Path(d)))
            if args.output == "text":
                print(json.dumps(rows[-1]), flush=True)
    machine = (
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load average {load_before:.1f} before / {os.getloadavg()[0]:.1f} after"
    )
    if args.output == "json":
        print(json.dumps({"machine": machine, "rows": rows}, indent=2))
    if not all(r["same_app_hash"] for r in rows):
        print("a restored store does not have the source's app hash", file=sys.stderr)
        return 1
    if args.record:
        cmd = " ".join(["benchmarks/snapshot_bench.py", *sys.argv[1:]])
        cols = list(rows[0])
        with open(ROOT / "benchmarks" / "RESULTS.md", "a") as f:
            f.write(
                f"\n### snapshot_bench ({time.strftime('%Y-%m-%d')}, {machine})\n\n`{cmd}`\n\n"
                + "| "
                + " | ".join(cols)
                + " |\n|"
                + "---|" * len(cols)
                + "\n"
                + "".join("| " + " | ".join(str(r[c]) for c in cols) + " |\n" for r in rows)
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
