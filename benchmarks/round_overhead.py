"""What the network adds to a round: a real 4-validator testnet with 4 provider workers runs a
job, and each worker's DATA_DIR/stats.json (node/worker/worker.py ``account``) splits every round
it took part in into

    compute   training (H steps) + re-execution as a verifier + aggregation
    blobs     time fetching blobs over HTTP (base model, states to verify, updates to aggregate)
    txs       time from signing a tx to seeing it in a block (each duty's tx)
    windows   the rest of the participant's round (waiting for the chain's phase windows)

and counts bytes: what each blob server sent (its /stats counter) and what each worker fetched,
against the trainer's own accounting (payload sizes committed on chain, state blobs).

    .venv/bin/python benchmarks/round_overhead.py [--inner-steps 800] [--rounds 3] [--commit-blocks
    90]

Prints a table per participant-round and the totals; record the figures in RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--inner-steps", type=int, default=800)
    ap.add_argument("--trace-interval", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--commit-blocks", type=int, default=90)
    ap.add_argument(
        "--verdict-blocks",
        type=int,
        default=40,
        help="long enough for 2 targets x 2 segments x k steps",
    )
    a = ap.parse_args()

    from node import testnet_market as tm
    from node.ports import find_free_base
    from node.rpc import Client
    from node.testnet import load, nodes_of

    d = Path(tempfile.mkdtemp(prefix="round-overhead-")) / "net"
    base = find_free_base(
        range(30656, 45000, 1000), [100 * i + k for i in range(4) for k in (0, 1, 4, 24)]
    )
    cli = [sys.executable, "-m", "node.cli"]
    up = subprocess.run(
        [
            *cli,
            "testnet",
            "up",
            "--dir",
            str(d),
            "--providers",
            "4",
            "--no-job",
            "--base-port",
            str(base),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    if up.returncode != 0:
        sys.exit(up.stdout + up.stderr)
    try:
        m = load(d)
        workers = tm.workers_of(m)
        rpc = nodes_of(m)[0].rpc_url
        job, dataset, model = tm.builtin_job(a.rounds, workers)
        job.update(
            inner_steps=a.inner_steps,
            trace_interval=a.trace_interval,
            windows=dict(job["windows"], commit=a.commit_blocks, verdict=a.verdict_blocks),
        )
        tm.seed_stores(workers, [dataset, model])
        job_id = tm.create_job(d, rpc, "validator0", job)
        t0 = time.monotonic()
        with Client(rpc) as c:
            while True:
                j = json.loads(c.abci_query(f"/job/{job_id}").value)
                if j["status"] == "completed":
                    break
                if time.monotonic() - t0 > 1200:
                    sys.exit("the job did not complete in 20 minutes")
                time.sleep(2)
            rounds = json.loads(c.abci_query(f"/rounds/{job_id}").value)["rounds"]
        last = f"{job_id}/{rounds[-1]['round']}"

        def written() -> bool:  # each worker writes stats.json when it sees a round final
            try:
                return all(
                    "finalized"
                    in json.loads((w.path / "stats.json").read_text())["rounds"].get(last, {})
                    for w in workers
                )
            except (OSError, ValueError, KeyError):
                return False

        deadline = time.monotonic() + 60
        while not written() and time.monotonic() < deadline:
            time.sleep(1)
        report(workers, rounds, a)
    finally:
        subprocess.run(
            [*cli, "testnet", "down", "--purge", "--dir", str(d)],
            capture_output=True,
            cwd=ROOT,
            check=False,
        )
    return 0


def report(workers, rounds, a) -> None:
    stats = {
        w.address: json.loads((w.path / "stats.json").read_text())
        for w in workers
        if (w.path / "stats.json").exists()
    }
    print(
        f"H={a.inner_steps} k={a.trace_interval}, {len(rounds)} rounds, 2 of 4 providers train, 2 "
        "verify"
    )
    print(
        f"{'worker':10s} {'round':>5s} {'role':9s} {'outcome':13s} {'wall s':>7s} {'compute':>8s} "
        f"{'blobs':>7s} {'txs':>7s} {'windows':>8s} {'overhead %':>10s}"
    )
    tot = {"compute": 0.0, "blobs": 0.0, "txs": 0.0}
    for w in workers:
        st = stats.get(w.address, {}).get("rounds", {})
        for r in rounds:
            t = st.get(f"{r['job_id']}/{r['round']}")
            if not t or "seen" not in t:
                continue
            mine = [p for p in r["participants"] if p["address"] == w.address]
            role = "trainer" if mine else "verifier"
            outcome = mine[0]["outcome"] if mine else "-"
            if role == "verifier" and not t.get("verify_s"):
                continue  # not on this round's panels
            end = t.get("attested") or t.get("finalized") or t["seen"]
            wall = end - t["seen"]
            compute = t.get("train_s", 0) + t.get("verify_s", 0) + t.get("aggregate_s", 0)
            blobs, txs = t.get("fetch_s", 0), t.get("tx_s", 0)
            for k, v in (("compute", compute), ("blobs", blobs), ("txs", txs)):
                tot[k] += v
            over = 100 * (blobs + txs) / compute if compute else 0
            print(
                f"{w.name:10s} {r['round']:>5d} {role:9s} {outcome:13s} {wall:7.1f} "
                f"{compute:8.2f} {blobs:7.2f} {txs:7.2f} "
                f"{max(0.0, wall - compute - blobs - txs):8.1f} {over:10.1f}"
            )
    payload = sum(
        p["commitment"]["payload_size"]
        for r in rounds
        for p in r["participants"]
        if p["commitment"]
    )
    sent = sum(s.get("server", {}).get("bytes_sent", 0) for s in stats.values())
    fetched = sum(
        v.get("fetch_bytes", 0) for s in stats.values() for v in s.get("rounds", {}).values()
    )
    print(
        "\n"
        f"total compute {tot['compute']:.1f} s, blob transfer {tot['blobs']:.1f} s, tx latency "
        f"{tot['txs']:.1f} s: network "
        f"{100 * (tot['blobs'] + tot['txs']) / max(tot['compute'], 1e-9):.1f} % of compute"
    )
    print(
        f"bytes: blob servers sent {sent:,}, workers fetched {fetched:,}; payloads committed "
        f"{payload:,} (the rest: trace states to verifiers, base models, the dataset once per "
        "worker)"
    )


if __name__ == "__main__":
    sys.exit(main())
