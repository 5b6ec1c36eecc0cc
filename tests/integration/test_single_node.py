"""A single loconet node on the real cometbft binary: `loconet init` + `loconet start`, blocks,
a transfer through the CLI queryable with a verified proof; then kill -9 of the whole process
group at random moments while transfers flow, restarted each time: the chain continues, no
app-hash mismatch, and every tx that reached a block is still there and in the balances."""

from __future__ import annotations

import base64
import hashlib
import json
import random
import threading
import time

import httpx
import pytest

from abci_app.codec.address import from_bech32
from abci_app.codec.tx import build_tx
from node.client.keys import Keyring
from node.client.rpc import Client, RpcError
from tests.kits.chainkit import send_msg
from tests.kits.nodekit import Node, cli

pytestmark = pytest.mark.integration


class Sender(threading.Thread):
    """Sends transfers of distinct amounts to one recipient until stopped, riding out crashes."""

    def __init__(self, node: Node, chain_id: str, recipient: bytes) -> None:
        super().__init__(daemon=True)
        self.node, self.chain_id, self.recipient = node, chain_id, recipient
        self.key = Keyring(node.home).get("validator")
        self.accepted: dict[str, int] = {}  # tx hash -> amount (passed CheckTx)
        self.halt = threading.Event()
        self.n = 0

    def run(self) -> None:
        seq = None
        while not self.halt.is_set():
            try:
                with Client(self.node.url, timeout=3) as c:
                    if seq is None:
                        acc = json.loads(c.abci_query(f"/account/{self.key.address}").value)
                        seq = acc["sequence"]
                    self.n += 1
                    amount = 1000 + self.n
                    raw = build_tx(
                        self.key.signer,
                        chain_id=self.chain_id,
                        msgs=[send_msg(self.recipient, amount)],
                        sequence=seq,
                        fee=10_000,  # above the default minimum fee
                    )
                    h = c.broadcast_tx_sync(raw)
                    self.accepted[h] = amount
                    seq += 1
            except RpcError:
                seq = None  # node down or sequence out of sync (mempool lost on crash): resync
                time.sleep(0.3)
            time.sleep(0.05)


# long: one live node's story (transfer, proof, crashes), step by step; splitting hides the order
def test_single_node_transfer_proof_and_crash_restarts(tmp_path) -> None:
    node = Node(tmp_path / "home")
    info = node.init()
    assert info["validator_address"] and info["validator_account"].startswith("loco1")
    assert oct((tmp_path / "home" / "keyring" / "validator.json").stat().st_mode & 0o777) == "0o600"
    node.start()
    try:
        node.wait_height(2)
        # one RPC request used to stop every node: a query path that is not UTF-8 (issue 12)
        for hostile in ("0xff", "0x2f6163636f756e742fc328"):  # a lone 0xff; "/account/" + bad UTF-8
            res = httpx.get(f"{node.url}/abci_query", params={"path": hostile}, timeout=10).json()
            resp = res["result"]["response"]
            assert (int(resp["code"]), resp["codespace"]) == (3, "query"), res
        node.wait_height(node.wait_height(1) + 2)  # and the node keeps making blocks
        bob = json.loads(cli("keys", "add", "bob", "--home", str(node.home), "-o", "json").stdout)[
            "address"
        ]

        # a transfer through the CLI, then a proven query
        r = cli(
            "tx",
            "bank",
            "send",
            bob,
            "2.5loco",
            "--from",
            "validator",
            "--home",
            str(node.home),
            "--node",
            node.url,
            "-o",
            "json",
        )
        sent = json.loads(r.stdout)
        assert sent["code"] == 0 and sent["height"] >= 2
        q = json.loads(
            cli("query", "account", bob, "--node", node.url, "--prove", "-o", "json").stdout
        )
        assert q["balance"] == 2_500_000 and q["proof_verified"] is True and q["proof"]
        assert q["validator_set"] == "node"
        # with the node home, the signers are trusted from its genesis (node/client/trust.py): the
        # set the app's InitChain computes must be the one the real chain runs
        q = json.loads(
            cli(
                "query",
                "account",
                bob,
                "--node",
                node.url,
                "--prove",
                "--home",
                str(node.home),
                "-o",
                "json",
            ).stdout
        )
        assert q["balance"] == 2_500_000 and q["validator_set"] == "genesis"
        assert (node.home / "data" / "light_trust.json").is_file()
        # a rejected tx: exit code non-zero, code and reason printed
        bad = cli(
            "tx",
            "bank",
            "send",
            info["validator_account"],
            "1000000loco",
            "--from",
            "bob",
            "--home",
            str(node.home),
            "--node",
            node.url,
            check=False,
        )
        assert (
            bad.returncode != 0 and "bank/101" in bad.stderr and "insufficient funds" in bad.stderr
        )

        carol = from_bech32(
            json.loads(cli("keys", "add", "carol", "--home", str(node.home), "-o", "json").stdout)[
                "address"
            ]
        )
        sender = Sender(node, "loconet-it", carol)
        sender.start()
        rng = random.Random(7)
        heights = []
        for _ in range(3):
            time.sleep(rng.uniform(1.0, 4.0))  # a random moment while transfers flow
            h_before = node.wait_height(1)
            node.kill9()
            node.start()
            # the chain continues past where it was
            h_after = node.wait_height(h_before + 2, timeout=90)
            heights.append((h_before, h_after))
        time.sleep(1.5)
        sender.halt.set()
        sender.join(10)
        node.wait_height(node.wait_height(1) + 2)

        with node.client() as c:
            # read the blocks themselves: cometbft's tx index is written after the block and
            # may miss a tx committed just before a kill -9; the block store does not
            top = c.latest_height()
            block_txs: set[str] = set()
            for h in range(1, top + 1):
                txs = c.block(h)["block"]["data"]["txs"] or []
                results = c.call("block_results", height=str(h))["txs_results"] or []
                for t, r in zip(txs, results, strict=True):
                    if int(r.get("code", 0)) == 0:
                        block_txs.add(hashlib.sha256(base64.b64decode(t)).hexdigest().upper())
            committed = 0
            in_blocks = 0
            for txh, amount in sender.accepted.items():
                if txh in block_txs:  # mempool txs may be lost in a crash, never committed ones
                    committed += amount
                    in_blocks += 1
            carol_addr = cli("keys", "show", "carol", "--home", str(node.home)).stdout.strip()
            bal = json.loads(c.abci_query(f"/account/{carol_addr}").value)["balance"]
        assert in_blocks >= 3, f"too few transfers landed to mean anything ({in_blocks})"
        assert bal == committed
        # the proven balance of bob survived all the crashes
        q = json.loads(
            cli("query", "account", bob, "--node", node.url, "--prove", "-o", "json").stdout
        )
        assert q["balance"] == 2_500_000 and q["proof_verified"]
        # no app-hash mismatch or halt was logged on any restart
        assert "wrong Block.Header.AppHash" not in node.tail(10_000)
        assert "halted" not in (node.home / "node.out").read_text()
    finally:
        rc = node.stop()
    assert rc == 0  # SIGTERM stops both processes cleanly
