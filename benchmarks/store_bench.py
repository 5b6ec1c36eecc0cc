"""Benchmark of abci_app.store.MerkleStore: blocks of changes over a large state.

    .venv/bin/python benchmarks/store_bench.py                 # 1k-change blocks, 100k keys
    .venv/bin/python benchmarks/store_bench.py --keys 10000 --blocks 10

Builds a state of --keys keys in an SQLite file (WAL, synchronous=FULL, as a node
runs it), then commits --blocks blocks of --changes changed keys each (70% rewrites,
20% inserts, 10% deletes) and prints commits/s and microseconds per changed key,
split into stage (tree update and hashing) and commit (one SQLite transaction with
fsync, plus pruning).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import platform
import resource
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from abci_app.store import MerkleStore
from node.local.supervisor import tune_gc

ROOT = Path(__file__).resolve().parent.parent


def _key(i: int) -> bytes:
    return b"bench/" + hashlib.sha256(i.to_bytes(8, "big")).digest()[:12]


def _value(block: int, i: int) -> bytes:
    return hashlib.sha256(b"%d/%d" % (block, i)).digest() * 2  # 64 bytes


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=100_000, help="state size (default 100000)")
    parser.add_argument("--changes", type=int, default=1000, help="changed keys per block")
    parser.add_argument("--blocks", type=int, default=20, help="measured blocks (default 20)")
    parser.add_argument("--keep-recent", type=int, default=100, help="versions kept")
    parser.add_argument(
        "--warmup",
        type=int,
        default=0,
        help="blocks of --changes committed before the measured ones (with a --keep-recent "
        "below it, the measured blocks prune what blocks of the same size made stale: the "
        "steady state, not the load's big blocks)",
    )
    parser.add_argument(
        "--default-gc",
        action="store_true",
        help="keep CPython's default GC thresholds (default: the node process's, "
        "node.local.supervisor.GC_THRESHOLD, as the store runs inside `loconet start`)",
    )
    parser.add_argument("--dir", type=Path, default=None, help="folder for the database")
    parser.add_argument(
        "--record", action="store_true", help="append the figures to benchmarks/RESULTS.md"
    )
    parser.add_argument("-o", "--output", choices=("text", "json"), default="text")
    return parser.parse_args()


def load_state(store: MerkleStore, keys: int) -> float:
    """The state of ``keys`` keys, committed in blocks of 10,000; the seconds it took."""
    t0 = time.perf_counter()
    batch = 10_000
    for start in range(0, keys, batch):
        changes: dict[bytes, bytes | None] = {
            _key(i): _value(0, i) for i in range(start, min(keys, start + batch))
        }
        store.stage(store.height + 1, changes)
        store.commit()
    return time.perf_counter() - t0


@dataclass
class Blocks:
    """The measured blocks' sums; ``live`` and ``next_key`` track the state's keys."""

    live: list[int]
    next_key: int
    stage_s: float = 0.0
    commit_s: float = 0.0
    cpu_s: float = 0.0
    stage_cpu_s: float = 0.0
    block_ms: list[float] = field(default_factory=list)
    hashes: int = 0
    reads: int = 0
    written: int = 0
    pages: int = 0


def block_changes(bl: Blocks, b: int, n_changes: int) -> dict[bytes, bytes | None]:
    """Block ``b``'s changes: 70 % rewrites, 20 % inserts, 10 % deletes of live keys spread
    over the key space (``bl``'s live keys updated)."""
    n_update = n_changes * 7 // 10
    n_insert = n_changes * 2 // 10
    n_delete = n_changes - n_update - n_insert
    changes: dict[bytes, bytes | None] = {}
    live, next_key = bl.live, bl.next_key
    step = max(1, len(live) // (n_update + n_delete))
    picked = live[(b * 7919) % step :: step][: n_update + n_delete]
    for i in picked[:n_update]:
        changes[_key(i)] = _value(b + 1, i)
    for i in picked[n_update:]:
        changes[_key(i)] = None
    for i in range(next_key, next_key + n_insert):
        changes[_key(i)] = _value(b + 1, i)
    gone = set(picked[n_update:])
    bl.live = [i for i in live if i not in gone] + list(range(next_key, next_key + n_insert))
    bl.next_key = next_key + n_insert
    return changes


def run_blocks(store: MerkleStore, args: argparse.Namespace) -> Blocks:
    """The warm-up blocks (committed, not measured), then the measured ones: wall and CPU time
    of stage and commit, and the store's counters."""
    bl = Blocks(live=list(range(args.keys)), next_key=args.keys)
    for b in range(-args.warmup, args.blocks):
        changes = block_changes(bl, b, args.changes)
        if b < 0:  # warm-up: committed, not measured
            store.stage(store.height + 1, changes)
            store.commit()
            continue
        c1, t1 = time.process_time(), time.perf_counter()
        store.stage(store.height + 1, changes)
        t2, c2 = time.perf_counter(), time.process_time()
        store.commit()
        c3, t3 = time.process_time(), time.perf_counter()
        bl.cpu_s += c3 - c1
        bl.stage_cpu_s += c2 - c1
        bl.block_ms.append(1e3 * (t3 - t1))
        bl.stage_s += t2 - t1
        bl.commit_s += t3 - t2
        s = store.stats
        bl.hashes += s.hashes
        bl.reads += s.node_reads
        bl.written += s.nodes_written
        bl.pages += s.pages_written
    return bl


def figures(
    args: argparse.Namespace, load_s: float, bl: Blocks, size: int, load0: float
) -> dict[str, Any]:
    total = bl.stage_s + bl.commit_s
    changed = args.blocks * args.changes
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "keys": args.keys,
        "blocks": args.blocks,
        "changes": args.changes,
        "load_s": round(load_s, 1),
        "ms_per_block": round(1e3 * total / args.blocks, 1),
        "max_block_ms": round(max(bl.block_ms), 1),
        "stage_ms": round(1e3 * bl.stage_s / args.blocks, 1),
        "commit_ms": round(1e3 * bl.commit_s / args.blocks, 1),
        "cpu_ms_per_block": round(1e3 * bl.cpu_s / args.blocks, 1),
        "stage_cpu_ms": round(1e3 * bl.stage_cpu_s / args.blocks, 1),
        "hashes_per_key": round(bl.hashes / changed, 1),
        "node_reads_per_key": round(bl.reads / changed, 1),
        "nodes_written_per_key": round(bl.written / changed, 1),
        "pages_written_per_key": round(bl.pages / changed, 1),
        "db_mib": round(size / 2**20, 1),
        "rss_mb": round(rss_mb),
        "gc_threshold": list(gc.get_threshold()),
        "load_average": [round(load0, 1), round(os.getloadavg()[0], 1)],
    }


def print_text(args: argparse.Namespace, out: dict[str, Any], bl: Blocks, load0: float) -> None:
    total = bl.stage_s + bl.commit_s
    changed = args.blocks * args.changes
    print(f"blocks: {args.blocks} x {args.changes} changed keys over {args.keys} keys")
    print(
        f"ms per block: {out['ms_per_block']} (stage {out['stage_ms']}, commit "
        f"{out['commit_ms']}; slowest {out['max_block_ms']}); commits/s: "
        f"{args.blocks / total:.2f}"
    )
    print(
        f"us per changed key: {1e6 * total / changed:.1f} (stage "
        f"{1e6 * bl.stage_s / changed:.1f}, commit {1e6 * bl.commit_s / changed:.1f})"
    )
    print(
        f"per changed key: {out['hashes_per_key']} hashes, {out['node_reads_per_key']} node "
        f"reads, {out['nodes_written_per_key']} nodes written in "
        f"{out['pages_written_per_key']} pages"
    )
    print(
        f"CPU ms per block: {out['cpu_ms_per_block']} (this process; stage {out['stage_cpu_ms']})"
    )
    print(
        f"database size: {out['db_mib']} MiB (keep_recent={args.keep_recent}); peak RSS "
        f"{out['rss_mb']} MB; load average {load0:.1f} -> {os.getloadavg()[0]:.1f}"
    )


def record(args: argparse.Namespace, out: dict[str, Any], load0: float) -> None:
    """--record: the run's row appended to benchmarks/RESULTS.md."""
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    cmd = " ".join(["benchmarks/store_bench.py", *sys.argv[1:]])
    with open(ROOT / "benchmarks" / "RESULTS.md", "a") as f:
        f.write(
            "\n"
            f"### store_bench ({time.strftime('%Y-%m-%d')}, {machine}, load average "
            f"{load0:.1f} -> {os.getloadavg()[0]:.1f}, GC thresholds {gc.get_threshold()})\n"
            "\n"
            f"`{cmd}`\n"
            "\n"
            "| keys | ms/block (stage + commit) | slowest block ms | CPU ms/block (stage) | "
            "hashes / node reads / nodes written (pages) per key | DB MiB | peak RSS MB | "
            "load s |\n"
            "|---|---|---|---|---|---|---|---|\n"
            f"| {args.keys:,} | {out['ms_per_block']} ({out['stage_ms']} + "
            f"{out['commit_ms']}) | {out['max_block_ms']} | {out['cpu_ms_per_block']} "
            f"({out['stage_cpu_ms']}) | {out['hashes_per_key']} / {out['node_reads_per_key']} "
            f"/ {out['nodes_written_per_key']} ({out['pages_written_per_key']}) | "
            f"{out['db_mib']} | {out['rss_mb']} | "
            f"{out['load_s']} |\n"
        )


def main() -> None:
    args = parse_args()
    load0 = os.getloadavg()[0]
    if not args.default_gc:
        tune_gc()

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / "state.db"
        store = MerkleStore(path, keep_recent=args.keep_recent)
        load_s = load_state(store, args.keys)
        if args.output == "text":
            print(f"loaded {args.keys} keys in {load_s:.1f} s", flush=True)
        bl = run_blocks(store, args)
        store.close()
        size = sum(p.stat().st_size for p in Path(tmp).iterdir())

    out = figures(args, load_s, bl, size, load0)
    if args.output == "json":
        print(json.dumps(out, indent=2))
    else:
        print_text(args, out, bl, load0)
    if args.record:
        record(args, out, load0)


if __name__ == "__main__":
    main()
