"""Crash-safe writes of the small state files of a home (keys, settlement key, client config,
app.toml, genesis, testnet manifest): a ``kill -9`` or a full disk mid-write never leaves a
half-written file under a name the node reads.

The bytes go to a hidden temp file in the same folder (``.NAME.RANDOM.tmp``: no reader matches
it, ``keys list`` globs ``*.json``), are fsynced, then take the final name in one step:
``os.replace`` (``write_atomic``) or ``os.link``, which fails if the name exists
(``write_new_atomic``: a key is never overwritten, even by a concurrent ``keys add``). The folder
is fsynced after. ``locked`` serialises read-modify-write cycles of one file across processes
(two ``loconet config set`` at once: neither update is lost)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _mkstemp(path: Path) -> tuple[int, str]:
    """A private temp file beside ``path``; an error names ``path`` (its folder is missing, not
    writable...), not the temp file's random name."""
    try:
        return tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise OSError(e.errno, e.strerror, str(path)) from None


def _write_temp(path: Path, data: bytes, mode: int) -> str:
    fd, tmp = _mkstemp(path)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return tmp


def write_atomic(path: Path | str, data: bytes | str, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` (str is UTF-8) in one step; readers see the old file or the
    new one, never part of it."""
    path = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    tmp = _write_temp(path, raw, mode)
    try:
        os.replace(tmp, path)
    except OSError as e:  # e.g. PATH is a folder: name PATH, not the temp file
        Path(tmp).unlink(missing_ok=True)
        raise OSError(e.errno, e.strerror, str(path)) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def copy_atomic(src: Path | str, dst: Path | str, mode: int = 0o644) -> None:
    """Copy ``src`` to ``dst`` (streamed, any size) as ``write_atomic`` writes: complete or not
    at all under ``dst``."""
    dst = Path(dst)
    fd, tmp = _mkstemp(dst)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as out, open(src, "rb") as f:
            shutil.copyfileobj(f, out, 1 << 20)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, dst)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise OSError(e.errno, e.strerror, str(dst) if e.filename == tmp else e.filename) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(dst.parent)


def write_new_atomic(path: Path | str, data: bytes | str, mode: int = 0o600) -> None:
    """Create ``path`` holding ``data``, complete or not at all; FileExistsError if the name
    exists (never overwritten, even when two processes race for it)."""
    path = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    tmp = _write_temp(path, raw, mode)
    try:
        os.link(tmp, path)  # atomic and exclusive: EEXIST when the name is taken
    finally:
        Path(tmp).unlink(missing_ok=True)
    _fsync_dir(path.parent)


@contextlib.contextmanager
def locked(path: Path | str) -> Iterator[None]:
    """An exclusive advisory lock on ``PATH.lock`` for the block (blocks until free)."""
    lock = Path(str(path) + ".lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class Held(Exception):
    """``hold``: another live process holds the lock; ``pid`` is what it wrote there."""

    def __init__(self, path: Path, pid: str) -> None:
        super().__init__(f"{path} is held by pid {pid}")
        self.path, self.pid = path, pid


def hold(path: Path | str) -> int:
    """Take an exclusive lock on ``path`` for the life of this process (flock: released when the
    process ends, kill -9 included) and write our pid in it; returns the fd (``os.close`` it to
    release). Raises ``Held`` naming the holder's pid when another process has it."""
    path = Path(path)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise Held(path, holder) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd
