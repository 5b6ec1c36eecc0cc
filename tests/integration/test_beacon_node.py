"""The randomness beacon on the real cometbft binary: a `loconet init` node (vote extensions on
from height 1) extends each precommit with its VRF share, every later block carries the last
commit's extensions first, and the share is the validator's own output for (chain id, h - 1)."""

from __future__ import annotations

import base64
import json

import pytest

from abci_app import beacon
from abci_app.pb import abci
from abci_app.vote_extensions import INJECTED_PREFIX, VoteExtension, block_beacon, split_block
from tests.kits.nodekit import Node

pytestmark = pytest.mark.integration


def test_real_node_blocks_carry_verified_beacon_shares(tmp_path) -> None:
    node = Node(tmp_path / "n0")
    node.init()
    pv = json.loads((node.home / "config" / "priv_validator_key.json").read_text())
    pub = base64.b64decode(pv["pub_key"]["value"])
    seed = base64.b64decode(pv["priv_key"]["value"])[:32]
    addr = bytes.fromhex(pv["address"])
    node.start()
    try:
        node.wait_height(5, timeout=120)
        with node.client() as c:
            chain_id = c.status()["node_info"]["network"]
            for h in (2, 3, 4):
                b = c.block(h)["block"]
                txs = [base64.b64decode(t) for t in b["data"]["txs"] or []]
                assert txs and txs[0].startswith(INJECTED_PREFIX), (
                    f"block {h} lacks the last commit's extensions"
                )
                info = abci.ExtendedCommitInfo.FromString(txs[0][len(INJECTED_PREFIX) :])
                assert [v.validator.address for v in info.votes] == [addr]
                ext = VoteExtension.FromString(info.votes[0].vote_extension)
                assert beacon.verify(pub, beacon.alpha(chain_id, h - 1), ext.beacon) is not None
                # bound to its height
                assert beacon.verify(pub, beacon.alpha(chain_id, h), ext.beacon) is None
                votes, _ = split_block(txs)
                want = beacon.block_beacon(
                    [(addr, beacon.output(beacon.prove(seed, beacon.alpha(chain_id, h - 1))))]
                )
                assert block_beacon(votes) == want
    finally:
        assert node.stop() == 0, node.tail()
