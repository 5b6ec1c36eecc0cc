"""What the network adds to a round: a real 4-validator testnet with 4 provider workers runs a
job, and each worker's DATA_DIR/stats.json (node/worker/context.py ``account``) splits every round
it took part in into

    compute   training (H steps) + re-execution as a verifier + aggregation
    blobs     time fetching blobs over HTTP (base model, states to verify, updates to aggregate)
    txs       time from signing a tx to seeing it in a block (each duty's tx)
    windows   the rest of the participant's round (waiting for the chain's phase windows)

and counts bytes per worker: what its blob server sent (its /stats counter) and what it fetched,
against the trainer's own accounting (the payload sizes committed on chain: its own, those served
to the workers that needed them, the others' it needed; the rest is trace states and models).

    .venv/bin/python benchmarks/round_overhead.py [--inner-steps 2000] [--rounds 11]
        [--wan 100ms:100mbit] [--busy 4] [--save run.json]
    .venv/bin/python benchmarks/round_overhead.py --from-saved run.json   # the tables again

The job is the CLI's default job (challenge rate, segments, verifiers, codec, tolerance mode:
node/client/market_msgs.py DEFAULT_*) on the built-in model and corpus, its windows sized from
``--compute-per-round`` (default 30 s) and the testnet's measured block time as `tx job create`
sizes them (``compute_windows``), unless ``--commit-blocks``/``--verdict-blocks`` are given. With
``--fixed-roles`` (default) 2 providers train every round and 2 only verify, so a trainer's
utilization (training time / wall time from its first training to its last,
node/local/testnet_market.py ``trainer_utilization``) measures how long it waited between rounds.
Also printed: round latency
(commit close to finalized, open to finalized, in seconds and multiples of the round's compute,
from the block times), the time from `tx job create` to the first attested model, and every
slash.

Prints a table per participant-round (compute, compute net of the fetches timed inside it, blobs,
txs, windows, overhead = (blobs + txs) / net), one per round, the totals and a bytes table per
worker; record the figures in RESULTS.md. The chain takes commitments up to commit_deadline - 1:
--commit-blocks must leave room for H steps on a loaded machine and, as in the built-in job, be at
least reveal + 2 x --verdict-blocks + attest (node/local/testnet_market.py BUILTIN_JOB).
The job's last round is left out of the tables: the workers follow active jobs only, so none
writes it final to stats.json (run one round more than you want reported).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from abci_app.jobs.params import DEFAULTS
from node.client import market_msgs as mm
from node.client.light import parse_time
from node.client.rpc import Client
from node.local import manifest
from node.local import testnet_market as tm
from node.local.manifest import load, nodes_of
from node.local.testnet_market import trainer_utilization
from node.ports import find_free_base

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))  # the demo's --busy burners: one definition
from demo import start_burners, stop_burners  # noqa: E402


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--inner-steps", type=int, default=2000)
    ap.add_argument("--trace-interval", type=int, default=250)
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--compute-per-round", type=int, default=30, help="seconds (job spec)")
    ap.add_argument("--commit-blocks", type=int, help="default: from --compute-per-round")
    ap.add_argument("--verdict-blocks", type=int, help="default: from --compute-per-round")
    ap.add_argument("--challenge-bps", type=int, default=mm.DEFAULT_CHALLENGE_BPS)
    ap.add_argument("--segments", type=int, default=mm.DEFAULT_SEGMENTS_PER_CHALLENGE)
    ap.add_argument("--verifiers", type=int, default=mm.DEFAULT_VERIFIERS_PER_CHALLENGE)
    ap.add_argument("--wan", help="RTT:BANDWIDTH on every link (testnet up --wan)")
    ap.add_argument("--busy", type=int, default=0, help="CPU-burning processes beside it")
    ap.add_argument(
        "--fixed-roles",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="2 providers train every round, 2 verify (default)",
    )
    ap.add_argument(
        "--save",
        type=Path,
        help="also write the raw figures (rounds, each worker's stats.json) to this JSON file",
    )
    ap.add_argument(
        "--from-saved",
        type=Path,
        metavar="FILE",
        help="print the report of a run saved with --save; starts no network",
    )
    return ap.parse_args()


def _testnet_up(a: argparse.Namespace, d: Path, cli: list[str]) -> None:
    """The --busy burners, then a 4-validator testnet with 4 provider workers and no job."""
    base = find_free_base(
        range(30656, 45000, 1000), [100 * i + k for i in range(4) for k in (0, 1, 4, 24)]
    )
    start_burners(a.busy)
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
            *(["--fixed-roles"] if a.fixed_roles else []),
            *(["--wan", a.wan] if a.wan else []),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    if up.returncode != 0:
        stop_burners()
        sys.exit(up.stdout + up.stderr)


def _job_spec(a: argparse.Namespace, rpc: str, workers: list) -> tuple[dict, Any, Any]:
    """The CLI's default job on the built-in model and corpus, its windows sized from
    --compute-per-round and the measured block time as `tx job create` sizes them (recorded
    in ``a`` for the report). Returns the job and its dataset and model blobs."""
    job, dataset, model = tm.builtin_job(a.rounds, workers)
    with Client(rpc) as c:
        block_s = mm.measure_block_time(c) or mm.DEFAULT_BLOCK_S
    w = mm.compute_windows(
        a.compute_per_round,
        block_s,
        inner_steps=a.inner_steps,
        trace_interval=a.trace_interval,
        segments=a.segments,
    )
    w, cut = mm.cap_windows(w, int(DEFAULTS["max_window_blocks"]))  # as tx job create does
    if cut:
        print(f"windows {', '.join(cut)} cut to {DEFAULTS['max_window_blocks']} blocks")
    w["commit"] = a.commit_blocks or w["commit"]
    w["verdict"] = a.verdict_blocks or w["verdict"]
    a.commit_blocks, a.verdict_blocks, a.windows, a.block_s = (
        w["commit"],
        w["verdict"],
        w,
        block_s,
    )
    job.update(
        inner_steps=a.inner_steps,
        trace_interval=a.trace_interval,
        windows=w,
        compute_s_per_round=a.compute_per_round,
        challenge_bps=a.challenge_bps,
        segments_per_challenge=a.segments,
        verifiers_per_challenge=a.verifiers,
        compression_policy=mm.DEFAULT_COMPRESSION,
        determinism_mode="tolerance",
        tolerance_ppm=1_000,
        stack="",
    )
    return job, dataset, model


def _await_job(rpc: str, job_id: int, workers: list) -> tuple[list[dict], dict, dict]:
    """Wait (40 minutes at most) for the job to complete; its rounds, the times of the blocks
    the report reads (open, commit deadline, finalized) and each worker's slashes."""
    t0 = time.monotonic()
    with Client(rpc) as c:
        while True:
            j = json.loads(c.abci_query(f"/job/{job_id}").value)
            if j["status"] == "completed":
                break
            if time.monotonic() - t0 > 2400:
                sys.exit("the job did not complete in 40 minutes")
            time.sleep(2)
        rounds = json.loads(c.abci_query(f"/rounds/{job_id}").value)["rounds"]
        heights = sorted(
            {
                int(r["windows"][f])
                for r in rounds
                for f in ("open_height", "commit_deadline")
                if r["windows"].get(f)
            }
            | {int(r["finalized_height"]) for r in rounds if r.get("finalized_height")}
        )
        times = {str(h): block_time(c, h) for h in heights}
        slashes = {
            w.address: json.loads(c.abci_query(f"/provider/{w.address}").value)["slashed_total"]
            for w in workers
        }
    return rounds, times, slashes


def _run(a: argparse.Namespace, d: Path) -> None:
    """The job on the testnet in ``d``, then the report (and --save)."""
    m = load(d)
    workers = manifest.workers_of(m)
    rpc = nodes_of(m)[0].rpc_url
    job, dataset, model = _job_spec(a, rpc, workers)
    tm.seed_stores(workers, [dataset, model])
    created = time.time()
    job_id = tm.create_job(d, rpc, "validator0", job)
    rounds, times, slashes = _await_job(rpc, job_id, workers)
    last = f"{job_id}/{rounds[-1]['round']}"

    ws = [{"name": w.name, "address": w.address, "role": w.role} for w in workers]
    stats = tm.final_stats(workers, last, timeout=30)  # the last round is not written final
    a.created, a.times, a.slashes = created, times, slashes
    if a.save:
        args = {k: v for k, v in vars(a).items() if k not in ("save", "from_saved")}
        a.save.write_text(
            json.dumps({"args": args, "workers": ws, "rounds": rounds, "stats": stats})
        )
    report(ws, rounds, stats, a)


def main() -> int:
    a = parse_args()
    if a.from_saved:
        saved = json.loads(a.from_saved.read_text())
        report(
            saved["workers"], saved["rounds"], saved["stats"], argparse.Namespace(**saved["args"])
        )
        return 0

    d = Path(tempfile.mkdtemp(prefix="round-overhead-")) / "net"
    cli = [sys.executable, "-m", "node.cli"]
    _testnet_up(a, d, cli)
    try:
        _run(a, d)
    finally:
        stop_burners()
        subprocess.run(
            [*cli, "testnet", "down", "--purge", "--dir", str(d)],
            capture_output=True,
            cwd=ROOT,
            check=False,
        )
    return 0


def block_time(c: Any, height: int) -> float:
    sec, nanos = parse_time(c.block(height)["block"]["header"]["time"])
    return sec + nanos / 1e9


def utilization_report(
    workers: list[dict[str, str]],
    rounds: list[dict[str, Any]],
    stats: dict[str, Any],
    a: argparse.Namespace,
) -> None:
    """Per provider: trainer utilization (training time / wall time from its first training's
    start to its last training's end); per round: latency from commit close and from open to
    finalized, in seconds and in multiples of the round's mean training time; the time from
    `tx job create` to the first attested model; slashes."""
    times = {int(k): v for k, v in (getattr(a, "times", None) or {}).items()}
    print(
        f"\nwindows {a.windows} blocks at {a.block_s:.2f} s/block (from --compute-per-round "
        f"{a.compute_per_round} s); wan {a.wan or 'none'}; busy {a.busy} CPU burners"
    )
    print(
        f"{'provider':10s} {'role':7s} {'rounds':>6s} {'train s':>8s} {'wall s':>8s} {'util %':>7s}"
    )
    for w in workers:
        u = trainer_utilization(stats.get(w["address"], {}).get("rounds", {}))
        if u is None:
            print(f"{w['name']:10s} {w.get('role', ''):7s} trained fewer than 2 rounds")
            continue
        print(
            f"{w['name']:10s} {w.get('role', ''):7s} {int(u['rounds']):6d} {u['train_s']:8.1f} "
            f"{u['wall_s']:8.1f} {100 * u['utilization']:7.1f}"
        )
    print(
        f"\n{'round':>5s} {'compute s':>9s} {'commit->final s':>15s} {'x':>5s} "
        f"{'open->final s':>13s} {'x':>5s} outcomes"
    )
    for r in rounds:
        w = r["windows"]
        fin = r.get("finalized_height")
        if not fin or int(fin) not in times:
            continue
        trains = [
            t["train_s"]
            for s in stats.values()
            if (t := s.get("rounds", {}).get(f"{r['job_id']}/{r['round']}", {})).get("train_s")
        ]
        comp = sum(trains) / len(trains) if trains else 0.0
        c2f = times[int(fin)] - times[int(w["commit_deadline"])]
        o2f = times[int(fin)] - times[int(w["open_height"])]
        outs = ",".join(p["outcome"] for p in r["participants"])
        print(
            f"{r['round']:>5d} {comp:9.1f} {c2f:15.1f} {c2f / comp if comp else 0:5.2f} "
            f"{o2f:13.1f} {o2f / comp if comp else 0:5.2f} {outs}"
        )
    attested = [r for r in rounds if r.get("attested_model_hash") and r.get("finalized_height")]
    if attested and getattr(a, "created", None) and times:
        first = min(int(r["finalized_height"]) for r in attested)
        print(f"\ntx job create -> first attested model: {times[first] - a.created:.1f} s")
    slashed = {k: v for k, v in (getattr(a, "slashes", None) or {}).items() if v}
    names = {w["address"]: w["name"] for w in workers}
    print(
        "slashed: "
        + (", ".join(f"{names.get(k, k)} {v / 1e6:g} LOCO" for k, v in slashed.items()) or "none")
    )


KEYS = ("compute", "net", "blobs", "txs", "windows")


def _timing(stats: dict[str, Any], w: dict[str, str], r: dict[str, Any]) -> dict[str, Any]:
    """The worker's stats.json entry for the round (empty when it wrote none)."""
    rounds_ = stats.get(w["address"], {}).get("rounds", {})
    return dict(rounds_.get(f"{r['job_id']}/{r['round']}") or {})


def _share(x: dict[str, float]) -> float:
    return 100 * (x["blobs"] + x["txs"]) / max(x["net"], 1e-9)


@dataclass
class Sums:
    """The participant-rounds' seconds summed: all of them, those with >= 30 s of net
    compute, and per round."""

    tot: dict[str, float] = field(default_factory=lambda: dict.fromkeys(KEYS, 0.0))
    big: dict[str, float] = field(default_factory=lambda: dict.fromkeys(KEYS, 0.0))
    n_big: int = 0
    per_round: dict[int, dict[str, float]] = field(default_factory=dict)


def _participant_rows(
    workers: list[dict[str, str]], rounds: list[dict[str, Any]], stats: dict[str, Any]
) -> Sums:
    """Print a row per participant-round (trainers, and verifiers on the round's panels) and
    return the sums."""
    sums = Sums()
    for w in workers:
        for r in rounds:
            t = _timing(stats, w, r)
            if "seen" not in t:
                continue
            mine = [p for p in r["participants"] if p["address"] == w["address"]]
            role = "trainer" if mine else "verifier"
            outcome = mine[0]["outcome"] if mine else "-"
            if role == "verifier" and not t.get("verify_s"):
                continue  # not on this round's panels
            end = t.get("attested") or t.get("finalized") or t["seen"]
            wall = end - t["seen"]
            compute = t.get("train_s", 0) + t.get("verify_s", 0) + t.get("aggregate_s", 0)
            blobs, txs = t.get("fetch_s", 0), t.get("tx_s", 0)
            net = compute - min(blobs, t.get("verify_s", 0) + t.get("aggregate_s", 0))
            windows = max(0.0, wall - net - blobs - txs)
            row = dict(zip(KEYS, (compute, net, blobs, txs, windows), strict=True))
            pr = sums.per_round.setdefault(int(r["round"]), dict.fromkeys(KEYS, 0.0))
            for k, v in row.items():
                sums.tot[k] += v
                pr[k] += v
                if net >= 30:
                    sums.big[k] += v
            sums.n_big += net >= 30
            over = 100 * (blobs + txs) / net if net else 0
            print(
                f"{w['name']:10s} {r['round']:>5d} {role:9s} {outcome:13s} {wall:7.1f} "
                f"{compute:8.2f} {net:7.2f} {blobs:7.2f} {txs:7.2f} {windows:8.1f} {over:10.1f}"
            )
    return sums


def _round_rows(
    workers: list[dict[str, str]],
    rounds_all: list[dict[str, Any]],
    complete: list[dict[str, Any]],
    stats: dict[str, Any],
    sums: Sums,
) -> None:
    """A row per reported round, then the rounds left out (and who trained in them)."""
    print(
        f"\n{'round':>5s} {'outcomes':28s} {'compute':>8s} {'net':>7s} {'blobs':>7s} {'txs':>7s} "
        f"{'windows':>8s} {'overhead %':>10s}"
    )
    for r in complete:
        x = sums.per_round.get(int(r["round"]))
        if x is None:
            continue
        outs = ",".join(p["outcome"] for p in r["participants"])
        print(
            f"{r['round']:>5d} {outs:28s} {x['compute']:8.1f} {x['net']:7.1f} "
            f"{x['blobs']:7.2f} {x['txs']:7.2f} {x['windows']:8.1f} {_share(x):10.1f}"
        )
    for r in rounds_all:
        if r in complete:
            continue
        trained = ", ".join(
            f"{w['name']} {_timing(stats, w, r)['train_s']:.1f} s"
            for w in workers
            if _timing(stats, w, r).get("train_s")
        )
        outs = ",".join(p["outcome"] for p in r["participants"])
        print(
            f"{r['round']:>5d} {outs:28s} not reported: not written final by every worker "
            f"(the job's last round); training: {trained or '-'}"
        )


def _payload_accounting(
    workers: list[dict[str, str]], rounds: list[dict[str, Any]], stats: dict[str, Any]
) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """The trainer's accounting from the payload sizes committed on chain, per worker: its own
    payloads, what it served of them (its payload x the other workers that needed it: they
    fetch from the committing provider first), and the others' it needed (the rounds it
    aggregated, the targets it verified)."""
    aggregated = {
        (w["address"], int(r["round"]))
        for w in workers
        for r in rounds
        if _timing(stats, w, r).get("aggregate_s")
    }
    own = dict.fromkeys((w["address"] for w in workers), 0)
    served_pl = dict.fromkeys(own, 0)
    needed = dict.fromkeys(own, 0)
    for r in rounds:
        rn = int(r["round"])
        for p in r["participants"]:
            c = p["commitment"]
            if not c or p["address"] not in own:
                continue
            own[p["address"]] += c["payload_size"]
            verifiers = {
                v["address"] for v in (p["challenge"] or {}).get("verifiers", []) if v["committed"]
            }
            users = {
                w["address"]
                for w in workers
                if w["address"] != p["address"]
                and (w["address"] in verifiers or (w["address"], rn) in aggregated)
                and (p["outcome"] == "accepted" or w["address"] in verifiers)
            }
            served_pl[p["address"]] += c["payload_size"] * len(users)
            for u in users:
                needed[u] += c["payload_size"]
    return own, served_pl, needed


def _bytes_table(
    workers: list[dict[str, str]], rounds: list[dict[str, Any]], stats: dict[str, Any]
) -> None:
    """Bytes per worker: what its blob server sent, what it fetched, and the trainer's
    accounting."""
    own, served_pl, needed = _payload_accounting(workers, rounds, stats)
    print(
        "\nbytes per worker: served = its blob server's bytes_sent, fetched = what it fetched "
        "(both as of its last stats.json); the rest over the reported rounds: the trainer's "
        "accounting from the payload sizes committed on chain"
    )
    print(
        f"{'worker':10s} {'served B':>11s} {'reqs':>5s} {'fetched B':>11s} {'in rounds B':>11s} "
        f"{'own payl. B':>11s} {'payl. served B':>14s} {'states served B':>15s} "
        f"{'payl. fetched B':>15s} {'states fetched B':>16s}"
    )
    sent_all = fetched_all = 0
    for w in workers:
        s = stats.get(w["address"], {})
        srv = s.get("server", {})
        sent = int(srv.get("bytes_sent", 0))
        fetched = int(sum(v.get("fetch_bytes", 0) for v in s.get("rounds", {}).values()))
        fetched_c = int(sum(_timing(stats, w, r).get("fetch_bytes", 0) for r in rounds))
        sent_all += sent
        fetched_all += fetched
        a_ = w["address"]
        print(
            f"{w['name']:10s} {sent:11,d} {int(srv.get('requests', 0)):5d} {fetched:11,d} "
            f"{fetched_c:11,d} {own[a_]:11,d} {served_pl[a_]:14,d} {sent - served_pl[a_]:15,d} "
            f"{needed[a_]:15,d} {fetched_c - needed[a_]:16,d}"
        )
    print(
        f"bytes: blob servers sent {sent_all:,}, workers fetched {fetched_all:,} "
        f"({'equal' if sent_all == fetched_all else f'differ by {sent_all - fetched_all:,}'}); "
        f"payloads committed in the reported rounds {sum(own.values()):,}, fetched by the "
        f"workers that needed them {sum(needed.values()):,}; states = trace states and lists "
        "to verifiers, base models (the dataset and initial model are seeded in every store; "
        "served counts every round up to the snapshot)"
    )


def report(
    workers: list[dict[str, str]],
    rounds: list[dict[str, Any]],
    stats: dict[str, Any],
    a: argparse.Namespace,
) -> None:
    """The tables: each participant-round's seconds, each round's and the run's overhead, each
    worker's bytes. ``compute`` is what the worker timed (train_s + verify_s + aggregate_s);
    ``net`` takes the fetch time out of it: the worker times re-execution (verify_s) and
    aggregation (aggregate_s) around the fetches they make, so their blob time is in both
    ``compute`` and ``blobs``. Subtracted up to verify_s + aggregate_s (training's own inputs are
    fetched outside train_s): exact where every fetch was in those two, else a lower bound on
    compute (the overhead then errs high). overhead = (blobs + txs) / net; windows = wall - net -
    blobs - txs, the time the participant waited for the chain's windows."""
    # a round is reported once every worker has written it final to stats.json (the worker
    # writes stats.json when it sees a round final, and follows active jobs only: the last round
    # of a job, which completes the job, is never written final, and neither is its verifiers'
    # and aggregators' time nor the bytes they fetched for it)
    complete = [r for r in rounds if all("finalized" in _timing(stats, w, r) for w in workers)]
    print(
        f"H={a.inner_steps} k={a.trace_interval}, {len(rounds)} rounds, windows commit "
        f"{a.commit_blocks} / verdict {a.verdict_blocks} blocks; 2 of 4 providers train, 2 verify"
    )
    print(
        f"{'worker':10s} {'round':>5s} {'role':9s} {'outcome':13s} {'wall s':>7s} {'compute':>8s} "
        f"{'net':>7s} {'blobs':>7s} {'txs':>7s} {'windows':>8s} {'overhead %':>10s}"
    )
    sums = _participant_rows(workers, complete, stats)
    _round_rows(workers, rounds, complete, stats, sums)
    tot, big = sums.tot, sums.big
    print(
        "\n"
        f"total compute {tot['compute']:.1f} s (net of fetches {tot['net']:.1f} s), blob transfer "
        f"{tot['blobs']:.1f} s, tx latency {tot['txs']:.1f} s, windows {tot['windows']:.1f} s: "
        f"network {_share(tot):.1f} % of compute"
    )
    print(
        f"participant-rounds with >= 30 s of net compute: {sums.n_big}, network "
        f"{_share(big):.1f} % of their compute"
        if sums.n_big
        else "no participant-round had >= 30 s of net compute"
    )
    _bytes_table(workers, complete, stats)
    if getattr(a, "windows", None):  # runs saved before issue 30 have no utilization figures
        utilization_report(workers, rounds, stats, a)


if __name__ == "__main__":
    sys.exit(main())
