"""Issue 28, item 12: after ``kill -9`` of ``loconet start``'s own process (not its process
group), its cometbft child was still running 15 s later, holding the node's ports and blocking a
restart. cometbft is now started with PR_SET_PDEATHSIG (SIGKILL) and dies with its parent.

A cometbft that is well usually exits by itself too once its ABCI connections drop (it logs
"Did the application crash?" and sends itself SIGTERM), so the real node's test passes on a
machine where that shutdown does not hang; the second test stands in for one that hangs or
ignores SIGTERM (a child that outlives the ABCI server) and fails without the death signal."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.kits.nodekit import Node

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux"),
]


def children_of(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(entry))
    return out


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has died


def test_cometbft_dies_with_its_killed_supervisor(tmp_path: Path) -> None:
    node = Node(tmp_path / "home")
    node.init()
    node.start()
    assert node.proc is not None
    try:
        node.wait_height(1)
        comet = [
            c
            for c in children_of(node.proc.pid)
            if "cometbft" in Path(f"/proc/{c}/cmdline").read_text()
        ]
        assert len(comet) == 1, node.tail()
        os.kill(node.proc.pid, signal.SIGKILL)  # the supervisor only, not its process group
        node.proc.wait(10)
        deadline = time.monotonic() + 20  # generous: the kill is immediate
        while alive(comet[0]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(comet[0]), f"cometbft (pid {comet[0]}) outlived its supervisor"
    finally:
        try:
            os.killpg(node.proc.pid, signal.SIGKILL)  # whatever is left of the group
        except ProcessLookupError:
            pass


def test_a_cometbft_that_ignores_sigterm_dies_with_its_killed_supervisor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stub = tmp_path / "cometbft"  # no ABCI connection to lose, SIGTERM ignored: only the parent
    stub.write_text(  # death signal (SIGKILL) ends it
        f"#!{sys.executable}\n"
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "time.sleep(3600)\n"
    )
    stub.chmod(0o755)
    node = Node(tmp_path / "home")
    node.init()
    monkeypatch.setenv("LOCONET_COMETBFT", str(stub))  # node/paths.py: the binary to run
    node.start()
    assert node.proc is not None
    try:
        deadline = time.monotonic() + 30
        while "node started" not in (node.home / "node.out").read_text():
            assert node.proc.poll() is None and time.monotonic() < deadline, node.tail()
            time.sleep(0.1)
        child = children_of(node.proc.pid)
        assert len(child) == 1, node.tail()
        os.kill(node.proc.pid, signal.SIGKILL)
        node.proc.wait(10)
        deadline = time.monotonic() + 20
        while alive(child[0]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(child[0]), f"cometbft (pid {child[0]}) outlived its supervisor"
    finally:
        try:
            os.killpg(node.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
