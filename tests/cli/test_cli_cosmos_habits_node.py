"""#28 item 10 against one real node (cometbft + the app): a home made with `init --rpc-port
--p2p-port` serves bare commands through $LOCONET_HOME (no --home, no --node: its config.toml
names the port), and `query bank balances` / `query balance` take --prove, verified against the
header like `query account --prove`. A transfer pays with the Cosmos spelling `--fees`."""

from __future__ import annotations

import json

import pytest

from tests.kits.clikit import run
from tests.kits.nodekit import Node

pytestmark = pytest.mark.integration

TO = "loco1fx9yx4cdc0p7e5vx5h2m66dfpanv527l2aavz3"


def ok(*args: str) -> str:
    r = run(*args)
    assert r.returncode == 0, f"loconet {' '.join(args)} -> {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def test_bare_commands_and_proven_balances_against_a_real_node(tmp_path, monkeypatch) -> None:
    node = Node(tmp_path / "home")
    home = str(node.home)
    ports = ("--rpc-port", str(node.ports.rpc), "--p2p-port", str(node.ports.p2p))
    ok("init", "--home", home, "--chain-id", "loconet-it", *ports)
    node.start()
    try:
        node.wait_height(2)
        monkeypatch.setenv("LOCONET_HOME", home)  # the subprocesses' default home
        assert json.loads(ok("status", "-o", "json"))["chain_id"] == "loconet-it"
        me = ok("keys", "show", "validator").strip()
        sent = json.loads(ok("tx", "bank", "send", TO, "1loco", "--from", "validator",
                             "--fees", "5000uloco", "--yes", "-o", "json"))  # fmt: skip
        fee = next(e for e in sent["events"] if e["type"] == "tx")["attributes"]["fee"]
        assert sent["code"] == 0 and int(fee) == 5000

        to = json.loads(ok("query", "bank", "balances", TO, "--prove", "-o", "json"))
        assert to["balances"] == [{"denom": "uloco", "amount": "1000000"}], to
        assert to["pagination"] == {"next_key": None, "total": "0"}
        assert to["proof_verified"] is True and to["validator_set"] == "genesis"

        h = str(to["height"])  # the validator's balance moves with rewards: one height for both
        bank = json.loads(
            ok("query", "bank", "balances", me, "--prove", "--height", h, "-o", "json")
        )
        plain = json.loads(ok("query", "balance", me, "--prove", "--height", h, "-o", "json"))
        acct = json.loads(ok("query", "account", me, "--prove", "--height", h, "-o", "json"))
        assert bank["balances"][0]["amount"] == str(plain["balance"]) == str(acct["balance"])
        assert plain["proof_verified"] is True and plain["app_hash"] == acct["app_hash"]
        assert "proof:    verified against app hash" in ok("query", "balance", me, "--prove")
    finally:
        node.stop()
