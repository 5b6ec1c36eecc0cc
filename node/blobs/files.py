"""The blob store's files: names checked to be hashes, ``tmp/`` writes made durable and renamed
into ``blobs/``, stale temp files cleaned, the folder scanned. No metadata here: what a blob's
tier is, and when it may go, is ``node/blobs/retention.py`` and ``BlobStore``'s metadata."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import time
import uuid
from pathlib import Path

from node.blobs.errors import InvalidHash

log = logging.getLogger("loconet.blobs")

HASH_RE = re.compile(r"[0-9a-f]{64}")
CHUNK = 1 << 20
STALE_TMP_AGE_S = 24 * 3600.0  # a .part file this old is removed even if its pid looks alive


def check_hash(h: object) -> str:
    """``h`` if it is a sha256 hex string (64 lowercase hex characters), else ``InvalidHash``."""
    if not isinstance(h, str) or HASH_RE.fullmatch(h) is None:
        shown = repr(h) if len(repr(h)) <= 80 else repr(h)[:77] + "..."
        raise InvalidHash(f"not a sha256 hash (64 lowercase hex characters): {shown}")
    return h


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


class BlobFiles:
    """``ROOT/blobs/ab/abcd...`` (one file per blob, named by its hash) and ``ROOT/tmp/`` (writes
    in progress, ``PID.RANDOM.part``); both folders are created."""

    def __init__(self, root: Path) -> None:
        self.blob_dir = root / "blobs"
        self.tmp_dir = root / "tmp"
        self.blob_dir.mkdir(parents=True, exist_ok=True)
        self.tmp_dir.mkdir(parents=True, exist_ok=True)

    def final_path(self, h: str) -> Path:
        return self.blob_dir / h[:2] / h

    def new_tmp_path(self) -> Path:
        return self.tmp_dir / f"{os.getpid()}.{uuid.uuid4().hex}.part"

    def place(self, tmp: Path, h: str) -> None:
        """Renames the complete, fsynced temp file ``tmp`` onto the blob's final name, and
        makes the rename (and a new ``blobs/XX/`` folder) durable."""
        final = self.final_path(h)
        if not final.parent.is_dir():
            final.parent.mkdir(exist_ok=True)
            fsync_dir(final.parent.parent)  # the new blobs/XX/ entry itself, on disk
        os.replace(tmp, final)
        fsync_dir(final.parent)

    def hashes_on_disk(self) -> set[str]:
        """The hashes of the blob files present (a file whose name is no hash, or that sits in
        another hash's folder, is not a blob)."""
        on_disk: set[str] = set()
        for sub in self.blob_dir.iterdir():
            if not sub.is_dir():
                continue
            for f in sub.iterdir():
                if HASH_RE.fullmatch(f.name) and f.name[:2] == sub.name:
                    on_disk.add(f.name)
        return on_disk

    def clean_stale_tmp(self) -> int:
        """Remove ``.part`` files whose writer process is dead (or that are very old)."""
        removed = 0
        now = time.time()
        for p in self.tmp_dir.iterdir():
            pid_text = p.name.split(".", 1)[0]
            try:
                pid = int(pid_text)
                age = now - p.stat().st_mtime
            except (ValueError, FileNotFoundError):
                pid, age = -1, STALE_TMP_AGE_S + 1
            if pid == os.getpid() and age <= STALE_TMP_AGE_S:
                continue  # another writer in this process
            if pid > 0 and pid_alive(pid) and age <= STALE_TMP_AGE_S:
                continue
            p.unlink(missing_ok=True)
            removed += 1
        if removed:
            log.info("removed %d stale temp file(s) from %s", removed, self.tmp_dir)
        return removed
