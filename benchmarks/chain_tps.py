"""Chain throughput: loconet's ABCI app vs CometBFT's built-in kvstore, same load shape.

N pre-funded accounts send signed transfers through `broadcast_tx_async` (JSON-RPC batches of
--batch txs) at an offered rate for a fixed time to a single local node; then the same load
shape (same count, size class and pacing) of `key=value` txs goes to `cometbft start
--proxy_app=kvstore`. Reported: committed tx/s (the run's txs found in blocks / the time from
the first submission to the last block that carried any), p50/p95 submit-to-commit latency (from
the submit call to the moment the block is seen over RPC), and our/kvstore.

    .venv/bin/python benchmarks/chain_tps.py --accounts 200 --rate 3000 --duration 20
    .venv/bin/python benchmarks/chain_tps.py --record   # also appends to benchmarks/RESULTS.md
    .venv/bin/python benchmarks/chain_tps.py --validators 4 --rates 1000,2000,3000 --duration 10
    --record

``--validators N`` (N > 1): an N-validator loconet testnet (``node/local/testnet.py``
create/start_node, its config, genesis and app.toml as ``loconet testnet up`` makes them) and an
N-validator
``cometbft --proxy_app=kvstore`` network (N homes from ``cometbft init``, one genesis with the N
validators, the same config.toml values: LOCAL_TUNING + TESTNET_TUNING, ports by the same
scheme), one after the other in one run. Each offered rate uses its own fresh accounts (so a
rate never inherits the previous one's sequence gaps); each account's txs all go to one node
(account i -> node i mod N, as a real client keeps to one node), blocks are read from node0.
The single-node row is run first unless ``--no-single``.

All txs are signed before the clock starts, so the client's own signing is not measured.

``--funded N`` (single node, no kvstore row): the genesis also pre-funds N more accounts and every
transfer goes to one of them (tx j to account j * 7919 mod N), so each transfer changes a
random account of a state of N; reported also: seconds from the node's start to height 1 (the
InitChain of N balances, its commit, cometbft's start), the app's peak RSS and CPU seconds (the
`loconet start` process, from /proc), the block interval p50 and the state database's size.

    .venv/bin/python benchmarks/chain_tps.py --funded 1000000 --rate 300 --duration 30

(A genesis of 1M balances is a 71 MB InitChain; the ABCI server takes frames up to 96 MiB.)
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import itertools
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
from typing import Any

import httpx

from abci_app.auth.params import fee_fixpoint, params_from_json
from abci_app.codec.address import to_bech32
from abci_app.codec.tx import Ed25519Signer, build_tx
from abci_app.pb import bank_pb2, tx_pb2
from node.local import testnet
from node.local.config import Ports, set_toml_values, tune_cometbft_config
from node.paths import cometbft_binary
from node.ports import find_free_base, random_bases

ROOT = Path(__file__).resolve().parent.parent


PORTS = Ports(p2p=46656, rpc=46657, abci=46658, metrics=46660)
RPC = f"http://127.0.0.1:{PORTS.rpc}"
DRAIN_QUIET_S = 15.0
DRAIN_MAX_S = 180.0  # and never longer than this after the last submission (a stalled net)
NET_BASE = {"loconet": 47656, "kvstore": 48656}  # N-validator networks: node i adds 100*i


def net_base(name: str, n: int) -> int:
    """NET_BASE[name] if its ports are free for n nodes, else a free random base (a shared
    machine)."""
    offsets = [100 * i + o for i in range(n) for o in (0, 1, 4, 5)]
    return find_free_base([NET_BASE[name], *random_bases(20000, 60000, 10)], offsets)


def wait_height(
    h: int, timeout: float = 60, rpc: str = RPC, proc: subprocess.Popen[bytes] | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"the node exited ({proc.returncode}) before height {h}")
        try:
            r = httpx.get(f"{rpc}/status", timeout=2).json()
            if int(r["result"]["sync_info"]["latest_block_height"]) >= h:
                return
        except (httpx.HTTPError, KeyError, TypeError, ValueError):
            pass  # not up yet, or no blocks yet
        time.sleep(0.2)
    raise SystemExit("node did not produce blocks")


# BLOCK_LOG=1: one stderr line per block seen (height, time since the load began, txs, proposer)
BLOCK_LOG = bool(os.environ.get("BLOCK_LOG"))


def _encode_batches(q: list[bytes], batch: int) -> list[tuple[bytes, list[bytes]]]:
    """A node's txs as JSON-RPC batch bodies of ``broadcast_tx_async``, each with its txs'
    hashes."""
    out = []
    for i in range(0, len(q), batch):
        chunk = q[i : i + batch]
        req = [
            {
                "jsonrpc": "2.0",
                "id": j,
                "method": "broadcast_tx_async",
                "params": {"tx": base64.b64encode(t).decode()},
            }
            for j, t in enumerate(chunk)
        ]
        out.append((json.dumps(req).encode(), [hashlib.sha256(t).digest() for t in chunk]))
    return out


class _Load:
    """One load run's shared state: the block watcher fills ``committed`` and ``block_log``,
    the senders ``submitted`` and ``rpc_errors`` (under ``lock``)."""

    def __init__(self, rpcs: list[str]) -> None:
        self.rpcs = rpcs
        self.rpc_errors: dict[str, int] = {}
        self.submitted: dict[bytes, float] = {}
        self.committed: dict[bytes, float] = {}
        self.block_log: list[tuple[int, float, list[bytes]]] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.t_start = time.monotonic()

    def watch(self) -> None:
        try:
            self._watch()
        except Exception as e:  # a dead watcher would silently report zero
            print(f"block watcher failed: {e!r}", file=sys.stderr)
            raise

    def _watch(self) -> None:
        with httpx.Client(base_url=self.rpcs[0], timeout=10) as c:
            h = int(c.get("/status").json()["result"]["sync_info"]["latest_block_height"]) + 1
            while not self.stop.is_set():
                r = c.get("/block", params={"height": h}).json()
                if "result" not in r or r.get("error"):
                    time.sleep(0.02)
                    continue
                seen = time.monotonic()
                body = r["result"]["block"]["data"]["txs"] or []
                hashes = [hashlib.sha256(base64.b64decode(t)).digest() for t in body]
                for d in hashes:
                    self.committed[d] = seen
                self.block_log.append((h, seen, hashes))
                if BLOCK_LOG:
                    hdr = r["result"]["block"]["header"]
                    print(
                        f"block {h} +{seen - self.t_start:.2f}s txs={len(body)} "
                        f"proposer={hdr['proposer_address'][:8]}",
                        file=sys.stderr,
                    )
                h += 1

    def send(
        self,
        q: int,
        bodies: list[tuple[bytes, list[bytes]]],
        share: float,
        t0: float,
        duration: float,
        counts: list[int],
    ) -> None:
        """Node ``q``'s batches at ``share`` txs/s until ``duration`` is over; ``counts[q]``:
        the txs sent so far."""
        n = 0
        with httpx.Client(
            base_url=self.rpcs[q], timeout=30, headers={"content-type": "application/json"}
        ) as c:
            for body, hashes in bodies:
                if time.monotonic() - t0 >= duration:
                    break
                due = t0 + n / share
                now = time.monotonic()
                if due > now:
                    time.sleep(due - now)
                ts = time.monotonic()
                reply = c.post("/", content=body).json()
                if not isinstance(reply, list):
                    raise SystemExit(f"batch refused by the node: {reply}")
                with self.lock:
                    # async answers before CheckTx; an error here is e.g. a full mempool
                    for item in reply:
                        if item.get("error"):
                            why = str(item["error"].get("data") or item["error"].get("message"))[
                                :60
                            ]
                            self.rpc_errors[why] = self.rpc_errors.get(why, 0) + 1
                    for h in hashes:
                        self.submitted[h] = ts
                n += len(hashes)
                counts[q] = n

    def drain(self) -> None:
        """Until every submitted tx is in a block, or no new block carried one for
        DRAIN_QUIET_S (a loaded 4-validator net can take several seconds per block: a short
        window ends early); only this run's txs count: every loconet block carries a new
        injected vote-extension tx."""

        def landed() -> int:
            return sum(h in self.committed for h in self.submitted)

        last = landed()
        quiet = drain_start = time.monotonic()
        while (
            time.monotonic() - quiet < DRAIN_QUIET_S
            and time.monotonic() - drain_start < DRAIN_MAX_S
            and last < len(self.submitted)
        ):
            time.sleep(0.5)
            if (now := landed()) != last:
                last, quiet = now, time.monotonic()

    def result(self, rate: float, sent: int, send_time: float, t0: float) -> dict:
        submitted, committed = self.submitted, self.committed
        ours = {h: committed[h] for h in submitted if h in committed}
        lat = sorted(ours[h] - submitted[h] for h in ours)
        # a loaded block carries at least one of this run's txs: every loconet block also
        # carries the proposer's injected vote-extension tx, so "any tx" would count the idle
        # blocks of the drain
        loaded = [
            (h, t, n) for h, t, ds in self.block_log if (n := sum(d in submitted for d in ds)) > 0
        ]
        # committed tx/s = txs in blocks / (last loaded block seen - first submission): a few
        # huge blocks (a saturated net) make a block-to-block span meaningless
        span = loaded[-1][1] - t0 if loaded else 0.0
        tps = len(ours) / span if span > 0 else 0.0
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
            "block_interval_ms_p50": round(
                statistics.median(b[1] - a[1] for a, b in itertools.pairwise(loaded)) * 1000, 1
            )
            if len(loaded) > 2
            else None,
            "rpc_errors": self.rpc_errors,
        }


def run_load(
    txs: list[bytes],
    rate: float,
    duration: float,
    batch: int,
    rpcs: list[str] | None = None,
    route: list[int] | None = None,
) -> dict:
    """Send txs at `rate`/s in JSON-RPC batches; watch blocks; return the measurements.
    ``rpcs``: the nodes to send to (default the single node); ``route[i]``: the node of txs[i]
    (a batch only holds txs of one node). Blocks are read from rpcs[0]."""
    rpcs = rpcs or [RPC]
    route = route or [0] * len(txs)
    queues: list[list[bytes]] = [[] for _ in rpcs]
    for t, r in zip(txs, route, strict=True):
        queues[r].append(t)
    ld = _Load(rpcs)
    w = threading.Thread(target=ld.watch, daemon=True)
    w.start()
    time.sleep(0.5)
    # request bodies are encoded before the clock starts: the client's CPU (it shares the cores
    # with the nodes) goes to sending, not to base64 and JSON
    bodies = [_encode_batches(q, batch) for q in queues]
    counts = [0] * len(rpcs)

    def sender(q: int, t0: float) -> None:
        """One thread per node, each at its share of the rate (HTTP waits release the GIL)."""
        share = rate * len(queues[q]) / max(len(txs), 1)
        ld.send(q, bodies[q], share, t0, duration, counts)

    t0 = time.monotonic()
    threads = [
        threading.Thread(target=sender, args=(q, t0), daemon=True)
        for q in range(len(rpcs))
        if bodies[q]
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    sent = sum(counts)
    send_time = time.monotonic() - t0
    ld.drain()
    ld.stop.set()
    w.join(5)
    return ld.result(rate, sent, send_time, t0)


def start(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        cmd, stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT
    )


def stop(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is not None:  # exited by itself (its log says why)
        return
    os.killpg(p.pid, signal.SIGTERM)
    try:
        p.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def _proc_stats(pid: int) -> tuple[float, float]:
    """(peak RSS MB, CPU seconds) of a live process, from /proc."""
    status = Path(f"/proc/{pid}/status").read_text()
    hwm = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return hwm / 1024, cpu


def load_node(cmd: list[str], home: Path, txs: list[bytes], args: argparse.Namespace) -> dict:
    """Start a node, wait for blocks, run the load, stop it."""
    t0 = time.monotonic()
    p = start(cmd, home / "node.out")
    try:
        wait_height(1, timeout=3600 if args.funded else 60, proc=p)
        genesis_s = time.monotonic() - t0
        if args.funded:
            rss, cpu = _proc_stats(p.pid)
            print(f"height 1 after {genesis_s:.1f} s; app RSS {rss:.0f} MB, CPU {cpu:.1f} s",
                  file=sys.stderr)  # fmt: skip
        wait_height(2, timeout=600 if args.funded else 60, proc=p)
        print(f"loading {home.name}...", file=sys.stderr)
        res = run_load(txs, args.rate, args.duration, args.batch)
        res["tx_bytes"] = len(txs[0])
        if args.funded:
            rss, cpu = _proc_stats(p.pid)
            res.update(
                funded=args.funded,
                start_to_height1_s=round(genesis_s, 1),
                app_peak_rss_mb=round(rss),
                app_cpu_s=round(cpu, 1),
                state_db_mib=round(
                    sum(f.stat().st_size for f in (home / "data").glob("app.db*")) / 2**20, 1
                ),
            )
        return res
    finally:
        stop(p)


def bench_loconet(tmp: Path, args: argparse.Namespace) -> dict:
    home = tmp / "loconet"
    subprocess.run(
        [sys.executable, "-m", "node.cli", "init", "--home", str(home), "--chain-id", "bench"],
        check=True,
        capture_output=True,
        cwd=ROOT,
    )
    tune_cometbft_config(home, "bench", PORTS)
    (home / "config" / "app.toml").write_text(
        'abci_address = "unix://data/abci.sock"\nkeep_recent = 100\n'
    )
    keys = [Ed25519Signer(hashlib.sha256(b"bench%d" % i).digest()) for i in range(args.accounts)]
    g = json.loads((home / "config" / "genesis.json").read_text())
    g["app_state"]["bank"]["balances"] += [
        {"address": to_bech32(k.address), "amount": str(10**12)} for k in keys
    ]
    funded = [hashlib.sha256(b"funded%d" % i).digest()[:20] for i in range(args.funded)]
    g["app_state"]["bank"]["balances"] += [{"address": to_bech32(a), "amount": "1"} for a in funded]
    # compact: CometBFT passes app_state to InitChain as written (the ABCI frame limit is 64 MiB)
    (home / "config" / "genesis.json").write_text(json.dumps(g, separators=(",", ":")))
    total = int(args.rate * args.duration)
    per = -(-total // args.accounts)
    print(f"signing {per * args.accounts} txs...", file=sys.stderr)
    txs = signed_txs(keys, per, "bench", funded)
    return load_node(
        [sys.executable, "-m", "node.cli", "start", "--home", str(home)], home, txs, args
    )


def bench_kvstore(tmp: Path, args: argparse.Namespace, tx_bytes: int) -> dict:
    home = tmp / "kvstore"
    subprocess.run(
        [cometbft_binary(), "init", "--home", str(home)], check=True, capture_output=True
    )
    tune_cometbft_config(home, "kv", PORTS)
    total = int(args.rate * args.duration)
    pad = max(tx_bytes - 20, 1)
    txs = [f"k{i:012d}=".encode() + b"v" * pad for i in range(total)]
    return load_node(
        [cometbft_binary(), "start", "--home", str(home), "--proxy_app=kvstore"], home, txs, args
    )


# ------------------------------------------------------------------------------- N validators


def scrape(url: str, prefixes: tuple[str, ...]) -> dict[str, float]:
    """Prometheus samples whose name starts with one of ``prefixes`` ({} if the port is down)."""
    try:
        text = httpx.get(url, timeout=5).text
    except httpx.HTTPError:
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(prefixes):
            name, _, val = line.rpartition(" ")
            try:
                out[name] = float(val)
            except ValueError:
                pass
    return out


def counters_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, int]:
    return {
        k: int(v - before.get(k, 0)) for k, v in sorted(after.items()) if int(v - before.get(k, 0))
    }


MEMPOOL_METRICS = (
    "cometbft_mempool_failed_txs",
    "cometbft_mempool_rejected_txs",
    "cometbft_mempool_evicted_txs",
    "cometbft_mempool_recheck_times",
    "cometbft_mempool_size ",
)
APP_METRICS = ("loconet_txs_total",)


DEFAULT_AUTH = params_from_json({})


def signed_txs(
    keys: list[Ed25519Signer], per: int, chain_id: str, to: list[bytes] | None = None
) -> list[bytes]:
    """Transfers of 1 uloco to one sink, or with ``to`` tx j to to[j * 7919 % len(to)]."""
    sink = hashlib.sha256(b"sink").digest()[:20]
    txs: list[bytes] = []
    for s in range(per):  # round-robin over accounts, each account's sequence in order
        for k in keys:
            if to:
                sink = to[len(txs) * 7919 % len(to)]
            msg = tx_pb2.Msg(send=bank_pb2.MsgSend(to_address=sink, amount=1))

            def build(f: int, k: Ed25519Signer = k, msg: Any = msg, s: int = s) -> bytes:
                return build_tx(k, chain_id=chain_id, msgs=[msg], sequence=s, fee=f)

            # the exact minimum fee of the chain's default auth params
            txs.append(fee_fixpoint(DEFAULT_AUTH, 1, build)[1])
    return txs


def route(count: int, n: int, args: argparse.Namespace) -> list[int]:
    """The node of each tx: account i -> node i mod n (txs are round-robin over the accounts),
    or node0 for all with --to-node0."""
    return [0 if args.to_node0 else (i % args.accounts) % n for i in range(count)]


def override_config(home: Path, args: argparse.Namespace) -> None:
    if args.mempool_size:
        cfg = home / "config" / "config.toml"
        cfg.write_text(
            set_toml_values(cfg.read_text(), {"mempool": {"size": str(args.mempool_size)}})
        )


def group_cpu(pgids: list[int]) -> dict[str, float]:
    """CPU seconds (user + system, all threads, from /proc) of the live processes in the given
    process groups, summed by kind: ``app`` (the Python ABCI app, ``loconet start``) and
    ``cometbft``. CPU time does not depend on how busy the machine is, unlike wall-clock
    throughput on shared cores."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {"app": 0.0, "cometbft": 0.0}
    groups = set(pgids)
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        f = stat[stat.rindex(")") + 2 :].split()
        if int(f[2]) not in groups:  # field 5, pgrp
            continue
        kind = "cometbft" if comm.startswith("cometbft") else "app"
        out[kind] += (int(f[11]) + int(f[12])) / tick
    return out


def cpu_per_tx(before: dict[str, float], after: dict[str, float], committed: int) -> dict:
    """CPU ms per committed tx, per kind of process, summed over the network's nodes."""
    if not committed:
        return {}
    return {k: round((after[k] - before[k]) * 1000 / committed, 3) for k in after}


def load_network(
    name: str,
    homes: list[Path],
    rpcs: list[str],
    metrics: list[int],
    start_all,
    stop_all,  # noqa: ANN001
    loads: list[tuple[float, list[bytes], list[int]]],
    args: argparse.Namespace,
    pgids=None,  # noqa: ANN001 (a callable: the process groups of the nodes, for CPU/tx)
) -> list[dict]:
    """Start the network, run each (rate, txs, route) in turn, stop it. Each row carries the
    mempool (CometBFT) and CheckTx (app, loconet only) counters of node0 over that rate and the
    CPU ms per committed tx of the apps and of the cometbft processes of all nodes."""
    start_all()
    rows = []
    try:
        for r in rpcs:
            wait_height(2, timeout=120, rpc=r)
        for rate, txs, route in loads:
            print(f"loading {name} x{len(rpcs)} at {rate:.0f} tx/s...", file=sys.stderr)
            m0 = scrape(f"http://127.0.0.1:{metrics[0]}/metrics", MEMPOOL_METRICS)
            a0 = scrape(f"http://127.0.0.1:{metrics[0] + 1}/metrics", APP_METRICS)
            c0 = group_cpu(pgids()) if pgids else None
            res = run_load(txs, rate, args.duration, args.batch, rpcs, route)
            if c0 is not None:
                res["cpu_ms_per_tx"] = cpu_per_tx(c0, group_cpu(pgids()), res["committed"])
            res["tx_bytes"] = len(txs[0])
            res["mempool_node0"] = counters_delta(
                m0, scrape(f"http://127.0.0.1:{metrics[0]}/metrics", MEMPOOL_METRICS)
            )
            res["app_node0"] = counters_delta(
                a0, scrape(f"http://127.0.0.1:{metrics[0] + 1}/metrics", APP_METRICS)
            )
            rows.append(res)
            print(json.dumps(res), file=sys.stderr)
    finally:
        stop_all()
    return rows


def bench_loconet_net(tmp: Path, args: argparse.Namespace, rates: list[float]) -> list[dict]:
    d = tmp / "loconet-net"
    n = args.validators
    m = testnet.create(d, n, 0, net_base("loconet", n), testnet.parse_params([]))
    nodes = testnet.nodes_of(m)
    total_per_rate = [int(r * args.duration) for r in rates]
    keysets = [
        [
            Ed25519Signer(hashlib.sha256(b"bench-%d-%d" % (j, i)).digest())
            for i in range(args.accounts)
        ]
        for j in range(len(rates))
    ]
    g = json.loads((d / "genesis.json").read_text())
    g["app_state"]["bank"]["balances"] += [
        {"address": to_bech32(k.address), "amount": str(10**12)} for ks in keysets for k in ks
    ]
    text = json.dumps(g, indent=2) + "\n"
    (d / "genesis.json").write_text(text)
    for node in nodes:
        (node.path / "config" / "genesis.json").write_text(text)
    for node in nodes:
        override_config(node.path, args)
    loads = []
    for rate, total, keys in zip(rates, total_per_rate, keysets, strict=True):
        per = -(-total // args.accounts)
        print(f"signing {per * args.accounts} txs...", file=sys.stderr)
        txs = signed_txs(keys, per, m["chain_id"])
        loads.append((rate, txs, route(len(txs), n, args)))

    def start_all() -> None:
        for node in nodes:
            testnet.start_node(node)

    def stop_all() -> None:
        for node in nodes:
            testnet.stop_node(node)

    def pgids() -> list[int]:  # each node's `loconet start` leads its own session
        return [int((x.path / "loconet.pid").read_text()) for x in nodes]

    return load_network(
        "loconet",
        [x.path for x in nodes],
        [x.rpc_url for x in nodes],
        [x.metrics for x in nodes],
        start_all,
        stop_all,
        loads,
        args,
        pgids,
    )


def bench_kvstore_net(
    tmp: Path, args: argparse.Namespace, rates: list[float], tx_bytes: int
) -> list[dict]:
    """N cometbft homes (``cometbft init``), one genesis with the N validators (power 10 each),
    config.toml as a loconet testnet node's (LOCAL_TUNING + TESTNET_TUNING),
    ``--proxy_app=kvstore``."""
    d = tmp / "kvstore-net"
    n = args.validators
    homes = [d / f"node{i}" for i in range(n)]
    for h in homes:
        subprocess.run(
            [cometbft_binary(), "init", "--home", str(h)], check=True, capture_output=True
        )
    g = json.loads((homes[0] / "config" / "genesis.json").read_text())
    g["chain_id"] = "kv-net"
    if hasattr(testnet, "bound_blocks"):  # the same block bound as a loconet testnet's genesis
        testnet.bound_blocks(g)
    g["validators"] = []
    ids = []
    for i, h in enumerate(homes):
        pv = json.loads((h / "config" / "priv_validator_key.json").read_text())
        g["validators"].append(
            {"address": pv["address"], "pub_key": pv["pub_key"], "power": "10", "name": f"node{i}"}
        )
        ids.append(testnet._node_id(h))
    base = net_base("kvstore", n)
    ports = [testnet.node_ports(base, i) for i in range(n)]
    for i, h in enumerate(homes):
        (h / "config" / "genesis.json").write_text(json.dumps(g, indent=2))
        peers = ",".join(f"{ids[j]}@127.0.0.1:{ports[j].p2p}" for j in range(n) if j != i)
        tune_cometbft_config(h, f"node{i}", ports[i], persistent_peers=peers)
        cfg = h / "config" / "config.toml"
        cfg.write_text(set_toml_values(cfg.read_text(), testnet.TESTNET_TUNING))
        override_config(h, args)
    pad = max(tx_bytes - 20, 1)
    loads = []
    for j, rate in enumerate(rates):
        total = int(rate * args.duration)
        txs = [f"k{j}-{i:010d}=".encode() + b"v" * pad for i in range(total)]
        loads.append((rate, txs, route(total, n, args)))
    procs: list[subprocess.Popen[bytes]] = []

    def start_all() -> None:
        for h in homes:
            procs.append(
                start(
                    [cometbft_binary(), "start", "--home", str(h), "--proxy_app=kvstore"],
                    h / "node.out",
                )
            )

    def stop_all() -> None:
        for p in procs:
            stop(p)

    return load_network(
        "kvstore",
        homes,
        [f"http://127.0.0.1:{p.rpc}" for p in ports],
        [p.metrics for p in ports],
        start_all,
        stop_all,
        loads,
        args,
        lambda: [p.pid for p in procs],  # start_new_session: each leads its group
    )


def record_net(
    args: argparse.Namespace, single: dict | None, ours: list[dict], kv: list[dict]
) -> None:
    machine = (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}"
    )
    load = os.getloadavg()[0]
    cmd = " ".join(["benchmarks/chain_tps.py", *sys.argv[1:]])
    rows = []
    if single:
        for name in ("loconet", "kvstore"):
            r = single[name]
            rows.append(
                f"| {name} x1 | {r['offered_rate']:.0f} | {r['sent']} | {r['committed']} | "
                f"{r['committed_tps']} | {r['p50_latency_ms']} | {r['p95_latency_ms']} | "
                f"{r['max_txs_per_block']} | {r['block_interval_ms_p50']} | | |"
            )
    for o, k in zip(ours, kv, strict=True):
        ratio = o["committed_tps"] / k["committed_tps"] if k["committed_tps"] else 0.0
        for name, r in ((f"loconet x{args.validators}", o), (f"kvstore x{args.validators}", k)):
            cpu = r.get("cpu_ms_per_tx") or {}
            rows.append(
                f"| {name} | {r['offered_rate']:.0f} | {r['sent']} | {r['committed']} | "
                f"{r['committed_tps']} | {r['p50_latency_ms']} | {r['p95_latency_ms']} | "
                f"{r['max_txs_per_block']} | {r['block_interval_ms_p50']} | "
                f"{cpu.get('app', '') if r is o else '-'} / {cpu.get('cometbft', '')} | "
                f"{f'{ratio:.2f}' if r is o else ''} |"
            )
    with open(ROOT / "benchmarks" / "RESULTS.md", "a") as f:
        f.write(
            "\n"
            f"### chain_tps, {args.validators} validators "
            f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {machine}, load average "
            f"{args.load_start:.1f} at the start, {load:.1f} at the end)\n"
            "\n"
            f"`{cmd}`\n"
            "\n"
            "| network | offered tx/s | sent | committed | committed tx/s | p50 ms | p95 ms | "
            "max tx/block | block interval p50 ms | CPU ms per committed tx, apps / cometbft "
            "(all nodes) | loconet/kvstore |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n"
        )


def record_funded(args: argparse.Namespace, r: dict) -> None:
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    cmd = " ".join(["benchmarks/chain_tps.py", *sys.argv[1:]])
    with open(ROOT / "benchmarks" / "RESULTS.md", "a") as f:
        f.write(
            f"\n### chain_tps --funded ({time.strftime('%Y-%m-%d')}, {machine}, load average "
            f"{os.getloadavg()[0]:.1f})\n\n`{cmd}`\n\n"
            "| funded accounts | start to height 1 s | app peak RSS MB | app CPU s | offered tx/s "
            "| committed tx/s | p50 / p95 ms | block interval p50 ms | state DB MiB |\n"
            "|---|---|---|---|---|---|---|---|---|\n"
            f"| {r['funded']:,} | {r['start_to_height1_s']} | {r['app_peak_rss_mb']} | "
            f"{r['app_cpu_s']} | {r['offered_rate']:.0f} | {r['committed_tps']} | "
            f"{r['p50_latency_ms']} / {r['p95_latency_ms']} | {r['block_interval_ms_p50']} | "
            f"{r['state_db_mib']} |\n"
        )


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--accounts", type=int, default=200)
    ap.add_argument("--rate", type=float, default=3000, help="offered tx/s (the single-node row)")
    ap.add_argument(
        "--rates",
        default=None,
        help="offered tx/s for the N-validator rows, comma separated (default --rate)",
    )
    ap.add_argument("--duration", type=float, default=20, help="seconds of load per offered rate")
    ap.add_argument(
        "--batch",
        type=int,
        default=10,
        help="txs per JSON-RPC batch request (cometbft caps batches at rpc.max_request_batch_size "
        "= 10)",
    )
    ap.add_argument(
        "--validators",
        type=int,
        default=1,
        help="also run an N-validator loconet testnet and an N-validator kvstore network",
    )
    ap.add_argument(
        "--to-node0",
        action="store_true",
        help="with --validators N: send every tx to node0 (default: account i to node i mod N)",
    )
    ap.add_argument(
        "--mempool-size",
        type=int,
        default=0,
        help="with --validators N: mempool.size of every node (default LOCAL_TUNING's 20000)",
    )
    ap.add_argument(
        "--no-single", action="store_true", help="with --validators N: skip the single-node row"
    )
    ap.add_argument(
        "--no-kvstore",
        action="store_true",
        help="with --validators N: skip the kvstore network (an A/B of loconet alone; not with "
        "--record, whose table compares the two)",
    )
    ap.add_argument(
        "--funded",
        type=int,
        default=0,
        help="pre-fund N more accounts in genesis, send every transfer to one of them "
        "(single node only, no kvstore row)",
    )
    ap.add_argument(
        "--record", action="store_true", help="append the figures to benchmarks/RESULTS.md"
    )
    args = ap.parse_args()
    if args.no_kvstore and args.record:
        raise SystemExit("--record compares loconet with kvstore: drop --no-kvstore")
    return args


def run_single(tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The single-node rows: loconet, then kvstore with txs of the same size."""
    ours = bench_loconet(tmp, args)
    kv = bench_kvstore(tmp, args, ours["tx_bytes"])
    ratio = ours["committed_tps"] / kv["committed_tps"] if kv["committed_tps"] else 0.0
    single = {"loconet": ours, "kvstore": kv, "ratio": round(ratio, 3)}
    print(json.dumps(single, indent=2))
    return single


def run_net(tmp: Path, args: argparse.Namespace) -> tuple[list[dict], list[dict]]:
    """The N-validator rows at each offered rate: loconet, then kvstore (unless --no-kvstore)."""
    rates = [float(x) for x in (args.rates or str(args.rate)).split(",")]
    net_ours = bench_loconet_net(tmp, args, rates)
    net_kv = [] if args.no_kvstore else bench_kvstore_net(tmp, args, rates, net_ours[0]["tx_bytes"])
    print(
        json.dumps(
            {"validators": args.validators, "loconet": net_ours, "kvstore": net_kv},
            indent=2,
        )
    )
    return net_ours, net_kv


def record_single(args: argparse.Namespace, single: dict[str, Any]) -> None:
    """--record of the single-node rows: appended to benchmarks/RESULTS.md."""
    one, kv1, ratio = single["loconet"], single["kvstore"], single["ratio"]
    machine = (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}"
    )
    cmd = " ".join(["benchmarks/chain_tps.py", *sys.argv[1:]])
    with open(ROOT / "benchmarks" / "RESULTS.md", "a") as f:
        f.write(
            "\n"
            f"### chain_tps ({time.strftime('%Y-%m-%d')}, {machine})\n"
            "\n"
            f"`{cmd}`\n"
            "\n"
            "| app | offered tx/s | sent | committed | committed tx/s | p50 ms | p95 ms | "
            "max tx/block |\n"
            "|---|---|---|---|---|---|---|---|\n"
            + "".join(
                f"| {name} | {r['offered_rate']:.0f} | {r['sent']} | {r['committed']} | "
                f"{r['committed_tps']} | {r['p50_latency_ms']} | {r['p95_latency_ms']} | "
                f"{r['max_txs_per_block']} |\n"
                for name, r in (("loconet", one), ("kvstore", kv1))
            )
            + f"\nloconet / kvstore = {ratio:.2f}\n"
        )


def main() -> int:
    args = parse_args()
    args.load_start = os.getloadavg()[0]  # recorded with the figures (a shared machine)
    # stop the nodes (finally blocks) on kill
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmp = Path(tempfile.mkdtemp(prefix="loconet-bench-"))
    single: dict[str, Any] | None = None
    net_ours: list[dict] = []
    net_kv: list[dict] = []
    try:
        if args.funded:
            if args.validators > 1:
                raise SystemExit("--funded runs a single node; drop --validators")
            ours = bench_loconet(tmp, args)
            print(json.dumps(ours, indent=2))
            if args.record:
                record_funded(args, ours)
            return 0
        if args.validators <= 1 or not args.no_single:
            single = run_single(tmp, args)
        if args.validators > 1:
            net_ours, net_kv = run_net(tmp, args)
    finally:
        if not os.environ.get("KEEP"):
            shutil.rmtree(tmp, ignore_errors=True)
    if args.record and args.validators > 1:
        record_net(args, single, net_ours, net_kv)
    elif args.record and single:
        record_single(args, single)
    return 0


if __name__ == "__main__":
    sys.exit(main())
