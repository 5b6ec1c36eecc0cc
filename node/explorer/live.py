"""A provider's live training figures, read from its worker's ``/metrics`` (node/metrics.py
``WorkerMetrics``): self-reported, not proven (the job page says so), and read at most every
LIVE_EVERY_S per endpoint so a page view never waits on a slow worker twice."""

from __future__ import annotations

import time
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

LIVE_EVERY_S = 10.0  # a provider's /metrics is read at most this often
LIVE_TIMEOUT_S = 0.5
LIVE_RETRY_S = 60.0  # ... and not again for this long after it did not answer
LIVE_FIGURES = frozenset({"loss", "round", "round_steps", "round_seconds"})


class LiveFigures:
    """endpoint -> (when read, figures), refreshed on demand."""

    def __init__(self) -> None:
        self._live: dict[str, tuple[float, dict[str, Any]]] = {}

    def progress(self, endpoint: str) -> dict[str, Any]:
        """A provider's own figures from its blob endpoint's ``/metrics`` (the worker's
        ``WorkerMetrics``: per job the round it last trained, its steps, wall time and loss), read
        at most every LIVE_EVERY_S; ``{}`` when it does not answer. Self-reported, not proven:
        the page says so."""
        now = time.monotonic()
        when, figures = self._live.get(endpoint, (0.0, {}))
        wait = LIVE_EVERY_S if figures else LIVE_RETRY_S
        if when and now - when < wait:
            return figures
        try:
            figures = _read(endpoint)
        except (httpx.HTTPError, ValueError):
            figures = {}
        self._live[endpoint] = (now, figures)
        return figures


def _read(endpoint: str) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    r = httpx.get(endpoint.rstrip("/") + "/metrics", timeout=LIVE_TIMEOUT_S)
    if r.status_code == 200:
        jobs: dict[str, dict[str, float]] = {}
        for fam in text_string_to_metric_families(r.text):
            for smp in fam.samples:
                job = smp.labels.get("job")
                name = smp.name.removeprefix("loconet_training_")
                if job is not None and name in LIVE_FIGURES:
                    jobs.setdefault(job, {})[name] = smp.value
                elif smp.name == "loconet_training_steps_total":
                    figures["steps_total"] = smp.value
        figures["jobs"] = jobs
    return figures
