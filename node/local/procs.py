"""Detached child processes of the local-network tools (validator nodes, provider workers, anvil,
the relayer): started in their own session with a pid file, found again from the pid file and
/proc, stopped as a process group.

- A pid file is written atomically (temp file + rename): a crash never leaves half a pid under
  the file's name.
- A pid is believed only while /proc says the process is alive (not a zombie) and its command
  line carries the expected marker: pids are reused, and a stale pid file must never make the
  tools signal someone else's process.
- A child runs in a new session, so ``kill -9`` of its group takes its own children (a node's
  cometbft) with it, and a Ctrl-C in the terminal that started it does not reach it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from node.paths import PROJECT_ROOT


def spawn(argv: list[str], *, log: Path, pid_file: Path, env: dict[str, str] | None = None) -> int:
    """Start ``argv`` detached (new session, stdin closed, stdout and stderr appended to
    ``log``, unbuffered Python), write its pid to ``pid_file``; return the pid."""
    out = open(log, "ab")  # noqa: SIM115 (handed to the detached child)
    try:
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            cwd=str(PROJECT_ROOT),
        )
    finally:
        out.close()
    write_pid(pid_file, proc.pid)
    return proc.pid


def write_pid(pid_file: Path, pid: int) -> None:
    tmp = pid_file.with_name(f".{pid_file.name}.tmp")
    tmp.write_text(f"{pid}\n")
    os.replace(tmp, pid_file)


def read_pid(pid_file: Path) -> int | None:
    """The pid the file names, or None (no file, not a number)."""
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if pid > 0 else None


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def running(pid_file: Path, marker: str) -> int | None:
    """The pid in ``pid_file`` if that process is alive and its command line contains
    ``marker``; else None."""
    pid = read_pid(pid_file)
    if pid is None or not alive(pid):
        return None
    # a child caught inside execve (Popen returns once the close-on-exec pipe closes, before the
    # kernel has set up the new command line) reads an empty cmdline for a moment: wait it out
    for _ in range(100):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            return None
        if cmd or not alive(pid):
            break
        time.sleep(0.01)
    return pid if marker in cmd else None


def group_members(pgid: int, markers: tuple[str, ...] = ("cometbft", "node.cli")) -> list[int]:
    """Live processes of group ``pgid`` whose command line carries one of ``markers``."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
            if int(fields[2]) != pgid or fields[0] == "Z":
                continue
            cmd = (entry / "cmdline").read_bytes().decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        if any(m in cmd for m in markers):
            out.append(int(entry.name))
    return out


def kill_members(pgid: int) -> None:
    """SIGKILL what is left of group ``pgid`` (e.g. a node's cometbft after its app died)."""
    for member in group_members(pgid):
        try:
            os.kill(member, signal.SIGKILL)
        except ProcessLookupError:
            pass


def stop_group(pid: int, *, kill: bool = False, timeout: float = 20.0) -> bool:
    """SIGTERM (SIGKILL with ``kill``) to process group ``pid``; wait up to ``timeout`` for it,
    then SIGKILL what is left of the group. False if it was already gone."""
    try:
        os.killpg(pid, signal.SIGKILL if kill else signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while True:
        if not alive(pid):
            # reap it if we are its parent (tests), else it lingers as a zombie: a zombie that
            # died before the first look was left unreaped, its group still answered killpg, and
            # a second stop_group said True ("stopped") for a process long gone
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            break
        if time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    try:
        # whatever is left of the group (cometbft after a stuck stop)
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return True
    # and wait until it is gone: a cometbft still dying holds its data folder's lock, and the
    # node started next in that folder would fail to open its store and exit (a restart that
    # followed a stop at once on a loaded machine found node0 dead)
    group_gone(pid, timeout=GROUP_GONE_S)
    return True


GROUP_GONE_S = 10.0


def group_gone(pgid: int, timeout: float) -> bool:
    """Wait up to ``timeout`` until no process of group ``pgid`` exists; whether none does."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pgid, os.WNOHANG)  # the leader, when it is our child, is a zombie until then
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # a member of another user's: not ours to wait for
            return False
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
