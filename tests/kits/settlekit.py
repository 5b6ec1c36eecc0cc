"""A network of N in-process apps driven through the whole ABCI++ flow, as CometBFT would:
PrepareProposal by a rotating proposer (with the last commit's vote extensions), ProcessProposal
on every node (each must accept), FinalizeBlock + Commit on every node (app hashes must agree),
then ExtendVote by every validator, VerifyVoteExtension of each extension by every other node,
and the extensions signed with the validator's ed25519 key into the next ExtendedCommitInfo.
Each validator's app holds its own settlement key (ExtensionKeys), as a node would."""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from abci_app.app import Application
from abci_app.codec.address import to_bech32
from abci_app.codec.tx import Ed25519Signer, decode_tx
from abci_app.pb import abci, settlement_pb2, staking_pb2, tx_pb2
from abci_app.settlement import evm, keeper
from abci_app.store import MerkleStore
from abci_app.vote_extensions import ExtensionKeys, extension_sign_bytes
from tests.kits.chainkit import CHAIN_ID, min_fee_tx, signer
from tests.kits.stakekit import follow_updates

LOCO = 1_000_000
ACCEPT = abci.ResponseProcessProposal.ACCEPT
# The deployment a new_net's checkpoints name (settlement params): the first contract this key
# creates on eth-tester; on anvil (its chain id 31337) the params' defaults name the first
# contract of anvil's public account 0.
DEPLOYER_KEY = hashlib.sha256(b"settlekit/deployer").digest()
ETH_TESTER_CHAIN_ID = 131277322940537
ETH_TESTER = (ETH_TESTER_CHAIN_ID, evm.create_address(evm.address_of_private_key(DEPLOYER_KEY), 0))


def settlement_secret(i: int) -> bytes:
    return hashlib.sha256(b"settlekit/%d" % i).digest()


def set_key_msg(cons: bytes, secret: bytes, chain_id: str = CHAIN_ID) -> tx_pb2.Msg:
    addr = evm.address_of_private_key(secret)
    sig = evm.sign_digest(secret, keeper.key_proof_digest(chain_id, cons))
    return tx_pb2.Msg(
        set_settlement_key=settlement_pb2.MsgSetSettlementKey(
            validator=cons, evm_address=addr, signature=sig
        )
    )


def withdraw_msg(evm_address: bytes, amount: int) -> tx_pb2.Msg:
    return tx_pb2.Msg(
        withdraw_to_evm=settlement_pb2.MsgWithdrawToEvm(evm_address=evm_address, amount=amount)
    )


def bond_msg(cons: bytes, amount: int) -> tx_pb2.Msg:
    return tx_pb2.Msg(bond=staking_pb2.MsgBond(validator=cons, amount=amount))


@dataclass
class Net:
    apps: list[Application]
    vals: list[Ed25519Signer]  # consensus keys, each its own operator account
    keys: list[Ed25519Signer]  # funded accounts
    sets: dict[int, dict[bytes, int]] = field(default_factory=dict)  # height -> CometBFT's set
    seqs: dict[bytes, int] = field(default_factory=dict)
    # last height's
    commit: abci.ExtendedCommitInfo = field(default_factory=abci.ExtendedCommitInfo)
    app_hashes: dict[int, bytes] = field(default_factory=dict)
    last_txs: list[bytes] = field(default_factory=list)
    absent: set[bytes] = field(default_factory=set)  # validators whose precommits are missing

    @property
    def height(self) -> int:
        return self.apps[0].store.height

    def comet_set(self, h: int) -> dict[bytes, int]:
        while h not in self.sets:
            h -= 1
        return self.sets[h]

    def tx(self, k: Ed25519Signer, msgs: list[tx_pb2.Msg]) -> bytes:
        """A signed tx paying exactly the chain's minimum fee (chainkit.min_fee_tx)."""
        return min_fee_tx(
            self.apps[0].store, k, msgs, chain_id=CHAIN_ID, sequence=self.seqs.get(k.address, 0)
        )

    def by_address(self, cons: bytes) -> int:
        return next(i for i, v in enumerate(self.vals) if v.address == cons)

    def proposer(self, h: int) -> int:
        members = sorted(self.comet_set(h))
        return self.by_address(members[h % len(members)])

    def prepare(self, txs: list[bytes], h: int | None = None) -> list[bytes]:
        h = self.height + 1 if h is None else h
        req = abci.RequestPrepareProposal(
            txs=txs, height=h, max_tx_bytes=1 << 22, local_last_commit=self.commit
        )
        return list(self.apps[self.proposer(h)].prepare_proposal(req).txs)

    def last_commit_info(self) -> abci.CommitInfo:
        info = abci.CommitInfo(round=self.commit.round)
        for v in self.commit.votes:
            x = info.votes.add(block_id_flag=v.block_id_flag)
            x.validator.CopyFrom(v.validator)
        return info

    def process(self, txs: list[bytes], app: int = 0) -> bool:
        req = abci.RequestProcessProposal(
            txs=txs, height=self.height + 1, proposed_last_commit=self.last_commit_info()
        )
        return self.apps[app].process_proposal(req).status == ACCEPT

    def block(self, txs: list[bytes] = ()) -> abci.ResponseFinalizeBlock:  # type: ignore[assignment]
        h = self.height + 1
        block_txs = self.prepare(list(txs))
        assert all(self.process(block_txs, i) for i in range(len(self.apps))), (
            "a node refused the proposal"
        )
        # precommits (ExtendVote/VerifyVoteExtension) come before FinalizeBlock
        votes = self.vote(h)
        req = abci.RequestFinalizeBlock(
            txs=block_txs,
            height=h,
            hash=hashlib.sha256(b"block%d" % h).digest(),
            proposer_address=self.vals[self.proposer(h)].address,
            decided_last_commit=self.last_commit_info(),
        )
        req.time.seconds = 1_700_000_000 + h
        resps = [a.finalize_block(req) for a in self.apps]
        assert len({r.app_hash for r in resps}) == 1, "nodes disagree on the app hash"
        for a in self.apps:
            a.commit(abci.RequestCommit())
            a.invariants()
        resp = resps[0]
        self.app_hashes[h] = resp.app_hash
        self.last_txs = block_txs
        follow_updates(self.sets, self.comet_set(h + 1), h, resp.validator_updates)
        for raw, r in zip(block_txs, resp.tx_results, strict=True):
            if r.code == 0 and raw[:1] != b"\x00":
                t = decode_tx(raw)
                self.seqs[t.signer] = t.sequence + 1
        self.commit = votes
        return resp

    def extension(self, i: int, h: int) -> bytes:
        return self.apps[i].extend_vote(abci.RequestExtendVote(height=h)).vote_extension

    def verify(self, app: int, validator: bytes, h: int, ext: bytes) -> bool:
        r = self.apps[app].verify_vote_extension(
            abci.RequestVerifyVoteExtension(
                validator_address=validator, height=h, vote_extension=ext
            )
        )
        return r.status == abci.ResponseVerifyVoteExtension.ACCEPT

    def vote(self, h: int) -> abci.ExtendedCommitInfo:
        info = abci.ExtendedCommitInfo(round=0)
        for cons, power in sorted(self.comet_set(h).items()):
            i = self.by_address(cons)
            v = info.votes.add()
            v.validator.address, v.validator.power = cons, power
            if cons in self.absent:
                v.block_id_flag = 1  # absent
                continue
            ext = self.extension(i, h)
            for j in range(len(self.apps)):
                assert self.verify(j, cons, h, ext), (
                    f"node {j} refused the extension of validator {i}"
                )
            v.block_id_flag = 2
            v.vote_extension = ext
            v.extension_signature = self.vals[i].sign(extension_sign_bytes(ext, h, 0, CHAIN_ID))
        return info

    def blocks(self, n: int) -> None:
        for _ in range(n):
            self.block([])

    def ok(self, k: Ed25519Signer, msgs: list[tx_pb2.Msg]) -> abci.ResponseFinalizeBlock:
        raw = self.tx(k, msgs)
        resp = self.block([raw])
        r = resp.tx_results[self.last_txs.index(raw)]
        assert r.code == 0, r.log
        return resp

    def query(self, path: str, app: int = 0, height: int = 0) -> Any:
        r = self.apps[app].query(abci.RequestQuery(path=path, height=height))
        assert r.code == 0, r.log
        return json.loads(r.value)

    def run_until(self, pred: Any, limit: int = 60) -> None:
        for _ in range(limit):
            if pred():
                return
            self.block([])
        raise AssertionError("condition not reached")


def new_net(
    n: int = 4,
    bonds: list[int] | None = None,
    interval: int = 5,
    *,
    with_keys: bool = True,
    n_keys: int = 2,
    ve_height: int = 1,
    deployment: tuple[int, bytes] | None = ETH_TESTER,
) -> Net:
    """``deployment``: (EVM chain id, contract) the checkpoints name; None keeps the params'
    defaults (anvil's first contract of its account 0)."""
    bonds = bonds or [100 * LOCO] * n
    vals = [signer(2000 + i) for i in range(n)]
    keys = [signer(i) for i in range(n_keys)]
    balances = {k.address: 10**12 for k in keys} | {v.address: 10**12 for v in vals}
    app_state: dict[str, Any] = {
        "bank": {
            "balances": [
                {"address": to_bech32(a), "amount": str(b)} for a, b in sorted(balances.items())
            ]
        },
        "staking": {
            "validators": [
                {
                    "pub_key": base64.b64encode(v.public_bytes()).decode(),
                    "operator": to_bech32(v.address),
                    "moniker": f"val{i}",
                    "self_bond": str(b),
                }
                for i, (v, b) in enumerate(zip(vals, bonds, strict=True))
            ]
        },
        "settlement": {"params": {"checkpoint_interval": interval}},
    }
    if with_keys:  # as `loconet init` and `loconet testnet` write them
        app_state["settlement"]["keys"] = [
            {
                "validator": v.address.hex().upper(),
                "evm_address": "0x" + evm.address_of_private_key(settlement_secret(i)).hex(),
            }
            for i, v in enumerate(vals)
        ]
    else:  # keyless validators in the set: only where settlement does not require a key
        app_state["settlement"]["params"]["require_settlement_key"] = 0
    if deployment is not None:
        app_state["settlement"]["params"] |= {
            "evm_chain_id": deployment[0],
            "evm_contract": "0x" + deployment[1].hex(),
        }
    req = abci.RequestInitChain(
        chain_id=CHAIN_ID, initial_height=1, app_state_bytes=json.dumps(app_state).encode()
    )
    req.time.seconds = 1_700_000_000
    req.consensus_params.abci.vote_extensions_enable_height = ve_height
    apps = []
    resp = None
    for i in range(n):
        a = Application(
            MerkleStore(None, keep_recent=100),
            check_invariants=True,
            extension_keys=ExtensionKeys(settlement=settlement_secret(i), consensus=vals[i].seed),
        )
        a.info(abci.RequestInfo())
        resp = a.init_chain(req)
        apps.append(a)
    assert resp is not None
    net = Net(apps, vals, keys)
    net.sets[1] = {
        hashlib.sha256(u.pub_key.ed25519).digest()[:20]: u.power for u in resp.validators
    }
    net.block([])
    net.block([])  # (the height the keys took when they came by transaction)
    return net


def fund_deployer(w3: Any) -> Any:
    """The account whose first contract on this eth-tester chain is the one new_net names."""
    from eth_account import Account

    acct = Account.from_key(DEPLOYER_KEY)
    w3.eth.send_transaction(
        {"from": w3.eth.accounts[0], "to": acct.address, "value": 1000 * 10**18}
    )
    return acct
