"""State sync on a real 4-validator network: `loconet testnet add-node --state-sync` joins from a
snapshot that cometbft fetched over p2p (chunk by chunk, from the validators' snapshot
connections) and verified with its light client; the joined node's own app computes the
network's app hashes afterwards, and its block store starts above height 1 (it did not replay)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from node.client.rpc import Client
from node.local.manifest import load, nodes_of
from node.local.testnet import TESTNET_APP
from tests.kits.tnkit import app_hash_at, cli, height, network, wait_for

pytestmark = pytest.mark.integration


def test_add_node_with_state_sync_joins_from_a_snapshot(tmp_path: Path) -> None:
    with network(tmp_path) as (d, nodes):
        snaps = Path(nodes[0].home) / "data" / "snapshots"
        first = wait_for(
            "a snapshot on node0",
            lambda: sorted(int(p.name) for p in snaps.glob("*") if p.name.isdigit()),
            timeout=120,
        )
        assert first[0] % TESTNET_APP["snapshot_interval"] == 0
        r = cli(
            "testnet",
            "add-node",
            "--state-sync",
            "--dir",
            str(d),
            "--timeout",
            "150",
            "-o",
            "json",
            timeout=240,
        )
        new = nodes_of(load(d))[-1]
        joined = json.loads(r.stdout)
        assert (joined["name"], joined["state_sync"]) == (new.name, True), r.stdout + r.stderr

        with Client(new.rpc_url, timeout=5) as c:
            earliest = int(c.status()["sync_info"]["earliest_block_height"])
        assert earliest == joined["earliest_block_height"]
        assert earliest > 1, (
            "the joined node's block store starts at height 1: it replayed the chain"
        )
        log = (Path(new.home) / "node.log").read_text(errors="replace")
        assert "state restored from snapshot" in log, log[-3000:]
        restored = int(log.split("state restored from snapshot ")[1].split(":")[0])
        assert restored % TESTNET_APP["snapshot_interval"] == 0 and earliest == restored + 1
        served = (Path(nodes[0].home) / "node.log").read_text(errors="replace")
        chunks = int(served.split(f"snapshot of height {restored}: ")[1].split(" chunks")[0])
        assert chunks >= 2  # 1 KiB chunks (TESTNET_APP): fetched and verified one by one

        # the joined node's own app keeps computing the network's app hash, block after block
        target = height(nodes[0]) + 3
        wait_for(f"{new.name} at height {target}", lambda: height(new) >= target, timeout=90)
        with Client(new.rpc_url, timeout=5) as c:
            info = c.call("abci_info")["response"]
        h = int(info["last_block_height"])
        assert h > restored
        wait_for(f"block {h + 1} on node0", lambda: height(nodes[0]) > h, timeout=30)
        assert base64.b64decode(info["last_block_app_hash"]).hex() == app_hash_at(nodes[0], h + 1)
        assert app_hash_at(new, h) == app_hash_at(nodes[0], h)
