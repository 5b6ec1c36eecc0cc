"""settlement on the chain: checkpoints signed in vote extensions by every validator's app,
carried by the next proposer, checked by every node, identical everywhere, and accepted by the
contracts on an in-process EVM; withdrawals claimable there; bad extensions and proposals
refused."""

from __future__ import annotations

import hashlib

import pytest
from eth_account import Account
from web3 import EthereumTesterProvider, Web3

from abci_app.bank.errors import ErrInsufficientFunds, ErrInvalidAmount
from abci_app.codec.address import to_bech32
from abci_app.pb import abci, settlement_pb2, tx_pb2
from abci_app.settlement import evm
from abci_app.settlement.errors import (
    ErrInvalidEvmAddress,
    ErrInvalidKeyProof,
    ErrKeyInUse,
    ErrNotOperator,
    ErrValidatorNotFound,
)
from abci_app.vote_extensions import INJECTED_PREFIX, VoteExtension, extension_sign_bytes
from node.evm import client
from tests.kits.chainkit import CHAIN_ID, assert_rejected, signer, tx_fee
from tests.kits.settlekit import (
    LOCO,
    Net,
    bond_msg,
    new_net,
    set_key_msg,
    settlement_secret,
    withdraw_msg,
)
from tests.kits.stakekit import new_staking_chain

EVM_USER = evm.address_of_private_key(hashlib.sha256(b"evm-user").digest())


def final(net: Net, n: int) -> bool:
    r = net.apps[0].query(abci.RequestQuery(path=f"/checkpoint/{n}"))
    return r.code == 0 and b'"final":true' in r.value


class EVMChain:
    def __init__(self, cp: dict) -> None:
        self.w3 = Web3(EthereumTesterProvider())
        self.sender = Account.from_key(hashlib.sha256(b"settlement-test-deployer").digest())
        self.w3.eth.send_transaction(
            {
                "from": self.w3.eth.accounts[0],
                "to": self.sender.address,
                "value": Web3.to_wei(1000, "ether"),
            }
        )
        signers, powers = client.set_of(cp["signers"])
        self.d = client.deploy(self.w3, self.sender, CHAIN_ID, signers, powers, cp["number"] - 1)
        self.cp = client.checkpoints(self.w3, self.d)

    def submit(self, cp: dict) -> None:
        client.send(self.w3, self.cp.functions.submit(*client.submit_args(cp)), self.sender)


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
    digest = evm.checkpoint_digest(
        CHAIN_ID,
        1,
        5,
        net.app_hashes[5],
        bytes.fromhex(cp["rewards_root"]),
        bytes.fromhex(cp["next_set_hash"]),
    )
    for s in cp["signatures"]:
        signer = evm.recover(digest, bytes.fromhex(s["signature"]))
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
    dist = client.distributor(chain.w3, chain.d)
    client.send(chain.w3, dist.functions.claim(*client.claim_args(claim)), chain.sender)
    tok = client.token(chain.w3, chain.d)
    assert tok.functions.balanceOf(Web3.to_checksum_address(EVM_USER)).call() == 7 * LOCO


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
    # the keyless validator is not a signer
    assert cp["total_power"] == 300 and len(cp["signers"]) == 3


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
    d = evm.checkpoint_digest(
        CHAIN_ID,
        cp["number"],
        cp["height"] + 1,
        bytes.fromhex(cp["app_hash"]),
        bytes.fromhex(cp["rewards_root"]),
        bytes.fromhex(cp["next_set_hash"]),
    )
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
        genesis={"settlement": {"params": {"checkpoint_interval": 5}}},
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
    # a key can be replaced; the old is free again
    sc.ok(v0, [set_key_msg(v0.address, settlement_secret(3))])
    sc.ok(v1, [set_key_msg(v1.address, settlement_secret(0))])


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
