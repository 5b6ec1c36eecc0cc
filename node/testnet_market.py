"""Provider workers in a local testnet (``loconet testnet up --providers P``).

Provider i: key ``provider{i}`` in the shared keyring (funded at genesis), bonded with
``PROVIDER_BOND``, its blob endpoint at ``http://127.0.0.1:{base+24+100·i}`` (26680 + 100·i for
the default base), and one ``loconet provider run`` process with its folder ``DIR/provider{i}/``
(blob store, progress.json, worker.log, worker.pid) following node i mod N, with the next node
as fallback. ``--cheaters KIND:COUNT`` makes the last COUNT providers run ``--behaviour KIND``.

The built-in job (unless ``--no-job``): a small byte-level GPT on the built-in text corpus
(trainer.data.default_corpus_bytes: Python standard-library sources, named by sha256),
challenge rate 100 % (every commitment is examined), windows sized for 2 cores. The chain never
lets a round's participants verify each other, so the providers split: P − V train each round
and V = min(3, P // 2) verify, and the testnet genesis sets jobs.min_fraud_verifiers to 2 so two
invalid votes prove fraud. A cheater bonds CHEATER_BOND_FACTOR x more than the others (a rational
cheater wants to be drawn: the draw is weighted by bond x reputation), which also makes its
slash visible. The job's owner (validator0) hands
the dataset and the initial model to the providers the way an owner would: it writes both into
every provider's blob store, so each worker finds them by the hashes the job records.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from node.paths import PROJECT_ROOT

LOCO = 1_000_000
PROVIDER_BOND = 2_000 * LOCO
CHEATER_BOND_FACTOR = 4
BLOB_OFFSET = 24  # 26656 + 24 = 26680
CHEAT_KINDS = ("random-root", "withhold", "lazy-verifier", "poison")

# the built-in job: ~25k parameters, H = 40 steps of 8 x 32 bytes, a state every 10 steps
BUILTIN_JOB: dict[str, Any] = {
    "model": {"n_layers": 2, "n_heads": 2, "d_model": 32, "context_len": 32, "vocab_size": 256},
    "inner_steps": 40, "trace_interval": 10, "tokens_per_step": 256, "compression_policy": "dense+int8",
    # commit >= reveal + 2 x verdict (votes committed, then opened) + attest: round r+1 (opened at
    # r's commit deadline) trains on the model of round r-1, never older
    # (verdict 16: a verifier that is also training fetches the trace list, entries 0 and H/k and
    # the payload, checks start and payload, and re-executes 2 targets x 2 segments, in time on a
    # loaded 2-core machine; 8 and then 12 left a round undecided now and then)
    "windows": {"commit": 42, "reveal": 5, "verdict": 16, "attest": 5},
    "challenge_bps": 10_000, "reward_per_round": 10 * LOCO, "verifier_reward_per_round": LOCO,
    # 2 of the H/k = 4 segments opened and re-executed per challenge; exact mode: all workers
    # share this machine's stack (trainer.determinism.stack_id)
    "segments_per_challenge": 2, "determinism_mode": "exact",
}


from node.testnet import TestnetError as TestnetMarketError


@dataclass(slots=True)
class WorkerInfo:
    name: str  # provider0
    key: str
    address: str
    dir: str
    blob_port: int
    nodes: list[str]  # RPC URLs, first = primary
    behaviour: str = "honest"

    @property
    def path(self) -> Path:
        return Path(self.dir)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.blob_port}"


def parse_cheaters(items: list[str], providers: int) -> list[str]:
    """``KIND:COUNT`` items -> the behaviour of each provider (cheaters last)."""
    kinds: list[str] = []
    for it in items:
        kind, _, count = it.partition(":")
        if kind not in CHEAT_KINDS or not (count or "1").isdigit():
            raise TestnetMarketError(f"bad --cheaters {it!r}: write KIND:COUNT with KIND one of {', '.join(CHEAT_KINDS)}")
        kinds += [kind] * int(count or "1")
    if len(kinds) > providers:
        raise TestnetMarketError(f"--cheaters asks for {len(kinds)} cheaters but --providers is {providers}")
    return ["honest"] * (providers - len(kinds)) + kinds


def workers_of(m: dict[str, Any]) -> list[WorkerInfo]:
    return [WorkerInfo(**w) for w in m.get("workers", [])]


def find_worker(m: dict[str, Any], name: str) -> WorkerInfo | None:
    for w in workers_of(m):
        if name in (w.name, w.key):
            return w
    return None


def plan_workers(d: Path, m: dict[str, Any], behaviours: list[str]) -> list[WorkerInfo]:
    from node.keys import Keyring

    rpcs = [f"http://127.0.0.1:{n['rpc']}" for n in m["nodes"]]
    out = []
    for i, b in enumerate(behaviours):
        key = Keyring(d).get(f"provider{i}")
        nodes = [rpcs[(i + j) % len(rpcs)] for j in range(min(2, len(rpcs)))]
        out.append(WorkerInfo(f"provider{i}", key.name, key.address, str((d / f"provider{i}").resolve()),
                              m["base_port"] + BLOB_OFFSET + 100 * i, nodes, b))
    return out


# ------------------------------------------------------------------------------- chain setup


def _send_all(rpc: str, d: Path, batch: list[tuple[str, Any]]) -> None:
    """Sign and broadcast one tx per (key, msg) (different accounts: no waiting in between),
    then wait for every one to be in a block."""
    from node.keys import Keyring
    from node.market_msgs import send_tx
    from node.rpc import Client

    kr = Keyring(d)
    with Client(rpc) as c:
        sent = [send_tx(c, kr.get(k).signer, [msg], wait=False) for k, msg in batch]
        for s in sent:  # one tx per account: a tx that left the mempool is broadcast again
            c.wait_for_tx(s["txhash"], timeout=60, resubmit=[s["tx"]])


def register_providers(d: Path, rpc: str, workers: list[WorkerInfo]) -> None:
    from node.market_msgs import build_register_provider
    from node.worker.ml import detect_hardware

    hw = detect_hardware()
    _send_all(rpc, d, [(w.key, build_register_provider(
        PROVIDER_BOND * (1 if w.behaviour == "honest" else CHEATER_BOND_FACTOR), hw, 50_000, "local", w.endpoint))
        for w in workers])


def builtin_job(rounds: int, workers: list[WorkerInfo]) -> tuple[dict[str, Any], bytes, bytes]:
    """(job dict for market_msgs.build_create_job, dataset bytes, initial model bytes); the
    blob sources are the workers' endpoints (each holds both blobs: seed_stores)."""
    import hashlib

    from trainer.data import default_corpus_bytes
    from trainer.determinism import stack_id
    from trainer.portable_init import config_from_job, initial_model_bytes

    data = default_corpus_bytes(400_000)
    model = initial_model_bytes(config_from_job(BUILTIN_JOB["model"]), 0)
    job = {k: v for k, v in BUILTIN_JOB.items()}
    n = len(workers)
    verifiers = max(1, min(3, n // 2)) if n > 1 else 1
    p = max(1, n - verifiers)
    job.update(rounds=rounds, initial_model_hash=hashlib.sha256(model).hexdigest(), initial_model_bytes=len(model),
               dataset_id=hashlib.sha256(data).hexdigest(), dataset_bytes=len(data), participants_per_round=p,
               num_shards=max(2 * p, 4), verifiers_per_challenge=verifiers,
               blob_sources=[w.endpoint for w in workers[:8]], stack=stack_id("cpu"))
    return job, data, model


def seed_stores(workers: list[WorkerInfo], blobs: list[bytes]) -> None:
    """The owner hands the dataset and the initial model to every provider (pinned)."""
    from node.blobs import BlobStore

    for w in workers:
        store = BlobStore(w.path / "blobs", quota_bytes=20 << 30)
        for b in blobs:
            store.pin(store.put_bytes(b, tier="cold"))


def create_job(d: Path, rpc: str, owner: str, job: dict[str, Any]) -> int:
    from node.keys import Keyring
    from node.market_msgs import build_create_job, send_tx
    from node.rpc import Client

    with Client(rpc) as c:
        res = send_tx(c, Keyring(d).get(owner).signer, [build_create_job(job)])
        tx = c.tx(res["txhash"]) or {}
    for ev in (tx.get("tx_result") or {}).get("events", []):
        for a in ev.get("attributes", []):
            if a.get("key") == "job_id":
                return int(a["value"])
    with Client(rpc) as c:  # no event with the id: the newest job of the owner
        import json

        from abci_app.codec.address import to_bech32

        addr = to_bech32(Keyring(d).get(owner).address_bytes)
        jobs = json.loads(c.abci_query(f"/jobs?owner={addr}&limit=1000").value)["jobs"]
    return max(int(j["id"]) for j in jobs)


# ------------------------------------------------------------------------------- processes


def _pid(w: WorkerInfo) -> int | None:
    try:
        return int((w.path / "worker.pid").read_text().strip())
    except (OSError, ValueError):
        return None


def is_running(w: WorkerInfo) -> bool:
    pid = _pid(w)
    if pid is None:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X") and "provider" in cmd


def start_worker(d: Path, w: WorkerInfo) -> int:
    if is_running(w):
        return _pid(w) or 0
    w.path.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, "-m", "node.cli", "provider", "run", "--home", str(d), "--from", w.key,
            "--data-dir", w.dir, "--listen", f"127.0.0.1:{w.blob_port}", "--device", "cpu",
            "--behaviour", w.behaviour]
    for n in w.nodes:
        args += ["--node", n]
    log = open(w.path / "worker.log", "ab")  # noqa: SIM115 (handed to the detached child)
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, env=env, cwd=str(PROJECT_ROOT))
    log.close()
    (w.path / "worker.pid").write_text(f"{proc.pid}\n")
    return proc.pid


def stop_worker(w: WorkerInfo, *, kill: bool = False, timeout: float = 15.0) -> bool:
    from node.testnet import stop_group

    pid = _pid(w)
    if pid is None or not is_running(w):
        return False
    return stop_group(pid, kill=kill, timeout=timeout)


def worker_status(w: WorkerInfo) -> dict[str, Any]:
    import httpx

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
    """Until every worker's blob endpoint answers (its preflight passed and it follows the chain)."""
    deadline = time.monotonic() + timeout
    waiting = list(workers)
    while waiting:
        waiting = [w for w in waiting if not worker_status(w)["serving"]]
        for w in waiting:
            if not is_running(w):
                raise TestnetMarketError(f"{w.name} exited: see {w.path / 'worker.log'}")
        if waiting and time.monotonic() > deadline:
            raise TestnetMarketError(f"{', '.join(w.name for w in waiting)} not serving after {timeout:.0f}s: "
                                     f"see their worker.log")
        time.sleep(0.3)
