"""`loconet testnet stop|start|down -o json` print one JSON document on stdout, and the same facts
as the text output, without starting a network: the manifest is written by hand, nothing runs
(stop/down find no pid), and `start` has its process start and height wait replaced. The real
network path is covered in test_testnet_cli_fixes.py (slow)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from node.cli import main as cli
from node.cli import testnet as cli_testnet
from node.local import testnet_market as tm
from node.local.manifest import TESTNET_VERSION, NodeInfo, save


def manifest(d: Path) -> None:
    node = NodeInfo(
        name="node0",
        home=str(d / "node0"),
        p2p=46656,
        rpc=46657,
        abci=46658,
        metrics=46660,
        node_id="ab" * 20,
        validator_address="CD" * 20,
        operator_key="validator0",
    )
    worker = tm.WorkerInfo(
        name="provider0",
        key="provider0",
        address="loco12mhfny5zvckr4qgzg5swup48v43cua8hc7llry",
        dir=str(d / "provider0"),
        blob_port=46700,
        nodes=[node.rpc_url],
    )
    d.mkdir(parents=True, exist_ok=True)
    save(d, {"version": TESTNET_VERSION, "nodes": [asdict(node)], "workers": [asdict(worker)]})


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    r = capsys.readouterr()
    return rc, r.out, r.err


def test_stop_and_down_of_what_is_not_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = tmp_path / "tn"
    manifest(d)
    for name, kind in (("node0", "node"), ("0", "node"), ("provider0", "worker")):
        rc, o, _ = run(capsys, "testnet", "stop", name, "--dir", str(d), "-o", "json")
        full = "node0" if kind == "node" else name
        assert rc == 0 and json.loads(o) == {
            "name": full,
            "kind": kind,
            "was_running": False,
            "killed": False,
        }
        rc, o, _ = run(capsys, "testnet", "stop", name, "--dir", str(d))
        assert rc == 0 and o == f"{full} was not running\n"
    rc, o, _ = run(capsys, "testnet", "stop", "node0", "--kill", "--dir", str(d), "-o", "json")
    assert json.loads(o)["killed"] is True
    rc, o, _ = run(capsys, "testnet", "down", "--dir", str(d), "-o", "json")
    assert rc == 0 and json.loads(o) == {"dir": str(d), "stopped": [], "purged": False}
    rc, o, _ = run(capsys, "testnet", "down", "--purge", "--dir", str(d), "-o", "json")
    assert rc == 0 and json.loads(o)["purged"] is True and not d.exists()


def test_unknown_node_and_missing_testnet_are_json_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = tmp_path / "tn"
    for cmd in ("stop", "start"):
        rc, o, _ = run(capsys, "testnet", cmd, "node0", "--dir", str(d), "-o", "json")
        assert rc != 0 and "no testnet in" in json.loads(o)["error"]
    manifest(d)
    for cmd in ("stop", "start"):
        rc, o, _ = run(capsys, "testnet", cmd, "node7", "--dir", str(d), "-o", "json")
        assert rc != 0 and "no node 'node7'" in json.loads(o)["error"]


def test_start_prints_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    d = tmp_path / "tn"
    manifest(d)
    waited: list[Any] = []
    monkeypatch.setattr(cli_testnet, "start_node", lambda n: 4242)
    monkeypatch.setattr(cli_testnet, "wait_producing", lambda *a, **kw: waited.append(kw))
    monkeypatch.setattr(cli_testnet, "node_status", lambda n: {"height": 17})
    monkeypatch.setattr(tm, "start_worker", lambda d, w: 5151)

    rc, o, err = run(capsys, "testnet", "start", "node0", "--dir", str(d), "-o", "json")
    assert rc == 0 and waited and "waiting" in err  # progress goes to stderr, not into the JSON
    assert json.loads(o) == {
        "name": "node0",
        "kind": "node",
        "pid": 4242,
        "rpc": "http://127.0.0.1:46657",
        "started": True,
        "height": 17,
    }
    rc, o, _ = run(capsys, "testnet", "start", "node0", "--dir", str(d), "--no-wait", "-o", "json")
    assert rc == 0 and json.loads(o)["height"] is None and len(waited) == 1
    rc, o, _ = run(capsys, "testnet", "start", "node0", "--dir", str(d))
    assert o == "node0 at height 17, RPC http://127.0.0.1:46657\n"

    rc, o, _ = run(capsys, "testnet", "start", "provider0", "--dir", str(d), "-o", "json")
    assert rc == 0 and json.loads(o) == {
        "name": "provider0",
        "kind": "worker",
        "pid": 5151,
        "log": str(d / "provider0" / "worker.log"),
    }

    # a node that already runs: not started again, and JSON says so
    monkeypatch.setattr(cli_testnet, "is_running", lambda n: True)
    monkeypatch.setattr(cli_testnet, "pid_of", lambda n: 999)
    monkeypatch.setattr(
        cli_testnet, "start_node", lambda n: pytest.fail("started a running node again")
    )
    rc, o, _ = run(capsys, "testnet", "start", "node0", "--dir", str(d), "-o", "json")
    assert rc == 0 and json.loads(o) == {
        "name": "node0",
        "kind": "node",
        "pid": 999,
        "rpc": "http://127.0.0.1:46657",
        "started": False,
    }
