"""The CLI against one real node (cometbft + the ABCI app): the address from --home and
tcp:// URLs, results with events, the job id, Cosmos-style queries (tx, txs, block, balance,
rewards), --dry-run through /simulate, offline signing (--generate-only, tx sign, tx broadcast),
--chain-id checks and a pretty `query job`."""

from __future__ import annotations

import json

import pytest
from clikit import run
from nodekit import Node

pytestmark = pytest.mark.integration


def ok(*args: str, stdin: str | None = None) -> str:
    r = run(*args, stdin=stdin)
    assert r.returncode == 0, f"loconet {' '.join(args)} -> {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def test_cli_against_a_real_node(tmp_path):
    node = Node(tmp_path / "home")
    info = node.init()
    home = str(node.home)
    node.start()
    try:
        node.wait_height(2)
        # the address `start` prints (tcp://) is accepted; without --node the home's config.toml says where
        st = json.loads(ok("status", "--node", f"tcp://127.0.0.1:{node.ports.rpc}", "-o", "json"))
        assert st["chain_id"] == "loconet-it"
        assert json.loads(ok("status", "--home", home, "-o", "json"))["chain_id"] == "loconet-it"

        bob = json.loads(ok("keys", "add", "bob", "--home", home, "-o", "json"))["address"]
        sent = json.loads(ok("tx", "bank", "send", bob, "2loco", "--from", "validator", "--home", home,
                             "--fee", "0.001loco", "-o", "json"))
        types = {e["type"] for e in sent["events"]}
        assert sent["code"] == 0 and "tx" in types, sent
        tx_ev = next(e for e in sent["events"] if e["type"] == "tx")
        assert tx_ev["attributes"]["fee"] == "1000" and tx_ev["attributes"]["signer"] == info["validator_account"]

        # Cosmos-style queries
        q = json.loads(ok("query", "tx", sent["txhash"], "--home", home, "-o", "json"))
        assert q["height"] == sent["height"] and q["messages"][0]["send"]["amount"] == 2_000_000 and q["messages"][0]["send"]["to_address"] == bob and q["code"] == 0
        assert "send" in ok("query", "tx", sent["txhash"], "--home", home)
        found = json.loads(ok("query", "txs", "--events", f"tx.signer={info['validator_account']}", "--home", home, "-o", "json"))
        assert found["total"] >= 1 and sent["txhash"] in [t["txhash"] for t in found["txs"]]
        blk = json.loads(ok("query", "block", str(sent["height"]), "--home", home, "-o", "json"))
        assert sent["txhash"] in [t["txhash"] for t in blk["txs"]] and blk["height"] == sent["height"]
        assert json.loads(ok("query", "block", "--home", home, "-o", "json"))["height"] >= sent["height"]
        assert json.loads(ok("query", "balance", bob, "--home", home, "-o", "json"))["balance"] == 2_000_000
        missing = run("query", "tx", "AB" * 32, "--home", home)
        assert missing.returncode == 1 and "not found" in missing.stderr

        # --dry-run: nothing is kept; a rejection gives its code
        dry = json.loads(ok("tx", "bank", "send", bob, "1loco", "--from", "validator", "--home", home, "--dry-run", "-o", "json"))
        assert dry["would_succeed"] is True and any(e["type"] == "tx" for e in dry["events"])
        bad = run("tx", "bank", "send", info["validator_account"], "5000loco", "--from", "bob", "--home", home, "--dry-run")
        assert bad.returncode == 1 and "would be rejected with code bank/" in bad.stdout
        assert json.loads(ok("query", "balance", bob, "--home", home, "-o", "json"))["balance"] == 2_000_000

        # offline signing: generate (chain id and sequence from the node), sign, broadcast
        unsigned = ok("tx", "bank", "send", bob, "3loco", "--from", "validator", "--home", home, "--generate-only")
        (tmp_path / "u.json").write_text(unsigned)
        signed = ok("tx", "sign", str(tmp_path / "u.json"), "--from", "validator", "--home", home)
        (tmp_path / "s.json").write_text(signed)
        b = json.loads(ok("tx", "broadcast", str(tmp_path / "s.json"), "--home", home, "-o", "json"))
        assert b["code"] == 0 and b["txhash"] == json.loads(signed)["txhash"]
        assert json.loads(ok("query", "balance", bob, "--home", home, "-o", "json"))["balance"] == 5_000_000

        # --chain-id: checked against the node
        wrong = run("tx", "bank", "send", bob, "1loco", "--from", "validator", "--home", home, "--chain-id", "other", "-o", "json")
        assert wrong.returncode == 1 and "runs loconet-it" in json.loads(wrong.stdout)["error"]
        # a rejected tx in -o json is JSON with its code
        poor = run("tx", "bank", "send", info["validator_account"], "5000loco", "--from", "bob", "--home", home, "-o", "json")
        err = json.loads(poor.stdout)
        assert poor.returncode == 1 and err["codespace"] == "bank" and err["code"] > 0

        # tx job create prints the job id; query job is readable text
        r = run("tx", "job", "create", "--from", "validator", "--home", home, "--rounds", "1", "--reward-per-round", "1loco",
                "--inner-steps", "4", "--trace-interval", "2", "--participants", "1", "--shards", "2",
                "--tokens-per-step", "64", "--initial-model", "00" * 32, "--dataset-id", "11" * 32, "--compression", "int8")
        assert r.returncode == 0, r.stderr
        assert "job_id: 1" in r.stdout
        text = ok("query", "job", "1", "--home", home)
        assert "compression dense+int8" in text and "{" not in text and "windows:     commit 10" in text

        # rewards: the validator's operator account earns the fees and block rewards
        rw = json.loads(ok("query", "rewards", info["validator_account"], "--home", home, "-o", "json"))
        assert rw["total"] > 0 and rw["by_kind"].get("validator", 0) == rw["total"]
        assert json.loads(ok("query", "rewards", bob, "--home", home, "-o", "json"))["total"] == 0
    finally:
        node.stop()
