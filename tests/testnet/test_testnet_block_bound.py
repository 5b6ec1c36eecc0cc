"""A local testnet bounds its blocks (issue 12): the genesis consensus params cap a block's tx
bytes, so under a backlog a proposer does not take the whole mempool (blocks of 5,000-9,000
transfers measured without it), and the largest tx the app accepts still fits."""

from __future__ import annotations

import json

from abci_app.codec.tx import MAX_TX_BYTES
from node.local import testnet


def test_genesis_caps_block_bytes_above_the_largest_tx(tmp_path):
    d = tmp_path / "net"
    testnet.create(d, 2, 0, 36656, testnet.parse_params([]))
    for g in [
        d / "genesis.json",
        d / "node0" / "config" / "genesis.json",
        d / "node1" / "config" / "genesis.json",
    ]:
        block = json.loads(g.read_text())["consensus_params"]["block"]
        assert int(block["max_bytes"]) == testnet.BLOCK_MAX_BYTES
        evidence = json.loads(g.read_text())["consensus_params"]["evidence"]
        # else cometbft refuses the genesis
        assert int(evidence["max_bytes"]) <= testnet.BLOCK_MAX_BYTES
    # CometBFT's default takes the whole mempool
    assert 4 * MAX_TX_BYTES <= testnet.BLOCK_MAX_BYTES < 21 * 1024 * 1024
