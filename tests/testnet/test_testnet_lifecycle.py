"""A real 4-validator network: stop/start catches up, kill -9 loses nothing committed, `up`
restarts an existing network, an incompatible folder is refused."""

from __future__ import annotations

import base64
import hashlib
import json
import random
import re
import threading
import time
from pathlib import Path

import pytest

from abci_app.codec.tx import build_tx
from node.client.keys import Keyring
from node.client.rpc import Client, RpcError, TxRejected
from node.local.manifest import NodeInfo
from node.local.testnet import is_running, start_node, stop_node
from tests.kits.chainkit import send_msg
from tests.kits.tnkit import app_hash_at, cli, height, network, query, wait_for

pytestmark = pytest.mark.integration


def caught_up(n: NodeInfo, others: list[NodeInfo]) -> bool:
    target = max(height(o) for o in others)

    def done() -> bool:
        with Client(n.rpc_url, timeout=3) as c:
            si = c.status()["sync_info"]
        return int(si["latest_block_height"]) >= target and not si["catching_up"]

    return wait_for(f"{n.name} to reach height {target}", done, timeout=90)


def same_state(a: NodeInfo, b: NodeInfo) -> None:
    h = min(height(a), height(b))
    assert app_hash_at(a, h) == app_hash_at(b, h), f"{a.name} and {b.name} disagree at height {h}"


class Sender(threading.Thread):
    """Sends 1-uloco transfers from account0 to account1, one at a time, each waited into a
    block, always through a node that is up and caught up: not in ``avoid`` (the killer adds its
    victim before the kill and removes it once the node has caught up again; a node still
    catching up answers CheckTx from old state)."""

    def __init__(self, d: Path, nodes: list[NodeInfo]) -> None:
        super().__init__(daemon=True)
        kr = Keyring(d)
        self.key, self.to = kr.get("account0"), kr.get("account1")
        self.nodes, self.busy_with = nodes, ""
        self.avoid: set[str] = set()
        self.accepted: list[str] = []
        self.errors: list[str] = []
        self.stop_flag, self.seq, self.lock = False, 0, threading.Lock()
        self.behind = 0

    def run(self) -> None:
        i = 0
        while not self.stop_flag:
            with self.lock:
                gw = next(
                    n
                    for n in self.nodes[i % len(self.nodes) :] + self.nodes
                    if n.name not in self.avoid and is_running(n)
                )
                self.busy_with = gw.name
            i += 1
            try:
                with Client(gw.rpc_url, timeout=5) as c:
                    raw = build_tx(
                        self.key.signer,
                        chain_id="loconet-testnet",
                        msgs=[send_msg(self.to.address_bytes, 1)],
                        sequence=self.seq,
                        fee=10_000,  # above the default minimum fee
                    )
                    h = c.broadcast_tx_sync(raw)
                    self.accepted.append(h)
                    self.seq += 1
                    c.wait_for_tx(h, timeout=60)
            except TxRejected as e:
                m = re.search(r"expected (\d+), got (\d+)", e.log)
                if e.code == 6 and m and int(m.group(1)) < int(m.group(2)):
                    self.behind += (
                        1  # this node has not applied our last block yet: not accepted, retry
                    )
                    time.sleep(0.1)
                else:
                    self.errors.append(f"{gw.name}: {e}")
            except RpcError as e:
                self.errors.append(f"{gw.name}: {e}")
            finally:
                with self.lock:
                    self.busy_with = ""


def test_stop_start_kill9_and_restart(tmp_path: Path) -> None:
    with network(tmp_path) as (d, nodes):

        def all_healthy() -> bool:  # a node may be a block behind for a moment on 2 busy cores
            st = cli("testnet", "status", "--dir", str(d), "-o", "json")
            return all(not s["flags"] and s["peers"] == 3 for s in json.loads(st.stdout)["nodes"])

        wait_for("every node healthy with 3 peers", all_healthy, timeout=30, every=0.5)

        # one node stopped: the other three (75 % > 2/3) go on; started again it catches up
        cli("testnet", "stop", "node1", "--dir", str(d))
        h0 = height(nodes[0])
        wait_for("3 more blocks without node1", lambda: height(nodes[0]) >= h0 + 3, timeout=30)
        assert "STOPPED" in cli("testnet", "status", "--dir", str(d), check=False).stdout
        cli("testnet", "start", "node1", "--dir", str(d))
        caught_up(nodes[1], [nodes[0]])
        same_state(nodes[1], nodes[0])

        # kill -9 of a random node at random moments, 5 times, transfers flowing throughout
        key_to = Keyring(d).get("account1").address
        bal0 = query(nodes[0], f"/account/{key_to}")["balance"]
        sender = Sender(d, nodes)
        sender.start()
        rng = random.Random()
        for _ in range(5):
            victim = rng.choice(nodes)
            with sender.lock:
                sender.avoid.add(victim.name)
            wait_for(
                "the sender to leave the victim",
                lambda: sender.busy_with != victim.name,  # noqa: B023 (called within this pass)
                timeout=60,
                every=0.05,
            )
            time.sleep(rng.uniform(0.0, 1.5))
            assert stop_node(victim, kill=True)
            time.sleep(rng.uniform(0.0, 1.0))
            start_node(victim)
            caught_up(victim, [n for n in nodes if n is not victim])
            with sender.lock:
                sender.avoid.discard(victim.name)
        sender.stop_flag = True
        sender.join(90)
        assert not sender.errors, sender.errors
        assert len(sender.accepted) >= 5
        # every accepted tx is in a block, and the balance shows all of them, on every node
        # read node0's block store (its tx index may lack a tx committed just before a kill -9:
        # cometbft indexes after the block and does not re-index on restart)
        with Client(nodes[0].rpc_url) as c:
            in_blocks = set()
            for bh in range(1, c.latest_height() + 1):
                for t in c.block(bh)["block"]["data"]["txs"] or []:
                    in_blocks.add(hashlib.sha256(base64.b64decode(t)).hexdigest().upper())
        missing = [h for h in sender.accepted if h.upper() not in in_blocks]
        assert not missing, f"accepted txs not in any block: {missing}"
        top = max(height(n) for n in nodes)
        for n in nodes:
            wait_for(f"{n.name} at {top}", lambda: height(n) >= top, timeout=60)  # noqa: B023 (as above)
            same_state(n, nodes[0])
        assert query(nodes[0], f"/account/{key_to}")["balance"] == bal0 + len(sender.accepted)

        # `up` on the existing folder restarts the same network where it was
        cli("testnet", "down", "--dir", str(d))
        assert not any(is_running(n) for n in nodes)
        h_before = top
        r = cli("testnet", "up", "--dir", str(d))
        assert "restarting the existing 4-validator network" in r.stderr
        assert height(nodes[2]) >= h_before
        same_state(nodes[2], nodes[0])


def test_incompatible_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "testnet.json").write_text(json.dumps({"version": 0, "nodes": []}))
    r = cli("testnet", "up", "--dir", str(tmp_path), check=False)
    assert r.returncode == 1 and "format version 0" in r.stderr and "down --purge" in r.stderr
