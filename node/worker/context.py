"""What every duty of the worker shares (``WorkerContext``): its config and key, the node
link, the blob store and the blobs it fetches, progress.json, the jobs' plans and the
accounting (stats.json). The duties (train.py, reveal.py, judge.py, attest.py) each hold the
context; the loop (worker.py) is the context itself, so a test that replaces one of its methods
(``fetch``, ``_send``) replaces it for every duty."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from abci_app.codec.address import from_bech32
from abci_app.merkle import bound_update_leaves, merkle_root
from node.blobs import BlobClient, BlobError, BlobStore, FetchFailed, Oversize
from node.blobs.server import kind_of_head
from node.client.job_inputs import fetch_job_inputs
from node.client.keys import Keyring
from node.client.market_msgs import send_tx
from node.worker import ml
from node.worker.follow import Nodes
from node.worker.progress import Progress
from node.worker.records import Job, Participant, Round
from node.worker.traffic import CountingNodes, Traffic
from trainer.data import Corpus

log = logging.getLogger("loconet.worker")

# a fetch starts no further location past this (its first locations, the ones the chain names
# for the blob, are always tried first; a peer that accepts and never answers costs 30 s)
FETCH_GIVE_UP_S = 120.0


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


@dataclass
class Stats:
    submitted: int = 0
    revealed: int = 0
    votes: int = 0
    attested: int = 0
    failures: int = 0
    trained_s: float = 0.0
    events: dict[str, int] = field(default_factory=dict)


def pick_device(device: str) -> str:
    """``--device``: auto (cuda when torch sees one), cpu or cuda."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise WorkerError("--device cuda: torch sees no CUDA device (use --device cpu or auto)")
    if device not in ("cpu", "cuda"):
        raise WorkerError(f"--device must be auto, cpu or cuda, not {device!r}")
    return device


def check_procs(procs: int, device: str, pipeline: int = 1, microbatches: int = 0) -> None:
    """``--procs``, ``--pipeline`` and ``--microbatches`` make an island the device can hold."""
    if procs < 1:
        raise WorkerError(f"--procs must be at least 1, not {procs}")
    if pipeline < 1:
        raise WorkerError(f"--pipeline must be at least 1 stage, not {pipeline}")
    if microbatches < 0:
        raise WorkerError(f"--microbatches must be at least 1 (0: automatic), not {microbatches}")
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


class WorkerContext:
    """The state and plumbing every duty shares (module docstring)."""

    def __init__(self, cfg: WorkerConfig) -> None:
        self.cfg = cfg
        self.key = Keyring(cfg.home).get(cfg.key)
        self.me = self.key.address
        self.me_bytes = self.key.address_bytes
        self.traffic = Traffic()  # bytes with the node (stats.json "traffic")
        self.nodes: Nodes = CountingNodes(cfg.nodes, self.traffic)
        cfg.data_dir.mkdir(parents=True, exist_ok=True)
        self.store = BlobStore(cfg.data_dir / "blobs", quota_bytes=cfg.quota_bytes)
        self.progress = Progress(cfg.data_dir / "progress.json")
        self.device = pick_device(cfg.device)
        self.stack = ml.worker_stack(self.device)  # what an exact-mode job must pin to be ours
        check_procs(cfg.procs, self.device, cfg.pipeline, cfg.microbatches)
        self.endpoint = ""
        self.server: Any = None  # the blob server, once started (stats.json reads its counters)
        self.stats = Stats()
        self._send_lock = threading.Lock()  # one tx at a time: each takes the account's sequence
        self._plans: dict[int, ml.JobPlan] = {}
        # per job, this worker's measured seconds per inner step (from its last round)
        self._step_s: dict[int, float] = {}
        self._heights: list[tuple[int, float]] = []  # (height, monotonic) as blocks were seen
        self._corpora: dict[str, Corpus] = {}
        self._peers: tuple[float, list[str]] = (0.0, [])
        self._here = threading.local()  # .key: the round ("JOB/ROUND") the current thread works for
        # per round: seconds and bytes by kind (stats.json)
        self.timing: dict[str, dict[str, float]] = {}
        # blob hash -> kind, for blobs whose bytes do not say it (trace lists, datasets): what
        # this worker stored or fetched them as (the blob server's classify hook reads it too)
        self._kinds: dict[str, str] = {}

    # ------------------------------------------------------------------------- accounting

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

    def block_s(self) -> float | None:
        """The chain's block interval as this worker saw it over its last blocks (None until it
        saw blocks a few seconds apart)."""
        if len(self._heights) < 3:
            return None
        (h0, t0), (h1, t1) = self._heights[0], self._heights[-1]
        return (t1 - t0) / (h1 - h0) if h1 > h0 and t1 - t0 > 1.0 else None

    # ------------------------------------------------------------------------- txs

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

    def _endpoint_of(self, address: str) -> str:
        try:
            return str(self.nodes.query_json(f"/provider/{address}")["endpoint"]).rstrip("/")
        except Exception:  # noqa: BLE001 (a peer's or the chain's answer must never stop the worker)
            return ""

    def _client(self) -> BlobClient:
        """A blob client for one fetch, naming the round it fetches for (X-Loconet-Round: the
        serving worker counts the bytes it sends for that round)."""
        return BlobClient(
            timeout_s=30.0,
            max_bytes=self.cfg.max_blob_bytes,
            round_label=getattr(self._here, "key", None),
        )

    def _classify(self, h: str, head: bytes) -> str:
        """A blob's kind (node/blobs/server.py KINDS): what this worker stored or fetched it as,
        else the kind byte of its canonical header, else ``dataset`` for a job's dataset, else
        ``other``."""
        kind = self._kinds.get(h)
        if kind is not None:
            return kind
        kind = kind_of_head(head)
        if kind == "other" and any(p.dataset_id == h for p in list(self._plans.values())):
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

    def _inputs(self, job: Job) -> tuple[Path, Path]:
        """(initial model, dataset) of ``job`` in our store, cold (pinned): fetched by
        node.client.job_inputs.fetch_job_inputs (each limited to the size the spec states) from the
        job's blob sources, then every peer, unless they are here already."""
        spec = job.spec
        missing = [h for h in (job.initial_model_hash, job.dataset_id) if not self.store.has(h)]
        self._kinds[job.initial_model_hash] = "model"
        self._kinds[job.dataset_id] = "dataset"
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

    def _corpus(self, job: Job) -> Corpus:
        if job.dataset_id not in self._corpora:
            _, data = self._inputs(job)
            self._corpora[job.dataset_id] = Corpus(Path(data).read_bytes())
        return self._corpora[job.dataset_id]

    def _base(self, job: Job, h: str) -> bytes:
        """A round's base model: the job's initial model (its size as the spec states it), or
        an attested one (with the outer momentum: at most ml.blob_cap of MODEL_PARTS)."""
        if h == job.initial_model_hash:
            return Path(self._inputs(job)[0]).read_bytes()
        cap = ml.blob_cap(self._plans[job.id], ml.MODEL_PARTS)
        return self.fetch(h, job.blob_sources, tier="hot", max_bytes=cap)

    def _loc(self, h: str) -> str:
        return f"{self.endpoint}/blob/{h}"

    def _payload(self, r: Round, p: Participant, rk: str | None) -> bytes | None:
        """The participant's committed payload, checked against its bound update root; None if
        the commitment names no fetchable blob or the bytes are not what it committed to (a
        content fault, the same for every honest worker: the provider's own locations send more
        than its committed payload_size, or other bytes); BlobError if it is unavailable. No
        location may send more than payload_size: a longer body is refused while it streams and
        the next location is tried."""
        c = p.commitment
        if c is None:
            return None
        h = c.blob_location.rstrip("/").rsplit("/", 1)[-1].lower()
        if len(h) != 64 or any(ch not in "0123456789abcdef" for ch in h):
            return None
        own = [c.blob_location, self._endpoint_of(p.address)]
        try:
            data = self.fetch(h, own, tier="hot", round_key=rk, max_bytes=c.payload_size)
        except FetchFailed as e:
            if any(isinstance(x, Oversize) and url in own for url, x in e.attempts):
                log.info(
                    "round %s: %s serves more than its committed %d B for %s: no payload",
                    r.key,
                    p.address,
                    c.payload_size,
                    h[:12],
                )
                return None
            raise
        leaves = bound_update_leaves(
            from_bech32(p.address), r.job_id, r.round, bytes.fromhex(r.base_model_hash), data
        )
        if len(data) != c.payload_size or merkle_root(leaves).hex() != c.update_root:
            return None
        return data
