"""The worker's slow duties, beside its training: re-executing a challenged segment to vote on it,
and aggregating a round's accepted updates to attest the next model.

The worker's loop must never wait on one of them. A verification of round r that takes a minute
must not hold back round r + 1's commitment, whose training ran meanwhile on the training thread,
nor another round's reveal, whose window may be shorter. So the loop only *queues* a slow duty
here and goes on; ``threads`` worker threads (default 1: with the training thread, two of the
machine's cores) run them, the one whose window ends first first. A duty already queued or
running is not queued twice; each duty handles its own errors and retries (the loop queues it
again on a later block).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable

log = logging.getLogger("loconet.worker")


class DutyQueue:
    """Deadline-ordered background duties (earliest window end first, then queue order)."""

    def __init__(self, threads: int = 1, *, on_start: Callable[[], None] | None = None) -> None:
        self._heap: list[tuple[int, int, str, Callable[[], None]]] = []
        self._names: set[str] = set()  # queued or running
        self._running: set[str] = set()
        self._seq = itertools.count()
        self._cv = threading.Condition()
        self._stopped = False
        self._on_start = on_start
        self._threads = [
            threading.Thread(target=self._work, name=f"duty-{i}", daemon=True)
            for i in range(max(1, threads))
        ]
        for t in self._threads:
            t.start()

    def submit(self, name: str, deadline: int, fn: Callable[[], None]) -> bool:
        """Queue ``fn`` (which must not raise: it reports its own failure) unless a duty of that
        name is queued or running. ``deadline``: the height its window ends (0: none known, last).
        True when queued."""
        with self._cv:
            if self._stopped or name in self._names:
                return False
            self._names.add(name)
            key = deadline if deadline > 0 else 1 << 62
            heapq.heappush(self._heap, (key, next(self._seq), name, fn))
            self._cv.notify()
            return True

    def busy(self, name: str) -> bool:
        with self._cv:
            return name in self._names

    def running(self) -> list[str]:
        with self._cv:
            return sorted(self._running)

    def queued(self) -> list[str]:
        """Names waiting, in the order they will run."""
        with self._cv:
            return [n for _, _, n, _ in sorted(self._heap)]

    def join(self, timeout: float | None = None) -> bool:
        """Wait until nothing is queued or running (True), or ``timeout`` seconds (False)."""
        with self._cv:
            return self._cv.wait_for(lambda: not self._names, timeout)

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._heap.clear()
            self._cv.notify_all()

    def _work(self) -> None:
        if self._on_start is not None:
            self._on_start()
        while True:
            with self._cv:
                while not self._heap and not self._stopped:
                    self._cv.wait()
                if self._stopped:
                    return
                _, _, name, fn = heapq.heappop(self._heap)
                self._running.add(name)
            try:
                fn()
            except Exception as e:  # noqa: BLE001 (fn reports its own; never let the thread die)
                log.warning("%s: %s: %s", name, e.__class__.__name__, e)
            finally:
                with self._cv:
                    self._running.discard(name)
                    self._names.discard(name)
                    self._cv.notify_all()
