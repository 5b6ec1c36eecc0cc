"""`loconet start --log-console` shows cometbft's log on the console (and still writes it to
HOME/cometbft.log); without a terminal and without the flag the console stays quiet."""

from __future__ import annotations

import signal
import subprocess

import pytest

from tests.kits.nodekit import LOCONET, ROOT, Node

pytestmark = pytest.mark.integration


def test_start_shows_cometbft_log_on_the_console(tmp_path):
    node = Node(tmp_path / "home")
    node.init()
    proc = subprocess.Popen(
        [*LOCONET, "start", "--home", str(node.home), "--log-console"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    node.proc = proc  # nodekit's waits watch it
    try:
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if "committed state" in line or "finalized block" in line or "executed block" in line:
                break
            assert len(seen) < 500, "".join(seen[-20:])
        assert any("node started" in s for s in seen)
        assert (node.home / "cometbft.log").read_text().strip()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
