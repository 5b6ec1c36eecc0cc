"""Issue 28, items 3 and 6c: a second local process that opens an ABCI connection to a running
node (same user over the Unix socket; any local user over ``tcp://127.0.0.1``) and sends CheckTx
+ Flush, keeping the connection open, used to take the mempool role before cometbft's own
mempool connection had spoken: the next RPC tx made cometbft exit ("another connection already
holds the mempool role") and ``loconet start`` stopped. The snapshot role could be taken the
same way. Now only the connections of the cometbft process ``loconet start`` started may hold a
role; any other connection is refused (one WARNING line) and the node goes on. Stopping the node
while such a connection is open logs no traceback (item 6c)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from abci_app.codec.address import from_bech32
from abci_app.codec.tx import build_tx
from node.client.keys import Keyring
from node.client.rpc import Client
from node.local.config import AppConfig, tune_cometbft_config
from tests.kits.chainkit import send_msg
from tests.kits.nodekit import ROOT, Node, cli

pytestmark = pytest.mark.integration

# The intruder: a separate process that connects, sends one request + Flush, reports what it got
# back ("answered" or "closed") and keeps its socket open until its stdin closes.
INTRUDER = r"""
import socket, sys
from abci_app.pb import abci
from abci_app.server import frame
addr, method = sys.argv[1], sys.argv[2]
if addr.startswith("unix://"):
    s = socket.socket(socket.AF_UNIX)
    s.connect(addr.removeprefix("unix://"))
else:
    host, port = addr.removeprefix("tcp://").rsplit(":", 1)
    s = socket.create_connection((host, int(port)))
req = {
    "check_tx": abci.Request(check_tx=abci.RequestCheckTx(tx=b"\x01\x02")),
    "list_snapshots": abci.Request(list_snapshots=abci.RequestListSnapshots()),
}[method]
try:
    s.sendall(frame(req) + frame(abci.Request(flush=abci.RequestFlush())))
    s.settimeout(20)
    data = s.recv(65536)
    print("answered" if data else "closed", flush=True)
except OSError as e:  # a reset is a refusal too
    print("closed", type(e).__name__, flush=True)
sys.stdin.read()  # the socket stays open until the test is done
"""


def _node(tmp_path: Path, transport: str) -> Node:
    node = Node(tmp_path / "home")
    node.init()
    if transport == "tcp":
        address = f"tcp://127.0.0.1:{node.ports.abci}"
        tune_cometbft_config(node.home, "node0", node.ports, abci_address=address)
        (node.home / "config" / "app.toml").write_text(
            AppConfig(abci_address=address, check_invariants=True).to_toml()
        )
    return node


def _intrude(address: str, method: str) -> tuple[subprocess.Popen[str], str]:
    p = subprocess.Popen(
        [sys.executable, "-c", INTRUDER, address, method],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert p.stdout is not None
    line = p.stdout.readline().strip()  # the intruder's socket times out after 20 s
    return p, line


def _release(intruders: list[subprocess.Popen[str]]) -> None:
    for p in intruders:
        if p.stdin is not None:
            try:
                p.stdin.close()
            except OSError:
                pass
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        for pipe in (p.stdout, p.stderr):
            if pipe is not None:
                pipe.close()


def _send_one_tx(node: Node) -> dict:
    key = Keyring(node.home).get("validator")
    bob = json.loads(cli("keys", "add", "bob", "--home", str(node.home), "-o", "json").stdout)
    with Client(node.url, timeout=10) as c:
        seq = json.loads(c.abci_query(f"/account/{key.address}").value)["sequence"]
        raw = build_tx(
            key.signer,
            chain_id="loconet-it",
            msgs=[send_msg(from_bech32(bob["address"]), 1234)],
            sequence=seq,
            fee=10_000,
        )
        return c.wait_for_tx(c.broadcast_tx_sync(raw), timeout=60)


@pytest.mark.parametrize("transport", ["unix", "tcp"])
def test_extra_abci_connection_cannot_take_mempool_role(tmp_path: Path, transport: str) -> None:
    node = _node(tmp_path, transport)
    address = AppConfig.load(node.home).abci_address
    intruders: list[subprocess.Popen[str]] = []
    node.start()
    try:
        node.wait_height(1)  # cometbft is connected; no tx seen yet (its mempool role unclaimed)
        for method in ("check_tx", "list_snapshots"):
            p, got = _intrude(address, method)
            intruders.append(p)
            assert got.startswith("closed"), f"{method}: the intruder was {got!r}"
            assert p.poll() is None  # and it keeps its end open
        res = _send_one_tx(node)  # cometbft's mempool connection still takes the tx
        assert int(res["height"]) >= 1
        node.wait_height(int(res["height"]) + 1)
        assert node.proc is not None and node.proc.poll() is None, node.tail()
        out = (node.home / "node.out").read_text(errors="replace")
        refused = [ln for ln in out.splitlines() if "ABCI connection refused" in ln]
        assert len(refused) == 2 and all("WARNING" in ln for ln in refused), out
        assert "Traceback" not in out, out
    finally:
        rc = node.stop()
        _release(intruders)
    assert rc == 0, node.tail()


def test_stopping_a_node_with_an_extra_abci_connection_logs_no_traceback(tmp_path: Path) -> None:
    node = _node(tmp_path, "unix")
    address = AppConfig.load(node.home).abci_address
    node.start()
    intruders: list[subprocess.Popen[str]] = []
    try:
        node.wait_height(1)
        p, _ = _intrude(address, "check_tx")
        intruders.append(p)
        # a client that connects and says nothing, open while the node stops
        idle = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import socket, sys; s = socket.socket(socket.AF_UNIX); "
                f"s.connect({address.removeprefix('unix://')!r}); print('in', flush=True); "
                "sys.stdin.read()",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        intruders.append(idle)
        assert idle.stdout is not None and idle.stdout.readline().strip() == "in"
        node.wait_height(node.wait_height(1) + 1)
        assert node.proc is not None
        node.proc.send_signal(signal.SIGTERM)
        assert node.proc.wait(30) == 0
    finally:
        node.stop()
        _release(intruders)
    out = (node.home / "node.out").read_text(errors="replace")
    assert "node stopped" in out, out
    assert "Traceback" not in out and "CancelledError" not in out, out
