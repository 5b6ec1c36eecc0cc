"""Chain throughput: loconet's ABCI app vs CometBFT's built-in kvstore, same load shape.

N pre-funded accounts send signed transfers through `broadcast_tx_async` (JSON-RPC batches of
--batch txs) at an offered rate for a fixed time to a single local node; then the same load
shape (same count, size class and pacing) of `key=value` txs goes to `cometbft start
--proxy_app=kvstore`. Reported: sustained committed tx/s (txs in blocks between the first and
last block that carried load / that span's wall time), p50/p95 submit-to-commit latency (from
the submit call to the moment the block is seen over RPC), and our/kvstore.

    .venv/bin/python benchmarks/chain_tps.py --accounts 200 --rate 3000 --duration 20
    .venv/bin/python benchmarks/chain_tps.py --record   # also appends to benchmarks/RESULTS.md

All txs are signed before the clock starts, so the client's own signing is not measured.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from abci_app.codec.address import to_bech32  # noqa: E402
from abci_app.codec.tx import Ed25519Signer, build_tx  # noqa: E402
from abci_app.pb import bank_pb2, tx_pb2  # noqa: E402
from node.config import Ports, tune_cometbft_config  # noqa: E402
from node.paths import cometbft_binary  # noqa: E402

PORTS = Ports(p2p=46656, rpc=46657, abci=46658, metrics=46660)
RPC = f"http://127.0.0.1:{PORTS.rpc}"


def wait_height(h: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            r = httpx.get(f"{RPC}/status", timeout=2).json()
            if int(r["result"]["sync_info"]["latest_block_height"]) >= h:
                return
        except Exception:
            pass
        time.sleep(0.2)
    raise SystemExit("node did not produce blocks")


def run_load(txs: list[bytes], rate: float, duration: float, batch: int) -> dict:
    """Send txs at `rate`/s in JSON-RPC batches; watch blocks; return the measurements."""
    submitted: dict[bytes, float] = {}
    committed: dict[bytes, float] = {}
    block_log: list[tuple[int, float, int]] = []
    stop = threading.Event()

    def watch() -> None:
        try:
            _watch()
        except Exception as e:  # a dead watcher would silently report zero
            print(f"block watcher failed: {e!r}", file=sys.stderr)
            raise

    def _watch() -> None:
        with httpx.Client(base_url=RPC, timeout=10) as c:
            h = int(c.get("/status").json()["result"]["sync_info"]["latest_block_height"]) + 1
            while not stop.is_set():
                r = c.get("/block", params={"height": h}).json()
                if "result" not in r or r.get("error"):
                    time.sleep(0.02)
                    continue
                seen = time.monotonic()
                body = r["result"]["block"]["data"]["txs"] or []
                for t in body:
                    committed[hashlib.sha256(base64.b64decode(t)).digest()] = seen
                block_log.append((h, seen, len(body)))
                h += 1

    w = threading.Thread(target=watch, daemon=True)
    w.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    sent = 0
    with httpx.Client(base_url=RPC, timeout=30, limits=httpx.Limits(max_keepalive_connections=4)) as c:
        while sent < len(txs) and time.monotonic() - t0 < duration:
            due = t0 + sent / rate
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)
            chunk = txs[sent : sent + batch]
            req = [
                {"jsonrpc": "2.0", "id": i, "method": "broadcast_tx_async", "params": {"tx": base64.b64encode(t).decode()}}
                for i, t in enumerate(chunk)
            ]
            ts = time.monotonic()
            reply = c.post("/", json=req).json()
            if not isinstance(reply, list):
                raise SystemExit(f"batch refused by the node: {reply}")
            for t in chunk:
                submitted[hashlib.sha256(t).digest()] = ts
            sent += len(chunk)
    send_time = time.monotonic() - t0
    # drain: wait until no new committed txs for 3 s
    last = len(committed)
    quiet = time.monotonic()
    while time.monotonic() - quiet < 3:
        time.sleep(0.5)
        if len(committed) != last:
            last, quiet = len(committed), time.monotonic()
    stop.set()
    w.join(5)
    ours = {h: committed[h] for h in submitted if h in committed}
    lat = sorted(ours[h] - submitted[h] for h in ours)
    loaded = [(h, t, n) for h, t, n in block_log if n > 0]
    if len(loaded) >= 2:
        span = loaded[-1][1] - loaded[0][1]
        n = sum(n for _, _, n in loaded[1:])  # txs committed after the first loaded block
        tps = n / span if span > 0 else 0.0
    else:
        tps = 0.0
    return {
        "offered_rate": rate,
        "sent": sent,
        "send_seconds": round(send_time, 2),
        "committed": len(ours),
        "committed_tps": round(tps, 1),
        "p50_latency_ms": round(statistics.median(lat) * 1000, 1) if lat else None,
        "p95_latency_ms": round(lat[int(len(lat) * 0.95) - 1] * 1000, 1) if lat else None,
        "blocks": len(loaded),
        "max_txs_per_block": max((n for _, _, n in loaded), default=0),
    }


def start(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(cmd, stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT)


def stop(p: subprocess.Popen[bytes]) -> None:
    os.killpg(p.pid, signal.SIGTERM)
    try:
        p.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def load_node(cmd: list[str], home: Path, txs: list[bytes], args: argparse.Namespace) -> dict:
    """Start a node, wait for blocks, run the load, stop it."""
    p = start(cmd, home / "node.out")
    try:
        wait_height(2)
        print(f"loading {home.name}...", file=sys.stderr)
        res = run_load(txs, args.rate, args.duration, args.batch)
        res["tx_bytes"] = len(txs[0])
        return res
    finally:
        stop(p)


def bench_loconet(tmp: Path, args: argparse.Namespace) -> dict:
    home = tmp / "loconet"
    subprocess.run([sys.executable, "-m", "node.cli", "init", "--home", str(home), "--chain-id", "bench"], check=True, capture_output=True, cwd=ROOT)
    tune_cometbft_config(home, "bench", PORTS)
    (home / "config" / "app.toml").write_text('abci_address = "unix://data/abci.sock"\nkeep_recent = 100\n')
    keys = [Ed25519Signer(hashlib.sha256(b"bench%d" % i).digest()) for i in range(args.accounts)]
    g = json.loads((home / "config" / "genesis.json").read_text())
    g["app_state"]["bank"]["balances"] += [{"address": to_bech32(k.address), "amount": str(10**12)} for k in keys]
    (home / "config" / "genesis.json").write_text(json.dumps(g))
    total = int(args.rate * args.duration)
    per = -(-total // args.accounts)
    sink = hashlib.sha256(b"sink").digest()[:20]
    print(f"signing {per * args.accounts} txs...", file=sys.stderr)
    txs = []
    for s in range(per):  # round-robin over accounts, each account's sequence in order
        for k in keys:
            msg = tx_pb2.Msg(send=bank_pb2.MsgSend(to_address=sink, amount=1))
            txs.append(build_tx(k, chain_id="bench", msgs=[msg], sequence=s, fee=1))
    return load_node([sys.executable, "-m", "node.cli", "start", "--home", str(home)], home, txs, args)


def bench_kvstore(tmp: Path, args: argparse.Namespace, tx_bytes: int) -> dict:
    home = tmp / "kvstore"
    subprocess.run([cometbft_binary(), "init", "--home", str(home)], check=True, capture_output=True)
    tune_cometbft_config(home, "kv", PORTS)
    total = int(args.rate * args.duration)
    pad = max(tx_bytes - 20, 1)
    txs = [f"k{i:012d}=".encode() + b"v" * pad for i in range(total)]
    return load_node([cometbft_binary(), "start", "--home", str(home), "--proxy_app=kvstore"], home, txs, args)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--accounts", type=int, default=200)
    ap.add_argument("--rate", type=float, default=3000, help="offered tx/s")
    ap.add_argument("--duration", type=float, default=20, help="seconds of load")
    ap.add_argument("--batch", type=int, default=10, help="txs per JSON-RPC batch request (cometbft caps batches at rpc.max_request_batch_size = 10)")
    ap.add_argument("--record", action="store_true", help="append the figures to benchmarks/RESULTS.md")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="loconet-bench-"))
    try:
        ours = bench_loconet(tmp, args)
        kv = bench_kvstore(tmp, args, ours["tx_bytes"])
    finally:
        if not os.environ.get("KEEP"):
            shutil.rmtree(tmp, ignore_errors=True)
    ratio = ours["committed_tps"] / kv["committed_tps"] if kv["committed_tps"] else 0.0
    out = {"loconet": ours, "kvstore": kv, "ratio": round(ratio, 3)}
    print(json.dumps(out, indent=2))
    if args.record:
        machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
        cmd = " ".join(["benchmarks/chain_tps.py", *sys.argv[1:]])
        with open(ROOT / "benchmarks" / "RESULTS.md", "a") as f:
            f.write(
                f"\n### chain_tps ({time.strftime('%Y-%m-%d')}, {machine})\n\n`{cmd}`\n\n"
                "| app | offered tx/s | sent | committed | committed tx/s | p50 ms | p95 ms | max tx/block |\n|---|---|---|---|---|---|---|---|\n"
                + "".join(
                    f"| {name} | {r['offered_rate']:.0f} | {r['sent']} | {r['committed']} | {r['committed_tps']} | {r['p50_latency_ms']} | {r['p95_latency_ms']} | {r['max_txs_per_block']} |\n"
                    for name, r in (("loconet", ours), ("kvstore", kv))
                )
                + f"\nloconet / kvstore = {ratio:.2f}\n"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
