"""``loconet evm deploy`` checks the signer set it hands the contract as ``--prove`` checks an
answer (attacker-review finding): it read ``/settlement`` unproven, so a lying node could make
the contract trust the attacker's keys. Now the stored set must come with a proof against a
header signed by >2/3 of the validators, and a proof that leaves the key out is refused.
(Before the first checkpoint no set is stored: deploy says so; the validator set itself is
still the node's answer: README, Known limits.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from abci_app.encoding import encode_msg
from abci_app.pb import settlement_pb2
from abci_app.settlement.keys import LATEST_CHECKPOINT_KEY, PARAMS_KEY, SIGNER_SET_KEY
from abci_app.settlement.queries import set_to_json
from node.cli.common import UsageError
from node.cli.evm import _proven_settlement
from tests.kits.fakenode import FakeChain, install

SET = settlement_pb2.SignerSet(
    signers=[
        settlement_pb2.Signer(validator=b"\x01" * 20, evm_address=b"\xaa" * 20, power=10),
        settlement_pb2.Signer(validator=b"\x02" * 20, evm_address=b"\xbb" * 20, power=10),
    ]
)
ATTACKER = settlement_pb2.SignerSet(
    signers=[settlement_pb2.Signer(validator=b"\x01" * 20, evm_address=b"\xee" * 20, power=99)]
)


def _serve(
    monkeypatch: pytest.MonkeyPatch,
    stored: bool,
    shown: Any,
    keys: list[bytes],
    chain_id: str = "loconet-local",
    **extra: Any,
) -> None:
    state = {SIGNER_SET_KEY: encode_msg(SET)} if stored else {b"\x01other": b"x"}
    chain = FakeChain(state, chain_id=chain_id)
    body = {"signer_set": shown, "latest_final": 0, **extra}
    chain.answers["/settlement"] = (json.dumps(body).encode(), keys)
    install(monkeypatch, chain)


ALL = [PARAMS_KEY, SIGNER_SET_KEY, LATEST_CHECKPOINT_KEY]


def test_the_stored_set_as_proven_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    _serve(monkeypatch, True, set_to_json(SET), ALL)
    assert _proven_settlement("http://127.0.0.1:1", None)[0]["signer_set"] == set_to_json(SET)


def test_a_set_other_than_the_proven_one_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    _serve(monkeypatch, True, set_to_json(ATTACKER), ALL)
    with pytest.raises(UsageError, match="disagrees with its own proof"):
        _proven_settlement("http://127.0.0.1:1", None)


def test_a_proof_that_leaves_the_set_out_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    _serve(monkeypatch, True, set_to_json(ATTACKER), [PARAMS_KEY])
    with pytest.raises(UsageError, match="does not cover the signer set"):
        _proven_settlement("http://127.0.0.1:1", None)


def test_before_the_first_checkpoint_it_says_the_set_is_unproven(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _serve(monkeypatch, False, set_to_json(SET), ALL)
    assert _proven_settlement("http://127.0.0.1:1", None)[0]["signer_set"] == set_to_json(SET)
    assert "cannot be proven" in capsys.readouterr().err


def test_the_contract_binds_the_chain_id_the_proven_header_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _serve(monkeypatch, True, set_to_json(SET), ALL, chain_id="loconet-x")
    assert _proven_settlement("http://127.0.0.1:1", None)[1] == "loconet-x"


def test_a_node_of_another_chain_than_home_names_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With --home, the header must be of the home's chain: a node serving its own made-up chain
    (validly signed by itself) would otherwise get a contract bound to that chain."""
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "genesis.json").write_text(json.dumps({"chain_id": "loconet-main"}))
    _serve(monkeypatch, True, set_to_json(SET), ALL, chain_id="loconet-fake")
    with pytest.raises(UsageError, match="chain 'loconet-fake'"):
        _proven_settlement("http://127.0.0.1:1", str(tmp_path))


def test_a_keyless_power_other_than_the_proven_one_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The keyless power is part of the threshold the contract will use: a node that shows less
    than the stored set's would lower it (issue 32)."""
    stored = settlement_pb2.SignerSet()
    stored.CopyFrom(SET)
    stored.keyless_power = 30
    state = {SIGNER_SET_KEY: encode_msg(stored)}
    chain = FakeChain(state, chain_id="loconet-local")
    body = {"signer_set": set_to_json(SET), "latest_final": 0, "signer_set_keyless_power": 0}
    chain.answers["/settlement"] = (json.dumps(body).encode(), ALL)
    install(monkeypatch, chain)
    with pytest.raises(UsageError, match="disagrees with its own proof"):
        _proven_settlement("http://127.0.0.1:1", None)
    body["signer_set_keyless_power"] = 30
    chain.answers["/settlement"] = (json.dumps(body).encode(), ALL)
    assert _proven_settlement("http://127.0.0.1:1", None)[0]["signer_set_keyless_power"] == 30
