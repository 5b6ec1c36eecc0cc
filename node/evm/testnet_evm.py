"""``loconet testnet up --evm``: anvil beside the testnet, the contracts deployed with the
testnet's signer set, and a relayer posting every checkpoint; ``testnet down`` stops both.

Files in DIR/evm/: anvil.log, anvil.pid, deployment.json, relayer.log, relayer.pid,
deployment.json.relayer.json (the relayer's journal). Keys are anvil's public development keys:
account 0 deploys, account 1 relays, account 2 is a user that claims (printed by `up`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from node.evm import anvil
from node.paths import PROJECT_ROOT

DEPLOYER, RELAYER, USER = anvil.DEV_KEYS


def evm_dir(d: Path) -> Path:
    return d / "evm"


def _pid(path: Path) -> int | None:
    try:
        pid = int(path.read_text().strip())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


def start_relayer(d: Path, node_rpc: str, rpc: str) -> int:
    e = evm_dir(d)
    log = open(e / "relayer.log", "ab")  # noqa: SIM115 - handed to the detached child
    p = subprocess.Popen(
        [sys.executable, "-m", "node.cli", "relayer", "run", "--evm-rpc", rpc, "--deployment", str(e / "deployment.json"),
         "--from-key", RELAYER, "--node", node_rpc, "--poll", "0.5"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, cwd=str(PROJECT_ROOT),
        env=dict(os.environ, PYTHONUNBUFFERED="1"))
    log.close()
    (e / "relayer.pid").write_text(f"{p.pid}\n")
    return p.pid


def up(d: Path, node_rpc: str, port: int) -> dict[str, Any]:
    """Start anvil (unless running), deploy (unless deployed), start the relayer (unless running)."""
    from eth_account import Account
    from web3 import Web3

    from node.evm import client

    e = evm_dir(d)
    e.mkdir(parents=True, exist_ok=True)
    rpc = f"http://127.0.0.1:{port}"
    if _pid(e / "anvil.pid") is None:
        (e / "deployment.json").unlink(missing_ok=True)  # anvil keeps no state: a new chain needs new contracts
        (e / "deployment.json.relayer.json").unlink(missing_ok=True)
        p = anvil.start(port, e / "anvil.log")
        (e / "anvil.pid").write_text(f"{p.pid}\n")
    if not (e / "deployment.json").exists():
        from node.rpc import Client

        with Client(node_rpc) as c:
            qr = c.abci_query("/settlement")
            chain_id = c.status()["node_info"]["network"]
        s = json.loads(qr.value)
        w3 = Web3(Web3.HTTPProvider(rpc))
        signers, powers = client.set_of(s["signer_set"])
        dep = client.deploy(w3, Account.from_key(DEPLOYER), chain_id, signers, powers, int(s["latest_final"]))
        dep.save(e / "deployment.json")
    if _pid(e / "relayer.pid") is None:
        start_relayer(d, node_rpc, rpc)
    dep_data = json.loads((e / "deployment.json").read_text())
    return {"evm_rpc": rpc, "deployment": str(e / "deployment.json"), **dep_data,
            "user_key": USER, "user_address": Account.from_key(USER).address}


def down(d: Path) -> list[str]:
    from node.testnet import stop_group

    stopped = []
    for name in ("relayer", "anvil"):
        pid = _pid(evm_dir(d) / f"{name}.pid")
        if pid is not None and stop_group(pid, timeout=10):
            stopped.append(name)
    return stopped
