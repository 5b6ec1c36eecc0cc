"""What a Cosmos SDK user reaches for first (#28 item 10): `--fees`, `query bank balances`,
`loconet version` / `--version`, a default home (`$LOCONET_HOME`, else `~/.loconet`) so that
`config set node ...` serves bare commands, `--prove` on `query balance` too, and port flags on
`init` (`--rpc-port`, `--p2p-port`, `--rpc.laddr tcp://H:P`, `--p2p.laddr`). Each was missing or
an "unrecognized arguments" error. No test here touches the real ~/.loconet (HOME and
LOCONET_HOME are set to tmp folders)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from node.cli import main as cli
from node.cli import tx as cli_tx
from node.client.keys import Keyring
from node.client.rpc import QueryResult
from tests.kits.clikit import ROOT

ADDR = "loco1fx9yx4cdc0p7e5vx5h2m66dfpanv527l2aavz3"


# ---------------------------------------------------------------- --fees


@pytest.mark.parametrize(
    "argv",
    [
        ["tx", "bank", "send", ADDR, "1loco", "--from", "a", "--home", "h"],
        ["tx", "staking", "unjail", "AB" * 20, "--from", "a", "--home", "h"],
        ["provider", "run", "--from", "a", "--home", "h"],
    ],
)
def test_fees_is_the_cosmos_spelling_of_fee(argv: list[str]) -> None:
    parser = cli.build_parser()
    assert parser.parse_args([*argv, "--fees", "5000uloco"]).fee == 5000
    assert parser.parse_args([*argv, "--fee", "5000uloco"]).fee == 5000


# ---------------------------------------------------------------- version


def test_version_says_loconet_and_the_pinned_cometbft(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    pinned = re.search(r"^COMETBFT_VERSION=v(\S+)$", (ROOT / "scripts/setup.sh").read_text(), re.M)
    assert pinned and cli.COMETBFT_VERSION == pinned[1], "bump COMETBFT_VERSION with setup.sh"
    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0
    line = f"loconet {version('loconet')} (cometbft {cli.COMETBFT_VERSION})"
    assert capsys.readouterr().out.strip() == line
    assert cli.main(["version", "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["loconet"] == version("loconet") and data["cometbft"] == cli.COMETBFT_VERSION
    assert "cometbft_binary" in data
    assert cli.main(["version"]) == 0
    assert capsys.readouterr().out.startswith(line)


# ---------------------------------------------------------------- default home


@pytest.fixture
def fake_home_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """$HOME in tmp and no $LOCONET_HOME: the default home is tmp/user/.loconet."""
    user = tmp_path / "user"
    user.mkdir()
    monkeypatch.setenv("HOME", str(user))
    monkeypatch.delenv("LOCONET_HOME")
    return user / ".loconet"


def test_without_home_commands_use_loconet_home_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "env-home"
    (home / "config").mkdir(parents=True)
    monkeypatch.setenv("LOCONET_HOME", str(home))
    assert cli.main(["keys", "add", "bob", "-o", "json"]) == 0
    bob = json.loads(capsys.readouterr().out)["address"]
    assert Keyring(home).get("bob").address == bob
    assert cli.main(["keys", "show", "bob"]) == 0
    assert capsys.readouterr().out.strip() == bob
    # `config set node` there serves a bare `status`: nothing listens on port 9, and the error
    # names that node (not the built-in 127.0.0.1:26657)
    assert cli.main(["config", "set", "node", "127.0.0.1:9"]) == 0
    capsys.readouterr()
    assert cli.main(["status", "-o", "json"]) == 1
    assert "127.0.0.1:9" in json.loads(capsys.readouterr().out)["error"]
    # --node given: the implicit home does not pin anything
    assert cli.main(["status", "--node", "127.0.0.1:7", "-o", "json"]) == 1
    assert "127.0.0.1:7" in json.loads(capsys.readouterr().out)["error"]


def test_without_home_or_env_commands_use_dot_loconet(
    fake_home_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["keys", "list"]) == 1  # no home yet: named, with where it came from
    err = capsys.readouterr().err
    assert f"{fake_home_dir} does not exist" in err and "the default home" in err, err
    fake_home_dir.mkdir()
    assert cli.main(["keys", "add", "carol", "-o", "json"]) == 0
    capsys.readouterr()
    assert cli.main(["keys", "list", "-o", "json"]) == 0
    assert [k["name"] for k in json.loads(capsys.readouterr().out)] == ["carol"]


def test_optional_home_is_defaulted_only_when_it_exists_and_node_is_absent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parser = cli.build_parser()
    home = tmp_path / "h"
    monkeypatch.setenv("LOCONET_HOME", str(home))

    def resolved(*argv: str) -> Any:
        a = parser.parse_args(list(argv))
        cli.resolve_defaults(a)
        return a

    assert resolved("query", "balance", ADDR).home is None  # no such folder: nothing read
    home.mkdir()
    assert resolved("query", "balance", ADDR).home == str(home)
    assert resolved("query", "balance", ADDR, "--node", "x:1").home is None
    assert resolved("tx", "bank", "send", ADDR, "1loco", "--from", "a").home == str(home)
    assert resolved("init").home == str(home)
    assert resolved("keys", "list", "--home", "elsewhere").home == "elsewhere"


# ---------------------------------------------------------------- query bank balances, --prove


class FakeNode:
    """The one abci_query `query balance` makes."""

    def __init__(self, balance: int) -> None:
        self.balance = balance
        self.asked: list[tuple[str, int, bool]] = []

    def __enter__(self) -> FakeNode:
        return self

    def __exit__(self, *a: object) -> None:
        pass

    def abci_query(self, path: str, height: int = 0, prove: bool = False) -> QueryResult:
        self.asked.append((path, height, prove))
        body = {"address": ADDR, "balance": self.balance, "sequence": 3}
        return QueryResult(0, "", 17, json.dumps(body).encode(), [])


@pytest.mark.parametrize("balance", [2_500_000, 0])
def test_query_bank_balances_has_the_cosmos_shape(
    balance: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    node = FakeNode(balance)
    monkeypatch.setattr(cli_tx, "_client", lambda args: node)
    assert cli.main(["query", "bank", "balances", ADDR, "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    coins = [{"denom": "uloco", "amount": str(balance)}] if balance else []
    assert data == {
        "balances": coins,
        "pagination": {"next_key": None, "total": "0"},
        "height": 17,
    }
    assert cli.main(["query", "bank", "balances", ADDR]) == 0
    assert capsys.readouterr().out.startswith(f"{balance} uloco")
    assert cli.main(["query", "balance", ADDR, "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["balance"] == balance


def test_query_balance_and_bank_balances_take_prove() -> None:
    parser = cli.build_parser()
    for what in (["balance"], ["bank", "balances"], ["account"]):
        a = parser.parse_args(["query", *what, ADDR, "--prove", "--height", "5"])
        assert a.prove is True and a.height == 5


# ---------------------------------------------------------------- init port flags


def rpc_p2p(home: Path) -> tuple[str, str]:
    c = tomllib.loads((home / "config" / "config.toml").read_text())
    return c["rpc"]["laddr"], c["p2p"]["laddr"]


def test_init_writes_the_port_flags_into_config_toml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from node.client import config as client_config

    a = tmp_path / "a"
    assert cli.main(["init", "--home", str(a), "--rpc-port", "36657", "--p2p-port", "36656"]) == 0
    assert "RPC tcp://127.0.0.1:36657" in capsys.readouterr().out
    assert rpc_p2p(a) == ("tcp://127.0.0.1:36657", "tcp://127.0.0.1:36656")
    assert client_config.node_from_home(a) == "http://127.0.0.1:36657"  # bare commands find it
    b = tmp_path / "b"
    argv = ["init", "--home", str(b), "--rpc.laddr", "tcp://0.0.0.0:36757", "-o", "json"]
    assert cli.main([*argv, "--p2p.laddr", "tcp://0.0.0.0:36756"]) == 0
    assert json.loads(capsys.readouterr().out)["rpc"] == "tcp://0.0.0.0:36757"
    assert rpc_p2p(b) == ("tcp://0.0.0.0:36757", "tcp://0.0.0.0:36756")
    assert client_config.node_from_home(b) == "http://127.0.0.1:36757"


@pytest.mark.parametrize(
    "flags,why",
    [
        (["--rpc-port", "1", "--rpc.laddr", "tcp://127.0.0.1:2"], "not both"),
        (["--rpc.laddr", "127.0.0.1:2"], "write tcp://HOST:PORT"),
        (["--p2p.laddr", "tcp://h:70000"], "write tcp://HOST:PORT"),
        (["--rpc-port", "5", "--p2p-port", "5"], "give two ports"),
        (["--rpc-port", "26660"], "metrics"),
    ],
)
def test_invalid_init_port_flags_are_refused_before_anything_is_made(
    tmp_path: Path, flags: list[str], why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "h"
    assert cli.main(["init", "--home", str(home), *flags]) == 1
    assert why in capsys.readouterr().err
    assert not home.exists()
    with pytest.raises(SystemExit):
        cli.main(["init", "--home", str(home), "--rpc-port", "0"])  # argparse: not a port
