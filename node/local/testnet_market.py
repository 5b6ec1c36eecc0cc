"""Provider workers in a local testnet (``loconet testnet up --providers P``).

Provider i: key ``provider{i}`` in the shared keyring (funded at genesis), bonded with
``PROVIDER_BOND``, its blob endpoint at ``http://127.0.0.1:{base+24+100·i}`` (26680 + 100·i for
the default base; with ``--wan`` that port is its toxiproxy proxy and the worker listens one port
up, node/local/wan.py), and one ``loconet provider run`` process with its folder
``DIR/provider{i}/`` (blob store, progress.json, worker.log, worker.pid) following node i mod N,
with the next node
as fallback. ``--cheaters KIND:COUNT[,KIND:COUNT...]`` (repeatable) makes the last providers run
``--behaviour KIND``, in the order given.

The built-in job (unless ``--no-job``): a small byte-level GPT on the built-in text corpus
(trainer.data.default_corpus_bytes: Python standard-library sources, named by sha256),
challenge rate 100 % (every commitment is examined), windows sized for 2 cores. The chain never
lets a round's participants verify each other, so the providers split: P − V train each round
and V = min(3, P // 2) verify, and the testnet genesis sets jobs.min_fraud_verifiers to 2 so two
invalid votes prove fraud. A cheater bonds CHEATER_BOND_FACTOR x more than the others (a rational
cheater wants to be drawn: the draw is weighted by bond x reputation), which also makes its
slash visible. A lazy verifier bonds like an honest provider and takes no training slot (its
cheat is in its votes; see ``plan_roles``): with 4x it would hold 2/3 of a 3-verifier panel's
stake, and since a testnet this small has nobody left to draw an appeal panel from, the first
panel's 2/3 decides alone: its VALID would accept a poisoned update and slash the honest
verifiers (the *whale verifier* limit of abci_app/jobs/README.md, which an appeal panel drawn
from a larger network is what answers).

Roles (``plan_roles``): by default every provider except a lazy verifier may be drawn to train
and whoever is not drawn verifies. With ``--fixed-roles`` the roles are fixed, so every cheater
is examined in every round until it is jailed, by construction rather than by the luck of the
draw: V providers only verify (the lazy verifiers first, then honest ones from the last) and the
P − V others, every participant-side cheater among them, train in every round (the job draws
P − V participants). A verify-only provider registers with an opt-in policy whose minimum slot
reward (``VERIFY_ONLY_SLOT``) no job here pays: the draw of participants skips it, the draw of
verifiers (which ignores policies and job filters) does not.

The job's owner (validator0) hands
the dataset and the initial model to the providers the way an owner would: it writes both into
every provider's blob store, so each worker finds them by the hashes the job records.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx

from abci_app.codec.address import to_bech32
from node.client.keys import Keyring
from node.client.market_msgs import build_create_job, build_register_provider, send_tx
from node.client.rpc import Client
from node.local import procs
from node.local.manifest import TestnetError as TestnetMarketError
from node.local.manifest import (
    WorkerInfo,
    load,
)
from node.local.wan import worker_listen_port

LOCO = 1_000_000
PROVIDER_BOND = 2_000 * LOCO
CHEATER_BOND_FACTOR = 4
BLOB_OFFSET = 24  # 26656 + 24 = 26680
CHEAT_KINDS = ("random-root", "withhold", "lazy-verifier", "poison")
VERIFIER_CHEATS = ("lazy-verifier",)  # cheats in its votes: bonds like an honest one, never trains
VERIFY_ONLY_SLOT = 1_000_000 * LOCO  # policy min_slot_reward of a verify-only provider

# the built-in job: ~25k parameters, H = 40 steps of 8 x 32 bytes, a state every 10 steps
BUILTIN_JOB: dict[str, Any] = {
    "model": {"n_layers": 2, "n_heads": 2, "d_model": 32, "context_len": 32, "vocab_size": 256},
    "inner_steps": 40,
    "trace_interval": 10,
    "tokens_per_step": 256,
    "compression_policy": "dense+int8",
    # commit >= reveal + 2 x verdict (votes committed, then opened) + attest: round r+1 (opened at
    # r's commit deadline) trains on the model of round r-1, never older
    # (verdict 16: a verifier that is also training fetches the trace list, entries 0 and H/k and
    # the payload, checks start and payload, and re-executes 2 targets x 2 segments, in time on a
    # loaded 2-core machine; 8 and then 12 left a round undecided now and then)
    "windows": {"commit": 42, "reveal": 5, "verdict": 16, "attest": 5},
    "challenge_bps": 10_000,
    "reward_per_round": 10 * LOCO,
    "verifier_reward_per_round": LOCO,
    # 2 of the H/k = 4 segments opened and re-executed per challenge; exact mode: all workers
    # share this machine's stack (trainer.determinism.stack_id)
    "segments_per_challenge": 2,
    "determinism_mode": "exact",
}


def parse_cheaters(items: list[str], providers: int) -> list[str]:
    """``KIND:COUNT`` items (each may hold several, comma-separated: ``poison:1,withhold:1``) ->
    the behaviour of each provider (honest first, then the cheaters in the order given)."""
    kinds: list[str] = []
    for it in [part.strip() for item in items for part in item.split(",")]:
        kind, _, count = it.partition(":")
        count = count or "1"
        # ASCII digits only ('１' is isdigit too); the count is checked against --providers
        # before the list is built (poison:10**12 raised MemoryError)
        if kind not in CHEAT_KINDS or not (count.isascii() and count.isdigit()):
            raise TestnetMarketError(
                f"bad --cheaters {it!r}: write KIND:COUNT[,KIND:COUNT...] with KIND one of "
                f"{', '.join(CHEAT_KINDS)}, e.g. --cheaters poison:1,withhold:1"
            )
        n = len(kinds) + int(count)
        if n > providers:
            raise TestnetMarketError(
                f"--cheaters asks for {n if len(count) < 20 else 'more than 10^19'} cheaters but "
                f"--providers is {providers}: lower the counts or raise --providers"
            )
        kinds += [kind] * int(count)
    return ["honest"] * (providers - len(kinds)) + kinds


def verifier_seats(n: int) -> int:
    """Verifiers per challenge of the built-in job with ``n`` providers (the others train)."""
    return max(1, min(3, n // 2)) if n > 1 else 1


def plan_roles(behaviours: list[str], fixed: bool) -> list[str]:
    """Each provider's role: a lazy verifier always ``verify``; with ``fixed`` the verifier seats
    left go to honest providers from the last, and everyone else ``train``s (all of them drawn
    every round); without, ``any`` (the draw decides)."""
    roles = ["verify" if b in VERIFIER_CHEATS else "any" for b in behaviours]
    if not fixed:
        return roles
    seats = verifier_seats(len(behaviours))
    lazy = roles.count("verify")
    if lazy > seats:
        raise TestnetMarketError(
            f"--fixed-roles: {lazy} lazy verifiers but the job has {seats} verifier seats: "
            f"use fewer lazy-verifier cheaters or more --providers"
        )
    honest = [i for i, b in enumerate(behaviours) if b == "honest"]
    if len(honest) < seats - lazy + 1:
        raise TestnetMarketError(
            f"--fixed-roles needs {seats - lazy + 1} honest providers ({seats - lazy} to verify, "
            f"1 to train) but has {len(honest)}: add --providers or fewer --cheaters"
        )
    for i in honest[len(honest) - (seats - lazy) :]:
        roles[i] = "verify"
    return ["verify" if r == "verify" else "train" for r in roles]


def plan_workers(
    d: Path, m: dict[str, Any], behaviours: list[str], *, fixed_roles: bool = False
) -> list[WorkerInfo]:
    roles = plan_roles(behaviours, fixed_roles)
    rpcs = [f"http://127.0.0.1:{n['rpc']}" for n in m["nodes"]]
    out = []
    for i, b in enumerate(behaviours):
        key = Keyring(d).get(f"provider{i}")
        nodes = [rpcs[(i + j) % len(rpcs)] for j in range(min(2, len(rpcs)))]
        out.append(
            WorkerInfo(
                f"provider{i}",
                key.name,
                key.address,
                str((d / f"provider{i}").resolve()),
                m["base_port"] + BLOB_OFFSET + 100 * i,
                nodes,
                b,
                roles[i],
            )
        )
    return out


# ------------------------------------------------------------------------------- chain setup


def _send_all(rpc: str, d: Path, batch: list[tuple[str, Any]]) -> None:
    """Sign and broadcast one tx per (key, msg) (different accounts: no waiting in between),
    then wait for every one to be in a block."""

    kr = Keyring(d)
    with Client(rpc) as c:
        sent = [send_tx(c, kr.get(k).signer, [msg], wait=False) for k, msg in batch]
        for s in sent:  # one tx per account: a tx that left the mempool is broadcast again
            c.wait_for_tx(s["txhash"], timeout=60, resubmit=[s["tx"]])


def register_providers(d: Path, rpc: str, workers: list[WorkerInfo]) -> None:
    from node.worker.ml import detect_hardware  # lazy: imports torch (seconds)

    hw = detect_hardware()
    _send_all(
        rpc,
        d,
        [
            (
                w.key,
                build_register_provider(
                    PROVIDER_BOND
                    * (1 if w.behaviour in ("honest", *VERIFIER_CHEATS) else CHEATER_BOND_FACTOR),
                    hw,
                    50_000,
                    "local",
                    w.endpoint,
                    min_slot_reward=VERIFY_ONLY_SLOT if w.role == "verify" else 0,
                ),
            )
            for w in workers
        ],
    )


def builtin_job(
    rounds: int, workers: list[WorkerInfo], determinism: str = "exact"
) -> tuple[dict[str, Any], bytes, bytes]:
    """(job dict for market_msgs.build_create_job, dataset bytes, initial model bytes); the
    blob sources are the workers' endpoints (each holds both blobs: seed_stores).
    ``determinism`` "tolerance": a tolerance-mode job (1,000 ppm; probes, jobs README)."""

    from trainer.data import default_corpus_bytes  # lazy: imports torch (seconds)
    from trainer.determinism import stack_id  # lazy: imports torch (seconds)
    from trainer.portable_init import (  # lazy: imports torch (seconds)
        config_from_job,
        initial_model_bytes,
    )

    data = default_corpus_bytes(400_000)
    model = initial_model_bytes(config_from_job(BUILTIN_JOB["model"]), 0)
    job = dict(BUILTIN_JOB)
    n = len(workers)
    verifiers = verifier_seats(n)
    p = max(1, n - verifiers)
    job.update(
        rounds=rounds,
        initial_model_hash=hashlib.sha256(model).hexdigest(),
        initial_model_bytes=len(model),
        dataset_id=hashlib.sha256(data).hexdigest(),
        dataset_bytes=len(data),
        participants_per_round=p,
        num_shards=max(2 * p, 4),
        verifiers_per_challenge=verifiers,
        blob_sources=[w.endpoint for w in workers[:8]],
        stack=stack_id("cpu"),
    )
    if determinism == "tolerance":
        job.update(determinism_mode="tolerance", tolerance_ppm=1_000, stack="")
    return job, data, model


def seed_stores(workers: list[WorkerInfo], blobs: list[bytes]) -> None:
    """The owner hands the dataset and the initial model to every provider (pinned)."""
    from node.blobs import BlobStore  # lazy: aiohttp, 0.4 s at every --help

    for w in workers:
        store = BlobStore(w.path / "blobs", quota_bytes=20 << 30)
        for b in blobs:
            store.pin(store.put_bytes(b, tier="cold"))


def create_job(d: Path, rpc: str, owner: str, job: dict[str, Any]) -> int:
    with Client(rpc) as c:
        res = send_tx(c, Keyring(d).get(owner).signer, [build_create_job(job)])
        tx = c.tx(res["txhash"]) or {}
    for ev in (tx.get("tx_result") or {}).get("events", []):
        for a in ev.get("attributes", []):
            if a.get("key") == "job_id":
                return int(a["value"])
    with Client(rpc) as c:  # no event with the id: the newest job of the owner
        addr = to_bech32(Keyring(d).get(owner).address_bytes)
        jobs = json.loads(c.abci_query(f"/jobs?owner={addr}&limit=1000").value)["jobs"]
    return max(int(j["id"]) for j in jobs)


# ------------------------------------------------------------------------------- processes


def pid_of(w: WorkerInfo) -> int | None:
    """The pid of the worker (``loconet provider run``) if it runs; else None."""
    return procs.running(w.path / "worker.pid", "provider")


def is_running(w: WorkerInfo) -> bool:
    return pid_of(w) is not None


def start_worker(d: Path, w: WorkerInfo) -> int:
    pid = pid_of(w)
    if pid is not None:
        return pid

    try:
        behind_wan = bool(load(d).get("wan"))
    except TestnetMarketError:
        behind_wan = False
    w.path.mkdir(parents=True, exist_ok=True)
    args = [
        sys.executable,
        "-m",
        "node.cli",
        "provider",
        "run",
        "--home",
        str(d),
        "--from",
        w.key,
        "--data-dir",
        w.dir,
        "--listen",
        f"127.0.0.1:{worker_listen_port(w.blob_port, behind_wan)}",
        "--device",
        "cpu",
        "--behaviour",
        w.behaviour,
    ]
    for n in w.nodes:
        args += ["--node", n]
    log, pid_file = w.path / "worker.log", w.path / "worker.pid"
    return procs.spawn(args, log=log, pid_file=pid_file, env={"OMP_NUM_THREADS": "1"})


def stop_worker(w: WorkerInfo, *, kill: bool = False, timeout: float = 15.0) -> bool:
    pid = pid_of(w)
    if pid is None:
        return False
    return procs.stop_group(pid, kill=kill, timeout=timeout)


def final_stats(workers: list[WorkerInfo], key: str, timeout: float = 60.0) -> dict[str, Any]:
    """Each worker's DATA_DIR/stats.json (by address) once every worker has written round
    ``key`` ("JOB/ROUND") final there, or after ``timeout`` s (whatever they wrote by then):
    a worker writes stats.json when it sees a round final (benchmarks read the figures)."""

    def read(w: WorkerInfo) -> dict[str, Any] | None:
        try:
            got = json.loads((w.path / "stats.json").read_text())
        except (OSError, ValueError):
            return None
        return got if isinstance(got, dict) else None  # a damaged file of another shape

    def written() -> bool:
        try:
            return all("finalized" in (read(w) or {})["rounds"].get(key, {}) for w in workers)
        except (KeyError, TypeError, AttributeError):
            return False

    deadline = time.monotonic() + timeout
    while not written() and time.monotonic() < deadline:
        time.sleep(1)
    return {w.address: st for w in workers if (st := read(w)) is not None}


def trainer_utilization(rounds: dict[str, dict[str, float]]) -> dict[str, float] | None:
    """How busy a provider's trainer was, from its stats.json ``rounds`` (node/worker/context.py
    ``account`` and ``span``): ``train_s`` = the seconds it trained (every round it trained),
    ``wall_s`` = from its first training's start to its last training's end, ``utilization`` =
    train_s / wall_s (the share of that time its trainer computed: the rest it waited for the
    chain or for inputs), ``rounds`` trained. None when it trained fewer than two rounds (no
    wait between rounds to measure)."""
    spans = [
        (t["train_start"], t["train_end"], t.get("train_s", 0.0))
        for t in rounds.values()
        if isinstance(t, dict) and "train_start" in t and "train_end" in t
    ]
    if len(spans) < 2:
        return None
    wall = max(e for _, e, _ in spans) - min(b for b, _, _ in spans)
    trained = sum(x for _, _, x in spans)
    return {
        "train_s": trained,
        "wall_s": wall,
        "utilization": trained / wall if wall > 0 else 0.0,
        "rounds": float(len(spans)),
    }


def worker_status(w: WorkerInfo) -> dict[str, Any]:
    out: dict[str, Any] = {**asdict(w), "running": is_running(w), "serving": False, "last": ""}
    if out["running"]:
        try:
            out["serving"] = httpx.get(f"{w.endpoint}/stats", timeout=1.0).status_code == 200
        except httpx.HTTPError:
            pass
    log = w.path / "worker.log"
    if log.exists():
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
        out["last"] = lines[-1][:140] if lines else ""
    return out


def wait_serving(workers: list[WorkerInfo], timeout: float = 120.0) -> None:
    """Until every worker's blob endpoint answers (its preflight passed and it follows the
    chain)."""
    deadline = time.monotonic() + timeout
    waiting = list(workers)
    while waiting:
        waiting = [w for w in waiting if not worker_status(w)["serving"]]
        for w in waiting:
            if not is_running(w):
                raise TestnetMarketError(f"{w.name} exited: see {w.path / 'worker.log'}")
        if waiting and time.monotonic() > deadline:
            raise TestnetMarketError(
                f"{', '.join(w.name for w in waiting)} not serving after {timeout:.0f}s: "
                f"see their worker.log"
            )
        time.sleep(0.3)
