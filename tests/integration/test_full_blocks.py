"""A node keeps making blocks while its mempool holds more than a block (real cometbft).

Regression (issue 12, the 4-validator benchmark): once the mempool held more than one block's
worth, CometBFT reaped txs filling ``max_tx_bytes`` exactly, PrepareProposal put the injected
vote extensions in front and counted raw bytes only, and the proposal came back over the bound:
"CONSENSUS FAILURE!!! transaction data size exceeds maximum", after which that node's consensus
never moved again (two of four validators, and the testnet stopped). Here one node with vote
extensions on and blocks of ~5 KiB of txs gets a burst of ~6 blocks' worth of transfers."""

from __future__ import annotations

import base64
import hashlib
import json

import httpx
import pytest

from abci_app.codec.tx import build_tx
from node.client.keys import Keyring
from tests.kits.chainkit import send_msg
from tests.kits.nodekit import Node

pytestmark = pytest.mark.integration

N_TXS = 200


def test_blocks_keep_coming_when_the_mempool_holds_more_than_a_block(tmp_path) -> None:
    node = Node(tmp_path / "home")
    node.init()
    gpath = node.home / "config" / "genesis.json"
    g = json.loads(gpath.read_text())
    g["consensus_params"]["block"]["max_bytes"] = "8192"  # ~5 KiB of tx data: ~30 transfers
    g["consensus_params"]["evidence"]["max_bytes"] = "2048"  # must be <= block.max_bytes
    gpath.write_text(json.dumps(g, indent=2) + "\n")
    node.start()
    try:
        node.wait_height(2)
        key = Keyring(node.home).get("validator")
        with node.client() as c:
            chain_id = c.status()["node_info"]["network"]
            seq = json.loads(c.abci_query(f"/account/{key.address}").value)["sequence"]
            raws = [
                build_tx(
                    key.signer,
                    chain_id=chain_id,
                    msgs=[send_msg(bytes(20), 1)],
                    sequence=seq + i,
                    fee=10_000,  # above the default minimum fee
                )
                for i in range(N_TXS)
            ]
            h0 = c.latest_height()
        # all at once (JSON-RPC batches of 10, cometbft's cap), so the mempool holds ~6 blocks
        with httpx.Client(base_url=node.url, timeout=10) as http:
            for i in range(0, N_TXS, 10):
                batch = [
                    {
                        "jsonrpc": "2.0",
                        "id": j,
                        "method": "broadcast_tx_sync",
                        "params": {"tx": base64.b64encode(r).decode()},
                    }
                    for j, r in enumerate(raws[i : i + 10])
                ]
                for item in http.post("/", json=batch).json():
                    assert item["result"]["code"] == 0, item
        with node.client() as c:
            c.wait_for_tx(hashlib.sha256(raws[-1]).hexdigest().upper(), timeout=30)
            acc = json.loads(c.abci_query(f"/account/{key.address}").value)
            assert acc["sequence"] == seq + N_TXS  # every transfer executed
            h1 = c.latest_height()
            sizes = [
                len(c.call("block", height=str(h))["block"]["data"]["txs"] or [])
                for h in range(h0 + 1, h1 + 1)
            ]
        assert max(sizes) > 1 + N_TXS // 10, f"no block was full: {sizes}"
        log = (node.home / "cometbft.log").read_text(errors="replace")
        assert "CONSENSUS FAILURE" not in log
        node.wait_height(h1 + 2, timeout=30)  # and it goes on
    finally:
        node.stop()
