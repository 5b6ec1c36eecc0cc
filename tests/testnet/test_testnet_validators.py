"""A real network with short slashing windows: stake unbonded returns only after
unbonding_blocks; a node joins as a validator with MsgCreateValidator, stays out of CometBFT's
set until it registers a settlement key, goes down past the window (slashed, jailed, removed),
comes back with MsgUnjail and signs again; then a twin of another validator's key double-signs
and CometBFT's evidence gets it slashed once and tombstoned. One network, in that order (each
step needs the power left by the previous one: 5 validators of equal power)."""

from __future__ import annotations

from pathlib import Path

import pytest

from node.client.rpc import Client
from node.local.testnet import add_node, start_node, stop_node
from tests.kits.tnkit import cli, comet_validators, commit_signers, height, network, query, wait_for

pytestmark = pytest.mark.integration

PARAMS = (
    "slashing.signed_blocks_window=10",
    "slashing.min_signed_per_window_bps=5000",
    "slashing.downtime_jail_blocks=5",
    "slashing.slash_fraction_downtime_bps=100",
    "slashing.slash_fraction_double_sign_bps=500",
    "staking.unbonding_blocks=12",
    "slashing.max_evidence_age_blocks=12",
)
UNBONDING_BLOCKS = 12


def ceil_bps(amount: int, bps: int) -> int:
    return (amount * bps + 9999) // 10000


def supply_at(n, h: int) -> int:
    import json

    with Client(n.rpc_url) as c:
        return int(json.loads(c.abci_query("/supply", height=h).value)["supply"])


def signs(n0, addr: str, blocks: int = 2) -> bool:
    """addr's signature is in the commits of the last ``blocks`` blocks."""
    h = height(n0) - 1
    return all(addr in commit_signers(n0, x) for x in range(h - blocks + 1, h + 1))


# long: one live testnet's validator story, step by step; splitting would hide the order
def test_join_downtime_unjail_and_double_sign(tmp_path: Path) -> None:
    with network(tmp_path, *PARAMS) as (d, nodes):
        n0 = nodes[0]
        # -- unbonding: stake comes back only after unbonding_blocks ---------------------------
        from node.client.keys import Keyring

        acct = Keyring(d).get("account1").address
        target = nodes[1].validator_address
        cli(
            "tx",
            "staking",
            "bond",
            target,
            "300loco",
            "--from",
            "account1",
            "--home",
            str(d),
            "--node",
            n0.rpc_url,
        )
        bal0 = query(n0, f"/account/{acct}")["balance"]
        out = cli(
            "tx",
            "staking",
            "unbond",
            target,
            "300loco",
            "--from",
            "account1",
            "--home",
            str(d),
            "--node",
            n0.rpc_url,
            "-o",
            "json",
        ).stdout
        import json

        h_unbond = json.loads(out)["height"]
        fee_paid = bal0 - query(n0, f"/account/{acct}")["balance"]
        assert 0 <= fee_paid < 10**6  # only the fee left; the 300 LOCO are in the unbonding queue
        wait_for(
            "a few blocks into unbonding",
            lambda: height(n0) >= h_unbond + UNBONDING_BLOCKS // 2,
            timeout=30,
        )
        assert query(n0, f"/account/{acct}")["balance"] == bal0 - fee_paid  # not yet
        wait_for(
            "unbonding matured", lambda: height(n0) >= h_unbond + UNBONDING_BLOCKS + 1, timeout=40
        )
        assert query(n0, f"/account/{acct}")["balance"] == bal0 - fee_paid + 300 * 10**6

        # -- a new node joins as a validator ----------------------------------------------------
        new = add_node(d)
        start_node(new)
        wait_for("node4 in sync", lambda: height(new) >= height(n0) - 1, timeout=60)
        cli(
            "tx",
            "staking",
            "create-validator",
            "--from",
            "account0",
            "--validator-home",
            new.home,
            "--self-bond",
            "100000loco",
            "--moniker",
            "node4",
            "--home",
            str(d),
            "--node",
            n0.rpc_url,
        )
        addr = new.validator_address
        # -- no settlement key, no seat: bonded with a full validator's stake, node4 stays out of
        # CometBFT's set until its operator registers a settlement key (issue 32) ---------------
        h_created = height(n0)
        wait_for("4 blocks after create-validator", lambda: height(n0) >= h_created + 4, timeout=30)
        assert addr not in comet_validators(n0)
        v = query(n0, f"/validator/{addr}")
        assert v["power"] == 0 and v["tokens"] == 100000 * 10**6 and not v["jailed"]
        cli(
            "tx",
            "settlement",
            "set-key",
            "--validator-home",
            new.home,
            "--from",
            "account0",
            "--home",
            str(d),
            "--node",
            n0.rpc_url,
        )
        wait_for(
            "node4 in CometBFT's validator set",
            lambda: comet_validators(n0).get(addr) == 100000,
            timeout=30,
        )
        wait_for("node4's signatures in commits", lambda: signs(n0, addr), timeout=30)
        v = query(n0, f"/validator/{addr}")
        assert (v["power"], v["status"], v["moniker"]) == (100000, "active", "node4")
        tokens = v["tokens"]

        # -- it stays down past the window: slashed 1 %, jailed, removed ---------------------------
        stop_node(new)
        v = wait_for(
            "node4 jailed",
            lambda: (lambda v: v if v["jailed"] else None)(query(n0, f"/validator/{addr}")),
            timeout=60,
        )
        assert (
            v["slashed"] == ceil_bps(tokens, 100)
            and v["tokens"] == tokens - v["slashed"]
            and v["power"] == 0
        )
        wait_for(
            "node4 out of CometBFT's set", lambda: addr not in comet_validators(n0), timeout=20
        )
        out = cli("query", "validators", "--node", n0.rpc_url).stdout
        assert "jailed until" in out

        # -- back up, unjail after the jail period, signs again -----------------------------------
        start_node(new)
        wait_for(
            "node4 caught up", lambda: height(new) >= max(height(n0), v["jailed_until"]), timeout=60
        )
        cli(
            "tx",
            "staking",
            "unjail",
            addr,
            "--from",
            "account0",
            "--home",
            str(d),
            "--node",
            n0.rpc_url,
        )
        wait_for(
            "node4 back in the set",
            lambda: comet_validators(n0).get(addr) == v["tokens"] // 10**6,
            timeout=30,
        )
        wait_for("node4 signing again", lambda: signs(n0, addr, 3), timeout=30)
        assert query(n0, f"/validator/{addr}")["slashed"] == v["slashed"]  # no second penalty

        # -- double sign: node3's key in a second cometbft process ---------------------------------
        bad = nodes[3].validator_address
        before = query(n0, f"/validator/{bad}")
        hs = height(n0) - 1
        supply = supply_at(n0, hs)
        # the twin gives up on proposals at once and so prevotes nil where node3 prevotes the block
        twin = add_node(
            d,
            clone_key_of="node3",
            overrides={"consensus": {"timeout_propose": '"1ms"', "timeout_commit": '"1ms"'}},
        )
        start_node(twin)
        v3 = wait_for(
            "node3 tombstoned",
            lambda: (lambda v: v if v["tombstoned"] else None)(query(n0, f"/validator/{bad}")),
            timeout=90,
        )
        stop_node(twin)
        penalty = ceil_bps(before["tokens"], 500)
        assert v3["slashed"] == penalty and v3["jailed"] and v3["status"] == "tombstoned"
        with Client(n0.rpc_url) as c:  # the evidence is in a committed block
            found = [
                h
                for h in range(max(1, height(n0) - 60), height(n0) + 1)
                if c.block(h)["block"]["evidence"]["evidence"]
            ]
        assert found, "no block carries the duplicate-vote evidence"
        wait_for("node3 out of CometBFT's set", lambda: bad not in comet_validators(n0), timeout=20)
        h = height(n0)
        wait_for("3 more blocks", lambda: height(n0) >= h + 3, timeout=30)
        assert query(n0, f"/validator/{bad}")["slashed"] == penalty  # slashed once
        # supply: + 1 LOCO block reward per block, - the burned penalty, nothing else
        he = height(n0) - 1
        assert supply_at(n0, he) == supply + (he - hs) * 10**6 - penalty
        r = cli(
            "tx",
            "staking",
            "unjail",
            bad,
            "--from",
            "validator3",
            "--home",
            str(d),
            "--node",
            n0.rpc_url,
            check=False,
        )
        assert r.returncode == 1 and "tombstoned" in r.stderr

        # -- --prove from genesis across every set change above (node/client/trust.py)
        # ----------------- a join, a jail, an unjail and a tombstone, with skips of at most 8
        # blocks
        # (2/3 of unbonding_blocks 12): the set the genesis gives must lead to today's header
        res = json.loads(
            cli(
                "query",
                "account",
                acct,
                "--prove",
                "--home",
                str(n0.home),
                "--node",
                n0.rpc_url,
                "-o",
                "json",
            ).stdout
        )
        assert res["proof_verified"] is True and res["validator_set"] == "genesis"
        trusted = json.loads((Path(n0.home) / "data" / "light_trust.json").read_text())
        assert len(trusted["trusted"]) > height(n0) // 8 // 2
