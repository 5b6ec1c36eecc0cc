"""End to end on real processes: a 4-validator cometbft testnet with `--evm` (anvil from npm, the
contracts deployed, a relayer running). A validator withdraws LOCO it earned (block rewards) to
an EVM address, the relayer posts the checkpoint, the user claims the ERC-20 and holds exactly the
withdrawal; the relayer, killed with SIGKILL and restarted, never posts a checkpoint twice (every
relayer transaction is one accepted checkpoint, numbers strictly increasing); a validator set
change on loconet (a bond) rotates the contract's signer set."""

from __future__ import annotations

import json
import os
import signal
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


# long: one live testnet and EVM's story, step by step; splitting would hide the order
def test_earn_withdraw_relay_claim_restart_and_rotation(tmp_path: Path) -> None:
    port = _free_port()
    with network(
        tmp_path,
        "settlement.checkpoint_interval=6",
        extra=("--evm", "--evm-port", str(port), "--accounts", "1"),
    ) as (d, nodes):
        n0 = nodes[0]
        rpc = f"http://127.0.0.1:{port}"
        dep = client.Deployment.load(d / "evm" / "deployment.json")
        w3 = Web3(Web3.HTTPProvider(rpc))
        cps = client.checkpoints(w3, dep)
        wait_for(
            "the relayer's first checkpoint",
            lambda: cps.functions.lastNumber().call() >= 1,
            timeout=90,
        )

        # earn: validator0's operator has been paid block rewards; withdraw 5 LOCO of them
        op = cli("keys", "show", "validator0", "--home", str(d)).stdout.strip()
        earned = query(n0, f"/account/{op}")["balance"]
        assert earned > 900_000 * 10**6  # 1,000,000 LOCO funded, 100,000 bonded, rewards on top
        r = cli(
            "tx",
            "settlement",
            "withdraw",
            USER,
            "5loco",
            "--from",
            "validator0",
            "--home",
            str(d),
            "--node",
            n0.rpc_url,
            "-o",
            "json",
        )
        wheight = json.loads(r.stdout)["height"]

        # kill the relayer mid-stream, let loconet make a checkpoint meanwhile, restart it
        pid = int((d / "evm" / "relayer.pid").read_text())
        os.killpg(pid, signal.SIGKILL)
        wait_for(
            "a final checkpoint after the withdrawal",
            lambda: query(n0, "/checkpoint/latest")["height"] >= wheight,
            timeout=90,
        )
        testnet_evm.start_relayer(d, n0.rpc_url, rpc)
        wait_for(
            "the contract to reach the withdrawal",
            lambda: cps.functions.lastHeight().call() >= wheight,
            timeout=90,
        )

        out = cli(
            "evm",
            "claim",
            "--evm-rpc",
            rpc,
            "--deployment",
            str(d / "evm" / "deployment.json"),
            "--from-key",
            testnet_evm.USER,
            "--node",
            n0.rpc_url,
            "-o",
            "json",
        )
        assert json.loads(out.stdout)["paid"] == 5_000_000
        tok = client.token(w3, dep)
        assert tok.functions.balanceOf(USER).call() == 5_000_000

        # a validator set change on loconet is followed by the contract
        cons = nodes_of(load(d))[1].validator_address
        cli(
            "tx",
            "staking",
            "bond",
            cons,
            "50000loco",
            "--from",
            "account0",
            "--home",
            str(d),
            "--node",
            n0.rpc_url,
        )

        def rotated() -> bool:
            s = query(n0, "/settlement")
            powers = sorted(x["power"] for x in s["signer_set"])
            return (
                powers[-1] == 150_000
                and cps.functions.setHash().call().hex() == s["signer_set_hash"]
            )

        wait_for("the contract to follow the new signer set", rotated, timeout=120)

        # nothing was posted twice: each relayer tx is one accepted checkpoint, in increasing order
        relayer = w3.eth.account.from_key(testnet_evm.RELAYER).address
        events = cps.events.CheckpointAccepted.get_logs(from_block=0)
        numbers = [e["args"]["number"] for e in events]
        assert numbers == sorted(set(numbers))
        assert w3.eth.get_transaction_count(relayer) == len(events)
