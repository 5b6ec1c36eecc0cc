"""`loconet testnet` as an operator meets it (issue 13 item 4): `start` on a running node says so,
`up` on an existing folder honours --base-port, `add-node` with the network down fails at once
and leaves nothing behind."""

from __future__ import annotations

import json
import time

import pytest

from node.local.manifest import load, nodes_of
from tests.kits.tnkit import cli, free_base_port

pytestmark = pytest.mark.integration


def test_start_running_base_port_and_add_node_down(tmp_path):
    d = tmp_path / "net"
    base = free_base_port(3)
    cli(
        "testnet",
        "up",
        "--validators",
        "1",
        "--accounts",
        "0",
        "--base-port",
        str(base),
        "--dir",
        str(d),
    )
    try:
        r = cli("testnet", "start", "node0", "--dir", str(d))
        assert "already running" in r.stdout and "started" not in r.stdout
        r = cli("testnet", "start", "node0", "--dir", str(d), "-o", "json")
        assert json.loads(r.stdout)["started"] is False
        r = cli("testnet", "down", "--dir", str(d), "-o", "json")
        assert json.loads(r.stdout)["stopped"] == ["node0"]
        r = cli("testnet", "stop", "node0", "--dir", str(d), "-o", "json")
        assert json.loads(r.stdout) == {
            "name": "node0",
            "kind": "node",
            "was_running": False,
            "killed": False,
        }

        # add-node with the network down: fails fast, no node1 left behind
        t0 = time.monotonic()
        r = cli("testnet", "add-node", "--dir", str(d), check=False)
        assert (
            r.returncode == 1
            and "is down" in r.stderr
            and f"loconet testnet up --dir {d}" in r.stderr
        )
        assert time.monotonic() - t0 < 30
        assert [n.name for n in nodes_of(load(d))] == ["node0"] and not (d / "node1").exists()

        # up again on other ports: honoured, and the node answers there
        other = free_base_port(3)
        r = cli("testnet", "up", "--base-port", str(other), "--dir", str(d), "-o", "json")
        rows = json.loads(r.stdout)["nodes"]
        assert rows[0]["rpc"] == f"http://127.0.0.1:{other + 1}" and load(d)["base_port"] == other
        st = json.loads(cli("status", "--node", f"127.0.0.1:{other + 1}", "-o", "json").stdout)
        assert st["latest_height"] >= 2
        # moving a running network is refused with the exact commands
        r = cli("testnet", "up", "--base-port", str(base), "--dir", str(d), check=False)
        assert (
            r.returncode == 1
            and "loconet testnet down" in r.stderr
            and f"--base-port {base}" in r.stderr
        )
    finally:
        cli("testnet", "down", "--purge", "--dir", str(d), check=False)
