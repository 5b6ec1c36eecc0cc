"""``loconet tx settlement sign-pending`` signs only a checkpoint proven to be the chain's own
(attacker review, issue 32). It signed whatever ``/checkpoint/pending`` the node answered,
unproven: a node that lies (a public RPC endpoint, a compromised sentry) served a made-up
checkpoint naming the validator's key, got its signature back in the MsgSignCheckpoint, and
anyone could then report that signature with the made-up content (MsgReportForgedCheckpoint):
the honest validator slashed ``slash_fraction_forged_checkpoint_bps`` (5 %) and tombstoned.

Now the checkpoint and the params are read from proven state (``node.evm.sign.proven_pending``):
a proof against a header signed by >2/3 of the validators the validator's own genesis
(``--validator-home``) trusts, and what is signed is re-derived from the proven record, never
from the node's JSON. The chains here are made up in process (tests/kits/fakenode.py)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from nacl.signing import SigningKey

from abci_app.codec.address import address_from_pubkey, to_bech32
from abci_app.encoding import encode_amount, encode_msg
from abci_app.pb import settlement_pb2
from abci_app.settlement import evm
from abci_app.settlement.keys import LATEST_CHECKPOINT_KEY, PARAMS_KEY, checkpoint_key
from abci_app.settlement.params import params_from_json, params_to_json
from abci_app.settlement.queries import checkpoint_to_json
from node.cli.main import main
from node.client import settlement_key
from tests.kits.fakenode import FakeChain, install

CHAIN = "loconet-local"
PARAMS = params_from_json({})


def _genesis(chain_id: str) -> dict[str, Any]:
    """A genesis whose one validator (seed 1) is not the lying node's key (seed 7)."""
    k = SigningKey(b"\x01" * 32)
    op = address_from_pubkey(bytes(k.verify_key))
    return {
        "chain_id": chain_id,
        "initial_height": "1",
        "validators": [],
        "app_state": {
            "bank": {"balances": [{"address": to_bech32(op), "amount": "100000000"}]},
            "staking": {
                "validators": [
                    {
                        "pub_key": base64.b64encode(bytes(k.verify_key)).decode(),
                        "operator": to_bech32(op),
                        "moniker": "v0",
                        "self_bond": "10000000",
                    }
                ],
            },
        },
    }


def _checkpoint(member: bytes, app_hash: bytes) -> settlement_pb2.Checkpoint:
    return settlement_pb2.Checkpoint(
        number=1,
        height=4,
        app_hash=app_hash,
        rewards_root=b"\x00" * 32,
        set_hash=b"\x11" * 32,
        next_set_hash=b"\x11" * 32,
        signers=settlement_pb2.SignerSet(
            signers=[settlement_pb2.Signer(validator=b"\x01" * 20, evm_address=member, power=10)]
        ),
        total_power=10,
        created_height=5,
    )


def _node(
    monkeypatch: pytest.MonkeyPatch, stored: settlement_pb2.Checkpoint, shown: dict[str, Any]
) -> None:
    """A node whose state holds ``stored`` as the pending checkpoint and which answers
    ``/checkpoint/pending`` with ``shown`` (its proofs are of its own state)."""
    state = {
        PARAMS_KEY: encode_msg(PARAMS),
        LATEST_CHECKPOINT_KEY: encode_amount(stored.number),
        checkpoint_key(stored.number): encode_msg(stored),
    }
    chain = FakeChain(state, chain_id=CHAIN)
    keys = [checkpoint_key(stored.number), LATEST_CHECKPOINT_KEY]
    chain.answers["/checkpoint/pending"] = (json.dumps(shown).encode(), keys)
    settlement = {"params": params_to_json(PARAMS), "latest": 1}
    chain.answers["/settlement"] = (json.dumps(settlement).encode(), [PARAMS_KEY])
    install(monkeypatch, chain)


def _run(monkeypatch: pytest.MonkeyPatch, home: Path) -> tuple[int, list[Any]]:
    sent: list[Any] = []

    def fake_broadcast(args: Any, key: str, msgs: list[Any], **kw: Any) -> int:
        sent.extend(msgs)
        return 0

    monkeypatch.setattr("node.cli.evm.broadcast", fake_broadcast)
    argv = ["tx", "settlement", "sign-pending", "--validator-home", str(home)]
    rc = main([*argv, "--from", "alice", "--node", "http://127.0.0.1:1", "--chain-id", CHAIN])
    return rc, sent


def _home(tmp_path: Path, with_genesis: bool) -> tuple[Path, bytes]:
    home = tmp_path / "node"
    (home / "config").mkdir(parents=True)
    if with_genesis:
        (home / "config" / "genesis.json").write_text(json.dumps(_genesis(CHAIN)))
    settlement_key.create(home)
    secret = settlement_key.load(home)
    assert secret is not None
    return home, evm.address_of_private_key(secret)


def test_sign_pending_never_signs_a_checkpoint_its_validators_genesis_does_not_prove(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A node that made up its whole chain (its own key signs its headers) serves a pending
    checkpoint naming the victim's key: nothing is signed, nothing is sent."""
    home, member = _home(tmp_path, with_genesis=True)
    forged = _checkpoint(member, b"\xee" * 32)
    _node(monkeypatch, forged, checkpoint_to_json(forged))
    rc, sent = _run(monkeypatch, home)
    assert sent == []
    assert rc != 0


def test_sign_pending_signs_the_proven_record_not_the_node_s_json(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The node's JSON names another app hash than its proven record: the proven one is what
    is signed (here the home has no genesis, so the node's own validator set is checked)."""
    home, member = _home(tmp_path, with_genesis=False)
    real = _checkpoint(member, b"\x22" * 32)
    shown = checkpoint_to_json(_checkpoint(member, b"\xee" * 32))
    _node(monkeypatch, real, shown)
    rc, sent = _run(monkeypatch, home)
    assert rc == 0 and len(sent) == 1
    sig = sent[0].sign_checkpoint.signature
    digest = evm.checkpoint_digest(
        CHAIN, PARAMS.evm_chain_id, PARAMS.evm_contract, 1, 4, real.app_hash, b"\x00" * 32,
        b"\x11" * 32,
    )  # fmt: skip
    assert evm.recover(digest, sig) == member
