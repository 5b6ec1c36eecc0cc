"""Numbers and text at the CLI's type boundaries (red-team regressions), through the real CLI
with no node: each is refused before anything is signed or sent, in one line (JSON with -o json).

Found: ``tx job cancel -1``, ``--throughput 2^70``, ``--gpu H100:8:99999999999`` raised
protobuf's "Value out of range" as a traceback; ``--sequence -1`` was reported as the *node's*
malformed answer; ``query job ١`` and ``5٥loco`` read Arabic-Indic digits as numbers (Python's
int() and Decimal take them); ``--height 2^70`` reached CometBFT as a JSON-RPC unmarshal error;
``--memo`` with bytes that are not UTF-8 raised UnicodeEncodeError; ``query txs --events`` with a
quote in the value broke CometBFT's query ("Internal error offset 14: got tag"); ``--timeout
nan`` and ``testnet up --timeout nan`` were accepted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.kits.clikit import run

ADDR = "loco1rnzet8sscmrr9rxgu2y8hfql40c0p6wp8ltshu"
HASH = "ab" * 32
CLOSED = "http://127.0.0.1:9"  # nothing is asked of a node: the arguments fail first


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    h = tmp_path_factory.mktemp("numbers") / "home"
    r = run("init", "--home", str(h), "--chain-id", "numbers")
    assert r.returncode == 0, r.stderr
    return h


TX = ("--from", "validator", "--node", CLOSED)
CASES = [
    ("tx", "job", "cancel", "-1", *TX),
    ("tx", "job", "cancel", "\u0661", *TX),  # Arabic-Indic 1
    ("tx", "job", "cancel", "18446744073709551616", *TX),  # 2^64
    ("tx", "bank", "send", ADDR, "1loco", "--sequence", "-1", *TX),
    ("tx", "bank", "send", ADDR, "1loco", "--sequence", "1e3", *TX),
    ("tx", "round", "attest", "1", "-2", HASH, *TX),
    (
        "tx",
        "provider",
        "register",
        "--bond",
        "1loco",
        "--gpu",
        "H100:8:80",
        "--throughput",
        str(2**70),
        "--region",
        "eu",
        "--endpoint",
        "http://a",
        *TX,
    ),  # fmt: skip
    ("tx", "job", "create", "--rounds", str(2**32), "--reward-per-round", "1loco", *TX),
    ("tx", "job", "create", "--participants", "-1", "--reward-per-round", "1loco", *TX),
    ("query", "job", "\u0661", "--node", CLOSED),
    ("query", "round", "1", "-1", "--node", CLOSED),
    ("query", "account", ADDR, "--height", str(2**63), "--node", CLOSED),
    ("query", "block", "-1", "--node", CLOSED),
    ("query", "providers", "--offset", "-5", "--node", CLOSED),
    ("query", "txs", "--events", "a.b=c", "--page", "-1", "--node", CLOSED),
    ("query", "rewards", ADDR, "--limit", "-1", "--node", CLOSED),
    ("query", "rewards", ADDR, "--limit", "0", "--node", CLOSED),  # per_page 0: CometBFT's 30
    ("query", "txs", "--events", "a.b=c", "--page", "0", "--node", CLOSED),
    ("blob", "get", HASH, "--source", CLOSED, "--timeout", "nan"),
    ("blob", "get", HASH, "--source", CLOSED, "--timeout", "-1"),
    ("testnet", "up", "--timeout", "nan"),
    ("testnet", "up", "--timeout", "inf"),
    ("testnet", "up", "--evm", "--evm-port", "99999"),  # failed after the network started
    ("testnet", "up", "--evm", "--evm-port", "0"),
]


@pytest.mark.parametrize("args", CASES, ids=lambda a: " ".join(a[:4]))
def test_invalid_number_arguments_are_usage_errors(home: Path, tmp_path: Path, args) -> None:
    extra = ["--dir", str(tmp_path / "tn")] if args[0] == "testnet" else ["--home", str(home)]
    r = run(*args, *extra, "-o", "json")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stdout + r.stderr
    err = json.loads(r.stdout)["error"]
    assert "is not a whole number between" in err or "is not a number of seconds" in err, err
    assert not (tmp_path / "tn").exists()


@pytest.mark.parametrize("amount", ["5\u0665loco", "\u0665uloco", "\uff15loco"])
def test_invalid_amount_in_unicode_digits(home: Path, amount: str) -> None:
    r = run("tx", "bank", "send", ADDR, amount, *TX, "--home", str(home))
    assert r.returncode == 1 and r.stderr.startswith("error: bad amount"), r.stderr


def test_invalid_gpu_count_past_uint32(home: Path) -> None:
    r = run(
        "tx", "provider", "register", "--bond", "1loco", "--gpu", "H100:8:99999999999",
        "--throughput", "1", "--region", "eu", "--endpoint", "http://a", *TX,
        "--home", str(home),
    )  # fmt: skip
    assert r.returncode == 1 and "bad --gpu" in r.stderr and "Traceback" not in r.stderr


def test_invalid_memo_that_is_not_utf8(home: Path) -> None:
    r = run(
        "tx", "bank", "send", ADDR, "1loco", "--from", "validator", "--home", str(home),
        "--memo", "\udcff\udcfe", "--generate-only", "--chain-id", "numbers", "--sequence", "0",
        "-o", "json",
    )  # fmt: skip
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "not valid UTF-8" in json.loads(r.stdout)["error"]


@pytest.mark.parametrize(
    "events", ["tx.signer=a' OR 1=1", "tx.signer=a\\", "tx signer.x=1", "tx.sign'er=1"]
)
def test_invalid_event_query_quotes(events: str) -> None:
    r = run("query", "txs", "--events", events, "--node", CLOSED)
    assert r.returncode == 1 and r.stderr.startswith("error: bad --events"), r.stderr


def test_numbers_in_range_still_parse(home: Path) -> None:
    r = run(
        "tx", "job", "cancel", "18446744073709551615", "--from", "validator", "--home", str(home),
        "--generate-only", "--chain-id", "numbers", "--sequence", "18446744073709551615",
        "-o", "json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["sequence"] == 2**64 - 1
    assert doc["messages"][0]["cancel_job"]["job_id"] == 2**64 - 1


def test_invalid_new_size_on_an_existing_testnet(tmp_path: Path) -> None:
    """`testnet up --validators 7` (or --providers 2) on a folder holding a 1-validator network
    restarted the 1-validator network and printed success: the new size was silently ignored.
    Refused before anything starts, naming --purge; the same size, or none, restarts it."""
    from node.local.manifest import manifest_path
    from node.local.testnet import TESTNET_PARAMS, create

    d = tmp_path / "net"
    create(d, 1, 0, 40000, {m: dict(kv) for m, kv in TESTNET_PARAMS.items()})
    before = manifest_path(d).read_text()
    for flags in (["--validators", "7"], ["--providers", "2"]):
        r = run("testnet", "up", "--dir", str(d), *flags, "-o", "json")
        assert r.returncode == 1, r.stdout + r.stderr
        err = json.loads(r.stdout)["error"]
        assert "already holds a network with" in err and "--purge" in err, err
    assert manifest_path(d).read_text() == before


def test_logs_tail_reads_only_the_end(tmp_path: Path) -> None:
    """`testnet logs -n N` read the whole log into memory (gigabytes on a long-running node), and
    `-n 0` printed everything (``lines[-0:]``); -n -5 printed all but the first 5."""
    from node.cli.testnet import tail_lines

    log = tmp_path / "cometbft.log"
    log.write_text("".join(f"line {i}\n" for i in range(100_000)))
    assert tail_lines(log, 3) == ["line 99997", "line 99998", "line 99999"]
    assert tail_lines(log, 3, block=7) == ["line 99997", "line 99998", "line 99999"]
    assert tail_lines(log, 0) == []
    assert tail_lines(log, 10**9) == [f"line {i}" for i in range(100_000)]
    log.write_text("no newline at the end")
    assert tail_lines(log, 1) == ["no newline at the end"]
    log.write_text("")
    assert tail_lines(log, 5) == []
    r = run("testnet", "logs", "node0", "-n", "-5", "--dir", str(tmp_path))
    assert r.returncode == 2 and "is not a whole number" in r.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("keys", "add", "x", "--home", ""),
        ("init", "--home", " "),
        ("blob", "ls", "--dir", ""),
        ("testnet", "status", "--dir", ""),
        ("provider", "run", "--from", "a", "--home", "h", "--data-dir", ""),
    ],
)
def test_invalid_empty_folder_flag(tmp_path: Path, args) -> None:
    """`--home "$UNSET"` read as the current folder: `keys add` made a keyring, `init` a home,
    wherever the command ran."""
    import subprocess
    import sys

    from tests.kits.clikit import ROOT

    r = subprocess.run(
        [sys.executable, "-m", "node.cli", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=60,
        check=False,
    )
    assert r.returncode == 1 and "is empty: give a folder" in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []
