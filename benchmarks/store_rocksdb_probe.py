"""Probe: what would RocksDB cost for the Merkle store's commit? (not a project dependency)

    .venv/bin/python -m pip install rocksdict   # only for this probe
    .venv/bin/python benchmarks/store_rocksdb_probe.py --keys 1000000 --blocks 20

Loads --keys keys into the SQLite store as store_bench.py does, copies every row (tree pages,
history, stale lists) into a RocksDB, then replays blocks of 1,000 changes (store_bench's mix):
the SQLite store stages each block, the same rows (new pages, history rows, the stale list and
the pruning deletes of what became prunable) are written to RocksDB as one WriteBatch with a
synced WAL, and the SQLite store commits the block. Prints CPU per block of both writes
(RocksDB's background flushes and compactions included) and of 1,000 point reads. The RocksDB
side is an estimate of a backend, not one: its history keys are key || version without an
order-preserving escape, and a latest read is one point get.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.store_bench

from abci_app.store import MerkleStore  # noqa: E402
from abci_app.store.stale import pack_stale_nodes, unpack_stale_nodes  # noqa: E402
from benchmarks.store_bench import _key, _value  # noqa: E402


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=100_000, help="state size (default 100000)")
    parser.add_argument("--blocks", type=int, default=20, help="replayed blocks (default 20)")
    parser.add_argument("--dir", type=Path, default=None, help="folder for the databases")
    parser.add_argument("-o", "--output", choices=("text", "json"), default="text")
    return parser.parse_args()


def load_sqlite(store: MerkleStore, keys: int) -> None:
    """The SQLite store's state of ``keys`` keys, as store_bench.py loads it."""
    for start in range(0, keys, 10_000):
        end = min(keys, start + 10_000)
        store.stage(store.height + 1, {_key(i): _value(0, i) for i in range(start, end)})
        store.commit()


def copy_to_rocks(store: MerkleStore, rdb: Any, WriteBatch: Any) -> None:
    """Every row of the SQLite store (tree pages, history, stale lists) into the RocksDB."""
    batch, rows = WriteBatch(raw_mode=True), 0
    queries = (
        ("SELECT version, path, page FROM pages", lambda v, p, x: (b"p" + _u64(v) + p, x)),
        ("SELECT key, version, value FROM kv_history", lambda k, v, x: (b"h" + k + _u64(v), x)),
        ("SELECT since, pages, 0 FROM stale_pages", lambda s, x, _: (b"s" + _u64(s), x)),
    )
    for sql, row in queries:
        for a, b, c in store._db.execute(sql):
            key, value = row(a, b, c)
            batch.put(key, value or b"")
            rows += 1
            if rows % 100_000 == 0:
                rdb.write(batch)
                batch = WriteBatch(raw_mode=True)
    rdb.write(batch)


def probe_changes(b: int, live: list[int], next_key: int) -> tuple[dict, list[int], int]:
    """Block ``b``'s 1,000 changes (store_bench's mix: 700 rewrites, 100 deletes, 200
    inserts); the live keys and the next new key after it."""
    changes: dict[bytes, bytes | None] = {}
    step = max(1, len(live) // 800)
    picked = live[(b * 7919) % step :: step][:800]
    changes.update({_key(i): _value(b + 1, i) for i in picked[:700]})
    changes.update(dict.fromkeys((_key(i) for i in picked[700:]), None))
    changes.update({_key(i): _value(b + 1, i) for i in range(next_key, next_key + 200)})
    gone = set(picked[700:])
    live = [i for i in live if i not in gone] + list(range(next_key, next_key + 200))
    return changes, live, next_key + 200


def rocks_write(
    store: MerkleStore, rdb: Any, WriteBatch: Any, synced: Any, h: int, keep: int
) -> None:
    """The staged block's rows as one synced RocksDB WriteBatch: the new pages, the stale
    list, the history rows, and the pruning deletes of what became prunable."""
    staged = store._staged
    assert staged is not None
    earliest = max(store.earliest_height, h - keep + 1)
    batch, vb = WriteBatch(raw_mode=True), _u64(h)
    for path, page in staged.tree.pages:
        batch.put(b"p" + vb + path, page)
    if staged.tree.stale:
        batch.put(b"s" + vb, pack_stale_nodes(staged.tree.stale))
    for key, value in staged.changes:
        batch.put(b"h" + key + vb, value or b"")
    for since in range(store.earliest_height, earliest + 1):
        blob = rdb.get(b"s" + _u64(since))
        if blob is not None:
            for version, path in unpack_stale_nodes(blob):
                batch.delete(b"p" + _u64(version) + path)
            batch.delete(b"s" + _u64(since))
    for key, version in staged.kv_stale:  # as many deletes as the history pruning
        batch.delete(b"h" + key + _u64(version))
    batch.put(b"meta", vb + staged.tree.root.hash)
    rdb.write(batch, synced)


@dataclass
class Replay:
    """CPU seconds of the replayed blocks, by side."""

    rocks_s: float = 0.0
    sqlite_s: float = 0.0
    rocks_read_s: float = 0.0
    sqlite_read_s: float = 0.0
    background_s: float = 0.0


def replay(
    store: MerkleStore, rdb: Any, WriteBatch: Any, synced: Any, args: argparse.Namespace, keep: int
) -> Replay:
    """The blocks replayed on both stores: 1,000 point reads each, then SQLite stages, RocksDB
    writes the same rows, SQLite commits."""
    r = Replay()
    live, next_key = list(range(args.keys)), args.keys
    # RocksDB flushes and compacts in its own threads: their CPU (the process's minus this
    # thread's over the replay) is added to its side; SQLite and Python use this thread only
    p0, t0 = time.process_time(), time.thread_time()
    for b in range(args.blocks):
        changes, live, next_key = probe_changes(b, live, next_key)
        keys = sorted(changes)
        c0 = time.thread_time()
        rdb.get([b"h" + k + _u64(store.height) for k in keys])
        c1 = time.thread_time()
        store._latest_rows(keys)
        c2 = time.thread_time()
        r.rocks_read_s += c1 - c0
        r.sqlite_read_s += c2 - c1
        h = store.height + 1
        store.stage(h, changes)
        c0 = time.thread_time()
        rocks_write(store, rdb, WriteBatch, synced, h, keep)
        c1 = time.thread_time()
        store.commit()
        c2 = time.thread_time()
        r.rocks_s += c1 - c0
        r.sqlite_s += c2 - c1
    r.background_s = (time.process_time() - p0) - (time.thread_time() - t0)
    return r


def main() -> None:
    args = parse_args()
    try:
        # lazy: not a project dependency; without it the probe says how to install it
        from rocksdict import Options, Rdict, WriteBatch, WriteOptions
    except ImportError:
        sys.exit("this probe needs rocksdict: .venv/bin/python -m pip install rocksdict")
    load0 = os.getloadavg()[0]
    keep = 100
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        store = MerkleStore(Path(tmp) / "state.db", keep_recent=keep)
        load_sqlite(store, args.keys)
        opt = Options(raw_mode=True)
        opt.create_if_missing(True)
        rpath = str(Path(tmp) / "rocks")
        rdb = Rdict(rpath, opt)
        copy_to_rocks(store, rdb, WriteBatch)
        synced = WriteOptions()
        synced.sync = True
        r = replay(store, rdb, WriteBatch, synced, args, keep)
        rdb.close()
        store.close()
        rocks_mib = sum(f.stat().st_size for f in Path(rpath).iterdir()) / 2**20
    out = {
        "keys": args.keys,
        "blocks": args.blocks,
        "rocks_write_cpu_ms": round(1e3 * (r.rocks_s + r.background_s) / args.blocks, 1),
        "rocks_background_cpu_ms": round(1e3 * r.background_s / args.blocks, 1),
        "sqlite_commit_cpu_ms": round(1e3 * r.sqlite_s / args.blocks, 1),
        "rocks_1000_reads_cpu_ms": round(1e3 * r.rocks_read_s / args.blocks, 1),
        "sqlite_1000_reads_cpu_ms": round(1e3 * r.sqlite_read_s / args.blocks, 1),
        "rocks_mib": round(rocks_mib, 1),
        "rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "load_average": [round(load0, 1), round(os.getloadavg()[0], 1)],
    }
    if args.output == "json":
        print(json.dumps(out, indent=2))
    else:
        for k, v in out.items():
            print(f"{k}: {v}")


def _u64(n: int) -> bytes:
    return n.to_bytes(8, "big")


if __name__ == "__main__":
    main()
