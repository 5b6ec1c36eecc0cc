"""A tx that passed CheckTx and then left the mempool without a block is not lost silently
(issue 12): on the real cometbft binary, ``unsafe_flush_mempool`` empties the mempool the way a
full-mempool drop, a recheck eviction or a node restart does. The plain wait times out (the tx
is gone); ``wait_for_tx(..., resubmit=...)`` broadcasts the same bytes again, in order, and the
account's later txs, which followed the dropped one, land too."""

from __future__ import annotations

import json

import pytest

from abci_app.codec.address import to_bech32
from abci_app.codec.tx import build_tx
from node.client.keys import Keyring
from node.client.rpc import RpcError
from node.local.config import set_toml_values
from tests.kits.chainkit import send_msg
from tests.kits.nodekit import Node

pytestmark = pytest.mark.integration


def test_dropped_tx_and_its_successors_are_rebroadcast_in_order(tmp_path) -> None:
    node = Node(tmp_path / "home")
    node.init()
    cfg = node.home / "config" / "config.toml"
    # unsafe RPC for unsafe_flush_mempool; a 3 s block interval leaves time to flush before a block
    cfg.write_text(
        set_toml_values(
            cfg.read_text(), {"rpc": {"unsafe": "true"}, "consensus": {"timeout_commit": '"3s"'}}
        )
    )
    node.start()
    try:
        node.wait_height(2)
        key = Keyring(node.home).get("validator")
        recipient = bytes(20)
        with node.client() as c:
            chain_id = c.status()["node_info"]["network"]
            seq = json.loads(c.abci_query(f"/account/{key.address}").value)["sequence"]
            h0 = c.latest_height()
            while c.latest_height() == h0:  # right after a block: ~3 s before the next one
                pass
            raws = [
                build_tx(
                    key.signer,
                    chain_id=chain_id,
                    msgs=[send_msg(recipient, 10 + i)],
                    sequence=seq + i,
                    fee=10_000,  # above the default minimum fee
                )
                for i in range(3)
            ]
            hashes = [c.broadcast_tx_sync(r) for r in raws]
            c.call("unsafe_flush_mempool")
            assert c.tx(hashes[0]) is None, (
                "a block took the txs before the flush: the test did not drop them"
            )
            with pytest.raises(RpcError, match="not in a block"):  # without resubmission it is lost
                c.wait_for_tx(hashes[0], timeout=4)
            assert c.resubmitted == 0
            res = [
                c.wait_for_tx(h, timeout=30, resubmit=raws[i:], resubmit_after=1.0)
                for i, h in enumerate(hashes)
            ]
            assert c.resubmitted >= 3  # the dropped tx and both that followed it
            heights = [int(r["height"]) for r in res]
            assert heights == sorted(heights)
            acc = json.loads(c.abci_query(f"/account/{key.address}").value)
            assert acc["sequence"] == seq + 3
            got = json.loads(c.abci_query(f"/account/{to_bech32(recipient)}").value)
            assert got["balance"] == 10 + 11 + 12  # each transfer executed once
    finally:
        node.stop()
