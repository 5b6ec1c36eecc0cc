"""The relayer against real apps (settlekit's four-validator network) and an in-process EVM:
it posts every final checkpoint once, in order; a restarted relayer (a new process: a new
object over the same journal) posts nothing twice, also when the last run died between sending
and its receipt; a failing loconet node only delays it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from eth_account import Account
from web3 import EthereumTesterProvider, Web3

from abci_app.pb import abci
from abci_app.settlement import evm
from abci_app.settlement.params import DEFAULT_EVM_CONTRACT
from node.evm import client
from node.evm.relayer import Relayer
from tests.kits.chainkit import CHAIN_ID
from tests.kits.settlekit import LOCO, Net, bond_msg, fund_deployer, new_net

ANVIL_CONTRACT = evm.parse_address(DEFAULT_EVM_CONTRACT)


class NetSource:
    """A CheckpointSource over the in-process apps; fails its first ``failures`` calls."""

    def __init__(self, net: Net, failures: int = 0) -> None:
        self.net, self.failures = net, failures

    def _q(self, path: str) -> Any | None:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("loconet node down")
        r = self.net.apps[0].query(abci.RequestQuery(path=path))
        return json.loads(r.value) if r.code == 0 else None

    def latest_final(self) -> dict[str, Any] | None:
        return self._q("/checkpoint/latest")

    def checkpoint(self, n: int) -> dict[str, Any] | None:
        return self._q(f"/checkpoint/{n}")

    def block_time(self, height: int) -> float | None:
        return None


def _setup(tmp_path: Path) -> tuple[Net, Web3, client.Deployment, Any]:
    net = new_net()
    w3 = Web3(EthereumTesterProvider())
    deployer = fund_deployer(w3)
    relayer = Account.from_key(hashlib.sha256(b"relayer-test-relayer").digest())
    w3.eth.send_transaction(
        {"from": w3.eth.accounts[0], "to": relayer.address, "value": Web3.to_wei(1000, "ether")}
    )
    s = net.query("/settlement")
    signers, powers = client.set_of(s["signer_set"])
    d = client.deploy(w3, deployer, CHAIN_ID, signers, powers, 0)
    return net, w3, d, relayer


def _finals(net: Net, n: int) -> None:
    net.run_until(
        lambda: (
            net.apps[0]
            .query(abci.RequestQuery(path=f"/checkpoint/{n}"))
            .value.find(b'"final":true')
            >= 0
        )
    )


def test_posts_each_checkpoint_once_across_restarts(tmp_path: Path) -> None:
    net, w3, d, acct = _setup(tmp_path)
    journal = tmp_path / "journal.json"
    _finals(net, 2)
    posted = Relayer(w3, d, acct, NetSource(net), journal).step()
    assert [p.number for p in posted] == [2]  # the set did not move: only the newest is needed
    assert Relayer(w3, d, acct, NetSource(net), journal).step() == []  # restarted: nothing again
    assert w3.eth.get_transaction_count(acct.address) == 1

    # the last run died after sending checkpoint 3 but before its receipt: the journal has it
    _finals(net, 3)
    cp3 = net.query("/checkpoint/3")
    fn = client.checkpoints(w3, d).functions.submit(*client.submit_args(cp3))
    nonce = w3.eth.get_transaction_count(acct.address, "pending")
    signed = acct.sign_transaction(
        fn.build_transaction({"from": acct.address, "nonce": nonce, "chainId": w3.eth.chain_id})
    )
    w3.eth.send_raw_transaction(signed.raw_transaction)
    journal.write_text(
        json.dumps({"number": 3, "tx_hash": "0x" + bytes(signed.hash).hex(), "nonce": nonce})
    )
    assert Relayer(w3, d, acct, NetSource(net), journal).step() == []
    assert client.checkpoints(w3, d).functions.lastNumber().call() == 3
    assert w3.eth.get_transaction_count(acct.address) == 2  # one tx per post, none twice
    events = client.checkpoints(w3, d).events.CheckpointAccepted.get_logs(from_block=0)
    assert [e["args"]["number"] for e in events] == [2, 3]


def test_two_relayers_race_and_neither_fails(tmp_path: Path) -> None:
    """Any number of relayers may run: the one that loses a race sees the number already
    posted and moves on (its reverted transaction costs it gas, nothing else)."""
    net, w3, d, acct = _setup(tmp_path)
    other = Account.from_key(hashlib.sha256(b"relayer-test-other").digest())
    w3.eth.send_transaction(
        {"from": w3.eth.accounts[0], "to": other.address, "value": Web3.to_wei(1000, "ether")}
    )
    _finals(net, 1)
    a = Relayer(w3, d, acct, NetSource(net), tmp_path / "a.json")
    b = Relayer(w3, d, other, NetSource(net), tmp_path / "b.json")
    assert [p.number for p in a.step()] == [1]
    cp1 = net.query("/checkpoint/1")
    assert b._post_or_raced(cp1) is None  # lost the race: no error
    assert b.step() == []


def test_skips_to_the_newest_but_posts_every_set_change(tmp_path: Path) -> None:
    net, w3, d, acct = _setup(tmp_path)
    _finals(net, 1)
    net.ok(net.vals[0], [bond_msg(net.vals[0].address, 300 * LOCO)])  # the set moves
    n = 2
    while True:
        _finals(net, n)
        if (
            net.query(f"/checkpoint/{n}")["next_set_hash"]
            != net.query(f"/checkpoint/{n}")["set_hash"]
        ):
            break
        n += 1
    _finals(net, n + 2)
    posted = [p.number for p in Relayer(w3, d, acct, NetSource(net), tmp_path / "j.json").step()]
    assert posted == [n, n + 2]


def test_keeps_going_while_loconet_is_down(tmp_path: Path) -> None:
    net, w3, d, acct = _setup(tmp_path)
    _finals(net, 1)
    r = Relayer(w3, d, acct, NetSource(net, failures=3), tmp_path / "journal.json")
    r.run(poll=0.01, until=1)
    assert client.checkpoints(w3, d).functions.lastNumber().call() == 1


def test_keeps_going_while_the_evm_node_is_down(tmp_path: Path) -> None:
    """A real anvil, stopped (its chain saved) and started again while the relayer runs."""
    import socket
    import threading

    from node.evm import anvil

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    state = tmp_path / "anvil-state.json"
    proc = anvil.start(port, tmp_path / "anvil.log", state)
    try:
        net = new_net(deployment=None)  # the params' default: anvil's first contract of account 0
        w3 = Web3(Web3.HTTPProvider(f"http://127.0.0.1:{port}", request_kwargs={"timeout": 2}))
        deployer, relayer = Account.from_key(anvil.DEV_KEYS[0]), Account.from_key(anvil.DEV_KEYS[1])
        signers, powers = client.set_of(net.query("/settlement")["signer_set"])
        d = client.deploy(w3, deployer, CHAIN_ID, signers, powers, 0, expect_address=ANVIL_CONTRACT)
        _finals(net, 1)
        r = Relayer(w3, d, relayer, NetSource(net), tmp_path / "journal.json")
        assert [p.number for p in r.step()] == [1]
        proc.terminate()
        proc.wait(timeout=20)  # anvil writes its chain to `state` on the way out
        _finals(net, 2)
        done = threading.Event()

        def run_then_signal() -> None:
            r.run(poll=0.05, until=2)
            done.set()

        t = threading.Thread(target=run_then_signal, daemon=True)
        t.start()  # the EVM node is down: the relayer's passes fail and it retries
        assert not done.wait(1.0)
        proc = anvil.start(port, tmp_path / "anvil.log", state)
        assert done.wait(60), "the relayer did not post after the EVM node came back"
        assert client.checkpoints(w3, d).functions.lastNumber().call() == 2
        assert w3.eth.get_transaction_count(relayer.address) == 2
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_a_claim_works_however_far_the_relayer_lags(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    """The relayer stopped after checkpoint 1 and the node no longer serves that height's
    state: `loconet evm claim` posts the newest final checkpoint itself (one transaction: the
    set did not move), then claims against it."""
    import argparse

    from node.cli import evm as cli_evm
    from node.cli.common import UsageError
    from tests.kits.settlekit import withdraw_msg

    net, w3, d, relayer = _setup(tmp_path)
    _finals(net, 1)
    assert [p.number for p in Relayer(w3, d, relayer, NetSource(net), tmp_path / "r").step()] == [1]
    user = Account.from_key(hashlib.sha256(b"lagging-claimant").digest())
    w3.eth.send_transaction(
        {"from": w3.eth.accounts[0], "to": user.address, "value": Web3.to_wei(10, "ether")}
    )
    me = bytes.fromhex(user.address[2:])
    net.ok(net.keys[0], [withdraw_msg(me, 4 * LOCO)])
    _finals(net, 4)
    oldest = net.query("/checkpoint/3")["height"]

    def query(node: str, path: str, height: int = 0) -> Any:
        if 0 < height < oldest:  # pruned: the node keeps no state that old
            raise UsageError(f"query {path} failed: height {height} is no longer available")
        return net.query(path, height=height)

    monkeypatch.setattr(cli_evm, "_query", query)
    monkeypatch.setattr(cli_evm, "_w3", lambda url: w3)
    monkeypatch.setattr("node.evm.relayer.LoconetSource", lambda url: NetSource(net))
    dep = tmp_path / "deployment.json"
    d.save(dep)
    args = argparse.Namespace(
        deployment=str(dep),
        evm_rpc="unused",
        from_key="0x" + bytes(user.key).hex(),
        account=None,
        relay=False,
        node="unused",
        output="json",
    )
    assert cli_evm.cmd_evm_claim(args) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["paid"] == 4 * LOCO and got["checkpoint"] == 4
    cps = client.checkpoints(w3, d)
    events = cps.events.CheckpointAccepted.get_logs(from_block=0)
    assert [e["args"]["number"] for e in events] == [1, 4]  # 4 posted by the claimant, one tx


def test_report_forged_finds_nothing_on_an_honest_contract(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    """`loconet evm report-forged` over a contract that only ever took loconet's checkpoints
    reports nothing (the forged case: tests/settlement, the watchtower's report slashes)."""
    import argparse

    from node.cli import evm as cli_evm

    net, w3, d, acct = _setup(tmp_path)
    _finals(net, 2)
    Relayer(w3, d, acct, NetSource(net), tmp_path / "j.json").step()
    monkeypatch.setattr(cli_evm, "_w3", lambda url: w3)
    monkeypatch.setattr("node.evm.relayer.LoconetSource", lambda url: NetSource(net))
    dep = tmp_path / "deployment.json"
    d.save(dep)
    args = argparse.Namespace(deployment=str(dep), evm_rpc="unused", node="unused", output="json")
    assert cli_evm.cmd_evm_report_forged(args) == 0
    assert json.loads(capsys.readouterr().out) == {"forged": []}
