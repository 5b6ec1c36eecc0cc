"""Blob exchange speed on loopback: what a round pays to store and move a payload or a model.

    .venv/bin/python benchmarks/blob_transfer.py                 # 128 MiB, best of 3
    .venv/bin/python benchmarks/blob_transfer.py --mib 256 --repeats 3 --record

For one --mib MiB random blob it measures, best of --repeats (the least disturbed run on a
shared machine):
  * hashlib.sha256 over the bytes in memory (the floor: every path hashes once),
  * BlobStore.put_bytes (hash, write to a temp file, fsync, rename, metadata commit),
  * BlobClient.fetch from the real aiohttp BlobServer on 127.0.0.1 into a second store
    (HTTP stream + hash + temp file + fsync + rename), checking the server's bytes_sent.
--record appends the table to benchmarks/RESULTS.md with the command and the machine.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from node.blobs import BlobClient, BlobStore, serve_blobs

ROOT = Path(__file__).resolve().parent.parent


def best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--mib", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--record", action="store_true", help="append the figures to benchmarks/RESULTS.md"
    )
    args = ap.parse_args()
    n = args.mib << 20
    data = os.urandom(n)
    h = hashlib.sha256(data).hexdigest()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(dir=ROOT) as tmp:
        src = BlobStore(Path(tmp) / "src", 4 * n + (1 << 20))
        t_hash = best(lambda: hashlib.sha256(data).digest(), args.repeats)

        def put() -> None:
            if src.has(h):
                with src._tx() as db:  # drop it so the next put writes again
                    src._delete(db, h)
            src.put_bytes(data)

        t_put = best(put, args.repeats)
        server = serve_blobs(src, "127.0.0.1", 0)
        client = BlobClient(timeout_s=30, max_bytes=2 * n)
        k = [0]

        def fetch() -> None:
            k[0] += 1
            with BlobStore(Path(tmp) / f"dst{k[0]}", 2 * n) as dst:
                assert client.fetch(h, [server.url], dst).stat().st_size == n

        t_fetch = best(fetch, args.repeats)
        sent = server.stats.bytes_sent
        server.stop_thread()
        client.close()
        src.close()
    assert sent == n * args.repeats, (sent, n)
    load_after = os.getloadavg()[0]
    rows = [
        ("hashlib.sha256 (in memory)", t_hash),
        ("BlobStore.put_bytes", t_put),
        ("BlobClient.fetch over loopback HTTP", t_fetch),
    ]
    head = (
        f"### blob_transfer ({time.strftime('%Y-%m-%d')}, {platform.machine()}, {os.cpu_count()} "
        f"cores, Python {platform.python_version()}, load average {load_before:.1f} before / "
        f"{load_after:.1f} after)"
    )
    cmd = "benchmarks/blob_transfer.py " + " ".join(sys.argv[1:])
    table = [
        f"`{cmd.strip()}`: one {args.mib} MiB blob, best of {args.repeats}",
        "",
        "| path | MB/s | seconds |",
        "|---|---|---|",
    ]
    table += [f"| {name} | {n / t / 1e6:,.0f} | {t:.3f} |" for name, t in rows]
    print(head)
    print("\n".join(table))
    if args.record:
        with open(ROOT / "benchmarks" / "RESULTS.md", "a") as f:
            f.write("\n" + head + "\n\n" + "\n".join(table) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
