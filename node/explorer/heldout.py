"""Held-out loss of attested models, evaluated by the explorer itself.

The chain records only hashes: a round's attested model is the hash 2/3 of the accepted stake
signed. For the job page's training curve the explorer fetches each attested model (and the
job's dataset) by hash from the job's blob sources and the providers' endpoints
(``node.blobs.BlobClient`` checks every byte against the hash, so a peer cannot hand it another
model), evaluates it on the corpus' held-out split exactly as ``make demo`` does
(``node.worker.ml.val_loss``), and caches the figure by model hash for the life of the process.
Evaluation runs on one background thread, one model at a time, newest job first; a model no
source serves is retried after ``RETRY_S``. Nothing here blocks a page: a figure not yet computed
is shown as pending.
"""

from __future__ import annotations

import logging
import queue
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from node.blobs import BlobClient, BlobStore

log = logging.getLogger("loconet.explorer")

RETRY_S = 30.0
FETCH_TIMEOUT_S = 20.0


class HeldOut:
    def __init__(self, cache_dir: Path | None = None) -> None:
        self._tmp = None if cache_dir else tempfile.TemporaryDirectory(prefix="loconet-explorer-")
        self.dir = Path(cache_dir) if cache_dir else Path(self._tmp.name)  # type: ignore[union-attr]
        self.loss: dict[str, float] = {}  # model hash -> held-out loss (nats per byte)
        self.failed: dict[str, tuple[float, str]] = {}  # model hash -> (retry after, why)
        self._queued: set[str] = set()
        self._q: queue.Queue[tuple[dict[str, Any], str, list[str]]] = queue.Queue()
        self._lock = threading.Lock()
        self._corpora: dict[str, Any] = {}
        self._thread = threading.Thread(target=self._run, name="heldout", daemon=True)
        self._thread.start()

    def want(self, job: dict[str, Any], urls: list[str]) -> None:
        """Queue the job's initial model and every attested model not evaluated yet."""
        hashes = [job["spec"]["initial_model_hash"]] + [
            r["attested_model_hash"]
            for r in sorted(job.get("round_records", []), key=lambda r: r["round"])
            if r["attested_model_hash"]
        ]
        now = time.monotonic()
        with self._lock:
            for h in hashes:
                if h in self.loss or h in self._queued:
                    continue
                if h in self.failed and self.failed[h][0] > now:
                    continue
                self._queued.add(h)
                self._q.put((job, h, [*job["spec"].get("blob_sources", []), *urls]))

    def get(self, model_hash: str) -> float | None:
        return self.loss.get(model_hash)

    def why_missing(self, model_hash: str) -> str:
        if model_hash in self.failed:
            return self.failed[model_hash][1]
        return "computing…" if model_hash in self._queued else "not evaluated"

    def _run(self) -> None:
        while True:
            job, h, urls = self._q.get()
            try:
                loss = self._evaluate(job, h, urls)
                with self._lock:
                    self.loss[h] = loss
                    self.failed.pop(h, None)
            except Exception as e:  # noqa: BLE001 (a source down, a job this trainer cannot load)
                why = f"{type(e).__name__}: {e}"[:200]
                log.warning("held-out loss of %s not computed (retried later): %s", h[:12], why)
                with self._lock:
                    self.failed[h] = (time.monotonic() + RETRY_S, why)
            finally:
                with self._lock:
                    self._queued.discard(h)

    def _evaluate(self, job: dict[str, Any], h: str, urls: list[str]) -> float:
        # lazy: node.worker.ml and trainer.data load torch; the explorer without --heldout (and
        # `loconet --help`) must not
        from node.worker import ml
        from trainer.data import Corpus

        if not urls:
            raise RuntimeError("no blob source or provider endpoint to fetch it from")
        plan = ml.JobPlan.from_job(job)
        store = BlobStore(self.dir / "blobs", quota_bytes=1 << 30)
        with BlobClient(timeout_s=FETCH_TIMEOUT_S, max_bytes=1 << 30) as fetcher:
            if plan.dataset_id not in self._corpora:
                path = fetcher.fetch(plan.dataset_id, urls, store, give_up_after_s=60)
                self._corpora[plan.dataset_id] = Corpus(Path(path).read_bytes())
            model = Path(fetcher.fetch(h, urls, store, give_up_after_s=60)).read_bytes()
        return float(ml.val_loss(plan, model, self._corpora[plan.dataset_id]))
