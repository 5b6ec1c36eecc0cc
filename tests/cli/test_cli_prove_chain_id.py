"""``--prove`` refuses a header of another chain than the one the caller means (attacker-review
regression, in part). A lying node that made up a one-validator chain with its own key got
``query account X --prove`` to print a balance of 10^9 LOCO with "proof_verified": true: the
validator set is the node's own answer (README, Known limits) and the header's chain id was
compared with nothing. Now the header must name the chain of the client config
(``loconet config set chain-id``) or of the home's genesis; a forgery under the right name is
caught by the genesis trust of a node home (tests/cli/test_prove_trusted_genesis.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from abci_app.auth.keys import account_key
from abci_app.bank.keys import balance_key
from abci_app.codec.address import to_bech32
from abci_app.encoding import encode_amount
from node.cli.main import main
from tests.kits.fakenode import FakeChain, install

VICTIM = bytes(range(20))
FORGED = 10**15  # 10^9 LOCO


def _chain(chain_id: str) -> tuple[FakeChain, str]:
    chain = FakeChain({balance_key(VICTIM): encode_amount(FORGED)}, chain_id=chain_id)
    addr = to_bech32(VICTIM)
    chain.answers[f"/account/{addr}"] = (
        json.dumps({"address": addr, "balance": FORGED, "sequence": 0}).encode(),
        [balance_key(VICTIM), account_key(VICTIM)],
    )
    return chain, addr


def _home(tmp_path: Path, how: str) -> Path:
    home = tmp_path / "home"
    (home / "config").mkdir(parents=True)
    if how == "config":
        assert main(["config", "set", "chain-id", "loconet-main", "--home", str(home)]) == 0
    else:
        (home / "config" / "genesis.json").write_text(json.dumps({"chain_id": "loconet-main"}))
    return home


@pytest.mark.parametrize("how", ["config", "genesis"])
def test_prove_refuses_a_header_of_another_chain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    home = _home(tmp_path, how)
    capsys.readouterr()
    chain, addr = _chain("not-loconet-at-all")
    install(monkeypatch, chain)
    argv = ["query", "account", addr, "--prove", "--node", "http://127.0.0.1:1", "-o", "json"]
    rc = main([*argv, "--home", str(home)])
    out = capsys.readouterr()
    assert (
        rc == 1
        and "not-loconet-at-all" in out.out + out.err
        and "loconet-main" in (out.out + out.err)
    )
    assert "proof_verified" not in out.out


def test_prove_of_the_named_chain_still_verifies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home = _home(tmp_path, "config")
    capsys.readouterr()  # config set's own line
    chain, addr = _chain("loconet-main")
    install(monkeypatch, chain)
    argv = ["query", "account", addr, "--prove", "--node", "http://127.0.0.1:1", "-o", "json"]
    assert main([*argv, "--home", str(home)]) == 0
    # a forgery under the right name passes: the validator set is the node's (Known limits)
    assert json.loads(capsys.readouterr().out)["proof_verified"] is True
