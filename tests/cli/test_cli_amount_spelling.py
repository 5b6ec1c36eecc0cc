"""Amounts have one spelling (#28 item 7): `-5loco` was read as an unknown flag ("unrecognized
arguments", or "--fee: expected one argument"); `+5loco` and `5LOCO` were sent as 5 LOCO. Now a
negative amount is refused as one, and a sign or an uppercase unit is refused naming the
spelling to use, for the positional AMOUNT and for every amount flag (--fee, --bond ...)."""

from __future__ import annotations

from pathlib import Path

import pytest

from node.cli import main as cli
from node.cli.common import UsageError, parse_amount, parse_fee
from node.client.keys import Keyring

ADDR = "loco1fx9yx4cdc0p7e5vx5h2m66dfpanv527l2aavz3"
VALIDATOR = "61D6804A65EEC83E7F1D3A01649AF505CDB969CA"
OFFLINE = ["--generate-only", "--chain-id", "c", "--sequence", "0"]
# every command that reads an amount, with {} where the amount goes
COMMANDS = {
    "bank send": ["tx", "bank", "send", ADDR, "{}", "--from", "alice"],
    "bank send --fee": ["tx", "bank", "send", ADDR, "5loco", "--from", "alice", "--fee", "{}"],
    "staking bond": ["tx", "staking", "bond", VALIDATOR, "{}", "--from", "alice"],
    "provider register": [
        *("tx", "provider", "register", "--from", "alice", "--bond", "{}", "--throughput", "5"),
        *("--region", "eu", "--endpoint", "http://x:1", "--gpu", "cpu:1:1"),
        "--skip-hardware-check",
    ],
    "provider update": ["tx", "provider", "update", "--from", "alice", "--add-bond", "{}"],
    "job create": ["tx", "job", "create", "--from", "alice", "--reward-per-round", "{}"],
    "settlement withdraw": [
        *("tx", "settlement", "withdraw", "0x70997970C51812dc3A010C7d01b50e0d17dc79C8", "{}"),
        *("--from", "alice"),
    ],
}


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    h = tmp_path_factory.mktemp("amounts")
    Keyring(h).add("alice")
    return h


def run(home: Path, name: str, amount: str) -> list[str]:
    return [a.replace("{}", amount) for a in COMMANDS[name]] + ["--home", str(home), *OFFLINE]


@pytest.mark.parametrize(
    "text,hint",
    [
        ("+5loco", "without the sign: 5loco"),
        ("5LOCO", "units are lowercase: write 5loco"),
        ("5Loco", "units are lowercase: write 5loco"),
        ("2.5ULOCO", "units are lowercase: write 2.5uloco"),
        (".5loco", "write 0.5loco"),
        ("5.loco", "write 5loco"),
        ("-5loco", "amounts cannot be negative"),
        ("-3", "amounts cannot be negative"),
    ],
)
def test_invalid_amount_spellings_are_refused_naming_the_canonical_one(
    text: str, hint: str
) -> None:
    with pytest.raises(UsageError, match=hint.replace(".", r"\.").replace("+", r"\+")):
        parse_amount(text)
    with pytest.raises(UsageError, match=hint.replace(".", r"\.").replace("+", r"\+")):
        parse_fee(text)


def test_canonical_amounts_still_parse() -> None:
    assert parse_amount("5loco") == 5_000_000 and parse_amount("2.5loco") == 2_500_000
    assert parse_amount("1000uloco") == 1000 and parse_amount("0.000001loco") == 1
    assert parse_fee("auto") is None and parse_fee("5000") == 5000 and parse_fee("0loco") == 0
    for zero in ("0LOCO", "+0uloco", "0.loco"):
        with pytest.raises(UsageError, match="write 0uloco"):
            parse_fee(zero)


@pytest.mark.parametrize("name", sorted(COMMANDS))
@pytest.mark.parametrize("amount", ["+5loco", "5LOCO"])
def test_invalid_signed_or_uppercase_amount_is_not_sent(
    home: Path, name: str, amount: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        rc = cli.main(run(home, name, amount))
    except SystemExit as e:  # --fee's type check: an argparse error
        rc = int(e.code or 0)
    o = capsys.readouterr()
    assert rc in (1, 2) and "Traceback" not in o.err, o.err
    assert ("without the sign" if amount[0] == "+" else "units are lowercase") in o.err, o.err
    assert o.out == "", "nothing may be generated for a refused amount"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_invalid_negative_amount_is_not_an_unknown_flag(
    home: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(run(home, name, "-5loco"))
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert "amounts cannot be negative" in err, err
    assert "unrecognized" not in err and "expected one argument" not in err, err


def test_invalid_negative_amount_error_is_json_with_o_json(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    with pytest.raises(SystemExit):
        cli.main([*run(home, "bank send", "-5loco"), "-o", "json"])
    assert "amounts cannot be negative" in json.loads(capsys.readouterr().out)["error"]


def test_canonical_amount_is_sent(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    assert cli.main(run(home, "bank send", "2.5loco")) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["messages"][0]["send"]["amount"] == 2_500_000
