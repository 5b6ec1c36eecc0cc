"""The provider/verifier worker behind ``loconet provider run``.

One loop, woken by every new block (node/worker/follow.py), reads the active jobs' open rounds
from the chain and does what the round's phase asks of this provider::

    commit   drawn, no commitment yet  -> fetch base model + dataset by hash, train H steps on the
                                          assigned shard (background thread), store payload and
                                          trace states as blobs, MsgSubmitUpdate (roots bound to us)
    reveal   challenged, not revealed  -> MsgRevealSegment (states served from our blob store; the
                                          ends as leaf hashes only)
    verdict  assigned verifier         -> fetch the revealed states, re-execute k steps, MsgVerdict
                                          (tolerance mode: a blind vote on the probes reached)
    vote_reveal challenged (tolerance) -> MsgOpenEnd: the ends and their committed probes
             assigned verifier         -> MsgRevealVote (tolerance mode: once the ends are open,
                                          judged against the re-executed states)
    attest   our update accepted       -> fetch every accepted update, aggregate, store the model,
                                          MsgAttestModel
    final    -                         -> temp blobs of the round released, attested model pinned;
                                          the store's gc deletes temp blobs released more than
                                          its margin ago (also every GC_EVERY_S)

An exact-mode job pinned to a stack other than the worker's (ml.same_stack: torch version,
device class, dtype, TF32 on CUDA) is not re-executable bitwise here: the worker declines the
rounds it is drawn in (MsgDeclineRound, before committing: no slash) and casts no vote for it
(a verifier cannot decline), logging it once per job.

Failures are local: a duty that fails (peer blob bad or missing, node down, tx refused) is
logged and retried with backoff on a later block; nothing a peer or the chain sends can stop the
loop. Progress (node/worker/progress.py) makes ``kill -9`` + restart resume without redoing or
double-sending; the chain itself refuses a second commitment (ErrDuplicate).

Behaviours (``--behaviour``, for tests and demos only): ``random-root`` commits to random
bytes without training, ``withhold`` never reveals, ``lazy-verifier`` votes VALID without
re-executing, ``poison`` trains honestly but scales its update by POISON_SCALE.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from abci_app.codec.address import from_bech32
from abci_app.jobs.errors import ErrCannotDecline, ErrDuplicate, ErrWrongPhase
from abci_app.jobs.incentives import (
    UNAVAILABLE_EVIDENCE,
    compute_evidence,
    compute_hidden_entries,
    compute_masked_entries,
    mask_trace,
)
from abci_app.jobs.phases import PHASE_END_FIELD_BY_NAME
from abci_app.merkle import bound_update_leaves, merkle_root
from node.client.market_msgs import (
    build_attest,
    build_bound_submit,
    build_decline_round,
    build_open_end,
    build_reveal_from_trace,
    build_reveal_vote,
    build_verdict,
    send_tx,
)
from node.client.rpc import Client, NodeUnreachable, RpcError, TxRejected
from node.worker.duties import DutyQueue
from node.worker.follow import ChainFollower, Nodes
from node.worker.progress import Progress

log = logging.getLogger("loconet.worker")

BEHAVIOURS = ("honest", "random-root", "withhold", "lazy-verifier", "poison")
POISON_SCALE = 10.0
# MsgOpenEnd per tx (each ~1 KB at most: a 32-integer probe, its proof, a URL): well inside a tx
OPEN_ENDS_PER_TX = 32
# phase -> (verifier panel, whether votes are opened in it): MsgVerdict carries a vote's hash,
# MsgRevealVote opens it in the next window (abci_app/jobs/rounds.py)
PANEL_OF = {
    "verdict": (0, False),
    "vote_reveal": (0, True),
    "appeal": (1, False),
    "appeal_reveal": (1, True),
    "final": (2, False),
    "final_reveal": (2, True),
}
# a fetch starts no further location past this (its first locations, the ones the chain names
# for the blob, are always tried first; a peer that accepts and never answers costs 30 s)
FETCH_GIVE_UP_S = 120.0
# a verifier votes unavailable when the revealed states still cannot be fetched this many blocks
# before the end of the window its panel commits in (the vote must still land in the window);
# until then it keeps trying: a provider whose worker crashed and restarts in the window is verified
VOTE_UNAVAILABLE_MARGIN_BLOCKS = 2
# a duty whose window ends within this many blocks is tried again at least every DUE_RETRY_S,
# whatever its backoff: a retry scheduled past a short window turned one transient error into a
# missed reveal (slashed as fraud) or a silent verifier (slashed for liveness)
DUE_BLOCKS = 4
DUE_RETRY_S = 0.5
# phase name -> the round field holding the height it ends: the chain's one phase table
PHASE_END = PHASE_END_FIELD_BY_NAME
# the blob store's gc (temp blobs past their round's finalization + temp_margin_s, stale temp
# files, eviction down to the quota) runs when a round is finalized and at most this often
# besides, so the last rounds' trace states go too once no round finalizes any more
GC_EVERY_S = 60.0
# a drawn round whose inputs (base model, dataset) failed to fetch this many times is declined
# (while the commit window is open: declining is free, a missed commit is slashed)
INPUT_TRIES = 3
BLOCK_TIME_SPAN = 20  # blocks the worker's block-time estimate spans
# stats.json is written at every finalize and at least this often besides (a job's last round is
# never seen finalized by a worker that follows active jobs only)
STATS_EVERY_S = 15.0
DUPLICATE = (ErrDuplicate.codespace, ErrDuplicate.code)  # the chain already has this duty done
WRONG_PHASE = (ErrWrongPhase.codespace, ErrWrongPhase.code)  # too late (or too early) for it
CANNOT_DECLINE = (ErrCannotDecline.codespace, ErrCannotDecline.code)  # committed or declined


class InputsUnavailable(Exception):
    """A round's base model or dataset could not be fetched (or not with its hash)."""


class WorkerError(Exception):
    """The worker cannot start (not registered, hardware absent, bad options); names the fix."""


@dataclass(kw_only=True)
class WorkerConfig:
    home: Path
    key: str
    nodes: list[str]
    data_dir: Path
    listen: str | None = (
        None  # HOST:PORT of the blob server (default: the registered endpoint's port)
    )
    device: str = "auto"
    procs: int = 1  # > 1: train each round on a data-parallel island of this many processes
    pipeline: int = 1  # > 1: each island replica a pipeline of this many stages (processes)
    microbatches: int = 0  # per replica and step on a pipeline (0: ml.default_microbatches)
    behaviour: str = "honest"
    quota_bytes: int = 20 << 30
    jobs: frozenset[int] = frozenset()  # only these jobs (empty: all)
    fee: int | None = None  # at least this per tx; the chain's exact minimum when higher
    poll_s: float = 2.0
    max_blob_bytes: int = 1 << 31
    check_hardware: bool = True
    metrics_listen: str | None = None  # HOST:PORT for the worker's Prometheus /metrics (None: off)
    # threads for the slow duties beside training (re-execution, aggregation: node/worker/duties.py)
    duty_threads: int = 1


def _record_training(steps: int, seconds: float, loss: float, job: int = 0, rn: int = 0) -> None:
    """Prometheus figures of one round's training: the round's mean step time (observed once per
    step, so the histogram's count is the number of inner steps), its last loss and, by job, the
    round, its steps and wall time."""
    from node.metrics import worker_metrics

    m = worker_metrics()
    for _ in range(max(steps, 0)):
        m.step(loss, seconds / max(steps, 1), job)
    m.round_trained(job, rn, steps, seconds)


def _one_torch_thread() -> None:
    """A duty thread re-executes with one torch thread (bitwise as trained, trainer/README), so a
    verification takes one core beside the training thread's, never all of them."""
    import torch

    torch.set_num_threads(1)


def unavailable_vote(why: str) -> tuple[bool, int, list[bytes], str]:
    """``judge``'s answer when the revealed states cannot be fetched: invalid, quality 0 and
    nothing reached (a vote that re-executed always names one state per opened segment), sent
    as MsgRevealVote.unavailable."""
    return False, 0, [], why


def is_unavailable_vote(vote: tuple[bool, int, list[bytes], str]) -> bool:
    return not vote[0] and not vote[2]


@dataclass
class _Backoff:
    failures: int = 0
    next_try: float = 0.0
    last_try: float = 0.0


def phase_end(r: dict[str, Any]) -> int:
    """The last height of the round's current phase (0: a phase without an end, or unknown)."""
    return int(r.get("windows", {}).get(PHASE_END.get(r.get("phase", ""), ""), 0) or 0)


def fresh_of(ch: dict[str, Any], panel: int) -> list[int]:
    """The fresh segments drawn for ``panel`` (1 appeal, 2 final) of a challenge (/round JSON)."""
    key = {1: "appeal_segments", 2: "final_segments"}.get(panel)
    return [int(x) for x in (ch.get(key) or [])] if key else []


def fresh_unopened(ch: dict[str, Any], panel: int) -> list[int]:
    """The fresh segments of ``panel`` not opened yet (what the provider must open, and what
    the panel's verifiers wait for before they judge)."""
    opened = {int(o["segment"]) for o in ch.get("reveals") or [] if int(o.get("panel", 0)) == panel}
    return [s for s in fresh_of(ch, panel) if s not in opened]


def panel_openings(ch: dict[str, Any], panel: int) -> list[dict[str, Any]]:
    """The openings ``panel`` judges, in segment order: its own fresh segments and every earlier
    panel's (abci_app.jobs.incentives.compute_panel_reveals)."""
    return sorted(
        (o for o in ch.get("reveals") or [] if int(o.get("panel", 0)) <= panel),
        key=lambda o: int(o["segment"]),
    )


def is_due(r: dict[str, Any], height: int) -> bool:
    """The round's current phase ends within DUE_BLOCKS blocks of ``height``."""
    end = phase_end(r)
    return end > 0 and height >= end - DUE_BLOCKS


class Traffic:
    """Bytes this worker exchanges with its node (cumulative; stats.json ``traffic``): JSON-RPC
    requests and answers as HTTP/1.1 writes them (``rpc_out``, ``rpc_in``: the loop's queries,
    tx broadcasts and the waits for their blocks) and the new-block websocket's messages
    (``ws_in``: payload bytes, frame headers not counted). Not per round: the loop polls every
    block for every job (node/worker README, "Traffic by kind")."""

    def __init__(self) -> None:
        self.rpc_out = 0
        self.rpc_in = 0
        self.ws_in = 0
        self.lock = threading.Lock()

    def add(self, what: str, n: int) -> None:
        with self.lock:
            setattr(self, what, getattr(self, what) + n)

    def to_dict(self) -> dict[str, int]:
        with self.lock:
            return {"rpc_out": self.rpc_out, "rpc_in": self.rpc_in, "ws_in": self.ws_in}


class _CountingStream(httpx.SyncByteStream):
    def __init__(self, inner: Any, count: Callable[[int], None]) -> None:
        self.inner, self.count = inner, count

    def __iter__(self) -> Any:
        for chunk in self.inner:
            self.count(len(chunk))
            yield chunk

    def close(self) -> None:
        self.inner.close()


class _CountingTransport(httpx.BaseTransport):
    """httpx transport counting the bytes of each exchange: the request (line, headers, body)
    and the answer (status line, headers, the body as it came over the wire)."""

    def __init__(self, traffic: Traffic) -> None:
        self.inner = httpx.HTTPTransport()
        self.traffic = traffic

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        out = len(b"%s %s HTTP/1.1\r\n" % (request.method.encode(), request.url.raw_path))
        out += sum(len(k) + len(v) + 4 for k, v in request.headers.raw) + 2
        out += len(request.content) if isinstance(request.stream, httpx.ByteStream) else 0
        self.traffic.add("rpc_out", out)
        resp = self.inner.handle_request(request)
        head = len(f"HTTP/1.1 {resp.status_code} {resp.reason_phrase}\r\n".encode())
        head += sum(len(k) + len(v) + 4 for k, v in resp.headers.raw) + 2
        self.traffic.add("rpc_in", head)
        resp.stream = _CountingStream(resp.stream, partial(self.traffic.add, "rpc_in"))
        return resp

    def close(self) -> None:
        self.inner.close()


class _CountingNodes(Nodes):
    """``Nodes`` whose clients count their bytes into ``traffic``."""

    def __init__(self, urls: list[str], traffic: Traffic, timeout: float = 10.0) -> None:
        super().__init__(urls, timeout)
        self.traffic = traffic

    def client(self) -> Client:
        if self._client is None:
            self._client = Client(
                self.url, timeout=self.timeout, transport=_CountingTransport(self.traffic)
            )
        return self._client


class _CountingFollower(ChainFollower):
    """``ChainFollower`` counting the websocket messages it reads into ``traffic.ws_in``."""

    traffic: Traffic | None = None

    def _handle(self, text: str) -> None:
        if self.traffic is not None:
            self.traffic.add("ws_in", len(text.encode()))
        super()._handle(text)


@dataclass
class Stats:
    submitted: int = 0
    revealed: int = 0
    votes: int = 0
    attested: int = 0
    failures: int = 0
    trained_s: float = 0.0
    events: dict[str, int] = field(default_factory=dict)


def _code(e: TxRejected) -> tuple[str, int]:
    return e.codespace, e.code


class ProviderWorker:
    def __init__(self, cfg: WorkerConfig) -> None:
        from node.blobs import BlobStore
        from node.client.keys import Keyring
        from node.worker import ml

        if cfg.behaviour not in BEHAVIOURS:
            raise WorkerError(
                f"unknown --behaviour {cfg.behaviour!r}: choose one of {', '.join(BEHAVIOURS)}"
            )
        self.cfg = cfg
        self.key = Keyring(cfg.home).get(cfg.key)
        self.me = self.key.address
        self.me_bytes = self.key.address_bytes
        self.traffic = Traffic()  # bytes with the node (stats.json "traffic")
        self.nodes: Nodes = _CountingNodes(cfg.nodes, self.traffic)
        cfg.data_dir.mkdir(parents=True, exist_ok=True)
        self.store = BlobStore(cfg.data_dir / "blobs", quota_bytes=cfg.quota_bytes)
        self.progress = Progress(cfg.data_dir / "progress.json")
        self.device = self._pick_device(cfg.device)
        self.stack = ml.worker_stack(self.device)  # what an exact-mode job must pin to be ours
        self._check_procs(cfg.procs, self.device, cfg.pipeline, cfg.microbatches)
        self.endpoint = ""
        self.server: Any = None
        self.follower: ChainFollower | None = None
        self.stop_event = threading.Event()
        self.stats = Stats()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="train")
        # verification and aggregation: their own thread(s), never the loop's (duties.py)
        self._duties = DutyQueue(cfg.duty_threads, on_start=_one_torch_thread)
        self._send_lock = threading.Lock()  # one tx at a time: each takes the account's sequence
        # the duties a pass collects (``tick``); None outside a pass: ``_duty`` runs at once
        self._todo: list[tuple[int, int, str, Callable[[], None], bool, bool, str | None]] | None
        self._todo = None
        self._training: tuple[tuple[int, int], Future[Any]] | None = None
        self._backoff: dict[str, _Backoff] = {}
        self._fetch_failures: dict[str, int] = {}
        # tolerance mode: (job, round, target) -> the probes judge() reached, for do_verify
        self._probes: dict[tuple[int, int, str], list[int]] = {}
        self._plans: dict[int, Any] = {}
        self._bad_jobs: set[int] = set()  # jobs not to follow at all (malformed answers)
        # jobs this worker cannot train (ml.JobPlan refused them): job -> why; it declines
        self._unfit: dict[int, str] = {}
        # per job, this worker's measured seconds per inner step (from its last round)
        self._step_s: dict[int, float] = {}
        self._heights: list[tuple[int, float]] = []  # (height, monotonic) as blocks were seen
        # (job, round) -> how many times fetching the round's inputs failed
        self._input_failures: dict[tuple[int, int], int] = {}
        self._foreign: set[int] = set()  # exact-mode jobs pinned to another stack (logged once)
        self._corpora: dict[str, Any] = {}
        self._policy: dict[int, Any] = {}
        self._cursor: dict[int, int] = {}
        self._peers: tuple[float, list[str]] = (0.0, [])
        self._last_gc = -float("inf")  # time.monotonic() of the blob store's last gc
        self._last_stats = time.monotonic()  # of the last periodic stats.json
        self._here = threading.local()  # .key: the round ("JOB/ROUND") the current thread works for
        self.timing: dict[
            str, dict[str, float]
        ] = {}  # per round: seconds and bytes by kind (stats.json)
        # blob hash -> kind, for blobs whose bytes do not say it (trace lists, datasets): what
        # this worker stored or fetched them as (the blob server's classify hook reads it too)
        self._kinds: dict[str, str] = {}

    # ------------------------------------------------------------------------- start / stop

    @staticmethod
    def _pick_device(device: str) -> str:
        import torch

        if device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cuda" and not torch.cuda.is_available():
            raise WorkerError("--device cuda: torch sees no CUDA device (use --device cpu or auto)")
        if device not in ("cpu", "cuda"):
            raise WorkerError(f"--device must be auto, cpu or cuda, not {device!r}")
        return device

    @staticmethod
    def _check_procs(procs: int, device: str, pipeline: int = 1, microbatches: int = 0) -> None:
        import torch

        if procs < 1:
            raise WorkerError(f"--procs must be at least 1, not {procs}")
        if pipeline < 1:
            raise WorkerError(f"--pipeline must be at least 1 stage, not {pipeline}")
        if microbatches < 0:
            raise WorkerError(
                f"--microbatches must be at least 1 (0: automatic), not {microbatches}"
            )
        if microbatches and pipeline == 1:
            raise WorkerError("--microbatches needs --pipeline S > 1 (the stages it flows through)")
        n = procs * pipeline
        if device == "cuda" and n > torch.cuda.device_count():
            shape = f"--procs {procs}" + (
                f" x --pipeline {pipeline} = {n} processes" if pipeline > 1 else ""
            )
            raise WorkerError(
                f"{shape} on cuda: torch sees {torch.cuda.device_count()} GPU(s) "
                "(one process per GPU: lower --procs" + (" or --pipeline)" if pipeline > 1 else ")")
            )

    def preflight(self) -> dict[str, Any]:
        """The provider must be registered and active, its hardware present; returns its record."""
        from node.worker import ml

        try:
            p = self.nodes.query_json(f"/provider/{self.me}")
        except NodeUnreachable as e:
            raise WorkerError(str(e)) from None
        except RpcError as e:
            raise WorkerError(
                f"{self.me} ({self.cfg.key}) is not a registered provider ({e}): run "
                f"`loconet tx provider register --from {self.cfg.key} ...` first"
            ) from None
        if p["status"] != "active":
            raise WorkerError(
                f"provider {self.me} is {p['status']}, not active: it would never be drawn"
            )
        if self.cfg.check_hardware:
            why = ml.check_hardware(p["hardware"])
            if why is not None:
                raise WorkerError(why)
        self.endpoint = str(p["endpoint"]).rstrip("/")
        return dict(p)

    def _listen(self) -> tuple[str, int]:
        from urllib.parse import urlsplit

        if self.cfg.listen:
            host, _, port = self.cfg.listen.rpartition(":")
            if not (port.isascii() and port.isdigit() and 0 < int(port[:6]) < 65536):
                raise WorkerError(
                    f"--listen {self.cfg.listen!r}: write HOST:PORT, e.g. 0.0.0.0:26680"
                )
            return host or "0.0.0.0", int(port)
        u = urlsplit(self.endpoint)
        host = "127.0.0.1" if u.hostname in ("127.0.0.1", "localhost") else "0.0.0.0"
        return host, u.port or 26680

    def start(self) -> None:
        from node.blobs import serve_blobs
        from trainer.determinism import set_determinism

        # training and re-execution: bitwise reproducible (trainer/README)
        set_determinism(0, threads=1)
        self.preflight()
        host, port = self._listen()
        self.server = serve_blobs(
            self.store, host, port, classify=self._classify, round_of=self._serving_round
        )
        follower = _CountingFollower(self.cfg.nodes, self._on_events)
        follower.traffic = self.traffic
        self.follower = follower.start()
        if self.cfg.metrics_listen:
            from node.metrics import worker_metrics

            try:
                # blob bytes in/out already counted there
                worker_metrics().serve(self.cfg.metrics_listen)
            except OSError as e:
                raise WorkerError(
                    f"cannot serve metrics on {self.cfg.metrics_listen}: {e.strerror}; "
                    "pick another --metrics-listen"
                ) from None
            log.info("worker metrics on http://%s/metrics", self.cfg.metrics_listen)
        log.info(
            "worker %s (%s, %s) serving blobs on %s:%d, endpoint %s, device %s, stack %s",
            self.cfg.key,
            self.me,
            self.cfg.behaviour,
            host,
            port,
            self.endpoint,
            self.device,
            self.stack,
        )

    def stop(self) -> None:
        self.stop_event.set()
        if self.follower is not None:
            self.follower.stop()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._duties.stop()
        if self.server is not None:
            self.server.stop_thread()
        self.nodes.close()

    def run(self) -> int:
        """Until ``stop_event``: on every block (or every poll_s), do the duties due."""
        self.start()
        try:
            seen = 0
            while not self.stop_event.is_set():
                assert self.follower is not None
                self.follower.wait_block(seen, self.cfg.poll_s)
                try:
                    seen = self.tick()
                except Exception as e:  # never die on the chain's or a peer's answer  # noqa: BLE001
                    self.stats.failures += 1
                    log.warning("tick failed: %s: %s", e.__class__.__name__, e)
                    time.sleep(0.5)
        finally:
            self.stop()
        return 0

    def _on_events(self, height: int, events: list[dict[str, Any]]) -> None:
        for ev in events:  # the app's events of the block (round.opened, challenge.issued, ...)
            t = str(ev.get("type", ""))
            self.stats.events[t] = self.stats.events.get(t, 0) + 1
            log.debug("block %d: %s", height, t)

    # ------------------------------------------------------------------------- one pass

    def tick(self) -> int:
        height = self.nodes.call(lambda c: c.latest_height())
        if not self._heights or height > self._heights[-1][0]:
            self._heights = [*self._heights[-(BLOCK_TIME_SPAN - 1) :], (height, time.monotonic())]
        self._todo = []
        try:
            self._scan(height)
        finally:
            todo, self._todo = self._todo or [], None
            self._run_collected(todo)
        if time.monotonic() - self._last_gc >= GC_EVERY_S:
            self.gc()
        if time.monotonic() - self._last_stats >= STATS_EVERY_S:
            self._last_stats = time.monotonic()
            self.write_stats()
        return height

    def _run_collected(
        self, todo: list[tuple[int, int, str, Callable[[], None], bool, bool, str | None]]
    ) -> None:
        """A pass's duties, nearest window end first (a reveal due in 3 blocks before a vote due
        in 30); the heavy ones only queued (duties.py)."""
        for deadline, _, name, fn, due, heavy, key in sorted(todo, key=lambda d: d[:2]):
            self._here.key = key
            self._run_duty(name, fn, due=due, heavy=heavy, deadline=deadline)

    def _scan(self, height: int) -> None:
        """Read the chain's jobs and rounds and collect the duties due (``_duty``)."""
        jobs: list[dict[str, Any]] = []
        for status in ("active", "cancelling"):
            jobs += self.nodes.query_json(f"/jobs?status={status}&limit=100")["jobs"]
        for job in sorted(jobs, key=lambda j: j["id"]):
            if self.cfg.jobs and job["id"] not in self.cfg.jobs or job["id"] in self._bad_jobs:
                continue
            try:  # one job's failure must not starve the jobs after it
                self._job(job, height)
            except Exception as e:  # noqa: BLE001 (the chain's or a peer's answer: next job)
                self.stats.failures += 1
                log.warning("job %s: %s: %s", job.get("id"), e.__class__.__name__, e)

    def _job(self, job: dict[str, Any], height: int) -> None:
        from node.worker import ml

        jid = int(job["id"])
        if jid not in self._plans:
            try:
                self._plans[jid] = ml.JobPlan.from_job(job)
            except (ml.JobError, RuntimeError, KeyError, TypeError, ValueError) as e:
                # not a job this worker can train: it declines every round it is drawn in
                # (declining before the commit deadline is free; silence is a missed commit)
                log.warning("job %d: %s: declining the rounds it draws this worker in", jid, e)
                self._unfit[jid] = str(e)
        start = self._cursor.get(jid, 0)
        res = self.nodes.query_json(f"/rounds/{jid}?from={start}&limit=16")
        for r in res["rounds"]:
            if jid in self._unfit:
                self._decline_if_drawn(r, height, self._unfit[jid])
            else:
                self._round(job, r, height)
            if r["phase"] == "finalized" and r["round"] == self._cursor.get(jid, 0):
                self._cursor[jid] = r["round"] + 1
                self.progress.forget_before(jid, r["round"] - 4)

    def block_s(self) -> float | None:
        """The chain's block interval as this worker saw it over its last blocks (None until it
        saw blocks a few seconds apart)."""
        if len(self._heights) < 3:
            return None
        (h0, t0), (h1, t1) = self._heights[0], self._heights[-1]
        return (t1 - t0) / (h1 - h0) if h1 > h0 and t1 - t0 > 1.0 else None

    def _decline_if_drawn(self, r: dict[str, Any], height: int, why: str) -> None:
        """A round of a job this worker cannot do: decline it if drawn and not done yet."""
        me = next((p for p in r["participants"] if p["address"] == self.me), None)
        jid, rn = int(r["job_id"]), int(r["round"])
        self._here.key = f"{jid}/{rn}"
        if (
            r["phase"] == "commit"
            and me is not None
            and me["commitment"] is None
            and me["outcome"] != "declined"
        ):
            log.info("round %d/%d: declining: %s", jid, rn, why)
            self._duty(
                f"decline/{jid}/{rn}", lambda: self.do_decline(r, height), deadline=phase_end(r)
            )

    def infeasible(self, job: dict[str, Any], r: dict[str, Any], height: int) -> str | None:
        """Why this worker cannot do round ``r`` by the job's own terms (None: it can), checked
        before it trains (issue 31: a job must never cost an honest provider its bond): the
        training would not fit its device's memory (``ml.training_memory_bytes``), or at its
        measured speed on this job (its last round's seconds per step) the H steps would not end
        before the commit window closes at its measured block time."""
        from node.worker import ml

        jid = int(r["job_id"])
        plan = self._plans[jid]
        have = ml.available_memory_bytes(self.device)
        if self.cfg.pipeline > 1:  # the island's stages each hold their share (issue 35)
            procs, stages = self.cfg.procs, self.cfg.pipeline
            try:
                m = ml.check_island_plan(plan, procs, stages, self.cfg.microbatches)
            except ml.JobError as e:
                return str(e)
            per, total = ml.island_memory_bytes(plan, procs, stages, m)
            if self.device == "cuda" and per > have:
                return (
                    f"the largest of the island's {stages} stages needs ~{per >> 20} MiB, a GPU "
                    f"has {have >> 20} MiB"
                )
            if self.device != "cuda" and total > have:
                return (
                    f"the island's {procs * stages} processes need ~{total >> 20} MiB together, "
                    f"the cpu has {have >> 20} MiB available"
                )
            return self._too_slow(jid, plan, r, height)
        need = ml.training_memory_bytes(plan)
        if need > have:
            return (
                f"training needs ~{need >> 20} MiB, the {self.device} has {have >> 20} MiB "
                "available"
            )
        return self._too_slow(jid, plan, r, height)

    def _too_slow(self, jid: int, plan: Any, r: dict[str, Any], height: int) -> str | None:
        """Why the H steps would not end before the commit window closes, at this worker's
        measured speed on the job (None: they would, or no speed is measured yet)."""
        step_s, block_s = self._step_s.get(jid), self.block_s()
        if step_s is not None and block_s is not None:
            eta = step_s * plan.H
            left = (int(r["windows"]["commit_deadline"]) - 2 - height) * block_s
            if eta > left:
                return (
                    f"at its measured {step_s * 1000:.1f} ms/step the {plan.H} steps take "
                    f"~{eta:.0f} s; the commit window has ~{max(left, 0):.0f} s left"
                )
        return None

    def account(self, what: str, amount: float, key: str | None = None) -> None:
        """Add ``amount`` to this round's ``what`` (train_s, verify_s, aggregate_s, fetch_s,
        fetch_bytes, tx_s, bytes_in.KIND, bytes_out.http, tx_bytes, ...):
        benchmarks/round_overhead.py and benchmarks/traffic.py read them from stats.json."""
        key = key or getattr(self._here, "key", None)
        if key is not None:
            t = self.timing.setdefault(key, {})
            t[what] = t.get(what, 0.0) + amount

    def span(self, what: str, t0: float, t1: float) -> None:
        """This round's ``what`` ran from wall time ``t0`` to ``t1``: its first start and last end
        (``WHAT_start``, ``WHAT_end`` in stats.json), to see training and verification overlap."""
        key = getattr(self._here, "key", None)
        if key is not None:
            t = self.timing.setdefault(key, {})
            t[f"{what}_start"] = min(t.get(f"{what}_start", t0), t0)
            t[f"{what}_end"] = max(t.get(f"{what}_end", t1), t1)

    def _foreign_stack(self, jid: int) -> bool:
        """An exact-mode job pinned to a stack other than ours (ml.same_stack): our re-execution
        would not be bitwise that of an honest provider on its stack, so we neither train nor
        verify for it (an honest round voted INVALID would be slashed as a wrong vote). Logged
        once per job."""
        from node.worker import ml

        plan = self._plans[jid]
        if plan.tolerance is not None or not plan.stack or ml.same_stack(plan.stack, self.stack):
            return False
        if jid not in self._foreign:
            self._foreign.add(jid)
            log.warning(
                "job %d: exact mode pinned to stack %s, this worker runs %s: it neither trains "
                "nor verifies for this job (declines the rounds it is drawn in)",
                jid,
                plan.stack,
                self.stack,
            )
        return True

    def _round(self, job: dict[str, Any], r: dict[str, Any], height: int) -> None:
        me = next((p for p in r["participants"] if p["address"] == self.me), None)
        phase = r["phase"]
        jid, rn = int(r["job_id"]), int(r["round"])
        foreign = self._foreign_stack(jid)
        self._here.key = f"{jid}/{rn}"
        self.timing.setdefault(self._here.key, {}).setdefault("seen", time.time())
        due = is_due(r, height)
        end = phase_end(r)
        open_panel = {"vote_reveal": 0, "appeal_reveal": 1, "final_reveal": 2}.get(phase)
        if (
            open_panel is not None
            and me is not None
            and me["challenge"]
            and me["challenge"]["reveal"] is not None
            and self._plans[jid].tolerance is not None
            and any(
                not o.get("end_opened_height") and int(o.get("panel", 0)) == open_panel
                for o in me["challenge"].get("reveals") or []
            )
        ):
            self._duty(
                f"open-end/{jid}/{rn}/{open_panel}",
                lambda: self.do_open_end(job, r, me),
                due=due,
                deadline=end,
            )
        fresh_panel = {"appeal": 1, "final": 2}.get(phase)
        if (
            fresh_panel is not None
            and me is not None
            and me["challenge"]
            and me["outcome"] != "missed_reveal"
            and fresh_unopened(me["challenge"], fresh_panel)
            and self.cfg.behaviour != "withhold"
        ):
            self._duty(
                f"reveal-fresh/{jid}/{rn}/{fresh_panel}",
                partial(self.do_reveal_fresh, job, r, me, fresh_panel),
                due=due,
                deadline=end,
            )
        if phase == "commit" and me is not None and me["commitment"] is None:
            if not foreign:
                self._duty(
                    f"commit/{jid}/{rn}",
                    lambda: self.do_commit(job, r, me, height),
                    due=due,
                    deadline=end,
                )
            elif me["outcome"] != "declined":  # before committing: no slash (jobs README)
                self._duty(f"decline/{jid}/{rn}", lambda: self.do_decline(r, height), deadline=end)
        elif (
            phase == "reveal"
            and me is not None
            and me["challenge"]
            and me["challenge"]["reveal"] is None
        ):
            if self.cfg.behaviour != "withhold":
                self._duty(
                    f"reveal/{jid}/{rn}", lambda: self.do_reveal(job, r, me), due=due, deadline=end
                )
        elif phase in PANEL_OF:  # a panel commits its secret votes, or opens them
            panel, opening = PANEL_OF[phase]
            for t in r["participants"]:
                ch = t["challenge"]
                if not ch or ch["reveal"] is None:
                    continue
                mine = [
                    v
                    for v in ch["verifiers"]
                    if v["address"] == self.me and int(v.get("panel", 0)) == panel
                ]
                if opening and any(v.get("committed") and not v["voted"] for v in mine):
                    self._duty(
                        f"open-vote/{jid}/{rn}/{t['address']}",
                        partial(self.do_open_vote, job, r, t, height),
                        due=due,
                        deadline=end,
                    )
                elif (
                    not opening
                    and not foreign  # a verifier cannot decline: it lets the vote go
                    and any(not v.get("committed") and not v["voted"] for v in mine)
                    and not fresh_unopened(ch, panel)  # a later panel judges its fresh ones too
                ):
                    self._duty(
                        f"verify/{jid}/{rn}/{t['address']}/{panel}",
                        partial(self.do_verify, job, r, t, height),
                        due=due,
                        deadline=end,
                        heavy=True,  # fetch and re-execute: beside training, never in the loop
                    )
        elif (
            phase == "attest"
            and me is not None
            and me["outcome"] == "accepted"
            and not me["attested_hash"]
        ):
            self._duty(
                f"attest/{jid}/{rn}",
                lambda: self.do_attest(job, r, height),
                due=due,
                deadline=end,
                heavy=True,  # fetch and aggregate the accepted updates
            )
        elif phase == "finalized":
            self.on_finalized(r)

    def _duty(
        self,
        name: str,
        fn: Callable[[], None],
        *,
        due: bool = False,
        deadline: int = 0,
        heavy: bool = False,
    ) -> None:
        """Collect a duty for this pass; ``tick`` runs them nearest ``deadline`` (the height its
        window ends) first. ``heavy`` (a re-execution, an aggregation): queued on the duty
        threads (duties.py) so that it never delays the loop, training or a nearer duty."""
        if self._todo is None:
            self._run_duty(name, fn, due=due, heavy=heavy, deadline=deadline)
            return
        key = getattr(self._here, "key", None)
        self._todo.append((deadline, len(self._todo), name, fn, due, heavy, key))

    def _run_duty(
        self, name: str, fn: Callable[[], None], *, due: bool, heavy: bool, deadline: int
    ) -> None:
        """Run ``fn`` unless its backoff says wait; ``due`` (its window is about to close): wait at
        most DUE_RETRY_S since the last try, so no retry is scheduled past the window."""
        b = self._backoff.setdefault(name, _Backoff())
        now = time.monotonic()
        wait_until = min(b.next_try, b.last_try + DUE_RETRY_S) if due else b.next_try
        if now < wait_until or self._duties.busy(name):
            return
        if heavy:
            key = getattr(self._here, "key", None)

            def run() -> None:
                self._here.key = key
                self._attempt(name, fn, b)

            self._duties.submit(name, deadline, run)
            return
        self._attempt(name, fn, b)

    def _attempt(self, name: str, fn: Callable[[], None], b: _Backoff) -> None:
        b.last_try = time.monotonic()
        try:
            fn()
            b.failures = 0
        except TxRejected as e:
            if _code(e) in (DUPLICATE, WRONG_PHASE, CANNOT_DECLINE):
                log.info("%s: chain says %s; nothing more to do", name, e.log)
                b.next_try = float("inf")
                return
            self._failed(name, b, e)
        except Exception as e:  # noqa: BLE001 (a peer's bad blob, a node down, a duty's bug: retry)
            self._failed(name, b, e)

    def _failed(self, name: str, b: _Backoff, e: Exception) -> None:
        self.stats.failures += 1
        b.failures += 1
        b.next_try = time.monotonic() + min(0.5 * 2**b.failures, 10.0)
        log.warning("%s failed (%d): %s: %s", name, b.failures, e.__class__.__name__, e)

    def _send(self, *msgs: Any) -> dict[str, Any]:
        """One tx with ``msgs``, signed with the account's current sequence, waited for."""
        t0 = time.perf_counter()
        try:
            with self._send_lock:
                res = self.nodes.call(
                    lambda c: send_tx(c, self.key.signer, list(msgs), fee_floor=self.cfg.fee or 0)
                )
            # the signed tx's bytes, once (what the chain gossips and stores; a resubmit of the
            # same bytes and a refused attempt are in the node link's rpc_out, not here)
            self.account("tx_bytes", len(res.get("tx") or b""))
            self.account("txs", 1)
            return res
        finally:
            self.account("tx_s", time.perf_counter() - t0)

    # ------------------------------------------------------------------------- blobs

    def _peer_urls(self) -> list[str]:
        """Every registered provider's blob endpoint (refreshed every 30 s), ours excluded."""
        t, urls = self._peers
        if time.monotonic() - t > 30 or not urls:
            try:
                res = self.nodes.query_json("/providers?limit=1000")
                urls = sorted(
                    {str(p["endpoint"]).rstrip("/") for p in res["providers"]} - {self.endpoint}
                )
                self._peers = (time.monotonic(), urls)
            except Exception as e:  # noqa: BLE001 (a peer's or the chain's answer must never stop the worker)
                log.warning("cannot list providers: %s", e)
        return urls

    def _client(self) -> Any:
        """A blob client for one fetch, naming the round it fetches for (X-Loconet-Round: the
        serving worker counts the bytes it sends for that round)."""
        from node.blobs import BlobClient

        return BlobClient(
            timeout_s=30.0,
            max_bytes=self.cfg.max_blob_bytes,
            round_label=getattr(self._here, "key", None),
        )

    def _classify(self, h: str, head: bytes) -> str:
        """A blob's kind (node/blobs/server.py KINDS): what this worker stored or fetched it as,
        else the kind byte of its canonical header, else ``dataset`` for a job's dataset, else
        ``other``."""
        from node.blobs.server import kind_of_head

        kind = self._kinds.get(h)
        if kind is not None:
            return kind
        kind = kind_of_head(head)
        if kind == "other" and any(
            getattr(p, "dataset_id", None) == h for p in list(self._plans.values())
        ):
            return "dataset"
        return kind

    def _serving_round(self, h: str) -> str | None:
        """The round a blob served to a requester that named none is counted for: the blob's
        newest round hold in the store, else the newest round this worker has seen open."""
        try:
            holds = [r for r in self.store.info(h).rounds if r.count("/") == 1]
        except Exception:  # noqa: BLE001 (counting only)
            holds = []
        if holds:
            return max(holds, key=lambda r: tuple(int(x) for x in r.split("/")))
        seen = {k: v.get("seen", 0.0) for k, v in list(self.timing.items())}
        return max(seen, key=lambda k: seen[k], default=None)

    def _count_fetch(self, client: Any, kinds: dict[str, str]) -> None:
        """Account what ``client`` read: each blob's body bytes (failed attempts included) under
        its kind (``kinds``: hash -> kind), and the HTTP heads as kind ``http``."""
        for h, n in client.received_by_hash.items():
            self.account(f"bytes_in.{kinds.get(h, 'other')}", n)
        self.account("bytes_in.http", client.head_bytes_received)
        self.account("bytes_out.http", client.head_bytes_sent)

    def fetch(
        self,
        h: str,
        first: Sequence[str] = (),
        *,
        tier: str = "hot",
        round_key: str | None = None,
        max_bytes: int | None = None,
    ) -> bytes:
        """Blob ``h`` from the store, or fetched (hash-checked) from ``first`` then every peer.
        ``max_bytes``: the size the chain or the job states for it (the payload's committed
        size, a cap from the job's model): a location sending more is refused while the body
        streams and the next one is tried (None: the config's max_blob_bytes only). Its bytes
        are counted under its kind (``_classify``: ``_kinds``, else its header's kind byte)."""
        from node.blobs import BlobError

        if self.store.has(h):
            return bytes(self.store.read(h))
        urls = [u for u in dict.fromkeys(list(first) + self._peer_urls()) if u]
        if not urls:
            raise BlobError(f"blob {h[:12]} is not here and no peer is known")
        t0 = time.perf_counter()
        with self._client() as client:
            try:
                path = client.fetch(
                    h,
                    urls,
                    self.store,
                    tier=tier,
                    round_key=round_key,
                    max_bytes=max_bytes,
                    # the duty runs on the worker's loop: black-hole peers must not hold it for
                    # 30 s each (the blob is asked for again on the next tick)
                    give_up_after_s=FETCH_GIVE_UP_S,
                )
            except Exception:
                self._count_fetch(client, {h: self._kinds.get(h, "other")})  # failed: too
                raise
            data = Path(path).read_bytes()
            self._count_fetch(client, {h: self._classify(h, data[:8])})
        self.account("fetch_s", time.perf_counter() - t0)
        self.account("fetch_bytes", len(data))
        return data

    def _inputs(self, job: dict[str, Any]) -> tuple[Path, Path]:
        """(initial model, dataset) of ``job`` in our store, cold (pinned): fetched by
        node.client.job_inputs.fetch_job_inputs (each limited to the size the spec states) from the
        job's blob sources, then every peer, unless they are here already."""
        from node.client.job_inputs import fetch_job_inputs

        spec = job["spec"]
        missing = [
            h for h in (spec["initial_model_hash"], spec["dataset_id"]) if not self.store.has(h)
        ]
        self._kinds[spec["initial_model_hash"]] = "model"
        self._kinds[spec["dataset_id"]] = "dataset"
        t0 = time.perf_counter()
        with self._client() as client:
            extra = self._peer_urls() if missing else []
            try:
                model, data = fetch_job_inputs(spec, self.store, client, extra, tier="cold")
            finally:
                self._count_fetch(client, self._kinds)
        if missing:
            self.account("fetch_s", time.perf_counter() - t0)
            self.account("fetch_bytes", sum(self.store.info(h).size for h in missing))
        return model, data

    def _corpus(self, job: dict[str, Any]) -> Any:
        from trainer.data import Corpus

        dataset_id = str(job["spec"]["dataset_id"])
        if dataset_id not in self._corpora:
            _, data = self._inputs(job)
            self._corpora[dataset_id] = Corpus(Path(data).read_bytes())
        return self._corpora[dataset_id]

    def _base(self, job: dict[str, Any], h: str) -> bytes:
        """A round's base model: the job's initial model (its size as the spec states it), or
        an attested one (with the outer momentum: at most ml.blob_cap of MODEL_PARTS)."""
        from node.worker import ml

        if h == job["spec"]["initial_model_hash"]:
            return Path(self._inputs(job)[0]).read_bytes()
        cap = ml.blob_cap(self._plans[int(job["id"])], ml.MODEL_PARTS)
        return self.fetch(h, job["spec"].get("blob_sources") or [], tier="hot", max_bytes=cap)

    def _loc(self, h: str) -> str:
        return f"{self.endpoint}/blob/{h}"

    # ------------------------------------------------------------------------- commit

    def do_commit(
        self, job: dict[str, Any], r: dict[str, Any], me: dict[str, Any], height: int
    ) -> None:
        from node.worker import ml
        from trainer.commit import Binding

        jid, rn = int(r["job_id"]), int(r["round"])
        prog = self.progress.round(jid, rn)
        if prog.get("submitted"):
            return  # landed; the chain shows it on a later block
        # a tx sent now lands in block height+1 at the earliest, and the chain takes commitments
        # up to commit_deadline - 1 (block D's seed draws the challenges: jobs README)
        if height + 1 >= int(r["windows"]["commit_deadline"]):
            log.warning(
                "round %d/%d: commit window (last block %d) closed (height %d)",
                jid,
                rn,
                int(r["windows"]["commit_deadline"]) - 1,
                height,
            )
            return
        if (
            prog.get("payload")
            and prog.get("trace")
            and all(self.store.has(h) for h in prog["trace"])
        ):
            return self._submit(r, prog)  # made before a restart: send the same work
        if self._training is not None:
            key, fut = self._training
            if key != (jid, rn):
                if not fut.done():
                    return  # busy with an older round; this one waits for the next block
                self._training = None
                return
            if not fut.done():
                return
            self._training = None
            try:
                work = fut.result()  # raises the training error into _duty's retry
            except InputsUnavailable as e:
                n = self._input_failures[(jid, rn)] = self._input_failures.get((jid, rn), 0) + 1
                if n < INPUT_TRIES:
                    raise
                log.warning(
                    "round %d/%d: declining: inputs unavailable %d times: %s", jid, rn, n, e
                )
                return self.do_decline(r, height)
            self._store_work(jid, rn, work)
            return self._submit(r, self.progress.round(jid, rn))
        plan = self._plans[jid]
        behaviour = self.cfg.behaviour
        why = self.infeasible(job, r, height) if behaviour == "honest" else None
        if why is not None:
            log.warning("round %d/%d: declining: %s", jid, rn, why)
            return self.do_decline(r, height)
        if behaviour == "random-root":
            work = ml.random_round(plan)
            if plan.tolerance is not None:  # garbage probes too: it never trained
                work.probes = ml.random_probes(len(work.states))
            self._store_work(jid, rn, work)
            return self._submit(r, self.progress.round(jid, rn))
        spec = plan.shard_spec(rn, self.me, int(me["shard"]))
        base_hash = str(r["base_model_hash"])
        chooser = self._policy.setdefault(jid, plan.compression())
        poison = POISON_SCALE if behaviour == "poison" else 1.0

        def task() -> Any:
            self._here.key = f"{jid}/{rn}"
            log.info(
                "round %d/%d: training %d steps on shard %d from base %s",
                jid,
                rn,
                plan.H,
                spec.shard,
                base_hash[:12],
            )
            t0, wall0 = time.perf_counter(), time.time()
            try:
                base = self._base(job, base_hash)
                corpus = self._corpus(job)
            except Exception as e:  # noqa: BLE001 (no source has them, or not these bytes)
                raise InputsUnavailable(f"{e.__class__.__name__}: {e}") from e
            t1 = time.perf_counter()
            shapes = {
                n: tuple(p.shape) for n, p in ml.load_model(base, plan.model).named_parameters()
            }
            codec = chooser.choose(rn, shapes)
            binding = Binding(self.me_bytes, jid, rn, bytes.fromhex(base_hash))
            work = ml.train_round(
                plan,
                base,
                corpus,
                spec,
                binding,
                codec,
                device=self.device,
                poison=poison,
                procs=self.cfg.procs,
                corpus_path=(
                    self.store.path(plan.dataset_id)
                    if self.cfg.procs > 1 or self.cfg.pipeline > 1
                    else None
                ),
                pipeline=self.cfg.pipeline,
                microbatches=self.cfg.microbatches,
            )
            if plan.tolerance is not None:  # every state's probe, committed with the roots
                from trainer.probe import trace_probes

                work.probes = trace_probes(work.states)
            self.stats.trained_s += time.perf_counter() - t0
            self.account("train_s", time.perf_counter() - t1)
            self._step_s[jid] = (time.perf_counter() - t1) / max(1, plan.H)
            self.span("train", wall0 + (t1 - t0), time.time())
            _record_training(plan.H, time.perf_counter() - t1, work.loss_after / 1000, jid, rn)
            log.info(
                "round %d/%d: trained %d steps on shard %d in %.1fs, loss %.3f -> %.3f, payload "
                "%d B",
                jid,
                rn,
                plan.H,
                spec.shard,
                time.perf_counter() - t0,
                work.loss_before / 1000,
                work.loss_after / 1000,
                len(work.payload),
            )
            return work

        self._training = ((jid, rn), self._pool.submit(task))

    def _store_work(self, jid: int, rn: int, work: Any) -> None:
        rk = f"{jid}/{rn}"
        payload_hash = self.store.put_bytes(work.payload, tier="hot", round_key=rk)
        trace = [self.store.put_bytes(s, tier="temp", round_key=rk) for s in work.states]
        assert trace == [t.hex() for t in work.trace]
        # the round's starting carry only: the trace list is stored when revealing, masked
        # (do_reveal); the list in clear would name every end a panel's evidence is made of
        from node.worker import ml

        self.store.put_bytes(ml.fresh_carry_bytes(), tier="temp", round_key=rk)
        self.progress.update(
            jid,
            rn,
            payload=payload_hash,
            trace=trace,
            tokens=work.tokens,
            loss_before=work.loss_before,
            loss_after=work.loss_after,
            probes=work.probes,
        )

    def _store_trace_list(self, jid: int, rn: int, trace: Sequence[bytes]) -> str:
        """Store what a verifier needs beyond the opened segments: the trace list (every state's
        hash, so entries 0 and H/k can be fetched and proven against the trace root) and the
        round's starting carry bytes (empty: every network round starts fresh). Returns the
        trace list's hash, which the reveal commits on chain (``trace_list_hash``)."""
        from node.worker import ml

        rk = f"{jid}/{rn}"
        self.store.put_bytes(ml.fresh_carry_bytes(), tier="temp", round_key=rk)
        h = self.store.put_bytes(ml.trace_list_bytes(list(trace)), tier="temp", round_key=rk)
        self._kinds[h] = "trace_list"  # no header says so: the server's classify asks here
        return h

    def _submit(self, r: dict[str, Any], prog: dict[str, Any]) -> None:
        jid, rn = int(r["job_id"]), int(r["round"])
        payload = self.store.read(prog["payload"])
        msg = build_bound_submit(
            jid,
            rn,
            provider=self.me_bytes,
            base_model=bytes.fromhex(r["base_model_hash"]),
            payload=bytes(payload),
            trace=[bytes.fromhex(h) for h in prog["trace"]],
            tokens=int(prog["tokens"]),
            loss_before=int(prog["loss_before"]),
            loss_after=int(prog["loss_after"]),
            blob=self._loc(prog["payload"]),
            probes=prog.get("probes") if self._plans[jid].tolerance is not None else None,
        )
        try:
            res = self._send(msg)
        except TxRejected as e:
            if _code(e) == DUPLICATE:
                self.progress.update(jid, rn, submitted="duplicate")
            raise
        self.progress.update(jid, rn, submitted=res["txhash"])
        self.account("committed", time.time())
        self.stats.submitted += 1
        from node.metrics import worker_metrics

        worker_metrics().round_done(True)
        log.info(
            "round %d/%d: update submitted at height %d (%s)",
            jid,
            rn,
            res["height"],
            self.cfg.behaviour,
        )

    def do_decline(self, r: dict[str, Any], height: int) -> None:
        """MsgDeclineRound: drawn, not committed, and not able to do the round (the job pins
        another stack): outcome ``declined``, no slash, the slot stays in the escrow. Like a
        commitment it must land by commit_deadline - 1; later the round ends missed_commit."""
        jid, rn = int(r["job_id"]), int(r["round"])
        if height + 1 >= int(r["windows"]["commit_deadline"]):
            return
        res = self._send(build_decline_round(jid, rn))
        self.progress.update(jid, rn, declined=res["txhash"])
        log.info("round %d/%d: declined at height %d", jid, rn, res["height"])

    # ------------------------------------------------------------------------- reveal

    def do_reveal(self, job: dict[str, Any], r: dict[str, Any], me: dict[str, Any]) -> None:
        """Open every challenged segment not opened yet (one MsgRevealSegment each, one tx)."""
        jid, rn = int(r["job_id"]), int(r["round"])
        prog = self.progress.round(jid, rn)
        trace = prog.get("trace")
        if not trace:
            raise RuntimeError(
                "no trace recorded for this round (lost before the restart?): cannot reveal"
            )
        ch = me["challenge"]
        todo = [
            s for s in (ch.get("segments") or [ch["segment"]]) if s not in (ch.get("opened") or [])
        ]
        hashes = [bytes.fromhex(h) for h in trace]
        # both modes: the ends of the opened segments stay secret until the votes are committed
        # (only their leaf hashes are opened, and the list masks them: incentives.mask_trace):
        # only re-execution yields them (exact mode) or their probes (tolerance mode, opened
        # later by do_open_end), a verifier's evidence (jobs README *Evidence*)
        segs = [int(x) for x in (ch.get("segments") or [ch["segment"]])]
        # every entry but 0, H/k and the runs' starts: a later panel's fresh segment must have
        # an end nobody saw (incentives.compute_masked_entries)
        served = mask_trace(hashes, compute_masked_entries(segs, len(hashes) - 1))
        self._store_trace_list(jid, rn, served)  # idempotent: the blob is content-addressed
        # the first opening carries the trace list (the chain proves its hash against the trace
        # root); later ones name its hash only
        first = not ch.get("opened")
        msgs = [
            build_reveal_from_trace(
                jid,
                rn,
                int(s),
                hashes,
                self._loc(trace[s]),
                "",
                provider=self.me_bytes,
                base_model=bytes.fromhex(r["base_model_hash"]),
                with_list=first and i == 0,
                segments=segs,
            )
            for i, s in enumerate(todo)
        ]
        if not msgs:
            return
        res = self._send(*msgs)
        self.progress.update(jid, rn, revealed=res["txhash"])
        self.stats.revealed += 1
        log.info("round %d/%d: revealed segment(s) %s at height %d", jid, rn, todo, res["height"])

    def do_reveal_fresh(
        self, job: dict[str, Any], r: dict[str, Any], me: dict[str, Any], panel: int
    ) -> None:
        """Escalated: open the fresh segments the chain drew for the appeal (1) or final (2)
        panel (MsgRevealSegment with that panel, one tx), in that panel's voting window; the
        ends stay secret as for the first panel's. Not opening them is a missed reveal."""
        jid, rn = int(r["job_id"]), int(r["round"])
        trace = self.progress.round(jid, rn).get("trace")
        if not trace:
            raise RuntimeError("no trace recorded for this round: cannot open the fresh segments")
        ch = me["challenge"]
        todo = fresh_unopened(ch, panel)
        if not todo:
            return
        hashes = [bytes.fromhex(h) for h in trace]
        segs = [int(x) for x in (ch.get("segments") or [ch["segment"]])]
        judged = sorted({*segs, *fresh_of(ch, 1), *(fresh_of(ch, 2) if panel == 2 else [])})
        msgs = [
            build_reveal_from_trace(
                jid,
                rn,
                s,
                hashes,
                self._loc(trace[s]),
                "",
                provider=self.me_bytes,
                base_model=bytes.fromhex(r["base_model_hash"]),
                with_list=False,
                segments=segs,
                panel=panel,
                judged=judged,
            )
            for s in todo
        ]
        res = self._send(*msgs)
        log.info(
            "round %d/%d: opened the fresh segment(s) %s of panel %d at height %d",
            jid,
            rn,
            todo,
            panel,
            res["height"],
        )

    def do_open_end(self, job: dict[str, Any], r: dict[str, Any], me: dict[str, Any]) -> None:
        """Tolerance mode, vote-reveal window: open the end of every opened segment (its state,
        served from our store, and its probe committed with the roots: MsgOpenEnd, one tx). Not
        opening them is a missed reveal (punished as fraud)."""
        jid, rn = int(r["job_id"]), int(r["round"])
        prog = self.progress.round(jid, rn)
        trace, probes = prog.get("trace"), prog.get("probes")
        if not trace or not probes:
            raise RuntimeError("no trace or probes recorded for this round: cannot open the ends")
        panel = {"appeal_reveal": 1, "final_reveal": 2}.get(r["phase"], 0)
        todo = [  # each panel's ends open in its own opening window
            int(o["segment"])
            for o in me["challenge"].get("reveals") or []
            if not o.get("end_opened_height") and int(o.get("panel", 0)) == panel
        ]
        msgs = [
            build_open_end(
                jid,
                rn,
                s,
                [bytes.fromhex(h) for h in trace],
                probes,
                self._loc(trace[s + 1]),
                provider=self.me_bytes,
                base_model=bytes.fromhex(r["base_model_hash"]),
            )
            for s in todo
        ]
        for i in range(0, len(msgs), OPEN_ENDS_PER_TX):  # ~1 KB each: several txs for many
            res = self._send(*msgs[i : i + OPEN_ENDS_PER_TX])
            log.info(
                "round %d/%d: opened the end(s) of %s at height %d",
                jid,
                rn,
                todo[i : i + OPEN_ENDS_PER_TX],
                res["height"],
            )

    # ------------------------------------------------------------------------- verify

    def do_verify(
        self, job: dict[str, Any], r: dict[str, Any], t: dict[str, Any], height: int
    ) -> None:
        """Judge the target's opened segments and commit the vote's hash (MsgVerdict); the vote
        itself (valid, quality, evidence) is kept in progress.json to be opened next window."""
        jid, rn = int(r["job_id"]), int(r["round"])
        target = t["address"]
        t0, wall0 = time.perf_counter(), time.time()
        vote = self.judge(job, r, t, height)
        self.account("verify_s", time.perf_counter() - t0)
        self.span("verify", wall0, time.time())
        if vote is None:
            return  # states not fetched yet: retried on a later block
        valid, q, reached, why = vote
        unavailable = is_unavailable_vote(vote)
        votes = dict(self.progress.round(jid, rn).get("votes", {}))
        votes[target] = {
            "valid": valid,
            "quality": q,
            "reached": [x.hex() for x in reached],
            "why": why,
            "unavailable": unavailable,
        }
        probes = self._probes.pop((jid, rn, target), None)
        if probes is None and self._plans[jid].tolerance is not None and not unavailable:
            # nothing re-executed (an early refusal): a guess
            probes = self._no_probes(t, PANEL_OF[r["phase"]][0])
        if unavailable:  # either mode: nothing reached, nothing to probe
            probes, evidence = None, UNAVAILABLE_EVIDENCE
        elif probes is not None:  # tolerance mode: a blind vote on the probes reached
            from abci_app.jobs.probe import compute_probe_evidence

            votes[target]["probes"] = probes
            evidence = compute_probe_evidence(probes)
        else:
            evidence = compute_evidence(reached)
        self.progress.update(jid, rn, votes=votes)
        res = self._send(
            build_verdict(
                self.key.signer,
                jid,
                rn,
                from_bech32(target),
                valid,
                q,
                evidence,
                blind=probes is not None,
                unavailable=unavailable,
                panel=PANEL_OF[r["phase"]][0],
            )
        )
        self.stats.votes += 1
        log.info(
            "round %d/%d: vote on %s committed: %s quality %d (%s) at height %d",
            jid,
            rn,
            target,
            "UNAVAILABLE" if unavailable else "VALID" if valid else "INVALID",
            q,
            why,
            res["height"],
        )

    def do_open_vote(
        self, job: dict[str, Any], r: dict[str, Any], t: dict[str, Any], height: int
    ) -> None:
        """Open the committed vote (MsgRevealVote) with exactly what was hashed."""
        jid, rn = int(r["job_id"]), int(r["round"])
        target = t["address"]
        v = self.progress.round(jid, rn).get("votes", {}).get(target)
        if (
            v is None
        ):  # the record was lost (restart): judge again, the same inputs give the same vote
            vote = self.judge(job, r, t, height)
            if vote is None:
                return
            v = {
                "valid": vote[0],
                "quality": vote[1],
                "reached": [x.hex() for x in vote[2]],
                "unavailable": is_unavailable_vote(vote),
            }
            probes = self._probes.pop((jid, rn, target), None)
            if probes is None and self._plans[jid].tolerance is not None:
                probes = self._no_probes(t, PANEL_OF[r["phase"]][0])
            if probes is not None and not v["unavailable"]:
                v["probes"] = probes
        unavailable = bool(v.get("unavailable"))  # then nothing else in the opening counts
        valid = bool(v["valid"]) and not unavailable
        lazy = self.cfg.behaviour == "lazy-verifier"  # checks nothing: the chain catches it
        if "probes" in v and valid and not lazy:  # tolerance mode: judge the opened ends first
            verdict = self.judge_opened_ends(job, r, t, v, height)
            if verdict is None:
                return  # the ends are not open yet: retried on a later block
            valid, why = verdict
            if not valid:
                log.info("round %d/%d: %s: opened ends refuted: %s", jid, rn, target, why)
        res = self._send(
            build_reveal_vote(
                self.key.signer,
                jid,
                rn,
                from_bech32(target),
                valid,
                int(v["quality"]),
                [bytes.fromhex(x) for x in v["reached"]],
                probes=v.get("probes"),
                unavailable=unavailable,
                panel=PANEL_OF[r["phase"]][0],
            )
        )
        log.info(
            "round %d/%d: vote on %s opened: %s at height %d",
            jid,
            rn,
            target,
            "UNAVAILABLE" if unavailable else "VALID" if valid else "INVALID",
            res["height"],
        )

    @staticmethod
    def _no_probes(t: dict[str, Any], panel: int = 0) -> list[int]:
        """All-zero probes, one per segment ``panel`` judges: the evidence of a vote that
        re-executed nothing (an invalid vote, or a lazy one: it cannot know the probes)."""
        from abci_app.jobs.probe import PROBE_DIM

        n = len(panel_openings(t["challenge"], panel)) or 1
        return [0] * (PROBE_DIM * n)

    def judge_opened_ends(
        self,
        job: dict[str, Any],
        r: dict[str, Any],
        t: dict[str, Any],
        v: dict[str, Any],
        height: int,
    ) -> tuple[bool, str] | None:
        """Tolerance mode, once the provider opened its ends (MsgOpenEnd): each opened end must
        be the committed leaf, its probe within the chain's bound of ours, its state within the
        job's tolerance of our re-execution (trainer.verify.verify_opened_end). None while an
        end is not open yet (a later block), unless the window is closing: then valid on the
        probes alone (if the provider opens its ends in this last block, the chain compares our
        probes with its own, so a valid vote on faked work still counts invalid; if it never
        opens them, the challenge is a missed reveal and no vote is judged)."""
        from abci_app.jobs.msgs import MIN_SEALED_VOTE_REVEAL_BLOCKS
        from abci_app.jobs.probe import PROBE_DIM, is_probe_within
        from node.blobs import BlobError
        from node.worker import ml
        from trainer.commit import PayloadError
        from trainer.verify import verify_opened_end
        from trainer.verify_run import shift_state

        jid, rn = int(r["job_id"]), int(r["round"])
        ch = t["challenge"]
        panel = PANEL_OF.get(r["phase"], (0, True))[0]
        openings = panel_openings(ch, panel)  # the first panel's and the later panels' fresh ones
        # the last block that takes the first panel's openings is Vr - 1 when the vote windows
        # have >= 3 blocks (Vr's seed draws the audit: abci_app.jobs.msgs
        # compute_last_opening_height), else Vr; a tx sent now lands in height + 1 at the earliest
        last = int(r["windows"]["vote_reveal_end"])
        verdict_blocks = int((job["spec"].get("windows") or {}).get("verdict", 0))
        if panel:  # a later panel opens until its own window's end (it seeds nothing)
            last = int(r["windows"]["appeal_reveal_end" if panel == 1 else "final_reveal_end"])
        elif verdict_blocks >= MIN_SEALED_VOTE_REVEAL_BLOCKS:
            last -= 1
        closing = height + 1 >= last
        if not openings or any(not o.get("end_opened_height") for o in openings):
            return (
                (True, "the ends are not open: the probes speak for the vote") if closing else None
            )
        plan = self._plans[jid]
        ppm = int(job["spec"].get("tolerance_ppm", 0))
        probes = [int(x) for x in v["probes"]]
        endpoint = self._endpoint_of(t["address"])
        rk = f"{jid}/{rn}"
        state = partial(
            self.fetch, tier="temp", round_key=rk, max_bytes=ml.blob_cap(plan, ml.STATE_PARTS)
        )
        for i, o in enumerate(openings):
            mine = probes[i * PROBE_DIM : (i + 1) * PROBE_DIM]
            theirs = [int(x) for x in o.get("end_probe") or []]
            if not is_probe_within(theirs, mine, ppm):
                return False, f"segment {o['segment']}: the opened probe is not ours"
            shifted = False
            try:
                claimed = state(o["end_state_hash"], [o["end_location"], endpoint])
                reexec = bytes(self.store.read(v["reached"][i]))
                if o.get("start_state_hash"):  # a run's start
                    start = state(o["start_state_hash"], [o["start_location"], endpoint])
                else:  # the previous opened segment's end, opened too; we re-executed from
                    # ours: judge the displacement, our end moved onto the provider's start
                    p = openings[i - 1]
                    if i == 0 or int(p["segment"]) != int(o["segment"]) - 1:
                        return False, f"segment {o['segment']}: no opened start"
                    start = state(p["end_state_hash"], [p["end_location"], endpoint])
                    own = bytes(self.store.read(v["reached"][i - 1]))
                    reexec, shifted = shift_state(reexec, own, start), True
            except PayloadError as e:  # not a state of the model (the end before was judged)
                return False, f"segment {o['segment']}: opened states do not match: {e}"
            except (BlobError, KeyError, OSError) as e:
                if not closing:
                    raise
                return False, f"segment {o['segment']}: opened end unavailable: {e}"
            judge_end = partial(
                verify_opened_end,
                start,
                tolerance=float(plan.tolerance or 0.0),
                end_leaf=bytes.fromhex(o["end_leaf_hash"]),
                claimed_probe=theirs,
                tolerance_ppm=ppm,
            )
            sv = judge_end(reexec, claimed)
            if not sv.valid and shifted:
                # our re-execution of this segment started from our own state, so our moved end
                # still carries some of the previous segments' drift (benchmarks/probe_runs.py):
                # re-execute it once more from the provider's opened start, the single-segment
                # check, which decides
                spec = plan.shard_spec(rn, t["address"], int(t["shard"]))
                fresh = ml.reexecute_segment(
                    plan, spec, start, corpus=self._corpus(job), device=self.device
                )
                if fresh is not None:
                    sv = judge_end(fresh, claimed)
            if not sv.valid:
                return False, f"segment {o['segment']}: {sv.reason}"
        return True, "opened ends within tolerance of the re-execution"

    def judge(
        self, job: dict[str, Any], r: dict[str, Any], t: dict[str, Any], height: int
    ) -> tuple[bool, int, list[bytes], str] | None:
        """(valid, quality, reached, why) for the target's commitment: VALID only if the full
        check passes (ml.verify_round: the served trace list gives the committed trace root,
        entry 0 is the pinned fresh start, which the verifier builds from the round's base model
        and public metadata and never fetches, the committed payload is compress(θ_base − θ_H +
        e_prev) of entry H/k, every opened segment re-executes in the job's determinism mode).
        ``reached`` = the end state hash of each opened segment (segment order): in exact mode
        the re-executed one, checked against the opened leaf hash (the end itself is secret: only
        re-execution yields it), in tolerance mode the revealed one the re-execution is within
        tolerance of; when invalid, hashes that differ. The vote commits to
        abci_app.jobs.incentives.compute_evidence(reached). None while the blobs cannot be
        fetched (until VOTE_UNAVAILABLE_MARGIN_BLOCKS before the panel's window ends); then an
        UNAVAILABLE vote (``unavailable_vote``: invalid with nothing reached; docs/threat-model.md
        *Unavailable votes*): it convicts a provider that serves nobody, and costs this verifier
        at most the liveness slash if the provider served the others (framing)."""
        from abci_app.merkle import hash_leaf
        from node.blobs import BlobError
        from node.worker import ml
        from trainer.carry import EMPTY_CARRY_HASH
        from trainer.commit import KIND_STATE, Binding, PayloadError, decode_meta

        jid, rn = int(r["job_id"]), int(r["round"])
        target = t["address"]
        ch = t["challenge"]
        plan = self._plans[jid]
        panel = PANEL_OF.get(r["phase"], (0, False))[0]
        # the segments this panel judges: a later panel's fresh ones and every earlier panel's
        openings = panel_openings(ch, panel) or [dict(ch["reveal"], segment=ch["segment"])]
        # the committed leaf hash of each opened end: opened as such (exact mode) or by its hash
        leaves = [
            bytes.fromhex(o["end_leaf_hash"])
            if o.get("end_leaf_hash")
            else hash_leaf(bytes.fromhex(o["end_state_hash"]))
            for o in openings
        ]
        if self.cfg.behaviour == "lazy-verifier":  # public data only: refused (exact mode) or
            # counted invalid and slashed (tolerance mode: its probes, all zero, are a guess)
            public = {int(o["segment"]): o["start_state_hash"] for o in openings}
            guess = [  # only a run's start is public: never the end of an opened segment
                bytes.fromhex(o["end_state_hash"] or public.get(int(o["segment"]) + 1) or "00" * 32)
                for o in openings
            ]
            return True, ml.MAX_QUALITY, guess, "lazy: not re-executed"

        def invalid(why: str, reached: list[bytes]) -> tuple[bool, int, list[bytes], str]:
            pad = hashlib.sha256(why.encode()).digest()
            out = (list(reached) + [pad] * len(openings))[: len(openings)]
            if all(hash_leaf(x) == leaf for x, leaf in zip(out, leaves, strict=True)):
                out[-1] = hashlib.sha256(b"mismatch" + out[-1]).digest()  # never self-contradict
            return False, 0, out, why

        named = {str(o.get("trace_list_hash") or "") for o in openings}
        if len(named) != 1 or len(next(iter(named))) != 64:  # the chain refuses such a reveal
            return invalid(
                "the reveal commits no single trace list (trace_list_hash): entries 0 and H/k "
                "cannot be checked",
                [hashlib.sha256(b"no trace list").digest()],
            )
        list_hash = next(iter(named)).lower()
        endpoint = self._endpoint_of(target)
        rk = f"{jid}/{rn}"
        c = t["commitment"]
        n = plan.H // plan.k
        # what the provider serves, limited to what it can be: a peer sending more is refused
        # while the body streams (the trace list's size is exact, a state's a cap of the model)
        state = partial(
            self.fetch, tier="temp", round_key=rk, max_bytes=ml.blob_cap(plan, ml.STATE_PARTS)
        )
        states: dict[int, bytes] = {}
        # the ends the provider keeps secret (it serves their leaf hashes only), and with them
        # every start but a run's (the verifier re-executes each run through: ml.verify_round)
        segs = [int(o["segment"]) for o in openings]
        hidden: dict[int, bytes] = {}
        if any(o.get("end_leaf_hash") for o in openings):  # the chain opened the ends as leaves
            secret = compute_hidden_entries(segs, n)
            hidden = {
                int(o["segment"]) + 1: leaf
                for o, leaf in zip(openings, leaves, strict=True)
                if int(o["segment"]) + 1 in secret
            }
        try:
            self._kinds[list_hash] = "trace_list"  # traffic counters: no header says so
            listed = self.fetch(
                list_hash, [endpoint], tier="temp", round_key=rk, max_bytes=ml.trace_list_size(plan)
            )
            if hashlib.sha256(listed).hexdigest() != list_hash:  # the blob client checks it too
                raise ValueError("the served trace list is not the one committed on chain")
            trace = ml.parse_trace_list(listed)
            # the list holds every entry but 0, H/k and the first panel's run starts as its leaf
            # hash (incentives.compute_masked_entries); a later panel's run start is opened on
            # chain (proven against the trace root): put it in the clear, the rest stays secret
            first = [int(x) for x in (ch.get("segments") or [ch["segment"]])]
            if len(trace) == n + 1 and any(o.get("end_leaf_hash") for o in openings):
                for i in compute_masked_entries(first, n):
                    hidden.setdefault(i, bytes(trace[i]))
                for o in openings:  # a run's start: opened in the clear
                    if o.get("start_state_hash"):
                        hidden.pop(int(o["segment"]), None)
                        trace[int(o["segment"])] = bytes.fromhex(o["start_state_hash"])
            for o in openings:
                s = int(o["segment"])
                # a run's start (any other is the secret end before it); entry 0 is never
                # fetched: every round starts fresh, so ml.verify_round builds it from the base
                if s not in hidden and s != 0:
                    states[s] = state(o["start_state_hash"], [o["start_location"], endpoint])
                if s + 1 in hidden or s + 1 in states:
                    continue
                if o["end_state_hash"]:
                    states[s + 1] = state(o["end_state_hash"], [o["end_location"], endpoint])
                elif len(trace) == n + 1 and s + 1 == n:  # exact mode: entry H/k is public
                    states[s + 1] = state(trace[n].hex(), [endpoint])
            if len(trace) == n + 1 and n not in states:  # the payload check's θ_H
                states[n] = state(trace[n].hex(), [endpoint])
            carry = ml.fresh_carry_bytes()
            if n in states:
                named_carry = decode_meta(states[n], expected_kind=KIND_STATE).get("carry")
                if isinstance(named_carry, str) and named_carry != EMPTY_CARRY_HASH.hex():
                    carry = self.fetch(
                        named_carry,
                        [endpoint],
                        tier="temp",
                        round_key=rk,
                        max_bytes=ml.blob_cap(plan, ml.CARRY_PARTS),
                    )
            payload = self._payload(r, t, rk)
            base = self._base(job, r["base_model_hash"])
        except BlobError as e:
            key = f"{jid}/{rn}/{target}"
            nf = self._fetch_failures[key] = self._fetch_failures.get(key, 0) + 1
            w = r["windows"]  # the end of the window this panel commits in
            end = {"appeal": w.get("appeal_end"), "final": w.get("final_end")}.get(r["phase"])
            last_chance = height >= int(end or w["verdict_end"]) - VOTE_UNAVAILABLE_MARGIN_BLOCKS
            if not last_chance:
                raise
            return unavailable_vote(f"revealed blobs unavailable ({nf} tries): {e}")
        except (
            ValueError,
            PayloadError,
        ) as e:  # a trace list or end state that is not what it must be
            return invalid(
                f"served trace is malformed: {e}", [hashlib.sha256(str(e).encode()).digest()]
            )
        corpus = self._corpus(job)
        spec = plan.shard_spec(rn, target, int(t["shard"]))
        binding = Binding(from_bech32(target), jid, rn, bytes.fromhex(r["base_model_hash"]))
        try:
            v = ml.verify_round(
                plan,
                spec,
                segments=[int(o["segment"]) for o in openings],
                trace=trace,
                states=states,
                carry=carry,
                payload=payload,
                trace_root=bytes.fromhex(c["trace_root"]),
                update_root=bytes.fromhex(c["update_root"]),
                binding=binding,
                corpus=corpus,
                device=self.device,
                base_params_hash=ml.params_hash(base),
                hidden=hidden,
                base=base,  # entry 0 is built from it (a fresh start), not fetched
            )
        except (
            ValueError,
            KeyError,
            IndexError,
            PayloadError,
        ) as e:  # verify_challenge should not raise; never vote valid on it
            return invalid(f"verification failed: {e}", [hashlib.sha256(str(e).encode()).digest()])
        reached = [
            bytes.fromhex(sv.reexecuted_hash)
            if len(sv.reexecuted_hash) == 64
            else hashlib.sha256(sv.reason.encode()).digest()
            for _, sv in sorted(v.segments.items())
        ]
        if plan.tolerance is not None and len(v.segments) == len(openings):
            # tolerance mode: the vote's evidence is the probes of the re-executed ends; the
            # re-executed states are kept to judge the ends once they are opened (MsgOpenEnd)
            from abci_app.jobs.probe import PROBE_DIM

            flat: list[int] = []
            for _, sv in sorted(v.segments.items()):
                flat.extend(sv.probe if len(sv.probe) == PROBE_DIM else [0] * PROBE_DIM)
                if sv.reexecuted_state:
                    self.store.put_bytes(sv.reexecuted_state, tier="temp", round_key=rk)
            self._probes[(jid, rn, target)] = flat
        if not v.valid:
            return invalid(v.reason, reached)
        # valid: each end is the committed one, re-executed (exact) or the revealed one the
        # re-execution is within tolerance of
        ends = [
            bytes.fromhex(o["end_state_hash"])
            if o["end_state_hash"]
            else bytes.fromhex(v.segments[int(o["segment"])].reexecuted_hash)
            for o in openings
        ]
        q = 1
        try:
            if payload is not None:
                q = ml.quality(plan, base, payload, corpus)
        except Exception as e:  # noqa: BLE001 (a peer's or the chain's answer must never stop the worker)
            log.info("quality of %s: payload not scored (%s); valid at quality 1", target, e)
        return True, q, ends, v.reason

    def _endpoint_of(self, address: str) -> str:
        try:
            return str(self.nodes.query_json(f"/provider/{address}")["endpoint"]).rstrip("/")
        except Exception:  # noqa: BLE001 (a peer's or the chain's answer must never stop the worker)
            return ""

    def _payload(self, r: dict[str, Any], p: dict[str, Any], rk: str | None) -> bytes | None:
        """The participant's committed payload, checked against its bound update root; None if
        the commitment names no fetchable blob or the bytes are not what it committed to (a
        content fault, the same for every honest worker: the provider's own locations send more
        than its committed payload_size, or other bytes); BlobError if it is unavailable. No
        location may send more than payload_size: a longer body is refused while it streams and
        the next location is tried."""
        from node.blobs import FetchFailed, Oversize

        c = p["commitment"]
        h = c["blob_location"].rstrip("/").rsplit("/", 1)[-1].lower()
        if len(h) != 64 or any(ch not in "0123456789abcdef" for ch in h):
            return None
        own = [c["blob_location"], self._endpoint_of(p["address"])]
        try:
            data = self.fetch(h, own, tier="hot", round_key=rk, max_bytes=int(c["payload_size"]))
        except FetchFailed as e:
            if any(isinstance(x, Oversize) and url in own for url, x in e.attempts):
                log.info(
                    "round %s/%s: %s serves more than its committed %d B for %s: no payload",
                    r["job_id"],
                    r["round"],
                    p["address"],
                    int(c["payload_size"]),
                    h[:12],
                )
                return None
            raise
        leaves = bound_update_leaves(
            from_bech32(p["address"]),
            int(r["job_id"]),
            int(r["round"]),
            bytes.fromhex(r["base_model_hash"]),
            data,
        )
        if len(data) != int(c["payload_size"]) or merkle_root(leaves).hex() != c["update_root"]:
            return None
        return data

    # ------------------------------------------------------------------------- attest

    def aggregate_round(
        self, job: dict[str, Any], r: dict[str, Any]
    ) -> tuple[bytes, list[str], list[str]]:
        """(new model bytes, included, excluded) for a round in attest phase: every accepted
        update whose bytes match its commitment, screened, norm-clipped and averaged, one outer
        Nesterov step from the round's base model with the momentum the base carries
        (ml.aggregate_payloads). BlobError when an update or the base is unavailable."""
        from node.worker import ml

        jid, rn = int(r["job_id"]), int(r["round"])
        plan = self._plans[jid]
        rk = f"{jid}/{rn}"
        payloads: dict[str, bytes | None] = {}
        for p in r["participants"]:
            if p["outcome"] == "accepted":
                payloads[from_bech32(p["address"]).hex()] = self._payload(r, p, rk)
        base = self._base(job, r["base_model_hash"])
        corpus = self._corpus(job)
        out, excluded = ml.aggregate_payloads(plan, base, payloads, corpus)
        for who, why in sorted(excluded.items()):
            log.info("round %d/%d: update of %s left out of the aggregate: %s", jid, rn, who, why)
        return out.model, out.kept, sorted(excluded)

    def do_attest(self, job: dict[str, Any], r: dict[str, Any], height: int) -> None:
        jid, rn = int(r["job_id"]), int(r["round"])
        prog = self.progress.round(jid, rn)
        model_hash = prog.get("aggregated")
        if not (model_hash and self.store.has(model_hash) and "excluded" in prog):
            t0, wall0 = time.perf_counter(), time.time()
            new, included, excluded = self.aggregate_round(job, r)
            self.account("aggregate_s", time.perf_counter() - t0)
            self.span("aggregate", wall0, time.time())
            model_hash = self.store.put_bytes(new, tier="cold")
            self.store.pin(model_hash)
            self.progress.update(jid, rn, aggregated=model_hash, excluded=list(excluded))
            log.info(
                "round %d/%d: aggregated %d update(s) (%d left out) -> model %s",
                jid,
                rn,
                len(included),
                len(excluded),
                model_hash[:12],
            )
        excluded_hex = self.progress.round(jid, rn).get("excluded") or []
        res = self._send(
            build_attest(
                jid, rn, bytes.fromhex(model_hash), [bytes.fromhex(a) for a in excluded_hex]
            )
        )
        self.progress.update(jid, rn, attested=res["txhash"])
        self.account("attested", time.time())
        self.stats.attested += 1
        log.info("round %d/%d: attested %s at height %d", jid, rn, model_hash[:12], res["height"])

    # ------------------------------------------------------------------------- finalized

    def on_finalized(self, r: dict[str, Any]) -> None:
        jid, rn = int(r["job_id"]), int(r["round"])
        prog = self.progress.round(jid, rn)
        if prog.get("final"):
            return
        try:
            self.store.release_round(f"{jid}/{rn}")
            h = r["attested_model_hash"]
            if h and self.store.has(h):
                self.store.pin(h)
        except Exception as e:  # noqa: BLE001 (a peer's or the chain's answer must never stop the worker)
            log.warning("round %d/%d: releasing blobs failed: %s", jid, rn, e)
        self.gc()  # earlier rounds' temp blobs whose margin has passed
        me = next((p for p in r["participants"] if p["address"] == self.me), None)
        if me is not None:
            log.info(
                "round %d/%d finalized: %s, reward %d, slashed %d",
                jid,
                rn,
                me["outcome"],
                me["reward"],
                me["slashed"],
            )
        self.account("finalized", time.time(), f"{jid}/{rn}")
        self.progress.update(jid, rn, final=True)
        self.write_stats()

    def gc(self) -> None:
        """The blob store's gc: the temp blobs (trace states) of rounds finalized more than the
        store's temp_margin_s ago are deleted; pinned (cold) and hot blobs stay (node/blobs)."""
        self._last_gc = time.monotonic()
        try:
            rep = self.store.gc()
        except Exception as e:  # noqa: BLE001 (a full or damaged disk must not stop the worker)
            log.warning("blob store gc failed: %s: %s", e.__class__.__name__, e)
            return
        if rep.expired or rep.evicted:
            log.info(
                "blob store gc: %d expired temp blob(s), %d evicted, %d B freed",
                len(rep.expired),
                len(rep.evicted),
                rep.freed_bytes,
            )

    def _rounds_with_served(self, server: dict[str, Any]) -> dict[str, dict[str, float]]:
        """``timing`` with what the blob server sent and read for each round added: its body
        bytes by kind and response heads to ``bytes_out.KIND``, the request heads it read to
        ``bytes_in.http`` (node/blobs/server.py attributes them to rounds). A copy: the server's
        counters are cumulative, ``timing``'s fetch counters additive."""
        rounds = {k: dict(v) for k, v in list(self.timing.items())}
        for rk, kinds in (server.get("sent_by_round") or {}).items():
            t = rounds.setdefault(rk or "-", {})
            for kind, n in kinds.items():
                t[f"bytes_out.{kind}"] = t.get(f"bytes_out.{kind}", 0) + n
        for rk, n in (server.get("received_by_round") or {}).items():
            t = rounds.setdefault(rk or "-", {})
            t["bytes_in.http"] = t.get("bytes_in.http", 0) + n
        return rounds

    def write_stats(self) -> None:
        """DATA_DIR/stats.json: per-round seconds and bytes, the blob server's counters, totals."""
        import json
        import os

        server = self.server.stats.to_dict() if self.server is not None else {}
        out = {
            "rounds": self._rounds_with_served(server),
            "server": server,
            "totals": {k: v for k, v in vars(self.stats).items() if k != "events"},
            "traffic": self.traffic.to_dict(),
        }
        path = self.cfg.data_dir / "stats.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(out, sort_keys=True, indent=1))
        os.replace(tmp, path)
