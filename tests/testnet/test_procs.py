"""node.local.procs: a detached child found again from its pid file, a stale or foreign pid never
believed, a pid file never half written, the group stopped."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from node.local import procs


def test_spawn_find_and_stop_a_detached_child(tmp_path: Path) -> None:
    pid_file = tmp_path / "x.pid"
    argv = [sys.executable, "-c", "import time; time.sleep(60)", "marker-procs-test"]
    pid = procs.spawn(argv, log=tmp_path / "x.log", pid_file=pid_file)
    try:
        assert procs.read_pid(pid_file) == pid
        assert procs.running(pid_file, "marker-procs-test") == pid
        assert procs.running(pid_file, "cometbft") is None  # alive, but not what we started
        assert os.getpgid(pid) == pid  # its own session and group
        assert not list(tmp_path.glob(".*.tmp"))  # the pid file was renamed into place
    finally:
        assert procs.stop_group(pid, timeout=10)
    assert not procs.alive(pid)
    assert procs.running(pid_file, "marker-procs-test") is None
    assert procs.stop_group(pid) is False  # already gone


def test_invalid_pid_files_name_no_process(tmp_path: Path) -> None:
    f = tmp_path / "p.pid"
    assert procs.read_pid(f) is None  # absent
    for junk in ("", "12ab", "-1", "0", "\x00"):
        f.write_text(junk)
        assert procs.read_pid(f) is None and procs.running(f, "") is None, junk
    f.write_text(f"{os.getpid()}\n")  # a live process that is not the one we started
    assert procs.running(f, "no-such-marker-in-pytest") is None


def test_running_waits_out_a_child_inside_execve(tmp_path: Path, monkeypatch) -> None:
    """Popen returns when the close-on-exec pipe closes, before the kernel has set up the new
    command line: /proc/PID/cmdline reads empty for a moment (seen 2 in 150 spawns under load)."""
    pid_file = tmp_path / "self.pid"
    procs.write_pid(pid_file, os.getpid())
    real = Path.read_bytes
    calls = {"n": 0}

    def mid_exec(self: Path) -> bytes:
        if self.name == "cmdline" and calls["n"] < 3:
            calls["n"] += 1
            return b""
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", mid_exec)
    assert procs.running(pid_file, "pytest") == os.getpid()
    assert calls["n"] == 3


def test_stop_group_returns_only_when_a_lingering_member_is_gone(tmp_path: Path) -> None:
    """The flaky restart (node0 found dead right after `testnet up` moved a just-stopped net):
    stop_group SIGKILLed what was left of the group and returned at once, so a cometbft still
    dying could hold its data folder's lock while the next start opened it. Now it returns only
    once no member of the group is left."""
    member = tmp_path / "member.pid"
    # the leader exits on SIGTERM; its child ignores SIGTERM and lives on in the group until the
    # SIGKILL that stop_group sends to what is left
    script = (
        "import os, signal, subprocess, sys, time\n"
        "c = subprocess.Popen([sys.executable, '-c', "
        "'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)'])\n"
        f"open({str(member)!r}, 'w').write(str(c.pid))\n"
        "time.sleep(60)\n"
    )
    pid = procs.spawn(
        [sys.executable, "-c", script, "marker-group"],
        log=tmp_path / "g.log",
        pid_file=tmp_path / "g.pid",
    )
    for _ in range(200):
        if procs.read_pid(member) is not None:
            break
        time.sleep(0.05)
    child = procs.read_pid(member)
    assert child is not None and os.getpgid(child) == pid
    assert procs.stop_group(pid, timeout=5)
    assert not procs.alive(child)
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        pass
    else:
        raise AssertionError("a member of the stopped group is still there")
