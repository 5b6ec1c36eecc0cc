"""Issue 32 on real processes: a 4-validator cometbft testnet with `--evm` (anvil, the contracts,
a relayer). Two of the four validators unbond their whole stake (more than 1/3 of the signer set
leaves); the chain makes a valset update that the outgoing set signs while CometBFT still has
it, the relayer posts it, and a withdrawal made afterwards is claimable with only the two
validators left signing (before issue 32 this stalled for minutes, until a validator came back)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from web3 import Web3

from node.evm import client, testnet_evm
from node.local.manifest import load, nodes_of
from tests.kits.tnkit import cli, network, query, wait_for

pytestmark = pytest.mark.integration
USER = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"  # anvil account 2 (testnet_evm.USER)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_rotation_where_2_of_4_validators_leave_keeps_settling(tmp_path: Path) -> None:
    port = _free_port()
    with network(
        tmp_path,
        "settlement.checkpoint_interval=6",
        extra=("--evm", "--evm-port", str(port)),
    ) as (d, nodes):
        n0 = nodes[0]
        rpc = f"http://127.0.0.1:{port}"
        dep = client.Deployment.load(d / "evm" / "deployment.json")
        w3 = Web3(Web3.HTTPProvider(rpc))
        cps = client.checkpoints(w3, dep)
        wait_for("the first checkpoint", lambda: cps.functions.lastNumber().call() >= 1, 90)

        home = str(d)
        for i in (2, 3):
            v = nodes_of(load(d))[i].validator_address
            tokens = query(n0, f"/validator/{v}")["tokens"]
            cli(
                "tx", "staking", "unbond", v, f"{tokens}uloco",
                "--from", f"validator{i}", "--home", home, "--node", n0.rpc_url,
            )  # fmt: skip

        def moved() -> bool:
            s = query(n0, "/settlement")
            return (
                len(s["signer_set"]) == 2
                and cps.functions.setHash().call().hex() == s["signer_set_hash"]
            )

        wait_for("the contract to follow the two validators left", moved, timeout=120)
        updates = [
            query(n0, f"/checkpoint/{n}") for n in range(1, query(n0, "/settlement")["latest"] + 1)
        ]
        assert any(cp["valset_update"] and cp["final"] for cp in updates)

        r = cli(
            "tx", "settlement", "withdraw", USER, "3loco", "--from", "validator0",
            "--home", home, "--node", n0.rpc_url, "-o", "json",
        )  # fmt: skip
        h = json.loads(r.stdout)["height"]
        wait_for(
            "a checkpoint past the withdrawal", lambda: cps.functions.lastHeight().call() >= h, 120
        )
        out = cli(
            "evm", "claim", "--evm-rpc", rpc, "--deployment", str(d / "evm" / "deployment.json"),
            "--from-key", testnet_evm.USER, "--node", n0.rpc_url, "-o", "json",
        )  # fmt: skip
        assert json.loads(out.stdout)["paid"] == 3_000_000
        latest = query(n0, "/checkpoint/latest")
        assert latest["total_power"] == 200_000 and len(latest["signatures"]) == 2
