"""Crash storm on a real 4-validator testnet under steady signed load (issue 12, item 2).

    python benchmarks/chaos.py --perturbations 100 --record      # the full storm, ~20 min
    python benchmarks/chaos.py --perturbations 6 --seed 3         # a quick look

What it does: ``loconet testnet``'s own code writes and starts a 4-validator network; sender
threads (one account each) submit 1-transfer txs of distinct amounts with ``broadcast_tx_sync``
to a random node that is up, never waiting for blocks (steady load). Then, one node at a time,
``N`` random perturbations:

    kill9-group   SIGKILL to the node's whole process group (cometbft + the ABCI app), restart
    kill9-app     SIGKILL to the ABCI app only (cometbft loses its app and exits), restart
    kill9-comet   SIGKILL to cometbft only (``loconet start`` stops the app too), restart
    sigstop       SIGSTOP of the group for 2-6 s, then SIGCONT (a frozen machine)
    restart       SIGTERM and start again (an operator's restart)

After each: the other nodes kept making blocks, and the victim catches up with them (the time
it takes is the catch-up figure). During the storm a validator joins (a new node, then
``create-validator``, then ``tx settlement set-key``: no key, no seat) and one unbonds part of its
stake.

With ``--providers P`` (P > 0) the network also runs a training job: P honest provider workers
(``loconet provider run``, each following two of the validators' RPCs) register, and the
built-in job (``loconet testnet up``'s) runs through the storm, with one more perturbation kind:

    kill9-worker  SIGKILL to a worker's process group in the middle of a round (while it
                  trains or verifies, when the storm catches it at it), restart it 1-4 s later

At the end, with the load stopped:

- every node has the same app hash at the same height (divergence = 0);
- every tx that got a hash back from CheckTx is in every node's block store (lost tx = 0);
- the recipient's balance equals the sum of the committed transfers (read from the blocks);
- with workers: rounds were finalized; no honest participant was judged ``fraud`` or
  ``rejected`` and no valid or invalid vote an honest verifier opened was slashed (a worker
  killed across a deadline may miss that duty: a missed commit, reveal or vote is counted, with
  its slash, and so is an unavailable vote on a provider whose worker was down, which costs
  what silence costs; an honest provider ``rejected`` or convicted only by unavailable votes,
  its worker down through the deciding panel's window, is listed apart: that is the rule for a
  provider that does not serve what it revealed, which a crash cannot be told from).

``run_storm`` is also what tests/testnet/test_chaos.py runs with a handful of perturbations.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import platform
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from abci_app.codec.tx import build_tx
from abci_app.pb import bank_pb2, tx_pb2
from node.client.keys import Keyring
from node.client.rpc import Client, RpcError, TxRejected
from node.local import manifest
from node.local import testnet_market as tm
from node.local.manifest import NodeInfo, load, nodes_of, save
from node.local.testnet import (
    CHAIN_ID,
    add_node,
    create,
    is_running,
    pid_of,
    start_node,
    stop_node,
    wait_producing,
)
from node.ports import find_free_base, random_bases

ROOT = Path(__file__).resolve().parents[1]


KINDS = ("kill9-group", "kill9-app", "kill9-comet", "sigstop", "restart")
WORKER_KIND = "kill9-worker"
WRONG_SEQUENCE = re.compile(r"expected (\d+), got (\d+)")


@dataclass
class StormConfig:
    perturbations: int = 100
    seed: int = 0
    senders: int = 3
    validators: int = 4
    join: bool = True  # a validator joins a third of the way in
    unbond: bool = True  # one unbonds part of its stake two thirds of the way in
    base_port: int = 0  # 0: a free range
    catch_up_timeout: float = 90.0
    providers: int = 0  # > 0: honest workers run the built-in job, and kill9-worker joins KINDS
    rounds: int = 1000  # the job's rounds (more than the storm lasts: it is never completed)


@dataclass
class StormResult:
    perturbations: dict[str, int] = field(default_factory=dict)
    catch_up_s: list[float] = field(default_factory=list)
    worker_back_s: list[float] = field(default_factory=list)  # kill -> serving again
    accepted: int = 0
    committed: int = 0
    lost: list[str] = field(default_factory=list)
    divergent: dict[str, str] = field(default_factory=dict)
    balance_ok: bool = False
    final_height: int = 0
    seconds: float = 0.0
    joined: str = ""
    unbonded: bool = False
    sender_errors: list[str] = field(default_factory=list)
    resent: int = 0
    job: dict[str, Any] = field(default_factory=dict)  # with workers: round_stats(...)
    workers_caught_busy: int = 0

    def summary(self) -> dict[str, Any]:
        cu = sorted(self.catch_up_s)
        wb = sorted(self.worker_back_s)
        job = {f"job_{k}": v for k, v in self.job.items()}
        return {
            "perturbations": sum(self.perturbations.values()),
            "by_kind": dict(sorted(self.perturbations.items())),
            "catch_up_p50_s": round(statistics.median(cu), 2) if cu else None,
            "catch_up_max_s": round(max(cu), 2) if cu else None,
            "accepted_tx": self.accepted,
            "committed_tx": self.committed,
            "lost_tx": len(self.lost),
            "divergence": len(self.divergent),
            "balance_ok": self.balance_ok,
            "final_height": self.final_height,
            "validator_joined": self.joined,
            "unbonded": self.unbonded,
            "seconds": round(self.seconds, 1),
            "txs_resent_after_a_lost_mempool": self.resent,
            "cometbft_outlived_its_app": STATS["comet_outlived_app"],
            **(
                {
                    "worker_back_p50_s": round(statistics.median(wb), 2),
                    "worker_back_max_s": round(wb[-1], 2),
                }
                if wb
                else {}
            ),
            **job,
        }


def _send(to: bytes, amount: int) -> Any:
    return tx_pb2.Msg(send=bank_pb2.MsgSend(to_address=to, amount=amount))


class Sender(threading.Thread):
    """Steady load from one account: distinct amounts, own sequence, any node that is up.

    A client that submits in order must not lose its later txs silently: CometBFT's mempool is
    not persistent, so a tx CheckTx accepted on a node that is killed before gossiping it is
    gone, and every later tx of the account then fails CheckTx with a sequence gap. The sender
    keeps the signed bytes of each sequence; when a node says it expects an earlier sequence than
    ours, it re-sends the identical txs from there (same bytes, same hash: a node that still has
    one answers "already in cache", which is fine)."""

    def __init__(
        self,
        idx: int,
        key: Any,
        to: bytes,
        nodes: list[NodeInfo],
        down: set[str],
        rng: random.Random,
    ) -> None:
        super().__init__(daemon=True, name=f"sender{idx}")
        self.idx, self.key, self.to, self.nodes, self.down, self.rng = (
            idx,
            key,
            to,
            nodes,
            down,
            rng,
        )
        self.halt = threading.Event()
        self.sent: dict[str, int] = {}  # tx hash -> amount, every tx we signed and sent
        self.accepted: list[str] = []  # hashes CheckTx accepted (the RPC gave the hash back)
        self.errors: list[str] = []
        self.seq: int | None = None
        self.n = 0
        self.signed: dict[int, bytes] = {}  # sequence -> the tx last signed with it
        self.resent = 0

    def _gateway(self) -> NodeInfo | None:
        up = [n for n in self.nodes if n.name not in self.down]
        return self.rng.choice(up) if up else None

    def run(self) -> None:
        while not self.halt.is_set():
            gw = self._gateway()
            if gw is None:
                time.sleep(0.2)
                continue
            try:
                with Client(gw.rpc_url, timeout=5) as c:
                    if self.seq is None:
                        self.seq = json.loads(c.abci_query(f"/account/{self.key.address}").value)[
                            "sequence"
                        ]
                    self.n += 1
                    amount = 1_000_000 * (self.idx + 1) + self.n  # distinct per tx
                    raw = build_tx(
                        self.key.signer,
                        chain_id=CHAIN_ID,
                        msgs=[_send(self.to, amount)],
                        sequence=self.seq,
                        fee=10_000,  # above the default minimum fee (~2,500 uloco)
                    )
                    h = hashlib.sha256(raw).hexdigest().upper()
                    self.sent[h] = amount
                    self.signed[self.seq] = raw
                    c.broadcast_tx_sync(raw)
                    self.accepted.append(h)
                    self.seq += 1
            except TxRejected as e:
                m = WRONG_SEQUENCE.search(e.log)
                if e.code == 6 and m:
                    expected = int(m.group(1))
                    if expected > (self.seq or 0):
                        self.seq = expected  # an earlier tx whose answer was lost did land
                    elif expected < (self.seq or 0):
                        # txs lost with a crashed mempool, or a lagging node
                        self._resend(gw, expected)
                else:
                    self.errors.append(f"{gw.name}: {e}")
                time.sleep(0.05)
            except (RpcError, OSError):
                time.sleep(0.2)  # node down; the tx may or may not have landed: the sequence tells
            time.sleep(0.02)

    def _resend(self, gw: NodeInfo, start: int) -> None:
        """Re-send our signed txs from sequence ``start`` up to the next one, in order, to
        ``gw``."""
        try:
            with Client(gw.rpc_url, timeout=5) as c:
                for seq in range(start, self.seq or 0):
                    raw = self.signed.get(seq)
                    if raw is None:
                        return
                    try:
                        c.broadcast_tx_sync(raw)
                        self.resent += 1
                    except TxRejected as e:
                        m = WRONG_SEQUENCE.search(e.log)
                        if not (e.code == 6 and m and int(m.group(1)) > seq):
                            return  # not a duplicate of something the node already has
                    except RpcError as e:
                        if (
                            "already" not in str(e).lower()
                        ):  # "tx already exists in cache": it is there
                            return
        except (RpcError, OSError):
            pass


STATS = {"comet_outlived_app": 0}  # kill9-app cases where cometbft was still up 15 s later


def _live(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _children(pid: int) -> list[int]:
    try:
        out = subprocess.run(
            ["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False
        ).stdout
    except FileNotFoundError:
        return []
    return [int(p) for p in out.split()]


def _height(n: NodeInfo) -> int:
    with Client(n.rpc_url, timeout=3) as c:
        return c.latest_height()


def _wait(what: str, fn: Any, timeout: float, every: float = 0.3) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            v = fn()
        except (RpcError, OSError):
            v = None
        if v:
            return v
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


def _max_height(nodes: list[NodeInfo], skip: str = "") -> int:
    hs = []
    for n in nodes:
        if n.name == skip:
            continue
        try:
            hs.append(_height(n))
        except (RpcError, OSError):
            pass
    return max(hs) if hs else 0


def _caught_up(n: NodeInfo, target: int) -> bool:
    with Client(n.rpc_url, timeout=3) as c:
        si = c.status()["sync_info"]
    return int(si["latest_block_height"]) >= target and not si["catching_up"]


def perturb(n: NodeInfo, kind: str, rng: random.Random) -> None:
    pid = pid_of(n)
    if kind == "kill9-group":
        stop_node(n, kill=True)
        time.sleep(rng.uniform(0.0, 1.0))
        start_node(n)
    elif kind == "kill9-app":
        if pid:
            comet = _children(pid)
            os.kill(pid, signal.SIGKILL)
            try:  # cometbft loses its ABCI connections and exits by itself
                _wait(
                    "cometbft to exit after its app died",
                    lambda: not any(_live(c) for c in comet),
                    15,
                )
            except TimeoutError:
                STATS["comet_outlived_app"] += 1
            stop_node(n, kill=True)  # whatever is left of the group (an orphaned cometbft)
        start_node(n)
    elif kind == "kill9-comet":
        if pid:
            for c in _children(pid):
                os.kill(c, signal.SIGKILL)
            _wait(
                "loconet start to stop after cometbft died", lambda: not is_running(n), timeout=20
            )
        stop_node(n, kill=True)
        start_node(n)
    elif kind == "sigstop":
        if pid:
            os.killpg(pid, signal.SIGSTOP)
            time.sleep(rng.uniform(2.0, 6.0))
            os.killpg(pid, signal.SIGCONT)
    elif kind == "restart":
        stop_node(n)
        start_node(n)
    else:
        raise ValueError(kind)


def _worker_busy(w: tm.WorkerInfo, seen: int) -> bool:
    """The worker logged, after byte ``seen`` of its log, that it started training or verifying."""
    p = w.path / "worker.log"
    try:
        with p.open("rb") as f:
            f.seek(seen)
            tail = f.read()
    except OSError:
        return False
    return b": training" in tail or b"verif" in tail


def perturb_worker(
    d: Path, w: tm.WorkerInfo, rng: random.Random, wait_busy: float
) -> tuple[bool, float]:
    """SIGKILL of a worker's process group while it trains or verifies (waiting up to
    ``wait_busy`` s for it to start either, then at whatever it is doing), then a restart 1-4 s
    later, as `loconet testnet start providerN` does. Returns (caught busy, monotonic time of
    the kill)."""
    log = w.path / "worker.log"
    seen = log.stat().st_size if log.exists() else 0
    deadline = time.monotonic() + wait_busy
    while time.monotonic() < deadline and not _worker_busy(w, seen):
        time.sleep(0.1)
    busy = _worker_busy(w, seen)
    time.sleep(rng.uniform(0.0, 1.0))  # somewhere inside the work, not at its first line
    killed = time.monotonic()
    tm.stop_worker(w, kill=True)
    time.sleep(rng.uniform(1.0, 4.0))
    tm.start_worker(d, w)
    return busy, killed


def round_stats(rounds: list[dict[str, Any]], honest: set[str]) -> dict[str, Any]:
    """Outcomes of the finalized rounds of a job whose providers are all honest: what a crash may
    cost a worker (a missed duty, its slash) and what it must never (a fraud or rejected verdict,
    a slash of a vote an honest verifier opened)."""
    done = [r for r in rounds if r["phase"] == "finalized"]
    outcomes: dict[str, int] = {}
    wrong: list[str] = []
    missed_slash = 0
    silent_votes = 0
    unavailable_votes = 0
    unavailable_losses: list[str] = []
    for r in done:
        for p in r["participants"]:
            outcomes[p["outcome"]] = outcomes.get(p["outcome"], 0) + 1
            if p["address"] in honest and p["outcome"] in ("fraud", "rejected"):
                if _refuted_only_by_unavailability(p):
                    # its worker was down through the deciding panel's window (a kill here): the
                    # rule for a provider that does not serve what it revealed, not a wrong verdict
                    unavailable_losses.append(f"round {r['round']}: {p['address']} {p['outcome']}")
                else:
                    wrong.append(f"round {r['round']}: {p['address']} {p['outcome']}")
            if p["outcome"].startswith("missed_"):
                missed_slash += p["slashed"]
            for v in (p.get("challenge") or {}).get("verifiers", []):
                if v["address"] not in honest:
                    continue
                if v.get("unavailable"):  # could not fetch (e.g. the provider's worker was
                    # down): what silence costs, at most (docs/threat-model.md *Unavailable votes*)
                    unavailable_votes += 1
                    missed_slash += v["slashed"]
                elif v["voted"] and v["slashed"]:
                    wrong.append(
                        f"round {r['round']}: honest verifier {v['address']} slashed for an "
                        f"opened vote on {p['address']}"
                    )
                elif not v["voted"]:
                    silent_votes += 1
                    missed_slash += v["slashed"]
    return {
        "rounds_finalized": len(done),
        "outcomes": dict(sorted(outcomes.items())),
        "silent_verifier_seats": silent_votes,
        "unavailable_votes": unavailable_votes,
        "slashed_for_missed_duties_uloco": missed_slash,
        "lost_to_unavailability": unavailable_losses,
        "wrong_verdicts": wrong,
    }


def _refuted_only_by_unavailability(p: dict[str, Any]) -> bool:
    """No vote of the panel that decided ``p`` (the last one seated) said invalid after
    re-executing: each was valid, unavailable or silent."""
    vs = (p.get("challenge") or {}).get("verifiers", [])
    last = max((v["panel"] for v in vs), default=0)
    return any(v["voted"] and v.get("unavailable") for v in vs if v["panel"] == last) and all(
        v["valid"] or v.get("unavailable") or not v["voted"] for v in vs if v["panel"] == last
    )


def _job_rounds(n: NodeInfo, job_id: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    with Client(n.rpc_url, timeout=10) as c:
        while True:
            page = json.loads(c.abci_query(f"/rounds/{job_id}?from={len(out)}&limit=100").value)[
                "rounds"
            ]
            out += page
            if len(page) < 100:
                return out


def stop_all(d: Path) -> None:
    """Stop every worker and node of the storm's network (what `loconet testnet down` does)."""
    if not (d / "testnet.json").exists():
        return
    m = load(d)
    for w in manifest.workers_of(m):
        tm.stop_worker(w, kill=True)
    for n in nodes_of(m):
        stop_node(n)


def _start_job(d: Path, cfg: StormConfig, nodes: list[NodeInfo]) -> tuple[int, list[tm.WorkerInfo]]:
    """What `loconet testnet up --providers P` does: register P honest providers, hand them the
    built-in job's blobs, start their workers, create the job once they all serve."""

    m = load(d)
    workers = tm.plan_workers(d, m, ["honest"] * cfg.providers)
    rpc = nodes[0].rpc_url
    tm.register_providers(d, rpc, workers)
    m["workers"] = [asdict(w) for w in workers]
    save(d, m)
    job, dataset, model = tm.builtin_job(cfg.rounds, workers)
    tm.seed_stores(workers, [dataset, model])
    for w in workers:
        tm.start_worker(d, w)
    tm.wait_serving(workers, timeout=4 * cfg.catch_up_timeout)
    return tm.create_job(d, rpc, "validator0", job), workers


def _block_txs(n: NodeInfo, top: int) -> dict[str, int]:
    """tx hash -> result code, for every tx in n's block store up to ``top``."""
    out: dict[str, int] = {}
    with Client(n.rpc_url, timeout=10) as c:
        for h in range(1, top + 1):
            txs = c.block(h)["block"]["data"]["txs"] or []
            if not txs:
                continue
            results = c.call("block_results", height=str(h))["txs_results"] or []
            for t, r in zip(txs, results, strict=True):
                out[hashlib.sha256(base64.b64decode(t)).hexdigest().upper()] = int(r.get("code", 0))
    return out


def _cli(*args: str) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "node.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(ROOT),
        check=False,
    )
    if r.returncode != 0:
        raise RuntimeError(f"loconet {' '.join(args)}: {r.stderr.strip() or r.stdout.strip()}")
    return r.stdout


@dataclass
class Storm:
    """A running storm: the network, the nodes that take perturbations (``pool``: the genesis
    validators, then the one that joined), the nodes down right now (the senders avoid them),
    the workers, and the result being filled in."""

    cfg: StormConfig
    d: Path
    nodes: list[NodeInfo]
    pool: list[NodeInfo]
    down: set[str]
    res: StormResult
    rng: random.Random
    workers: list[tm.WorkerInfo]
    job_id: int
    log: Any


def _boot(cfg: StormConfig, d: Path) -> list[NodeInfo]:
    """The network on a free port range, every node started and producing blocks."""
    base = cfg.base_port or find_free_base(
        [b + 56 for b in random_bases(20_000, 45_000 - 700, 100)],
        [100 * i + k for i in range(7) for k in (0, 1, 2, 4)],
    )
    create(d, cfg.validators, cfg.senders + 2, base, {}, providers=cfg.providers)
    nodes = nodes_of(load(d))
    for n in nodes:
        start_node(n)
    wait_producing(nodes, progress=False)
    return nodes


def _join_validator(st: Storm, i: int) -> None:
    """A new node syncs, its operator creates a validator and registers its settlement key,
    and it enters the validator set (then takes perturbations too)."""
    cfg, d, nodes = st.cfg, st.d, st.nodes
    new = add_node(d)
    start_node(new)
    _wait(
        "the new node in sync",
        lambda: _height(new) >= _max_height(st.pool) - 1,
        2 * cfg.catch_up_timeout,
    )
    _cli(
        "tx",
        "staking",
        "create-validator",
        "--from",
        f"account{cfg.senders}",
        "--validator-home",
        new.home,
        "--self-bond",
        "100000loco",
        "--moniker",
        new.name,
        "--home",
        str(d),
        "--node",
        nodes[0].rpc_url,
    )
    # no settlement key, no seat (abci_app/settlement README): register the new
    # node's key so its stake enters the set
    _cli(
        "tx",
        "settlement",
        "set-key",
        "--validator-home",
        new.home,
        "--from",
        f"account{cfg.senders}",
        "--home",
        str(d),
        "--node",
        nodes[0].rpc_url,
    )
    _wait(
        f"{new.name} in the validator set",
        lambda: any(
            v["address"] == new.validator_address for v in Client(nodes[0].rpc_url).validators()
        ),
        cfg.catch_up_timeout,
    )
    st.res.joined = new.name
    st.pool.append(new)
    st.log(f"[{i}] {new.name} joined as a validator")


def _unbond(st: Storm, i: int) -> None:
    """The second validator's operator unbonds part of its stake."""
    nodes = st.nodes
    _cli(
        "tx",
        "staking",
        "unbond",
        nodes[1].validator_address,
        "1000loco",
        "--from",
        nodes[1].operator_key,
        "--home",
        str(st.d),
        "--node",
        nodes[0].rpc_url,
    )
    st.res.unbonded = True
    st.log(f"[{i}] {nodes[1].name}'s operator unbonded 1000 LOCO")


def _kill_worker(st: Storm, i: int, kind: str) -> None:
    """A worker killed (busy when it can be caught so), timed until it serves again."""
    cfg, res = st.cfg, st.res
    w = st.rng.choice(st.workers)
    busy, killed = perturb_worker(st.d, w, st.rng, wait_busy=cfg.catch_up_timeout / 2)
    tm.wait_serving([w], timeout=2 * cfg.catch_up_timeout)
    # its own figure: a worker's restart is not a node's catch-up
    res.worker_back_s.append(time.monotonic() - killed)
    res.perturbations[kind] = res.perturbations.get(kind, 0) + 1
    res.workers_caught_busy += busy
    st.log(
        f"[{i}] {kind:12s} {w.name} ({'busy' if busy else 'idle'}): serving again "
        f"{res.worker_back_s[-1]:.1f}s after the kill"
    )


def _perturb_node(st: Storm, i: int, kind: str) -> None:
    """A node perturbed: the others go on without it, and it catches up (timed)."""
    cfg, res = st.cfg, st.res
    victim = st.rng.choice(st.pool)
    others = [n for n in st.pool if n is not victim]
    h_before = _max_height(others)
    st.down.add(victim.name)
    t0 = time.monotonic()
    st.log(f"[{i}] {kind} {victim.name} ...")
    perturb(victim, kind, st.rng)
    # the others went on without it (more than 2/3 of the power is still up)
    _wait(
        "blocks while a node was down",
        lambda: _max_height(others) > h_before,
        cfg.catch_up_timeout,
    )
    target = _max_height(others)
    _wait(
        f"{victim.name} to catch up to {target}",
        lambda: _caught_up(victim, target),
        cfg.catch_up_timeout,
    )
    res.catch_up_s.append(time.monotonic() - t0)
    st.down.discard(victim.name)
    res.perturbations[kind] = res.perturbations.get(kind, 0) + 1
    st.log(
        f"[{i}] {kind:12s} {victim.name}: caught up in {res.catch_up_s[-1]:.1f}s (height {target})"
    )


def _perturbations(st: Storm) -> None:
    """The storm itself: the shuffled perturbations, the join a third of the way in and the
    unbond two thirds in; with workers, until the job finalized a round."""
    cfg = st.cfg
    menu = (*KINDS, WORKER_KIND) if st.workers else KINDS
    kinds = [menu[i % len(menu)] for i in range(cfg.perturbations)]
    st.rng.shuffle(kinds)
    join_at = cfg.perturbations // 3 if cfg.join else -1
    unbond_at = 2 * cfg.perturbations // 3 if cfg.unbond else -1
    for i, kind in enumerate(kinds):
        if i == join_at:
            _join_validator(st, i)
        if i == unbond_at:
            _unbond(st, i)
        if kind == WORKER_KIND:
            _kill_worker(st, i, kind)
        else:
            _perturb_node(st, i, kind)
    if st.workers:  # a short storm may end before round 0: let the job finalize one
        _wait(
            "a finalized round of the job",
            lambda: any(r["phase"] == "finalized" for r in _job_rounds(st.nodes[0], st.job_id)),
            6 * cfg.catch_up_timeout,
            every=2.0,
        )


def _settle(st: Storm, senders: list[Sender], recipient_address: str, bal0: int) -> None:
    """After the storm: every node at one height, the same app hash; every accepted tx in
    every node's blocks; the recipient's balance up by exactly the committed sends."""
    res, pool, cfg = st.res, st.pool, st.cfg
    res.sender_errors = [e for s in senders for e in s.errors]
    res.resent = sum(s.resent for s in senders)
    # let the mempools drain into blocks, then compare everything at one height
    time.sleep(3.0)
    top = _max_height(pool)
    for n in pool:
        _wait(f"{n.name} at {top}", lambda n=n: _height(n) >= top, cfg.catch_up_timeout)
    hashes = {}
    for n in pool:
        with Client(n.rpc_url) as c:
            hashes[n.name] = c.app_hash_at(top).hex()
    ref = hashes[pool[0].name]
    res.divergent = {k: v for k, v in hashes.items() if v != ref}
    accepted = sorted({h for s in senders for h in s.accepted})
    sent = {h: a for s in senders for h, a in s.sent.items()}
    res.accepted = len(accepted)
    stores = {n.name: _block_txs(n, top) for n in pool}
    for h in accepted:
        if any(h not in blocks for blocks in stores.values()):
            res.lost.append(h)
    committed = {h: a for h, a in sent.items() if stores[pool[0].name].get(h) == 0}
    res.committed = len(committed)
    with Client(pool[0].rpc_url) as c:
        bal = json.loads(c.abci_query(f"/account/{recipient_address}", height=top).value)["balance"]
    res.balance_ok = bal == bal0 + sum(committed.values())
    res.final_height = top
    if st.workers:
        res.job = round_stats(_job_rounds(pool[0], st.job_id), {w.address for w in st.workers})
        res.job["workers_killed_busy"] = res.workers_caught_busy


def run_storm(cfg: StormConfig, d: Path, log: Any = print) -> StormResult:
    rng = random.Random(cfg.seed)
    nodes = _boot(cfg, d)
    res = StormResult()
    t_start = time.monotonic()
    job_id, workers = _start_job(d, cfg, nodes) if cfg.providers else (0, [])
    if workers:
        log(f"job {job_id} runs on {len(workers)} workers")
    kr = Keyring(d)
    recipient = kr.get(f"account{cfg.senders + 1}")
    with Client(nodes[0].rpc_url) as c:
        bal0 = json.loads(c.abci_query(f"/account/{recipient.address}").value)["balance"]
    st = Storm(cfg, d, nodes, list(nodes), set(), res, rng, workers, job_id, log)
    senders = [
        Sender(
            i,
            kr.get(f"account{i}"),
            recipient.address_bytes,
            nodes,
            st.down,
            random.Random(cfg.seed * 100 + i),
        )
        for i in range(cfg.senders)
    ]
    for s in senders:
        s.start()
    try:
        _perturbations(st)
    finally:
        for s in senders:
            s.halt.set()
        for s in senders:
            s.join(30)
    _settle(st, senders, recipient.address, bal0)
    res.seconds = time.monotonic() - t_start
    return res


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--perturbations", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--senders", type=int, default=3)
    ap.add_argument("--no-join", action="store_true")
    ap.add_argument("--no-unbond", action="store_true")
    ap.add_argument(
        "--providers",
        type=int,
        default=0,
        help="run the built-in training job on this many honest workers, and kill them too",
    )
    ap.add_argument(
        "--record", action="store_true", help="append the figures to benchmarks/RESULTS.md"
    )
    ap.add_argument(
        "--keep",
        metavar="DIR",
        help="build the network in DIR and leave it there (logs for a post-mortem)",
    )
    args = ap.parse_args()
    cfg = StormConfig(
        perturbations=args.perturbations,
        seed=args.seed,
        senders=args.senders,
        join=not args.no_join,
        unbond=not args.no_unbond,
        providers=args.providers,
    )

    def _terminated(signum: int, _frame: Any) -> None:  # kill/timeout: stop the network too
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _terminated)
    with tempfile.TemporaryDirectory(prefix="loconet-chaos-") as tmp:
        d = Path(args.keep) if args.keep else Path(tmp) / "net"
        try:
            res = run_storm(cfg, d)
        finally:
            stop_all(d)
    s = res.summary()
    print(json.dumps(s, indent=2))
    ok = not res.lost and not res.divergent and res.balance_ok
    if cfg.providers:
        ok = ok and res.job["rounds_finalized"] > 0 and not res.job["wrong_verdicts"]
    if args.record:
        cmd = "python benchmarks/chaos.py " + " ".join(sys.argv[1:])
        machine = (
            f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
        )
        with open(ROOT / "benchmarks" / "RESULTS.md", "a") as f:
            f.write(f"\n### Crash storm ({time.strftime('%Y-%m-%d')})\n\n`{cmd}` on {machine}\n\n")
            f.write("| figure | value |\n|---|---|\n")
            f.writelines(f"| {k} | {v} |\n" for k, v in s.items())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
