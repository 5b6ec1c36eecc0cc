"""A rejected tx names its code once: ``error (code bank/5): tx rejected in CheckTx: ...``, not
``error (code bank/5): tx rejected in CheckTx with code bank/5: ...``; -o json keeps the code in
its own fields."""

import json

import pytest

from node.cli import main as cli
from node.client.rpc import TxRejected


def _rejecting(args: object) -> int:
    raise TxRejected(5, "bank", "insufficient funds: have 1uloco, need 9uloco", "CheckTx")


@pytest.fixture
def rejecting_status(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "cmd_status", _rejecting)


def test_text_error_says_the_code_once(
    rejecting_status: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["status", "--node", "http://127.0.0.1:1"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == (
        "error (code bank/5): tx rejected in CheckTx: insufficient funds: have 1uloco, need 9uloco"
    )
    assert err.count("bank/5") == 1


def test_json_error_keeps_code_and_codespace(
    rejecting_status: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["status", "--node", "http://127.0.0.1:1", "-o", "json"]) == 1
    body = json.loads(capsys.readouterr().out)
    assert body["code"] == 5 and body["codespace"] == "bank"
    assert body["error"].startswith("tx rejected in CheckTx: insufficient funds")
