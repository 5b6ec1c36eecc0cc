"""Whole-round traffic on a live network against per-step fp32 ring AllReduce (issue 29).

A real 4-validator testnet with 4 provider workers (``loconet testnet up --providers 4 --no-job``)
runs one job created by ``loconet tx job create --spec FILE``: the testnet's built-in model and
corpus (node/local/testnet_market.py ``builtin_job``), H and k from ``--inner-steps`` /
``--trace-interval``, and the verification settings (challenge rate, segments, verifiers,
determinism mode) left to the CLI, so the job runs at the defaults it ships at the time of the run
(node/client/market_msgs.py DEFAULT_*, read here and printed too). The job's dataset and initial
model are served by a blob server of this process (the owner's ``--blob-source``), not seeded into
the
workers' stores: each provider downloads them once, and those bytes are counted.

Every byte is counted by the workers themselves (node/worker README, "Traffic by kind"): what a
worker fetches (``bytes_in.KIND`` per round in DATA_DIR/stats.json), what its blob server sends
(``bytes_out.KIND``, attributed to the round the requester fetches for), the signed txs it
broadcasts (``tx_bytes``), and its JSON-RPC and websocket bytes with its node (``traffic``, a total,
not per round). Kinds: update (payloads), state (trace states), trace_list, carry, model (base and
attested models), dataset, other, http (request and response heads, short error bodies), tx.

For each reported round and each worker the script prints bytes by kind, sent and received, mean
and max over the worker-rounds, the totals, and the ratio to per-step fp32 ring AllReduce at equal
tokens: per worker per step a ring AllReduce sends 2(N-1)/N x 4 B per parameter and receives as
much (N = the round's participants), H steps a round, so sent + received = 2 x H x 2(N-1)/N x 4P.
Ratios: against the mean worker-round, against the largest worker-round, and against the round's
whole traffic (every worker's) charged to its N participants (the conservative one: the verifiers'
and idle providers' bytes are charged to the workers that trained).

    .venv/bin/python benchmarks/traffic.py --rounds 10 --save /tmp/traffic.json
    .venv/bin/python benchmarks/traffic.py --from-saved /tmp/traffic.json   # the tables again
    .venv/bin/python benchmarks/traffic.py --job myjob.json --inner-steps 1000 --trace-interval 100

The job is created with ``--rounds`` + 1 rounds and the last one is not reported: the workers
follow active jobs only, so none writes the job's last round final to stats.json. Progress lines
go to stderr; the network is stopped on exit, on failure, on Ctrl-C and on SIGTERM.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

import node.client.market_msgs as mm
from node.client.rpc import Client
from node.local import testnet_market as tm
from node.local.manifest import load, nodes_of, workers_of
from node.ports import find_free_base

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "node.cli"]  # the command line, as a user runs it
sys.path.insert(0, str(ROOT))

# what a worker's stats.json counts per round, in display order (node/blobs/server.py KINDS, tx)
KINDS = ("update", "state", "trace_list", "carry", "model", "dataset", "other", "http", "tx")
DEFAULT_H, DEFAULT_K = 500, 50
# job fields tx job create fills in with its shipped defaults when the spec does not give them
VERIFICATION_FIELDS = (
    "challenge_bps",
    "segments_per_challenge",
    "verifiers_per_challenge",
    "determinism_mode",
    "tolerance_ppm",
    "stack",
)


def log(msg: str) -> None:
    print(f"[traffic {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------ arithmetic


def ring_factor(n: int) -> float:
    """What a ring AllReduce moves each way per worker, in units of the reduced buffer."""
    return 2 * (n - 1) / n if n > 0 else 0.0


def allreduce_round_bytes(n_params: int, n: int, steps: int) -> dict[str, float]:
    """Per-step fp32 ring AllReduce over ``steps`` steps, per worker: sent, received, total."""
    each = steps * ring_factor(n) * 4 * n_params
    return {"sent": each, "received": each, "total": 2 * each}


def worker_round(timing: dict[str, Any]) -> dict[str, dict[str, int]]:
    """{"sent": {kind: B}, "received": {kind: B}} of one worker's round in stats.json."""
    sent = {k: int(timing.get(f"bytes_out.{k}", 0)) for k in KINDS if k != "tx"}
    sent["tx"] = int(timing.get("tx_bytes", 0))
    received = {k: int(timing.get(f"bytes_in.{k}", 0)) for k in KINDS if k != "tx"}
    received["tx"] = 0  # the others' txs arrive in blocks: the node link (traffic.ws_in)
    return {"sent": sent, "received": received}


def role_of(address: str, r: dict[str, Any]) -> str:
    """participant (drawn to train), verifier (on a panel of one of the round's challenges),
    or idle."""
    if any(p["address"] == address for p in r["participants"]):
        return "participant"
    for p in r["participants"]:
        for v in (p.get("challenge") or {}).get("verifiers") or []:
            if v["address"] == address:
                return "verifier"
    return "idle"


def reported_rounds(saved: dict[str, Any]) -> list[dict[str, Any]]:
    """The rounds every worker wrote final to its stats.json (the job's last round never is)."""
    out = []
    for r in saved["rounds"]:
        key = f"{r['job_id']}/{r['round']}"
        if all(
            "finalized" in (saved["stats"].get(w["address"], {}).get("rounds", {}).get(key) or {})
            for w in saved["workers"]
        ):
            out.append(r)
    return out


def _stat(vals: list[float]) -> dict[str, float]:
    return {"mean": sum(vals) / len(vals) if vals else 0.0, "max": max(vals, default=0.0)}


def _worker_rounds(
    saved: dict[str, Any], rounds: list[dict[str, Any]], P: int, H: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A row per worker-round (its bytes by kind, sent and received, and the AllReduce it
    stands against) and a row per round (every worker's bytes moved, charged to its N
    participants)."""
    rows: list[dict[str, Any]] = []  # one per worker-round
    per_round: list[dict[str, Any]] = []
    for r in rounds:
        key = f"{r['job_id']}/{r['round']}"
        n = len(r["participants"])
        ar = allreduce_round_bytes(P, n, H)
        round_rows = []
        for w in saved["workers"]:
            t = saved["stats"].get(w["address"], {}).get("rounds", {}).get(key) or {}
            wr = worker_round(t)
            row = {
                "worker": w["name"],
                "round": int(r["round"]),
                "role": role_of(w["address"], r),
                "n": n,
                "sent": wr["sent"],
                "received": wr["received"],
                "sent_total": sum(wr["sent"].values()),
                "received_total": sum(wr["received"].values()),
                "allreduce": ar,
            }
            row["total"] = row["sent_total"] + row["received_total"]
            round_rows.append(row)
        rows += round_rows
        moved = sum(x["total"] for x in round_rows)  # every worker's sent + received
        per_round.append(
            {
                "round": int(r["round"]),
                "n": n,
                "outcomes": [p["outcome"] for p in r["participants"]],
                "challenged": sum(1 for p in r["participants"] if p.get("challenge")),
                "total": moved,
                "charged": moved / n if n else 0.0,
                "allreduce": ar["total"],
                "ratio_charged": ar["total"] / (moved / n) if n and moved else float("inf"),
            }
        )
    return rows, per_round


def _role_figures(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    roles: dict[str, dict[str, Any]] = {}
    for role in ("participant", "verifier", "idle"):
        sel = [x for x in rows if x["role"] == role]
        roles[role] = {
            "count": len(sel),
            "sent": _stat([float(x["sent_total"]) for x in sel]),
            "received": _stat([float(x["received_total"]) for x in sel]),
            "total": _stat([float(x["total"]) for x in sel]),
            "kinds": {
                side: {k: _stat([float(x[side][k]) for x in sel])["mean"] for k in KINDS}
                for side in ("sent", "received")
            },
        }
    return roles


def _node_link(saved: dict[str, Any]) -> list[dict[str, Any]]:
    """The node link: JSON-RPC and websocket bytes, per worker, over the rounds it saw final."""
    link = []
    for w in saved["workers"]:
        s = saved["stats"].get(w["address"], {})
        tr = s.get("traffic") or {}
        seen = sum(1 for t in (s.get("rounds") or {}).values() if "finalized" in (t or {}))
        if seen:
            link.append(
                {
                    "worker": w["name"],
                    "rounds": seen,
                    "out": (tr.get("rpc_out", 0)) / seen,
                    "in": (tr.get("rpc_in", 0) + tr.get("ws_in", 0)) / seen,
                }
            )
    return link


def _unattributed(saved: dict[str, Any]) -> dict[str, int]:
    """Per worker: the bytes no round could be named for (its stats' "-" entry)."""
    return {
        w["name"]: sum(
            int(v)
            for k, v in (
                (saved["stats"].get(w["address"], {}).get("rounds") or {}).get("-") or {}
            ).items()
            if k.startswith("bytes_")
        )
        for w in saved["workers"]
    }


def summarize(saved: dict[str, Any]) -> dict[str, Any]:
    """The figures the tables print, from a saved run (pure arithmetic, no network)."""
    H = int(saved["job"]["inner_steps"])
    P = int(saved["n_params"])
    rounds = reported_rounds(saved)
    rows, per_round = _worker_rounds(saved, rounds, P, H)
    kinds = {
        side: {k: _stat([float(x[side][k]) for x in rows]) for k in KINDS}
        for side in ("sent", "received")
    }
    totals = {
        "sent": _stat([float(x["sent_total"]) for x in rows]),
        "received": _stat([float(x["received_total"]) for x in rows]),
        "total": _stat([float(x["total"]) for x in rows]),
    }
    ar_mean = sum(x["allreduce"]["total"] for x in rows) / len(rows) if rows else 0.0
    worst = max(rows, key=lambda x: x["total"], default=None)
    moved_all = sum(p["total"] for p in per_round)
    charged_all = sum(p["charged"] for p in per_round)
    ar_all = sum(p["allreduce"] for p in per_round)
    link = _node_link(saved)
    link_mean = sum(x["out"] + x["in"] for x in link) / len(link) if link else 0.0
    return {
        "H": H,
        "n_params": P,
        "rounds": [int(r["round"]) for r in rounds],
        "rows": rows,
        "per_round": per_round,
        "kinds": kinds,
        "totals": totals,
        "allreduce_mean": ar_mean,
        "ratio_mean": ar_mean / totals["total"]["mean"] if totals["total"]["mean"] else 0.0,
        "worst": worst,
        "ratio_max": worst["allreduce"]["total"] / worst["total"]
        if worst and worst["total"]
        else 0.0,
        "ratio_charged": ar_all / charged_all if charged_all else 0.0,
        "moved_all": moved_all,
        "roles": _role_figures(rows),
        "link": link,
        "link_mean": link_mean,
        "ratio_with_link": ar_mean / (totals["total"]["mean"] + link_mean)
        if totals["total"]["mean"] + link_mean
        else 0.0,
        "unattributed": _unattributed(saved),
    }


# ------------------------------------------------------------------------------ the report


def fmt(x: float) -> str:
    return f"{x:,.0f}"


def header(*cols: str, align: str) -> None:
    """A markdown table's header row and its alignment row (l or r per column)."""
    print("| " + " | ".join(cols) + " |")
    print("|" + "|".join("---" if a == "l" else "---:" for a in align) + "|")


def _report_header(saved: dict[str, Any], s: dict[str, Any], ns: list[int]) -> None:
    """The job, the shipped defaults, the machine, the rounds reported."""
    job = saved["job"]
    d = saved.get("defaults") or {}
    print(
        f"job {saved.get('job_id', '?')}: H={job['inner_steps']} k={job['trace_interval']}, "
        f"P={fmt(s['n_params'])} parameters, {job.get('compression_policy')}, "
        f"{job.get('participants_per_round')} participants of {len(saved['workers'])} providers; "
        f"challenge {job.get('challenge_bps')} bps, {job.get('segments_per_challenge')} "
        f"segment(s), {job.get('verifiers_per_challenge')} verifier(s), "
        f"{job.get('determinism_mode')} mode"
    )
    if d:
        print(
            "tx job create's shipped defaults at run time (node/client/market_msgs.py): "
            + ", ".join(f"{k}={v}" for k, v in sorted(d.items()))
        )
    if saved.get("machine"):
        m = saved["machine"]
        print(f"machine: {m.get('nproc')} cores (nproc), {m.get('date')}, {m.get('python')}")
    rr = s["rounds"]
    print(
        f"rounds reported: {len(rr)} ({rr[0]}..{rr[-1]})" if rr else "rounds reported: none",
        f"of the job's {len(saved['rounds'])}; N (participants per round) = "
        f"{', '.join(map(str, ns)) or '-'}; {len(s['rows'])} worker-rounds",
    )


def _report_kinds(s: dict[str, Any], ns: list[int]) -> None:
    """Bytes by kind, the totals, and the ratios to a per-step ring AllReduce."""
    print(
        "\nBytes per worker per round, by kind (mean and max over the worker-rounds; a max is "
        "that kind's own largest worker-round)\n"
    )
    print("| kind | sent mean | sent max | received mean | received max |")
    print("|---|---:|---:|---:|---:|")
    for k in KINDS:
        a, b = s["kinds"]["sent"][k], s["kinds"]["received"][k]
        print(f"| {k} | {fmt(a['mean'])} | {fmt(a['max'])} | {fmt(b['mean'])} | {fmt(b['max'])} |")
    t = s["totals"]
    print(
        f"| **total** | **{fmt(t['sent']['mean'])}** | {fmt(t['sent']['max'])} | "
        f"**{fmt(t['received']['mean'])}** | {fmt(t['received']['max'])} |"
    )
    print(
        f"\nsent + received per worker per round: mean {fmt(t['total']['mean'])} B, max "
        f"{fmt(t['total']['max'])} B"
        + (
            f" ({s['worst']['worker']}, round {s['worst']['round']}, {s['worst']['role']})"
            if s["worst"]
            else ""
        )
    )
    print(
        f"per-step fp32 ring AllReduce at equal tokens, per worker per round (N = "
        f"{', '.join(map(str, ns)) or '-'}, H = {s['H']}): 2(N-1)/N x 4 B x {fmt(s['n_params'])} "
        f"x {s['H']} sent and as much received = {fmt(s['allreduce_mean'])} B"
    )
    print(
        f"ratio AllReduce / whole round: **{s['ratio_mean']:,.0f}x** (mean worker-round), "
        f"{s['ratio_max']:,.0f}x (largest worker-round), {s['ratio_charged']:,.0f}x (every "
        "worker's bytes of a round charged to its N participants)"
    )
    print(
        f"the node link (JSON-RPC with its node, new-block websocket; not in the ratios above): "
        f"{fmt(s['link_mean'])} B per worker per round; counted too, the mean ratio is "
        f"{s['ratio_with_link']:,.1f}x"
    )


def _report_roles(s: dict[str, Any]) -> None:
    print("\nBy role (per worker-round, B)\n")
    header(
        "role",
        "worker-rounds",
        "sent mean",
        "received mean",
        "total mean",
        "total max",
        "largest kinds (mean, sent+received)",
        align="lrrrrrl",
    )
    for role, x in s["roles"].items():
        both = {k: x["kinds"]["sent"][k] + x["kinds"]["received"][k] for k in KINDS}
        top = ", ".join(
            f"{k} {fmt(v)}" for k, v in sorted(both.items(), key=lambda kv: -kv[1])[:3] if v
        )
        print(
            f"| {role} | {x['count']} | {fmt(x['sent']['mean'])} | {fmt(x['received']['mean'])} "
            f"| {fmt(x['total']['mean'])} | {fmt(x['total']['max'])} | {top or '-'} |"
        )


def _report_rounds(s: dict[str, Any]) -> None:
    print("\nPer round (B; moved = every worker's sent + received)\n")
    header(
        "round",
        "N",
        "outcomes",
        "challenged",
        "moved",
        "charged per participant",
        "AllReduce per worker",
        "ratio (charged)",
        align="rrlrrrrr",
    )
    for p in s["per_round"]:
        print(
            f"| {p['round']} | {p['n']} | {','.join(p['outcomes'])} | {p['challenged']} | "
            f"{fmt(p['total'])} | {fmt(p['charged'])} | {fmt(p['allreduce'])} | "
            f"{p['ratio_charged']:,.0f}x |"
        )


def _report_workers(saved: dict[str, Any], s: dict[str, Any]) -> None:
    print("\nPer worker (mean per reported round, B)\n")
    header(
        "worker",
        "participant / verifier / idle rounds",
        "sent",
        "received",
        "total",
        "max total",
        "node link (rpc out, rpc+ws in)",
        align="llrrrrr",
    )
    link = {x["worker"]: x for x in s["link"]}
    for w in saved["workers"]:
        sel = [x for x in s["rows"] if x["worker"] == w["name"]]
        if not sel:
            continue
        roles = "/".join(
            str(sum(1 for x in sel if x["role"] == r)) for r in ("participant", "verifier", "idle")
        )
        n = len(sel)
        lk = link.get(w["name"])
        print(
            f"| {w['name']} | {roles} | {fmt(sum(x['sent_total'] for x in sel) / n)} | "
            f"{fmt(sum(x['received_total'] for x in sel) / n)} | "
            f"{fmt(sum(x['total'] for x in sel) / n)} | {fmt(max(x['total'] for x in sel))} | "
            + (f"{fmt(lk['out'])}, {fmt(lk['in'])} |" if lk else "- |")
        )


def _report_checks(saved: dict[str, Any], s: dict[str, Any]) -> None:
    """The cross-check: what the workers' servers sent for the reported rounds against what the
    workers received for them (bodies by kind; the dataset and initial model come from the
    owner's source, which is not a worker); the bytes outside the tables."""
    sent_k = {k: sum(x["sent"][k] for x in s["rows"]) for k in KINDS}
    recv_k = {k: sum(x["received"][k] for x in s["rows"]) for k in KINDS}
    owner = saved.get("owner_server") or {}
    owner_kinds = ", ".join(
        f"{k} {fmt(v)}" for k, v in sorted((owner.get("sent_by_kind") or {}).items())
    )
    print(
        "\ncross-check over the reported rounds, all workers (B, sent / received): "
        + ", ".join(f"{k} {fmt(sent_k[k])} / {fmt(recv_k[k])}" for k in KINDS if k != "tx")
        + f"; the owner's blob source sent {fmt(owner.get('bytes_sent', 0))} B of bodies in all "
        f"({owner_kinds})"
    )
    un = {k: v for k, v in s["unattributed"].items() if v}
    if un:
        print(
            "bytes no round could be named for (outside the tables): "
            + ", ".join(f"{k} {fmt(v)}" for k, v in un.items())
        )
    live = saved.get("live") or {}
    late = []
    for w in saved["workers"]:
        srv = saved["stats"].get(w["address"], {}).get("server") or {}
        lv = live.get(w["address"]) or {}
        if lv and int(lv.get("bytes_sent", 0)) != int(srv.get("bytes_sent", 0)):
            late.append(
                f"{w['name']} {fmt(int(lv.get('bytes_sent', 0)) - int(srv.get('bytes_sent', 0)))}"
            )
    if late:
        print(
            "served after each worker's last stats.json (the job's last round; in no table): "
            + ", ".join(late)
        )


def report(saved: dict[str, Any]) -> None:
    s = summarize(saved)
    ns = sorted({p["n"] for p in s["per_round"]})
    _report_header(saved, s, ns)
    _report_kinds(s, ns)
    _report_roles(s)
    _report_rounds(s)
    _report_workers(saved, s)
    _report_checks(saved, s)


# ------------------------------------------------------------------------------ the run


def shipped_defaults() -> dict[str, Any]:
    return {k: v for k, v in vars(mm).items() if k.startswith("DEFAULT_")}


def n_params_of(model_cfg: dict[str, Any]) -> int:
    from trainer.model import GPT  # lazy: torch; --from-saved and the tests only print tables
    from trainer.portable_init import config_from_job  # lazy: torch, as above

    return int(sum(p.numel() for p in GPT(config_from_job(model_cfg)).parameters()))


def build_spec(
    a: argparse.Namespace, workers: list[Any], owner_url: str
) -> tuple[dict, bytes, bytes]:
    """The job spec for ``tx job create --spec``: --job FILE (if given) over the built-in job,
    without the verification fields (the CLI's shipped defaults fill them in), H and k from
    the flags, the owner's blob source first."""
    from trainer.portable_init import config_from_job, initial_model_bytes  # lazy: torch

    job, data, model = tm.builtin_job(a.rounds + 1, workers)
    for k in VERIFICATION_FIELDS:
        job.pop(k, None)
    if a.job:
        given = json.loads(a.job.read_text())
        if not isinstance(given, dict):
            sys.exit(f"--job {a.job}: a JSON object (tx job create --spec) is needed")
        if "model" in given and "initial_model_hash" not in given:
            model = initial_model_bytes(config_from_job(given["model"]), 0)
            job.update(
                initial_model_hash=hashlib.sha256(model).hexdigest(),
                initial_model_bytes=len(model),
            )
        job.update(given)
    given_fields = a.job_fields or {}
    for field, flag, default in (
        ("inner_steps", a.inner_steps, DEFAULT_H),
        ("trace_interval", a.trace_interval, DEFAULT_K),
    ):
        if flag is not None:
            job[field] = flag
        elif field not in given_fields:
            job[field] = default
    job["rounds"] = a.rounds + 1
    w = dict(job["windows"])
    if a.commit_blocks:
        w["commit"] = a.commit_blocks
    if a.verdict_blocks:
        w["verdict"] = a.verdict_blocks
    job["windows"] = w
    job["blob_sources"] = [owner_url, *[s for s in job.get("blob_sources", []) if s != owner_url]][
        :8
    ]
    return job, data, model


def _testnet_up(a: argparse.Namespace, net: Path) -> None:
    base = find_free_base(
        range(30656, 45000, 1000), [100 * i + k for i in range(4) for k in (0, 1, 4, 24)]
    )
    log(f"starting 4 validators and {a.providers} provider workers in {net} (base port {base})")
    up = subprocess.run(
        [
            *CLI,
            "testnet",
            "up",
            "--dir",
            str(net),
            "--providers",
            str(a.providers),
            "--no-job",
            "--base-port",
            str(base),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    if up.returncode != 0:
        raise SystemExit(f"testnet up failed:\n{up.stdout}{up.stderr}")


def _create_job(net: Path, rpc: str, job: dict[str, Any]) -> int:
    """``tx job create --spec`` with the job written next to the network; its id."""
    spec_file = net.parent / "job.json"
    spec_file.write_text(json.dumps(job, indent=1))
    log(
        f"creating the job (tx job create --spec {spec_file}): H={job['inner_steps']} "
        f"k={job['trace_interval']}, {job['rounds']} rounds, verification at the CLI's defaults"
    )
    made = subprocess.run(
        [
            *CLI,
            "tx",
            "job",
            "create",
            "--spec",
            str(spec_file),
            "--from",
            "validator0",
            "--home",
            str(net),
            "--node",
            rpc,
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    for line in made.stderr.splitlines():
        log(f"tx job create: {line}")
    if made.returncode != 0:
        raise SystemExit(f"tx job create failed:\n{made.stdout}{made.stderr}")
    return int(json.loads(made.stdout)["job_id"])


def _follow_job(
    a: argparse.Namespace, rpc: str, job_id: int, workers: list
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Log each round as it finalizes until the job completes (--timeout); the job as the
    chain holds it and its rounds."""
    deadline = time.monotonic() + a.timeout
    done: set[int] = set()
    names = {w.address: w.name for w in workers}
    with Client(rpc) as c:
        spec = json.loads(c.abci_query(f"/job/{job_id}").value)
        log(
            f"job {job_id}: challenge {spec['spec'].get('challenge_bps')} bps, "
            f"{spec['spec'].get('segments_per_challenge')} segment(s), "
            f"{spec['spec'].get('verifiers_per_challenge')} verifier(s), "
            f"{spec['spec'].get('determinism_mode')} mode"
        )
        while True:
            j = json.loads(c.abci_query(f"/job/{job_id}").value)
            rounds = json.loads(c.abci_query(f"/rounds/{job_id}?limit=1000").value)["rounds"]
            for r in rounds:
                if r["phase"] == "finalized" and r["round"] not in done:
                    done.add(r["round"])
                    log(
                        f"round {r['round']} finalized: "
                        + ", ".join(
                            f"{names.get(p['address'], '?')} {p['outcome']}"
                            + (" (challenged)" if p.get("challenge") else "")
                            for p in r["participants"]
                        )
                    )
            if j["status"] == "completed":
                return spec, rounds
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"the job did not complete within --timeout {a.timeout} s "
                    f"({len(done)} rounds final)"
                )
            time.sleep(2)


def _live_stats(workers: list) -> dict[str, Any]:
    """Each worker's blob server /stats now (after its last stats.json)."""
    live = {}
    for w in workers:
        try:
            live[w.address] = httpx.get(f"{w.endpoint}/stats", timeout=5.0).json()
        except (httpx.HTTPError, ValueError) as e:
            log(f"{w.name}: /stats not read ({e})")
    return live


def run_network(a: argparse.Namespace, net: Path) -> dict[str, Any]:
    from node.blobs import BlobServer, BlobStore  # lazy: aiohttp, only for a live run

    _testnet_up(a, net)
    m = load(net)
    workers = workers_of(m)
    rpc = nodes_of(m)[0].rpc_url
    owner_store = BlobStore(net.parent / "owner-blobs")
    kinds: dict[str, str] = {}  # the owner knows what it serves: the job's inputs
    owner = BlobServer(owner_store, "127.0.0.1", 0, classify=lambda h, head: kinds.get(h))
    owner.start_thread()
    try:
        job, data, model = build_spec(a, workers, owner.url)
        kinds.update({job["dataset_id"]: "dataset", job["initial_model_hash"]: "model"})
        for b in (data, model):
            owner_store.pin(owner_store.put_bytes(b, tier="cold"))
        job_id = _create_job(net, rpc, job)
        spec, rounds = _follow_job(a, rpc, job_id, workers)
        last = f"{job_id}/{rounds[-2]['round']}" if len(rounds) > 1 else f"{job_id}/0"

        stats = tm.final_stats(workers, last)
        live = _live_stats(workers)
        return {
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()},
            "job_id": job_id,
            "job": {**spec["spec"], "rounds": spec.get("rounds", job["rounds"])},
            "defaults": shipped_defaults(),
            "n_params": n_params_of(job["model"]),
            "workers": [{"name": w.name, "address": w.address} for w in workers],
            "rounds": rounds,
            "stats": stats,
            "live": live,
            "owner_server": owner.stats.to_dict(),
            "machine": {
                "nproc": os.cpu_count(),
                "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                "python": sys.version.split()[0],
            },
        }
    finally:
        owner.stop_thread()
        owner_store.close()


def _terminated(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="benchmarks/traffic.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example: .venv/bin/python benchmarks/traffic.py --rounds 10 --save /tmp/t.json",
    )
    ap.add_argument("--rounds", type=int, default=10, help="rounds reported (default 10)")
    ap.add_argument("--inner-steps", type=int, help="H (default 500, or the --job file's)")
    ap.add_argument("--trace-interval", type=int, help="k (default 50, or the --job file's)")
    ap.add_argument(
        "--job",
        type=Path,
        metavar="FILE",
        help="a job JSON (tx job create --spec): its fields over the built-in job's; the "
        "verification fields it leaves out get tx job create's shipped defaults",
    )
    ap.add_argument("--providers", type=int, default=4, help="provider workers (default 4, >= 4)")
    ap.add_argument("--commit-blocks", type=int, help="commit window (default the built-in job's)")
    ap.add_argument("--verdict-blocks", type=int, help="verdict window (default the built-in's)")
    ap.add_argument(
        "--timeout", type=float, default=3600, help="seconds for the job to complete (3600)"
    )
    ap.add_argument("--save", type=Path, help="also write the raw figures to this JSON file")
    ap.add_argument(
        "--keep",
        action="store_true",
        help="stop the network but keep its folder (node and worker logs, stats.json); "
        "default: purged",
    )
    ap.add_argument(
        "--from-saved",
        type=Path,
        metavar="FILE",
        help="print the report of a run saved with --save; starts no network",
    )
    a = ap.parse_args(argv)
    if a.providers < 4:
        ap.error("--providers: at least 4")
    if a.rounds < 1:
        ap.error("--rounds: at least 1")
    a.job_fields = {}
    if a.job:
        try:
            a.job_fields = json.loads(a.job.read_text())
        except (OSError, ValueError) as e:
            ap.error(f"--job {a.job}: {e}")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.from_saved:
        report(json.loads(a.from_saved.read_text()))
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="traffic-"))
    net = tmp / "net"

    def down() -> None:
        if net.exists():
            log("stopping the network" + (f" (its folder stays: {net})" if a.keep else ""))
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "node.cli",
                    "testnet",
                    "down",
                    *([] if a.keep else ["--purge"]),
                    "--dir",
                    str(net),
                ],
                capture_output=True,
                cwd=ROOT,
                check=False,
            )

    try:
        saved = run_network(a, net)
    except KeyboardInterrupt:
        log("interrupted")
        down()
        return 130
    except BaseException:
        down()
        raise
    down()
    if a.save:
        saved["args"].pop("job_fields", None)
        a.save.write_text(json.dumps(saved))
        log(f"saved to {a.save}")
    report(saved)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _terminated)
    sys.exit(main())
