"""settlement on the chain: checkpoints signed in vote extensions by every validator's app,
carried by the next proposer, checked by every node, identical everywhere, and accepted by the
contracts on an in-process EVM; withdrawals claimable there; bad extensions and proposals
refused."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from web3 import EthereumTesterProvider, Web3

from abci_app.bank.errors import ErrInsufficientFunds, ErrInvalidAmount
from abci_app.codec.address import to_bech32
from abci_app.errors import LoconetError
from abci_app.pb import abci, settlement_pb2, tx_pb2
from abci_app.settlement import evm
from abci_app.settlement.errors import (
    ErrCheckpointNotPending,
    ErrInvalidCheckpointSignature,
    ErrInvalidEvidence,
    ErrInvalidEvmAddress,
    ErrInvalidKeyProof,
    ErrKeyInUse,
    ErrNotForged,
    ErrNotOperator,
    ErrValidatorNotFound,
)
from abci_app.vote_extensions import INJECTED_PREFIX, VoteExtension, extension_sign_bytes
from node.evm import client
from tests.kits.chainkit import CHAIN_ID, assert_rejected, signer, tx_fee
from tests.kits.evmkit import assert_reverts
from tests.kits.settlekit import (
    ETH_TESTER,
    LOCO,
    Net,
    bond_msg,
    fund_deployer,
    new_net,
    set_key_msg,
    settlement_secret,
    withdraw_msg,
)
from tests.kits.stakekit import new_staking_chain, unbond_msg

EVM_USER = evm.address_of_private_key(hashlib.sha256(b"evm-user").digest())


def final(net: Net, n: int) -> bool:
    r = net.apps[0].query(abci.RequestQuery(path=f"/checkpoint/{n}"))
    return r.code == 0 and b'"final":true' in r.value


class EVMChain:
    """eth-tester with the contracts at the address new_net's checkpoints name."""

    def __init__(self, cp: dict, **deploy: Any) -> None:
        self.w3 = Web3(EthereumTesterProvider())
        self.sender = fund_deployer(self.w3)
        signers, powers = client.set_of(cp["signers"])
        self.d = client.deploy(
            self.w3,
            self.sender,
            CHAIN_ID,
            signers,
            powers,
            cp["number"] - 1,
            keyless_power=cp["keyless_power"],
            expect_address=ETH_TESTER[1],
            **deploy,
        )
        self.cp = client.checkpoints(self.w3, self.d)
        self.dist = client.distributor(self.w3, self.d)
        self.token = client.token(self.w3, self.d)

    def submit(self, cp: dict) -> None:
        client.send(self.w3, self.cp.functions.submit(*client.submit_args(cp)), self.sender)

    def claim(self, claim: dict, number: int) -> None:
        fn = self.dist.functions.claim(*client.claim_args(claim, number))
        client.send(self.w3, fn, self.sender)

    def balance(self, a: bytes) -> int:
        return int(self.token.functions.balanceOf(Web3.to_checksum_address(a)).call())


def digest(cp: dict, deployment: tuple[int, bytes] = ETH_TESTER, **over: Any) -> bytes:
    f = {**cp, **over}
    return evm.checkpoint_digest(
        CHAIN_ID,
        *deployment,
        f["number"],
        f["height"],
        bytes.fromhex(f["app_hash"]),
        bytes.fromhex(f["rewards_root"]),
        bytes.fromhex(f["next_set_hash"]),
    )


def test_checkpoint_signed_in_vote_extensions_same_on_every_node_and_accepted_by_contract() -> None:
    net = new_net()
    net.run_until(lambda: final(net, 1))
    views = [net.query("/checkpoint/1", app=i) for i in range(4)]
    assert all(v == views[0] for v in views)
    cp = views[0]
    # signed at 7
    assert cp["height"] == 5 and cp["created_height"] == 6 and cp["final_height"] == 8
    assert bytes.fromhex(cp["app_hash"]) == net.app_hashes[5]  # the app hash after block 5
    assert cp["signed_power"] == cp["total_power"] == 400 and len(cp["signatures"]) == 4
    d = digest(cp)
    for s in cp["signatures"]:
        signer = evm.recover(d, bytes.fromhex(s["signature"]))
        assert signer is not None and "0x" + signer.hex() == s["evm_address"]
    assert net.query("/checkpoint/latest") == cp
    chain = EVMChain(cp)
    chain.submit(cp)
    assert chain.cp.functions.lastNumber().call() == 1
    assert chain.cp.functions.lastAppHash().call() == net.app_hashes[5]


def test_withdraw_then_claim_on_the_evm_pays_exactly_the_withdrawal() -> None:
    net = new_net()
    k = net.keys[0]
    net.run_until(lambda: final(net, 1))
    chain = EVMChain(net.query("/checkpoint/1"))
    chain.submit(net.query("/checkpoint/1"))
    before = net.query("/account/" + to_bech32(k.address))["balance"]
    fees = tx_fee(net.ok(k, [withdraw_msg(EVM_USER, 5 * LOCO)]), None)
    fees += tx_fee(net.ok(k, [withdraw_msg(EVM_USER, 2 * LOCO)]), None)
    after = net.query("/account/" + to_bech32(k.address))["balance"]
    assert before - after == 7 * LOCO + fees and fees > 0
    net.run_until(lambda: final(net, 2))
    cp = net.query("/checkpoint/2")
    claim = net.query(f"/claim/0x{EVM_USER.hex()}", height=cp["height"])
    assert claim["cumulative"] == 7 * LOCO and claim["rewards_root"] == cp["rewards_root"]
    chain.submit(cp)
    chain.claim(claim, cp["number"])
    assert chain.balance(EVM_USER) == 7 * LOCO


def test_no_checkpoint_until_keyed_validators_hold_more_than_two_thirds() -> None:
    net = new_net(with_keys=False)
    net.block(
        [
            net.tx(v, [set_key_msg(v.address, settlement_secret(i))])
            for i, v in enumerate(net.vals[:2])
        ]
    )
    net.blocks(12)  # two due heights pass: 2 of 4 keyed is not enough
    assert net.query("/settlement")["latest"] == 0
    net.ok(net.vals[2], [set_key_msg(net.vals[2].address, settlement_secret(2))])  # 3 of 4
    net.run_until(lambda: final(net, 1))
    cp = net.query("/checkpoint/1")
    # the keyless validator is not a signer, and counts in the total as not signing
    assert cp["total_power"] == 400 and len(cp["signers"]) == 3 and cp["keyless_power"] == 100


def test_keyless_validator_counts_as_not_signing() -> None:
    """3 of 4 validators keyed, one of them absent: 200 of 400 signed is not final, though it is
    2/3... more than 2/3 of the keyed power would have been enough before (issue 32)."""
    net = new_net(with_keys=False)
    net.block(
        [
            net.tx(v, [set_key_msg(v.address, settlement_secret(i))])
            for i, v in enumerate(net.vals[:3])
        ]
    )
    net.absent = {net.vals[2].address}
    net.run_until(lambda: net.query("/settlement")["latest"] == 1)
    net.blocks(6)
    cp = net.query("/checkpoint/1")
    assert not cp["final"] and cp["signed_power"] == 200 and cp["total_power"] == 400
    net.absent = set()
    net.run_until(lambda: final(net, 1))
    chain = EVMChain(cp)
    chain.submit(net.query("/checkpoint/1"))


def test_vote_extension_checks() -> None:
    net = new_net()
    net.run_until(
        lambda: net.apps[0].query(abci.RequestQuery(path="/checkpoint/pending")).code == 0
    )
    h = net.height + 1  # votes of the next height are made on the state just committed
    cp = net.query("/checkpoint/pending")
    good = net.extension(0, h)
    ext = VoteExtension.FromString(good)
    assert ext.settlement.number == cp["number"]
    v0 = net.vals[0].address
    assert net.verify(1, v0, h, good)
    assert not net.verify(1, v0, h, b"")  # no beacon share: refused (every extension carries one)
    # no settlement key: beacon only
    assert net.verify(1, v0, h, VoteExtension(beacon=ext.beacon).SerializeToString())
    # from a non-validator (a valid signature by a key that is not in the signer set)
    outsider = signer(9999).address
    assert not net.verify(1, outsider, h, good)
    # another validator's signature presented as v0's
    assert not net.verify(1, net.vals[1].address, h, good)
    # a bad signature
    bad = VoteExtension.FromString(good)
    sig = ext.settlement.signature
    bad.settlement.signature = sig[:-2] + bytes([sig[-2] ^ 1]) + sig[-1:]
    assert not net.verify(1, v0, h, bad.SerializeToString())
    # for another checkpoint (height): same number, digest of another height; or another number
    other = VoteExtension(beacon=ext.beacon)  # a valid share: only the settlement part is wrong
    d = digest(cp, height=cp["height"] + 1)
    other.settlement.number, other.settlement.signature = (
        cp["number"],
        evm.sign_digest(settlement_secret(0), d),
    )
    assert not net.verify(1, v0, h, other.SerializeToString())
    other.settlement.number = cp["number"] + 1
    assert not net.verify(1, v0, h, other.SerializeToString())
    # malformed envelope, unknown field
    assert not net.verify(1, v0, h, b"\xff\x01")
    assert not net.verify(1, v0, h, good + b"\x18\x01")


def _pending_with_signed_commit(net: Net) -> None:
    """Stop where the next proposal must carry signatures (votes of the last height signed)."""
    net.run_until(
        lambda: any(
            VoteExtension.FromString(v.vote_extension).HasField("settlement")
            for v in net.commit.votes
            if v.vote_extension
        )
    )


def test_process_proposal_refuses_blocks_without_enough_valid_extensions() -> None:
    net = new_net()
    _pending_with_signed_commit(net)
    txs = net.prepare([])
    assert txs and txs[0].startswith(INJECTED_PREFIX)
    assert all(net.process(txs, i) for i in range(4))
    assert not net.process([])  # extensions left out while a checkpoint needs them
    info = abci.ExtendedCommitInfo.FromString(txs[0][len(INJECTED_PREFIX) :])

    def variant(f) -> list[bytes]:
        x = abci.ExtendedCommitInfo()
        x.CopyFrom(info)
        f(x)
        return [INJECTED_PREFIX + x.SerializeToString(deterministic=True)]

    assert not net.process(variant(lambda x: x.votes.__delitem__(slice(2, 4))))  # 2 of 4: not > 2/3
    assert net.process(variant(lambda x: x.votes.__delitem__(slice(3, 4))))  # 3 of 4 is enough
    assert not net.process(variant(lambda x: x.votes.append(x.votes[0])))  # duplicate
    assert not net.process(variant(lambda x: setattr(x.votes[0].validator, "power", 999)))

    def forge(x: abci.ExtendedCommitInfo) -> None:
        x.votes[0].extension_signature = bytes(64)

    assert not net.process(variant(forge))

    def old_height(x: abci.ExtendedCommitInfo) -> None:  # validly signed, but for the height before
        i = net.by_address(x.votes[0].validator.address)
        x.votes[0].extension_signature = net.vals[i].sign(
            extension_sign_bytes(x.votes[0].vote_extension, net.height - 1, 0, CHAIN_ID)
        )

    assert not net.process(variant(old_height))

    def swapped(x: abci.ExtendedCommitInfo) -> None:  # v1's extension under v0's name
        x.votes[0].vote_extension, x.votes[0].extension_signature = (
            x.votes[1].vote_extension,
            x.votes[1].extension_signature,
        )

    assert not net.process(variant(swapped))
    assert not net.process([txs[0] + b"\x00"])  # not canonical
    assert not net.process([net.tx(net.keys[0], [withdraw_msg(EVM_USER, 1)]), txs[0]])  # not first
    # a user cannot send the injected bytes as a tx
    assert net.apps[0].check_tx(abci.RequestCheckTx(tx=txs[0])).code != 0


def test_an_absent_validator_does_not_stop_the_checkpoint() -> None:
    net = new_net()
    net.absent = {net.vals[3].address}
    net.run_until(lambda: final(net, 1))
    cp = net.query("/checkpoint/1")
    assert cp["signed_power"] == 300 and len(cp["signatures"]) == 3


def test_validator_set_change_rotates_the_contract_set() -> None:
    net = new_net()
    net.run_until(lambda: final(net, 1))
    chain = EVMChain(net.query("/checkpoint/1"))
    chain.submit(net.query("/checkpoint/1"))
    net.ok(net.vals[0], [bond_msg(net.vals[0].address, 300 * LOCO)])  # val0: power 100 -> 400
    n = 2
    while True:
        net.run_until(lambda n=n: final(net, n))
        cp = net.query(f"/checkpoint/{n}")
        chain.submit(cp)
        if cp["next_set_hash"] != cp["set_hash"]:
            break
        n += 1
    powers = sorted(s["power"] for s in cp["next_set"])
    assert powers == [100, 100, 100, 400]
    assert chain.cp.functions.setHash().call() == bytes.fromhex(cp["next_set_hash"])
    net.run_until(lambda: final(net, n + 1))
    nxt = net.query(f"/checkpoint/{n + 1}")
    assert nxt["total_power"] == 700
    chain.submit(nxt)  # signed by the new set, accepted by the contract that followed the rotation
    assert chain.cp.functions.lastNumber().call() == n + 1


# ---------------------------------------------------------------------------- messages


@pytest.fixture
def sc():
    return new_staking_chain(
        [100 * LOCO, 100 * LOCO],
        n_keys=2,
        genesis={"settlement": {"params": {"checkpoint_interval": 5, "require_settlement_key": 0}}},
    )


def test_set_settlement_key(sc) -> None:
    v0, v1 = sc.vals
    sc.ok(v0, [set_key_msg(v0.address, settlement_secret(0))])
    assert (
        sc.query("/settlement")["keys"][v0.address.hex().upper()]
        == "0x" + evm.address_of_private_key(settlement_secret(0)).hex()
    )
    assert_rejected(
        sc, sc.tx(sc.keys[0], [set_key_msg(v1.address, settlement_secret(1))]), ErrNotOperator
    )
    assert_rejected(sc, sc.tx(v1, [set_key_msg(v1.address, settlement_secret(0))]), ErrKeyInUse)
    assert_rejected(
        sc, sc.tx(v1, [set_key_msg(signer(77).address, settlement_secret(1))]), ErrValidatorNotFound
    )
    wrong = set_key_msg(v1.address, settlement_secret(1))
    # no proof of this key
    wrong.set_settlement_key.evm_address = evm.address_of_private_key(settlement_secret(5))
    assert_rejected(sc, sc.tx(v1, [wrong]), ErrInvalidKeyProof)
    other_chain = set_key_msg(v1.address, settlement_secret(1), chain_id="other")
    assert_rejected(sc, sc.tx(v1, [other_chain]), ErrInvalidKeyProof)
    # a key can be replaced; the old one stays bound to its validator (what it signed stays
    # slashable), so no other validator can take it
    sc.ok(v0, [set_key_msg(v0.address, settlement_secret(3))])
    assert_rejected(sc, sc.tx(v1, [set_key_msg(v1.address, settlement_secret(0))]), ErrKeyInUse)
    sc.ok(v0, [set_key_msg(v0.address, settlement_secret(0))])  # its own old key: fine


def test_withdraw_rejections_change_nothing(sc) -> None:
    k = sc.keys[0]

    def msg(a: bytes, amt: int) -> tx_pb2.Msg:
        return tx_pb2.Msg(
            withdraw_to_evm=settlement_pb2.MsgWithdrawToEvm(evm_address=a, amount=amt)
        )

    assert_rejected(sc, sc.tx(k, [msg(bytes(20), 5)]), ErrInvalidEvmAddress)
    assert_rejected(sc, sc.tx(k, [msg(b"\x01" * 19, 5)]), ErrInvalidEvmAddress)
    assert_rejected(sc, sc.tx(k, [msg(EVM_USER, 0)]), ErrInvalidAmount)
    assert_rejected(sc, sc.tx(k, [msg(EVM_USER, 10**13)]), ErrInsufficientFunds)
    sc.ok(k, [msg(EVM_USER, 5)])
    assert sc.query(f"/claim/0x{EVM_USER.hex()}")["cumulative"] == 5


# ---------------------------------------------------------------------------- issue 32


def _post_final(net: Net, chain: EVMChain, after: int) -> int:
    """Post every final checkpoint after ``after`` (superseded ones never are); the newest."""
    last = after
    for n in range(after + 1, net.query("/settlement")["latest"] + 1):
        cp = net.query(f"/checkpoint/{n}")
        if cp["final"]:
            chain.submit(cp)
            last = n
    return last


def test_rotation_where_2_of_4_validators_leave_keeps_settling() -> None:
    """Half the signer set unbonds in one block (more than 1/3): the end-block makes a valset
    update that the outgoing set signs at the next height, while CometBFT still has it; the
    contract follows, and the remaining two validators settle a withdrawal on their own."""
    net = new_net()
    net.run_until(lambda: final(net, 1))
    chain = EVMChain(net.query("/checkpoint/1"))
    chain.submit(net.query("/checkpoint/1"))
    leave = net.vals[2:]
    net.block([net.tx(v, [unbond_msg(v.address, 100 * LOCO)]) for v in leave])
    update = net.query("/checkpoint/pending")
    assert update["valset_update"] and update["total_power"] == 400
    assert sorted(s["power"] for s in update["next_set"]) == [100, 100]
    net.blocks(2)  # signed at the next height by all four, final the one after
    update = net.query(f"/checkpoint/{update['number']}")
    assert update["final"] and update["signed_power"] == 400
    last = _post_final(net, chain, 1)
    assert chain.cp.functions.setHash().call() == bytes.fromhex(update["next_set_hash"])
    net.ok(net.keys[0], [withdraw_msg(EVM_USER, 3 * LOCO)])
    n = net.query("/settlement")["latest"] + 1
    net.run_until(lambda: final(net, n))
    cp = net.query(f"/checkpoint/{n}")
    assert cp["total_power"] == 200 and len(cp["signatures"]) == 2
    _post_final(net, chain, last)
    chain.claim(net.query(f"/claim/0x{EVM_USER.hex()}", height=cp["height"]), n)
    assert chain.balance(EVM_USER) == 3 * LOCO


def test_a_member_signs_by_transaction() -> None:
    """Two of four validators' nodes run without their settlement key (their extensions carry
    none): the checkpoint stalls at 200 of 400, until one of them sends its signature in a
    MsgSignCheckpoint (Gravity's MsgValsetConfirm; also the way for a member that left CometBFT's
    set, so has no vote extension)."""
    from dataclasses import replace

    net = new_net()
    for a in net.apps[2:]:
        a.extension_keys = replace(a.extension_keys, settlement=None)
    net.run_until(lambda: net.query("/settlement")["latest"] == 1)
    net.blocks(3)
    cp = net.query("/checkpoint/1")
    assert not cp["final"] and cp["signed_power"] == 200
    sig = evm.sign_digest(settlement_secret(2), digest(cp))

    def sign_msg(number: int, signature: bytes) -> tx_pb2.Msg:
        return tx_pb2.Msg(
            sign_checkpoint=settlement_pb2.MsgSignCheckpoint(number=number, signature=signature)
        )

    k = net.keys[1]
    outsider = evm.sign_digest(hashlib.sha256(b"nobody").digest(), digest(cp))
    again = evm.sign_digest(settlement_secret(0), digest(cp))  # v0 signed in its extension
    for msg, err in (
        (sign_msg(2, sig), ErrCheckpointNotPending),
        (sign_msg(1, outsider), ErrInvalidCheckpointSignature),
        (sign_msg(1, again), ErrInvalidCheckpointSignature),
    ):
        _refused(net, net.tx(k, [msg]), err)
    assert net.query("/checkpoint/1") == cp  # nothing changed
    net.ok(k, [sign_msg(1, sig)])
    cp = net.query("/checkpoint/1")
    assert cp["final"] and cp["signed_power"] == 300


def _refused(net: Net, raw: bytes, err: type[LoconetError]) -> None:
    """CheckTx and the block both refuse ``raw`` with ``err``'s code (the module's own check that
    a refused tx writes nothing is chainkit.assert_rejected, on the staking chain below)."""
    assert net.apps[0].check_tx(abci.RequestCheckTx(tx=raw)).code == err.code
    resp = net.block([raw])
    assert resp.tx_results[net.last_txs.index(raw)].code == err.code


def test_forged_checkpoint_is_rate_limited_and_its_signers_slashed() -> None:
    """Three of four settlement keys (more than 2/3) sign a checkpoint the chain never made,
    crediting a thief 10^30: the contract accepts it (it cannot know), but mints only what the
    rate limit allows per window; the signed bytes, reported on loconet, slash, jail and
    tombstone the three signers, and the honest fourth keeps its stake."""
    net = new_net()
    net.run_until(lambda: final(net, 1))
    cp1 = net.query("/checkpoint/1")
    chain = EVMChain(cp1, mint_limit=5 * LOCO, mint_window=3600)
    chain.submit(cp1)
    thief = evm.address_of_private_key(hashlib.sha256(b"thief").digest())
    root = evm.rewards_root([(thief, 10**30)])
    forged = {**cp1, "number": 2, "height": 999, "app_hash": "13" * 32, "rewards_root": root.hex()}
    d = digest(forged)
    sigs = [evm.sign_digest(settlement_secret(i), d) for i in range(3)]
    forged["signatures"] = [
        {"evm_address": "0x" + evm.recover(d, s).hex(), "signature": s.hex()}  # type: ignore[union-attr]
        for s in sigs
    ]
    chain.submit(forged)
    claim = {"evm_address": "0x" + thief.hex(), "cumulative": 10**30, "proof": []}
    chain.claim(claim, 2)
    assert chain.balance(thief) == 5 * LOCO  # not 10^30
    assert_reverts("RateLimited(uint256)", chain.claim, claim, 2)
    # the evidence, on loconet
    report = settlement_pb2.MsgReportForgedCheckpoint(
        evm_chain_id=ETH_TESTER[0],
        evm_contract=ETH_TESTER[1],
        number=2,
        height=999,
        app_hash=b"\x13" * 32,
        rewards_root=root,
        next_set_hash=bytes.fromhex(cp1["next_set_hash"]),
        signatures=sigs,
    )
    # the watchtower finds it in the contract's events and calldata (checkpoint 1 is the chain's)
    from node.evm.watch import forged_checkpoints

    found = forged_checkpoints(chain.w3, chain.d, _Source(net))
    assert len(found) == 1 and sorted(found[0].signatures) == sorted(report.signatures)
    del report.signatures[:]
    del found[0].signatures[:]
    assert found[0] == report
    report = forged_checkpoints(chain.w3, chain.d, _Source(net))[0]  # what gets reported
    before = {v.address: net.query(f"/validator/{v.address.hex()}") for v in net.vals}
    resp = net.ok(net.keys[1], [tx_pb2.Msg(report_forged_checkpoint=report)])
    slashed = [
        e
        for r in resp.tx_results
        for e in r.events
        if e.type == "settlement.forged_checkpoint_slashed"
    ]
    assert len(slashed) == 3
    for i, v in enumerate(net.vals):
        after = net.query(f"/validator/{v.address.hex()}")
        if i < 3:
            assert after["tombstoned"] and after["jailed"]
            assert int(after["tokens"]) == int(before[v.address]["tokens"]) * 95 // 100
        else:
            assert after == before[v.address]
    # the same evidence again slashes nobody: refused
    _refused(
        net,
        net.tx(net.keys[1], [tx_pb2.Msg(report_forged_checkpoint=report)]),
        ErrInvalidEvidence,
    )


class _Source:
    """The relayer's CheckpointSource over the in-process apps."""

    def __init__(self, net: Net) -> None:
        self.net = net

    def _q(self, path: str) -> Any:
        r = self.net.apps[0].query(abci.RequestQuery(path=path))
        return json.loads(r.value) if r.code == 0 else None

    def latest_final(self) -> Any:
        return self._q("/checkpoint/latest")

    def checkpoint(self, n: int) -> Any:
        return self._q(f"/checkpoint/{n}")

    def block_time(self, height: int) -> float | None:
        return None


def test_signing_the_chains_own_checkpoint_is_not_evidence() -> None:
    net = new_net()
    net.run_until(lambda: final(net, 1))
    cp = net.query("/checkpoint/1")
    own = settlement_pb2.MsgReportForgedCheckpoint(
        evm_chain_id=ETH_TESTER[0],
        evm_contract=ETH_TESTER[1],
        number=1,
        height=cp["height"],
        app_hash=bytes.fromhex(cp["app_hash"]),
        rewards_root=bytes.fromhex(cp["rewards_root"]),
        next_set_hash=bytes.fromhex(cp["next_set_hash"]),
        signatures=[bytes.fromhex(s["signature"]) for s in cp["signatures"]],
    )
    k = net.keys[0]
    _refused(net, net.tx(k, [tx_pb2.Msg(report_forged_checkpoint=own)]), ErrNotForged)
    # the same content for another deployment *is* forged: signed by nobody here, so refused
    # as evidence without a registered signer
    other = settlement_pb2.MsgReportForgedCheckpoint()
    other.CopyFrom(own)
    other.evm_contract = b"\x01" * 20
    _refused(net, net.tx(k, [tx_pb2.Msg(report_forged_checkpoint=other)]), ErrInvalidEvidence)
    short = settlement_pb2.MsgReportForgedCheckpoint()
    short.CopyFrom(own)
    short.app_hash = b"\x00"
    _refused(net, net.tx(k, [tx_pb2.Msg(report_forged_checkpoint=short)]), ErrInvalidEvidence)


def test_invalid_forged_report_changes_nothing(sc) -> None:
    """On the staking chain: a report signed for another deployment by v0's key slashes v0;
    reports that prove nothing are refused and write nothing (chainkit.assert_rejected)."""
    v0, v1 = sc.vals
    sc.ok(v0, [set_key_msg(v0.address, settlement_secret(0))])
    fields = {
        "evm_chain_id": 1,
        "evm_contract": b"\x02" * 20,
        "number": 7,
        "height": 70,
        "app_hash": b"\x03" * 32,
        "rewards_root": b"\x04" * 32,
        "next_set_hash": b"\x05" * 32,
    }
    d = evm.checkpoint_digest(CHAIN_ID, *fields.values())  # type: ignore[arg-type]
    unknown = evm.sign_digest(settlement_secret(9), d)
    msg = settlement_pb2.MsgReportForgedCheckpoint(**fields, signatures=[unknown])
    k = sc.keys[0]
    assert_rejected(sc, sc.tx(k, [tx_pb2.Msg(report_forged_checkpoint=msg)]), ErrInvalidEvidence)
    empty = settlement_pb2.MsgReportForgedCheckpoint(**fields)
    assert_rejected(sc, sc.tx(k, [tx_pb2.Msg(report_forged_checkpoint=empty)]), ErrInvalidEvidence)
    good = settlement_pb2.MsgReportForgedCheckpoint(
        **fields,
        signatures=[evm.sign_digest(settlement_secret(0), d)],
    )
    sc.ok(k, [tx_pb2.Msg(report_forged_checkpoint=good)])
    assert sc.query(f"/validator/{v0.address.hex()}")["tombstoned"]
    assert not sc.query(f"/validator/{v1.address.hex()}")["tombstoned"]


def test_claim_query_reads_the_incremental_tree() -> None:
    """The tree in the state equals the tree rebuilt from every cumulative, proofs verify, and a
    second withdrawal to an address rewrites its leaf in place (the invariant check rebuilds it
    after every block of every test)."""
    net = new_net()
    users = [evm.address_of_private_key(hashlib.sha256(b"u%d" % i).digest()) for i in range(5)]
    net.ok(net.keys[0], [withdraw_msg(u, 1000 + i) for i, u in enumerate(users)])
    net.ok(net.keys[0], [withdraw_msg(users[1], 5)])
    leaves = [(u, 1000 + i + (5 if i == 1 else 0)) for i, u in enumerate(users)]
    root = evm.rewards_root(leaves)
    for i, u in enumerate(users):
        c = net.query(f"/claim/0x{u.hex()}")
        assert c["leaf_index"] == i and c["rewards_root"] == root.hex()
        proof = [bytes.fromhex(p) for p in c["proof"]]
        assert evm.verify_proof(root, evm.claim_leaf(u, leaves[i][1]), proof)
