"""Issue 32's attacks against the contracts on a real anvil process (the in-process eth-tester
runs the same in tests/evm/test_contracts.py and tests/settlement/test_settlement_chain.py):
a checkpoint for another deployment or another EVM chain, a forged signature, two thirds of the
power exactly, a replayed or old checkpoint, a claim raced by a newer checkpoint in the same
block, a number that would block the contract, a forged mint (rate limited, its signers slashed
on loconet), the guardian's pause, keyless power counting as not signing, and a rotation where
half of loconet's signer set leaves in one block."""

from __future__ import annotations

import hashlib
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from eth_account import Account
from web3 import Web3

from abci_app.pb import settlement_pb2, tx_pb2
from abci_app.settlement import evm
from abci_app.settlement.params import DEFAULT_EVM_CONTRACT
from node.evm import anvil, client
from tests.kits.chainkit import CHAIN_ID
from tests.kits.evmkit import Member, assert_reverts, checkpoint, make_set
from tests.kits.settlekit import LOCO, new_net, settlement_secret

ANVIL_CHAIN_ID = 31337
SET = make_set(4, tag="anvil")


@pytest.fixture
def w3(tmp_path: Path) -> Iterator[Web3]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    proc = anvil.start(port, tmp_path / "anvil.log")
    try:
        yield Web3(Web3.HTTPProvider(f"http://127.0.0.1:{port}", request_kwargs={"timeout": 10}))
    finally:
        proc.terminate()
        proc.wait(timeout=20)


DEPLOYER = Account.from_key(anvil.DEV_KEYS[0])
USER = Account.from_key(anvil.DEV_KEYS[2])


class Deployed:
    def __init__(self, w3: Web3, members: list[Member], keyless: int = 0, **kw: Any) -> None:
        self.w3 = w3
        signers = [Web3.to_checksum_address(m.address) for m in members]
        self.d = client.deploy(
            w3,
            DEPLOYER,
            CHAIN_ID,
            signers,
            [m.power for m in members],
            0,
            keyless_power=keyless,
            **kw,
        )
        self.at = (ANVIL_CHAIN_ID, bytes.fromhex(self.d.distributor[2:]))
        self.cp = client.checkpoints(w3, self.d)
        self.dist = client.distributor(w3, self.d)
        self.token = client.token(w3, self.d)

    def cpt(self, number: int, members: list[Member], **kw: Any) -> dict[str, Any]:
        return checkpoint(number, members, deployment=self.at, **kw)

    def submit(self, cp: dict[str, Any]) -> Any:
        return client.send(self.w3, self.cp.functions.submit(*client.submit_args(cp)), DEPLOYER)

    def claim(self, account: bytes, cumulative: int, proof: list[bytes], number: int) -> Any:
        fn = self.dist.functions.claim(Web3.to_checksum_address(account), cumulative, number, proof)
        return client.send(self.w3, fn, USER)


def _entries() -> list[tuple[bytes, int]]:
    return [(hashlib.sha256(b"acct%d" % i).digest()[:20], 1_000 * (i + 1)) for i in range(5)]


def test_checkpoint_for_another_deployment_is_refused(w3: Web3) -> None:
    a, b = Deployed(w3, SET), Deployed(w3, SET)  # same loconet chain id, same set
    cp = a.cpt(1, SET)
    a.submit(cp)
    assert_reverts("BadSignature(uint256)", b.submit, cp)
    cp_b = b.cpt(1, SET)
    b.submit(cp_b)
    assert_reverts("BadSignature(uint256)", a.submit, b.cpt(2, SET))


def test_checkpoint_for_another_evm_chain_is_refused(w3: Web3) -> None:
    """Signed for the same contract address on Ethereum mainnet (chain id 1): refused here."""
    c = Deployed(w3, SET)
    other = (1, c.at[1])
    assert_reverts("BadSignature(uint256)", c.submit, checkpoint(1, SET, deployment=other))
    c.submit(c.cpt(1, SET))


def test_forged_signature_is_refused(w3: Web3) -> None:
    """A key outside the set signs in a member's place: the contract recovers the signer of the
    digest it computes itself and refuses the checkpoint."""
    c = Deployed(w3, SET)
    cp = c.cpt(1, SET)
    outsider = make_set(1, tag="anvil-outsider")[0]
    d = evm.checkpoint_digest(
        CHAIN_ID,
        *c.at,
        1,
        cp["height"],
        bytes.fromhex(cp["app_hash"]),
        bytes.fromhex(cp["rewards_root"]),
        bytes.fromhex(cp["next_set_hash"]),
    )
    cp["signatures"][0]["signature"] = evm.sign_digest(outsider.key, d).hex()
    assert_reverts("BadSignature(uint256)", c.submit, cp)


def test_two_thirds_of_the_power_is_not_enough(w3: Web3) -> None:
    s = make_set(3, tag="anvil-third")
    c = Deployed(w3, s)
    assert_reverts("NotEnoughPower(uint256,uint256)", c.submit, c.cpt(1, s, signed_by=s[:2]))
    c.submit(c.cpt(1, s))


def test_replayed_and_old_checkpoints_are_refused(w3: Web3) -> None:
    c = Deployed(w3, SET)
    cp1, cp2 = c.cpt(1, SET), c.cpt(2, SET)
    c.submit(cp2)
    assert_reverts("StaleNumber(uint64,uint64)", c.submit, cp2)
    assert_reverts("StaleNumber(uint64,uint64)", c.submit, cp1)


def test_racing_checkpoint_does_not_revert_a_claim(w3: Web3) -> None:
    """The claim (against checkpoint 1) and a newer checkpoint land in one block, the checkpoint
    first (it paid more gas): the claim still pays."""
    c = Deployed(w3, SET)
    entries = _entries()
    c.submit(c.cpt(1, SET, root=evm.rewards_root(entries)))
    acct, cum = entries[3]
    entries2 = [(a, v + 1) for a, v in entries]
    w3.provider.make_request("evm_setAutomine", [False])  # type: ignore[arg-type]
    try:
        claim_fn = c.dist.functions.claim(
            Web3.to_checksum_address(acct), cum, 1, evm.claim_proof(entries, 3)
        )
        claim_tx = claim_fn.build_transaction(
            {  # type: ignore[arg-type]
                "from": USER.address,
                "nonce": w3.eth.get_transaction_count(USER.address),
                "gas": 300_000,
                "maxFeePerGas": 10**10,
                "maxPriorityFeePerGas": 10**9,
            }
        )
        race = c.cp.functions.submit(
            *client.submit_args(c.cpt(2, SET, root=evm.rewards_root(entries2)))
        )
        race_tx = race.build_transaction(
            {  # type: ignore[arg-type]
                "from": DEPLOYER.address,
                "nonce": w3.eth.get_transaction_count(DEPLOYER.address),
                "gas": 500_000,
                "maxFeePerGas": 10**11,
                "maxPriorityFeePerGas": 5 * 10**10,
            }
        )
        h_claim = w3.eth.send_raw_transaction(USER.sign_transaction(claim_tx).raw_transaction)
        h_race = w3.eth.send_raw_transaction(DEPLOYER.sign_transaction(race_tx).raw_transaction)
        w3.provider.make_request("evm_mine", [])  # type: ignore[arg-type]
    finally:
        w3.provider.make_request("evm_setAutomine", [True])  # type: ignore[arg-type]
    r_claim = w3.eth.get_transaction_receipt(h_claim)
    r_race = w3.eth.get_transaction_receipt(h_race)
    assert r_claim["blockNumber"] == r_race["blockNumber"]
    assert r_race["transactionIndex"] < r_claim["transactionIndex"]  # the race was won...
    assert r_race["status"] == 1 and r_claim["status"] == 1  # ...and the claim still paid
    assert c.token.functions.balanceOf(Web3.to_checksum_address(acct)).call() == cum


def test_checkpoint_number_cannot_jump_out_of_reach(w3: Web3) -> None:
    c = Deployed(w3, SET)
    assert_reverts("NumberGapTooLarge(uint64,uint64)", c.submit, c.cpt(2**64 - 1, SET, height=1))
    c.submit(c.cpt(1000, SET))
    c.submit(c.cpt(1001, SET))


def test_keyless_power_counts_as_not_signing(w3: Web3) -> None:
    s = make_set(3, tag="anvil-k")
    c = Deployed(w3, s, keyless=1)
    assert_reverts(
        "NotEnoughPower(uint256,uint256)", c.submit, c.cpt(1, s, signed_by=s[:2], keyless=1)
    )
    c.submit(c.cpt(1, s, keyless=1))


def test_guardian_pause_stops_checkpoints_and_claims(w3: Web3) -> None:
    c = Deployed(w3, SET, guardian=USER.address)
    entries = _entries()
    c.submit(c.cpt(1, SET, root=evm.rewards_root(entries)))
    assert_reverts("NotGuardian(address)", client.send, w3, c.cp.functions.pause(), DEPLOYER)
    client.send(w3, c.cp.functions.pause(), USER)
    assert_reverts("IsPaused()", c.submit, c.cpt(2, SET))
    assert_reverts("IsPaused()", c.claim, *entries[0], evm.claim_proof(entries, 0), 1)
    client.send(w3, c.cp.functions.unpause(), USER)
    c.claim(*entries[0], evm.claim_proof(entries, 0), 1)


def test_forged_checkpoint_is_rate_limited_and_its_signers_slashed(w3: Web3) -> None:
    """loconet's four validators (their genesis names anvil's first contract of account 0, the
    params' default) and the contract deployed there; three of the four settlement keys forge
    a checkpoint crediting a thief 10^30: it mints 5 LOCO an hour, and the signed bytes slash
    the three on loconet."""
    net = new_net(deployment=None)
    s = net.query("/settlement")
    signers, powers = client.set_of(s["signer_set"])
    d = client.deploy(
        w3,
        DEPLOYER,
        CHAIN_ID,
        signers,
        powers,
        0,
        mint_limit=5 * LOCO,
        mint_window=3600,
        expect_address=evm.parse_address(DEFAULT_EVM_CONTRACT),
    )
    dist = client.distributor(w3, d)
    thief = bytes.fromhex(USER.address[2:])
    root = evm.rewards_root([(thief, 10**30)])
    fields: dict[str, Any] = {
        "number": 1,
        "height": 999,
        "app_hash": b"\x13" * 32,
        "rewards_root": root,
        "next_set_hash": bytes.fromhex(s["signer_set_hash"]),
    }
    dg = evm.checkpoint_digest(
        CHAIN_ID, ANVIL_CHAIN_ID, bytes.fromhex(d.distributor[2:]), *fields.values()
    )
    sigs = [evm.sign_digest(settlement_secret(i), dg) for i in range(3)]
    forged = {
        "number": 1,
        "height": 999,
        "app_hash": "13" * 32,
        "rewards_root": root.hex(),
        "set_hash": s["signer_set_hash"],
        "next_set_hash": s["signer_set_hash"],
        "signers": s["signer_set"],
        "next_set": s["signer_set"],
        "signatures": [
            {"evm_address": "0x" + evm.recover(dg, x).hex(), "signature": x.hex()}  # type: ignore[union-attr]
            for x in sigs
        ],
    }
    client.send(w3, dist.functions.submit(*client.submit_args(forged)), DEPLOYER)
    client.send(w3, dist.functions.claim(USER.address, 10**30, 1, []), USER)
    tok = client.token(w3, d)
    assert tok.functions.balanceOf(USER.address).call() == 5 * LOCO
    fn = dist.functions.claim(USER.address, 10**30, 1, [])
    assert_reverts("RateLimited(uint256)", client.send, w3, fn, USER)
    w3.provider.make_request("evm_increaseTime", [3601])  # type: ignore[arg-type]
    w3.provider.make_request("evm_mine", [])  # type: ignore[arg-type]
    client.send(w3, fn, USER)
    assert tok.functions.balanceOf(USER.address).call() == 10 * LOCO  # one window's worth more
    report = settlement_pb2.MsgReportForgedCheckpoint(
        evm_chain_id=ANVIL_CHAIN_ID,
        evm_contract=bytes.fromhex(d.distributor[2:]),
        signatures=sigs,
        **fields,
    )
    net.ok(net.keys[0], [tx_pb2.Msg(report_forged_checkpoint=report)])
    flags = [net.query(f"/validator/{v.address.hex()}")["tombstoned"] for v in net.vals]
    assert flags == [True, True, True, False]


def test_rotation_where_2_of_4_validators_leave_keeps_settling(w3: Web3) -> None:
    """Half of loconet's signer set unbonds in one block: the valset update its outgoing set
    signs moves the contract on anvil, and the two validators left settle a withdrawal alone."""
    from tests.kits.settlekit import withdraw_msg
    from tests.kits.stakekit import unbond_msg

    net = new_net(deployment=None)
    net.run_until(lambda: _has_final(net))
    cp1 = net.query("/checkpoint/latest")
    signers, powers = client.set_of(cp1["signers"])
    d = client.deploy(
        w3,
        DEPLOYER,
        CHAIN_ID,
        signers,
        powers,
        cp1["number"] - 1,
        expect_address=evm.parse_address(DEFAULT_EVM_CONTRACT),
    )
    cps = client.checkpoints(w3, d)

    def post_from(n: int) -> int:
        last = n - 1
        for k in range(n, net.query("/settlement")["latest"] + 1):
            cp = net.query(f"/checkpoint/{k}")
            if cp["final"]:
                client.send(w3, cps.functions.submit(*client.submit_args(cp)), DEPLOYER)
                last = k
        return last

    last = post_from(cp1["number"])
    net.block([net.tx(v, [unbond_msg(v.address, 100 * LOCO)]) for v in net.vals[2:]])
    assert net.query("/checkpoint/pending")["valset_update"]
    net.blocks(2)
    last = post_from(last + 1)
    assert cps.functions.setHash().call().hex() == net.query("/settlement")["signer_set_hash"]
    user = bytes.fromhex(USER.address[2:])
    net.ok(net.keys[0], [withdraw_msg(user, 2 * LOCO)])
    n = net.query("/settlement")["latest"] + 1
    net.run_until(lambda: _has(net, n) and net.query(f"/checkpoint/{n}")["final"])
    cp = net.query(f"/checkpoint/{n}")
    assert cp["total_power"] == 200
    post_from(last + 1)
    claim = net.query(f"/claim/0x{user.hex()}", height=cp["height"])
    client.send(w3, client.distributor(w3, d).functions.claim(*client.claim_args(claim, n)), USER)
    assert client.token(w3, d).functions.balanceOf(USER.address).call() == 2 * LOCO


def _has(net: Any, n: int) -> bool:
    from abci_app.pb import abci

    return net.apps[0].query(abci.RequestQuery(path=f"/checkpoint/{n}")).code == 0


def _has_final(net: Any) -> bool:
    """/checkpoint/latest answers once a checkpoint is final."""
    from abci_app.pb import abci

    return net.apps[0].query(abci.RequestQuery(path="/checkpoint/latest")).code == 0


def test_guardian_pauses_with_the_cli(
    w3: Web3, tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    """`loconet evm pause` / `unpause` by the guardian; anyone else is told who the guardian is."""
    import argparse
    import json

    from node.cli import evm as cli_evm
    from node.cli.common import UsageError

    c = Deployed(w3, SET, guardian=USER.address)
    dep = tmp_path / "deployment.json"
    c.d.save(dep)
    monkeypatch.setattr(cli_evm, "_w3", lambda url: w3)

    def run(verb: str, key: str) -> Any:
        ns = argparse.Namespace(
            evm_cmd=verb, deployment=str(dep), evm_rpc="unused", from_key=key, output="json"
        )
        assert cli_evm.cmd_evm_pause(ns) == 0
        return json.loads(capsys.readouterr().out)

    with pytest.raises(UsageError, match="only the guardian"):
        run("pause", anvil.DEV_KEYS[0])
    assert run("pause", anvil.DEV_KEYS[2])["paused"] is True
    assert_reverts("IsPaused()", c.submit, c.cpt(1, SET))
    assert run("unpause", anvil.DEV_KEYS[2])["paused"] is False
    c.submit(c.cpt(1, SET))
