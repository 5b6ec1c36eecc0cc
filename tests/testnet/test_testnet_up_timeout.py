"""`testnet up` whose wait times out (nodes producing, workers serving) stops what it started and
says how to retry or remove the network: on a busy machine the demo's `testnet up` gave up after
120 s and left 4 nodes and 4 workers running without a word on how to stop them."""

from __future__ import annotations

import pytest

from node.local.manifest import load, nodes_of
from node.local.testnet import is_running
from tests.kits.tnkit import cli, free_base_port

pytestmark = pytest.mark.integration


def test_testnet_up_timeout_stops_what_it_started(tmp_path):
    d = tmp_path / "net"
    base = free_base_port(2)
    args = ("--validators", "2", "--accounts", "0", "--base-port", str(base), "--dir", str(d))
    try:
        # 0.01 s: no network produces its second block that fast, so the wait times out
        r = cli("testnet", "up", *args, "--timeout", "0.01", check=False)
        assert r.returncode == 1, r.stdout + r.stderr
        assert "stopped node0, node1" in r.stderr or "stopped node1, node0" in r.stderr, r.stderr
        assert f"loconet testnet down --purge --dir {d}" in r.stderr
        assert f"loconet testnet up --dir {d}" in r.stderr
        nodes = nodes_of(load(d))
        assert nodes and not any(is_running(n) for n in nodes)
        # the kept files start again as the message says
        r = cli("testnet", "up", "--dir", str(d), "-o", "json")
        assert all(is_running(n) for n in nodes)
    finally:
        cli("testnet", "down", "--purge", "--dir", str(d), check=False)
