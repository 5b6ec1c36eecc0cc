"""The worker's own progress, one JSON file written atomically (temp file, fsync, rename, fsync
of the folder): after ``kill -9`` it holds either the previous or the new record, never half.

Per round (key ``"JOB/ROUND"``): the blobs this worker made (payload hash, trace state hashes),
the txs it got into a block (submit, reveal, votes, attest) and the model it aggregated. The chain
is the authority on what landed; the file only spares a restart from redoing work and from
sending a tx whose effect it already saw."""

from __future__ import annotations

import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any


def _well_formed(data: object) -> bool:
    """``{"rounds": {"JOB/ROUND": {...}, ...}, ...}`` with decimal JOB and ROUND."""
    if not isinstance(data, dict) or not isinstance(data.get("rounds"), dict):
        return False
    for key, entry in data["rounds"].items():
        job, sep, rnd = str(key).partition("/")
        if not (sep and job.isascii() and job.isdigit() and rnd.isascii() and rnd.isdigit()):
            return False
        if not isinstance(entry, dict):
            return False
    return True


class Progress:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        # the loop and the duty threads (node/worker/duties.py) both record: one writer at a time
        self._lock = threading.RLock()
        self.data: dict[str, Any] = {"version": 1, "rounds": {}}
        if self.path.exists():
            try:
                loaded = json.loads(self.path.read_text())
                if not _well_formed(loaded):  # another shape: forget_before/update would raise
                    raise ValueError("not a progress record")
                self.data = loaded
            except (OSError, ValueError, RecursionError):
                # unreadable: keep it aside for a human, start from the chain's view
                self.path.replace(self.path.with_suffix(".corrupt"))

    def round(self, job: int, round_: int) -> dict[str, Any]:
        with self._lock:
            return self.data["rounds"].setdefault(f"{job}/{round_}", {})

    def update(self, job: int, round_: int, **fields: Any) -> None:
        with self._lock:
            self.round(job, round_).update(fields)
            self.save()

    def forget_before(self, job: int, round_: int) -> None:
        """Drop the records of this job's rounds below ``round_`` (finalized long ago)."""
        with self._lock:
            self._forget_before(job, round_)

    def _forget_before(self, job: int, round_: int) -> None:
        for key in [
            k
            for k in self.data["rounds"]
            if k.split("/")[0] == str(job) and int(k.split("/")[1]) < round_
        ]:
            del self.data["rounds"][key]
        self.save()

    def save(self) -> None:
        with self._lock:
            self._save()

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".progress-", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(self.data, f, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dfd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
