"""A provider earns in a training round, withdraws to the EVM, and claims the ERC-20: the compute
market (marketkit's honest actors) runs on settlekit's four validators, so the checkpoint that
carries the withdrawal is signed in vote extensions and checked by every node on the way."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from web3 import EthereumTesterProvider, Web3

from abci_app.bank import keeper as bank
from abci_app.codec.tx import Ed25519Signer
from abci_app.pb import abci, tx_pb2
from abci_app.settlement import evm
from node.evm import client
from tests.kits.chainkit import CHAIN_ID
from tests.kits.marketkit import Market, register_msg, run_job
from tests.kits.settlekit import Net, fund_deployer, new_net, withdraw_msg


@dataclass
class NetChain:
    """What marketkit's Market drives (chainkit.Chain's surface) over a settlekit Net."""

    net: Net

    @property
    def store(self) -> Any:
        return self.net.apps[0].store

    @property
    def keys(self) -> list[Ed25519Signer]:
        return self.net.keys

    @property
    def seqs(self) -> dict[bytes, int]:
        return self.net.seqs

    def tx(self, k: Ed25519Signer, msgs: list[tx_pb2.Msg], *, seq: int | None = None) -> bytes:
        from tests.kits.chainkit import min_fee_tx

        s = self.net.seqs.get(k.address, 0) if seq is None else seq
        return min_fee_tx(self.store, k, msgs, chain_id=CHAIN_ID, sequence=s)

    def block(self, raws: list[bytes]) -> abci.ResponseFinalizeBlock:
        resp = self.net.block(raws)
        out = abci.ResponseFinalizeBlock()
        out.CopyFrom(resp)
        del out.tx_results[:]
        # the proposer may add its own first
        out.tx_results.extend(resp.tx_results[self.net.last_txs.index(r)] for r in raws)
        return out


def test_provider_round_reward_withdrawn_checkpointed_and_claimed_on_the_evm() -> None:
    net = new_net(n_keys=6, interval=20)
    m = Market(NetChain(net), net.keys[0], list(net.keys[1:4]))  # type: ignore[arg-type]
    m.block([(k, register_msg()) for k in m.providers])
    before = {k.address: bank.get_balance(m.store, k.address) for k in m.providers}
    m.create_job(rounds=1, reward=50_000_000)
    run_job(m, 1)
    earned = {a: bank.get_balance(m.store, a) - b for a, b in before.items()}
    winner = max(earned, key=lambda a: earned[a])
    assert earned[winner] > 0, earned
    user = evm.address_of_private_key(hashlib.sha256(b"provider's EVM wallet").digest())
    assert m.send(m.key(winner), withdraw_msg(user, earned[winner])).code == 0
    h = net.height

    w3 = Web3(EthereumTesterProvider())
    deployer = fund_deployer(w3)  # deploys where new_net's checkpoints name
    s = net.query("/settlement")  # what `loconet evm deploy` reads
    signers, powers = client.set_of(s["signer_set"])
    d = client.deploy(
        w3,
        deployer,
        CHAIN_ID,
        signers,
        powers,
        s["latest_final"],
        keyless_power=s["signer_set_keyless_power"],
    )

    def posted_past_withdrawal() -> bool:
        r = net.apps[0].query(abci.RequestQuery(path="/checkpoint/latest"))
        return r.code == 0 and net.query("/checkpoint/latest")["height"] >= h

    net.run_until(posted_past_withdrawal, limit=60)
    cp = net.query("/checkpoint/latest")
    chain = client.checkpoints(w3, d)
    for n in range(s["latest_final"] + 1, cp["number"] + 1):  # what the relayer does
        if net.query(f"/checkpoint/{n}")["final"]:
            args = client.submit_args(net.query(f"/checkpoint/{n}"))
            client.send(w3, chain.functions.submit(*args), deployer)
    claim = net.query(f"/claim/0x{user.hex()}", height=cp["height"])
    assert claim["rewards_root"] == cp["rewards_root"] and claim["cumulative"] == earned[winner]
    fn = client.distributor(w3, d).functions.claim(*client.claim_args(claim, cp["number"]))
    client.send(w3, fn, deployer)
    assert (
        client.token(w3, d).functions.balanceOf(Web3.to_checksum_address(user)).call()
        == earned[winner]
    )
