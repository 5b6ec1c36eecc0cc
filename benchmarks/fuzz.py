"""Coverage-guided fuzzing (atheris / libFuzzer) of every input a hostile peer controls.

    .venv/bin/python benchmarks/fuzz.py --target all --seconds 300          # 5 min per target
    .venv/bin/python benchmarks/fuzz.py --target msg --runs 1000000 --record
    .venv/bin/python benchmarks/fuzz.py --target query --seconds 60 -o json

Targets (tests/kits/fuzzkit.py holds the checks; the hypothesis tests in the suite call the same
ones):
  tx       arbitrary tx bytes: decode_tx, CheckTx and the block path (a rejection writes nothing)
  msg      every message type with arbitrary fields, correctly signed by a funded key, against a
           market state (providers registered, a job in its commit window)
  frames   the ABCI frame reader (abci_app/server.py FrameReader) over a stream cut in pieces,
           then protobuf decoding of every frame as a Request
  query    app.query with arbitrary path, data, height and prove
  payload  the trainer's payload decoder, then the declared codec against a model's shapes

Every input must come back with a stable code (a tx code, a query code, FramingError,
PayloadError); an uncaught exception or a failed check is a crash: libFuzzer stops, writes the
input to --artifacts and this script exits 1. Each target runs in its own process (atheris
instruments abci_app and trainer for coverage) for --runs inputs or --seconds, whichever
comes first, starting from a seed corpus of valid inputs (written to --corpus, which grows
with what the fuzzer finds). Requires the `fuzz` extra: `pip install -e '.[fuzz]'`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGETS = ("tx", "msg", "frames", "query", "payload")
KIT_PATHS = [ROOT]


# ------------------------------------------------------------------ input layouts (worker side)
#
# Each target reads its few parameters from fixed leading bytes (so seeds are easy to write and
# mutations of the rest stay meaningful):
#   msg:     kind u8 | key u8 | sequence delta u8 | fee u8 | message bytes
#   frames:  n_cuts u8 (mod 9) | n_cuts x u16 cut | stream
#   query:   flags u8 (bit 0 prove, bits 1-2 height form) | height i64 | path len u8 | path | data


def _u(data: bytes, i: int) -> int:
    return data[i] if i < len(data) else 0


def run_msg(fk, data: bytes) -> str:
    return fk.target_msg(_u(data, 0), data[4:], _u(data, 1), _u(data, 2), _u(data, 3))


def run_frames(fk, data: bytes) -> str:
    n = _u(data, 0) % 9
    head = data[1 : 1 + 2 * n].ljust(2 * n, b"\0")
    cuts = list(struct.unpack(f">{n}H", head))
    return fk.target_frames(data[1 + 2 * n :], cuts)


def run_query(fk, data: bytes) -> str:
    flags = _u(data, 0)
    (h,) = struct.unpack(">q", data[1:9].ljust(8, b"\0"))
    form = (flags >> 1) & 3
    height = h if form == 3 else (0 if form == 0 else h % 64 if form == 1 else -(h % 64))
    n = _u(data, 9)
    path = data[10 : 10 + n]
    return fk.target_query(fk.query_path(path), data[10 + n :], height, bool(flags & 1))


def seeds(target: str, fk) -> list[bytes]:
    """Valid inputs for each target, in its layout."""
    if target == "payload":
        return fk.payload_seeds()
    if target == "tx":
        return fk.seed_txs()
    if target == "msg":
        out = []
        for k_i in range(3):
            for msg in fk.seed_msgs():
                kind = msg.WhichOneof("sum")
                out.append(
                    bytes([fk.MSG_KINDS.index(kind), k_i, 0, 0])
                    + getattr(msg, kind).SerializeToString()
                )
        return out
    if target == "frames":
        # lazy: imported in the worker after atheris.instrument_imports, so it is instrumented
        from abci_app.server import frame

        stream = b"".join(frame(r) for r in fk.seed_requests())
        return [
            bytes([2]) + struct.pack(">HH", 3, 17) + stream,
            bytes([0]) + stream[:9],
            bytes([1, 0, 1]) + stream[:-3],
        ]
    out = []
    for i, p in enumerate(fk.seed_query_paths()):
        pb = p.encode()[:255]
        out.append(bytes([i & 7]) + struct.pack(">q", i) + bytes([len(pb)]) + pb)
    return out


def worker(target: str, libfuzzer_args: list[str]) -> None:
    import atheris  # lazy: optional (the fuzz extra), and only the worker process fuzzes

    sys.path[:0] = [str(p) for p in KIT_PATHS]
    with atheris.instrument_imports(include=["abci_app", "trainer", "tests.kits.fuzzkit"]):
        from tests.kits import fuzzkit as fk  # lazy: instrumented only when imported here
    fk.world()
    if target == "payload":
        import torch  # lazy: the payload target's worker only

        torch.set_num_threads(1)
    corpus = Path(libfuzzer_args[0])
    for i, s in enumerate(seeds(target, fk)):
        (corpus / f"seed-{i:03d}").write_bytes(s)
    counts: dict[str, int] = {}

    def one(data: bytes) -> None:
        if target == "tx":
            out = fk.target_tx_bytes(data)
        elif target == "msg":
            out = run_msg(fk, data)
        elif target == "frames":
            out = run_frames(fk, data)
        elif target == "query":
            out = run_query(fk, data)
        else:
            out = fk.target_payload(data)
        tally_one(out)

    # libFuzzer ends the process without running Python's atexit: write the tally as we go
    tally = Path(os.environ["LOCONET_FUZZ_TALLY"])
    seen = [0]

    def tally_one(out: str) -> None:
        counts[out] = counts.get(out, 0) + 1
        seen[0] += 1
        if seen[0] & (seen[0] - 1) == 0 or seen[0] % 20_000 == 0:
            tally.write_text(json.dumps(dict(sorted(counts.items(), key=lambda kv: -kv[1]))))

    atheris.Setup([sys.argv[0], *libfuzzer_args], one)
    atheris.Fuzz()


# ------------------------------------------------------------------ driver


def run_target(target: str, args: argparse.Namespace) -> dict:
    corpus = args.corpus / target
    corpus.mkdir(parents=True, exist_ok=True)
    args.artifacts.mkdir(parents=True, exist_ok=True)
    lf = [
        str(corpus),
        f"-runs={args.runs}",
        f"-max_total_time={args.seconds}",
        f"-artifact_prefix={args.artifacts}/{target}-",
        "-print_final_stats=1",
        "-timeout=30",
        f"-max_len={args.max_len}",
        "-rss_limit_mb=4096",
    ]
    cmd = [sys.executable, __file__, "--worker", target, "--", *lf]
    t0 = time.perf_counter()
    tally = args.artifacts / f"{target}.tally.json"
    tally.unlink(missing_ok=True)
    env = dict(os.environ, LOCONET_FUZZ_TALLY=str(tally))
    p = subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=ROOT, env=env)
    wall = time.perf_counter() - t0
    log = p.stdout + p.stderr
    (args.artifacts / f"{target}.log").write_text(log[-200_000:])
    runs = [int(x) for x in re.findall(r"stat::number_of_executed_units:\s+(\d+)", log)]
    done = re.findall(r"Done (\d+) runs", log)
    n = runs[-1] if runs else int(done[-1]) if done else 0
    outcomes = json.loads(tally.read_text()) if tally.exists() else {}
    crash_files = sorted(str(c) for c in args.artifacts.glob(f"{target}-*"))
    crashed = p.returncode != 0
    if crashed and not crash_files:  # the worker itself failed (a bad seed, an import error)
        crash_files = [f"{args.artifacts}/{target}.log (worker exited {p.returncode})"]
    return {
        "target": target,
        "inputs": n,
        "seconds": round(wall, 1),
        "exec_per_s": round(n / wall) if wall else 0,
        "crashes": len(crash_files) if crashed else 0,
        "crash_files": crash_files if crashed else [],
        "exit": p.returncode,
        "outcomes": outcomes,
        "tail": log[-3000:] if crashed else "",
    }


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[4:] if sys.argv[3] == "--" else sys.argv[3:])
        return 0
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--target", choices=(*TARGETS, "all"), default="all")
    ap.add_argument(
        "--runs", type=int, default=1_000_000, help="inputs per target (default 1000000)"
    )
    ap.add_argument("--seconds", type=int, default=600, help="time limit per target (default 600)")
    ap.add_argument(
        "--max-len", type=int, default=4096, help="longest input in bytes (default 4096)"
    )
    ap.add_argument("--corpus", type=Path, default=Path("/tmp/loconet-fuzz/corpus"))
    ap.add_argument("--artifacts", type=Path, default=Path("/tmp/loconet-fuzz/artifacts"))
    ap.add_argument(
        "--record", action="store_true", help="append the figures to benchmarks/RESULTS.md"
    )
    ap.add_argument("-o", "--output", choices=("text", "json"), default="text")
    args = ap.parse_args()
    try:
        import atheris  # noqa: F401
    except ImportError:
        ap.error(
            "atheris is not installed: pip install -e '.[fuzz]' (then rerun, e.g. --target tx "
            "--seconds 60)"
        )
    targets = TARGETS if args.target == "all" else (args.target,)
    load0 = os.getloadavg()[0]
    rows = []
    for t in targets:
        r = run_target(t, args)
        rows.append(r)
        if args.output == "text":
            print(
                f"{t:8} {r['inputs']:>10,} inputs in {r['seconds']:>7.1f} s "
                f"({r['exec_per_s']:,}/s), crashes {r['crashes']}, outcomes "
                f"{json.dumps(r['outcomes'])}",
                flush=True,
            )
            if r["crashes"]:
                print(r["tail"], flush=True)
    machine = (
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load average {load0:.1f} at start / {os.getloadavg()[0]:.1f} at end"
    )
    if args.output == "json":
        print(json.dumps({"machine": machine, "rows": rows}, indent=2))
    if args.record:
        cmd = " ".join(["benchmarks/fuzz.py", *sys.argv[1:]])
        with open(ROOT / "benchmarks" / "RESULTS.md", "a") as f:
            f.write(
                "\n"
                f"### fuzz ({time.strftime('%Y-%m-%d')}, {machine})\n"
                "\n"
                f"`{cmd}`\n"
                "\n"
                "| target | inputs | seconds | inputs/s | crashes | most frequent outcomes |\n"
                "|---|---|---|---|---|---|\n"
            )
            for r in rows:
                top = ", ".join(f"{k} {v:,}" for k, v in list(r["outcomes"].items())[:4])
                f.write(
                    f"| {r['target']} | {r['inputs']:,} | {r['seconds']} | {r['exec_per_s']:,} | "
                    f"{r['crashes']} | {top} |\n"
                )
    return 1 if any(r["crashes"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
