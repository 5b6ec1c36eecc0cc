"""The settlement CLI without a node: set-key builds MsgSetSettlementKey with a proof of
possession that the chain's own check accepts; bad EVM addresses and missing files are one-line
errors naming the fix."""

from __future__ import annotations

import base64
import json

import pytest
from clikit import run

from abci_app.pb import tx_pb2
from abci_app.settlement import evm, keeper
from node import settlement_key


@pytest.fixture(scope="module")
def home(tmp_path_factory):  # type: ignore[no-untyped-def]
    h = tmp_path_factory.mktemp("evmcli") / "home"
    r = run("init", "--home", str(h), "--chain-id", "loconet-offline")
    assert r.returncode == 0, r.stderr
    return h


def test_init_writes_a_settlement_key_into_the_genesis(home) -> None:  # type: ignore[no-untyped-def]
    g = json.loads((home / "config" / "genesis.json").read_text())
    assert g["consensus_params"]["abci"]["vote_extensions_enable_height"] == "1"
    assert g["app_state"]["settlement"]["keys"][0]["evm_address"] == settlement_key.address(home)
    assert oct((home / "config" / "settlement_key.json").stat().st_mode & 0o777) == "0o600"


def test_set_key_carries_a_valid_proof_of_possession(home) -> None:  # type: ignore[no-untyped-def]
    r = run("tx", "settlement", "set-key", "--validator-home", str(home), "--from", "validator", "--home", str(home),
            "--generate-only", "--chain-id", "loconet-offline", "--sequence", "0")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    body = tx_pb2.TxBody.FromString(base64.b64decode(out["body_bytes"]))
    msg = body.messages[0].set_settlement_key
    assert "0x" + msg.evm_address.hex() == settlement_key.address(home)
    cons = bytes.fromhex(json.loads((home / "config" / "priv_validator_key.json").read_text())["address"])
    assert msg.validator == cons
    assert evm.recover(keeper.key_proof_digest("loconet-offline", cons), msg.signature) == msg.evm_address


@pytest.mark.parametrize("addr", ["0x123", "3C44CdDdB6a900fa2b585dd299e03d12FA4293BC", "0xZZ44CdDdB6a900fa2b585dd299e03d12FA4293BC"])
def test_withdraw_refuses_a_bad_evm_address(home, addr: str) -> None:  # type: ignore[no-untyped-def]
    r = run("tx", "settlement", "withdraw", addr, "5loco", "--from", "validator", "--home", str(home),
            "--generate-only", "--chain-id", "c", "--sequence", "0")
    assert r.returncode == 1 and "0x followed by 40 hex digits" in r.stderr and "Traceback" not in r.stderr


def test_evm_commands_name_the_fix(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = run("evm", "balance", "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC", "--deployment", str(tmp_path / "none.json"))
    assert r.returncode == 1 and "loconet evm deploy" in r.stderr and "Traceback" not in r.stderr
    (tmp_path / "d.json").write_text(json.dumps({"evm_chain_id": 1, "loconet_chain_id": "c", "checkpoints": "0x" + "1" * 40,
                                                 "distributor": "0x" + "1" * 40, "token": "0x" + "2" * 40, "start_number": 0, "block": 1}))
    r = run("evm", "balance", "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC", "--deployment", str(tmp_path / "d.json"),
            "--evm-rpc", "http://127.0.0.1:9")
    assert r.returncode == 1 and "no EVM node answers" in r.stderr and "Traceback" not in r.stderr
