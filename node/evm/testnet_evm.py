"""``loconet testnet up --evm``: anvil beside the testnet, the contracts deployed with the
testnet's signer set, and a relayer posting every checkpoint; ``testnet down`` stops both.

Files in DIR/evm/: anvil.log, anvil.pid, deployment.json, relayer.log, relayer.pid,
deployment.json.relayer.json (the relayer's journal). Keys are anvil's public development keys:
account 0 deploys, account 1 relays, account 2 is a user that claims (printed by `up`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from abci_app.settlement import evm
from node.client.rpc import Client
from node.evm import anvil
from node.local import procs

DEPLOYER, RELAYER, USER = anvil.DEV_KEYS


def evm_dir(d: Path) -> Path:
    return d / "evm"


def _pid(path: Path) -> int | None:
    """The pid of anvil or the relayer from its pid file, if that process still runs."""
    return procs.running(path, "anvil" if path.name == "anvil.pid" else "relayer")


def start_relayer(d: Path, node_rpc: str, rpc: str) -> int:
    e = evm_dir(d)
    argv = [
        sys.executable,
        "-m",
        "node.cli",
        "relayer",
        "run",
        "--evm-rpc",
        rpc,
        "--deployment",
        str(e / "deployment.json"),
        "--from-key",
        RELAYER,
        "--node",
        node_rpc,
        "--poll",
        "0.5",
    ]
    return procs.spawn(argv, log=e / "relayer.log", pid_file=e / "relayer.pid")


def up(d: Path, node_rpc: str, port: int) -> dict[str, Any]:
    """Start anvil (unless running), deploy (unless deployed), start the relayer (unless
    running)."""
    # web3 and eth_account take a second or more to import; the CLI loads this module for every
    # `testnet` command and only `testnet up --evm` needs them
    from eth_account import Account  # lazy: see above
    from web3 import Web3  # lazy: see above

    from node.evm import client  # lazy: imports web3

    e = evm_dir(d)
    e.mkdir(parents=True, exist_ok=True)
    rpc = f"http://127.0.0.1:{port}"
    if _pid(e / "anvil.pid") is None:
        # anvil keeps no state: a new chain needs new contracts
        (e / "deployment.json").unlink(missing_ok=True)
        (e / "deployment.json.relayer.json").unlink(missing_ok=True)
        p = anvil.start(port, e / "anvil.log")
        procs.write_pid(e / "anvil.pid", p.pid)
    if not (e / "deployment.json").exists():
        with Client(node_rpc) as c:
            qr = c.abci_query("/settlement")
            chain_id = c.status()["node_info"]["network"]
        s = json.loads(qr.value)
        w3 = Web3(Web3.HTTPProvider(rpc))
        signers, powers = client.set_of(s["signer_set"])
        dep = client.deploy(
            w3,
            Account.from_key(DEPLOYER),
            chain_id,
            signers,
            powers,
            int(s["latest_final"]),
            keyless_power=int(s.get("signer_set_keyless_power") or 0),
            # the testnet's genesis keeps the params' default: anvil's first contract of account 0
            expect_address=evm.parse_address(s["params"]["evm_contract"]),
        )
        dep.save(e / "deployment.json")
    if _pid(e / "relayer.pid") is None:
        start_relayer(d, node_rpc, rpc)
    dep_data = json.loads((e / "deployment.json").read_text())
    return {
        "evm_rpc": rpc,
        "deployment": str(e / "deployment.json"),
        **dep_data,
        "user_key": USER,
        "user_address": Account.from_key(USER).address,
    }


def down(d: Path) -> list[str]:
    stopped = []
    for name in ("relayer", "anvil"):
        pid = _pid(evm_dir(d) / f"{name}.pid")
        if pid is not None and procs.stop_group(pid, timeout=10):
            stopped.append(name)
    return stopped
