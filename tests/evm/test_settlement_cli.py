"""The settlement CLI without a node: set-key builds MsgSetSettlementKey with a proof of
possession that the chain's own check accepts; bad EVM addresses and missing files are one-line
errors naming the fix."""

from __future__ import annotations

import base64
import json

import pytest

from abci_app.pb import tx_pb2
from abci_app.settlement import evm, keeper
from node.client import settlement_key
from tests.kits.clikit import ROOT, offline, run


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    h = tmp_path_factory.mktemp("evmcli") / "home"
    r = run("init", "--home", str(h), "--chain-id", "loconet-offline")
    assert r.returncode == 0, r.stderr
    return h


def test_init_writes_a_settlement_key_into_the_genesis(home) -> None:
    g = json.loads((home / "config" / "genesis.json").read_text())
    assert g["consensus_params"]["abci"]["vote_extensions_enable_height"] == "1"
    assert g["app_state"]["settlement"]["keys"][0]["evm_address"] == settlement_key.address(home)
    assert oct((home / "config" / "settlement_key.json").stat().st_mode & 0o777) == "0o600"


def test_set_key_carries_a_valid_proof_of_possession(home) -> None:
    set_key = ("tx", "settlement", "set-key", "--validator-home", str(home), "--from", "validator")
    r = run(*offline(home, *set_key, chain_id="loconet-offline"))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    body = tx_pb2.TxBody.FromString(base64.b64decode(out["body_bytes"]))
    msg = body.messages[0].set_settlement_key
    assert "0x" + msg.evm_address.hex() == settlement_key.address(home)
    cons = bytes.fromhex(
        json.loads((home / "config" / "priv_validator_key.json").read_text())["address"]
    )
    assert msg.validator == cons
    assert (
        evm.recover(keeper.key_proof_digest("loconet-offline", cons), msg.signature)
        == msg.evm_address
    )


@pytest.mark.parametrize(
    "addr",
    [
        "0x123",
        "3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
        "0xZZ44CdDdB6a900fa2b585dd299e03d12FA4293BC",
        "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293  ",  # fromhex skipped the spaces: 19 bytes
        "0x3C44CdDdB6a900fa2b585dd299e03d12FA42 3BC",
    ],
)
def test_withdraw_refuses_a_bad_evm_address(home, addr: str) -> None:
    r = run(*offline(home, "tx", "settlement", "withdraw", addr, "5loco", "--from", "validator"))
    assert (
        r.returncode == 1
        and "0x followed by 40 hex digits" in r.stderr
        and "Traceback" not in r.stderr
    )


def test_evm_commands_name_the_fix(tmp_path) -> None:
    r = run(
        "evm",
        "balance",
        "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
        "--deployment",
        str(tmp_path / "none.json"),
    )
    assert r.returncode == 1 and "loconet evm deploy" in r.stderr and "Traceback" not in r.stderr
    (tmp_path / "d.json").write_text(
        json.dumps(
            {
                "evm_chain_id": 1,
                "loconet_chain_id": "c",
                "checkpoints": "0x" + "1" * 40,
                "distributor": "0x" + "1" * 40,
                "token": "0x" + "2" * 40,
                "start_number": 0,
                "block": 1,
            }
        )
    )
    r = run(
        "evm",
        "balance",
        "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
        "--deployment",
        str(tmp_path / "d.json"),
        "--evm-rpc",
        "http://127.0.0.1:9",
    )
    assert r.returncode == 1 and "no EVM node answers" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("body", ["{not json", '{"evm_address": "0x1"}', '{"secret": "zz"}', "zz"])
def test_invalid_from_key_file_is_a_usage_error(tmp_path, body: str) -> None:
    """--from-key FILE holding a settlement_key.json that is not JSON or has no secret raised
    JSONDecodeError / KeyError out of the CLI (red-team regression)."""
    from node.cli.evm import _evm_key
    from node.errors import UsageError

    p = tmp_path / "key.json"
    p.write_text(body)
    with pytest.raises(UsageError, match="--from-key must be"):
        _evm_key(str(p))
    good = "0x" + "11" * 32
    p.write_text(json.dumps({"secret": good[2:]}))
    assert _evm_key(str(p)).key.hex().removeprefix("0x") == good[2:]


def test_invalid_second_relayer_on_one_journal(tmp_path) -> None:
    """Two `relayer run` with one journal both posted every checkpoint (paying gas twice, one
    reverting) and overwrote each other's in-flight record; the second is refused."""
    import signal
    import subprocess
    import sys

    dep = tmp_path / "d.json"
    dep.write_text(
        json.dumps(
            {
                "evm_chain_id": 1,
                "loconet_chain_id": "c",
                "checkpoints": "0x" + "1" * 40,
                "distributor": "0x" + "1" * 40,
                "token": "0x" + "2" * 40,
                "start_number": 0,
                "block": 1,
            }  # fmt: skip
        )
    )
    code = (
        "import sys, time; from pathlib import Path; from node.atomic import hold\n"
        "hold(Path(sys.argv[1])); print('held', flush=True); time.sleep(600)\n"
    )
    lock = str(dep) + ".relayer.json.lock"
    p = subprocess.Popen(
        [sys.executable, "-c", code, lock], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "held"
        r = run(
            "relayer", "run", "--deployment", str(dep), "--evm-rpc", "http://127.0.0.1:9",
            "--from-key", "0x" + "11" * 32, "--once",
        )  # fmt: skip
        assert r.returncode == 1 and f"another relayer (pid {p.pid})" in r.stderr, r.stderr
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait(10)


@pytest.mark.parametrize(
    "addr,ok",
    [
        ("0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC", True),  # its EIP-55 checksum
        ("0x3c44cdddb6a900fa2b585dd299e03d12fa4293bc", True),  # no checksum: taken as is
        ("0x3C44CDDDB6A900FA2B585DD299E03D12FA4293BC", True),
        ("0x3C44CdDdB6a900fa2b585dd299e03d12FA4293Bc", False),  # one letter's case off
        ("0x3c44CdDdB6a900fa2b585dd299e03d12FA4293BC", False),
    ],
)
def test_withdraw_checks_the_eip55_checksum(home, addr: str, ok: bool) -> None:
    """A mixed-case address is a checksum (EIP-55): one with a typo was accepted and the LOCO
    withdrawn to an address nobody holds (red-team regression)."""
    r = run(*offline(home, "tx", "settlement", "withdraw", addr, "5loco", "--from", "validator"))
    if ok:
        assert r.returncode == 0, r.stderr
    else:
        assert r.returncode == 1 and "fails its EIP-55 checksum" in r.stderr, r.stderr
        assert "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC" in r.stderr


def test_evm_address_predicts_the_deployment_the_genesis_names() -> None:
    """`loconet evm address` (evm.create_address): anvil's known first two contracts of its
    account 0, and RLP's own encoding for nonces past one byte."""
    import rlp  # web3's dependency: the reference encoding

    anvil0 = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
    r = run("evm", "address", anvil0, "--nonce", "1", "-o", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["address"] == "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512"
    sender = bytes.fromhex(anvil0[2:])
    assert evm.create_address(sender, 0).hex() == "5fbdb2315678afecb367f032d93f642f64180aa3"
    for nonce in (0, 1, 127, 128, 255, 256, 70_000, 2**64 - 1):
        want = evm.keccak256(rlp.encode([sender, nonce]))[12:]
        assert evm.create_address(sender, nonce) == want, nonce
