"""Corrupt files in a home (red-team regressions): a key file that is not JSON (or holds no
32-byte seed) and an app.toml that is not TOML or has a mistyped value raised JSONDecodeError /
TOMLDecodeError tracebacks; each is now one line naming the file and the fix, exit 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.kits.clikit import run


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    h = tmp_path_factory.mktemp("corrupt") / "home"
    r = run("init", "--home", str(h), "--chain-id", "t", "--moniker", "m")
    assert r.returncode == 0, r.stderr
    return h


@pytest.mark.parametrize(
    "body", ["{not json", '{"seed": "abcd"}', '{"seed": 5}', "[]", "[" * 100_000]
)
def test_invalid_corrupt_key_file(home: Path, body: str) -> None:
    path = home / "keyring" / "validator.json"
    good = path.read_text()
    path.write_text(body)
    try:
        for args in (("keys", "show", "validator"), ("keys", "list")):
            r = run(*args, "--home", str(home))
            assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
            assert "is corrupt" in r.stderr and str(path) in r.stderr and "--recover" in r.stderr
        j = run("keys", "show", "validator", "--home", str(home), "-o", "json")
        assert j.returncode == 1 and "is corrupt" in json.loads(j.stdout)["error"]
    finally:
        path.write_text(good)


@pytest.mark.parametrize(
    "extra",
    [
        "x = [",
        'keep_recent = "many"\n',
        "keep_recent = -5\n",  # StoreError traceback at start
        'keep_recent = 1\nmetrics_address = "garbage"\n',  # ValueError traceback at start
        'keep_recent = 1\nmetrics_address = "127.0.0.1:99999"\n',
        "keep_recent = 1\nsnapshot_keep = 0\n",
        "x = " + "[" * 3000,  # tomllib: RecursionError, not TOMLDecodeError
    ],
)
def test_invalid_app_toml(home: Path, extra: str) -> None:
    path = home / "config" / "app.toml"
    good = path.read_text()
    path.write_text(good.replace("keep_recent", "# keep_recent") + extra)
    try:
        r = run("abci", "--home", str(home), timeout=30)
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        assert str(path) in r.stderr and len(r.stderr.strip().splitlines()) == 1
    finally:
        path.write_text(good)


HASH = "ab" * 32
DEEP = "[" * 100_000  # json.loads raises RecursionError, not ValueError


@pytest.mark.parametrize(
    "body,args",
    [
        (DEEP, ("tx", "job", "create", "--spec", "{f}")),
        ("[1]", ("tx", "job", "create", "--spec", "{f}")),
        (b"\xff\xfe", ("tx", "job", "create", "--spec", "{f}")),
        (
            DEEP,
            (
                "tx",
                "round",
                "reveal",
                "1",
                "0",
                "--segment",
                "0",
                "--trace-file",
                "{f}",
                "--start-location",
                "http://x",
            ),
        ),  # fmt: skip
        (b"\xff\xfe", ("tx", "sign", "{f}")),
        (DEEP, ("tx", "sign", "{f}")),
        (b"\xff\xfe", ("tx", "broadcast", "{f}")),
    ],
)
def test_invalid_input_files_are_one_line(home: Path, tmp_path: Path, body, args) -> None:
    """A --spec that is a JSON list (AttributeError), JSON nested 100,000 deep (RecursionError),
    or a file that is not UTF-8 (UnicodeDecodeError) was a traceback; each is one line naming
    the file (red-team regressions)."""
    f = tmp_path / "in.json"
    if isinstance(body, bytes):
        f.write_bytes(body)
    else:
        f.write_text(body)
    argv = [a.replace("{f}", str(f)) for a in args]
    if argv[0] == "tx" and argv[1] != "broadcast":
        argv += ["--from", "validator", "--home", str(home), "--node", "http://127.0.0.1:9"]
    r = run(*argv)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and str(f) in r.stderr, r.stderr


def test_invalid_priv_validator_key_is_one_line(home: Path) -> None:
    path = home / "config" / "priv_validator_key.json"
    good = path.read_text()
    path.write_text('{"priv_key": {}}')  # KeyError was a traceback at start
    try:
        r = run("abci", "--home", str(home), timeout=30)
    finally:
        path.write_text(good)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "is not a CometBFT key file" in r.stderr and str(path) in r.stderr


def test_tx_sign_takes_output_json(home: Path, tmp_path: Path) -> None:
    """`tx sign ... -o json` was a usage error (the only data command without -o)."""
    f = tmp_path / "in.json"
    f.write_text("[]")
    r = run("tx", "sign", str(f), "--from", "validator", "--home", str(home), "-o", "json")
    assert r.returncode == 1 and "is not a loconet tx document" in json.loads(r.stdout)["error"]


@pytest.mark.parametrize("body", ["{", '{"pub_key": {"value": "zz"}, "address": "00"}', "[]"])
def test_invalid_validator_home_key_file_is_one_line(home: Path, tmp_path: Path, body: str) -> None:
    """create-validator and set-key read --validator-home's priv_validator_key.json raw: a file
    that is not one was a JSONDecodeError / binascii.Error / TypeError traceback."""
    vh = tmp_path / "vh"
    (vh / "config").mkdir(parents=True)
    (vh / "config" / "priv_validator_key.json").write_text(body)
    common = ("--from", "validator", "--home", str(home), "--node", "http://127.0.0.1:9")
    for args in (
        (
            "tx",
            "staking",
            "create-validator",
            "--validator-home",
            str(vh),
            "--self-bond",
            "100loco",
            "--moniker",
            "x",
        ),  # fmt: skip
        ("tx", "settlement", "set-key", "--validator-home", str(vh)),
    ):
        r = run(*args, *common)
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        assert "is not a CometBFT priv_validator_key.json" in r.stderr, r.stderr
    assert not (vh / "config" / "settlement_key.json").exists()  # nothing written for a bad home


@pytest.mark.parametrize("kind", ["garbage", "folder"])
def test_invalid_state_database_is_one_line(home: Path, kind: str) -> None:
    """A data/app.db that is not SQLite (or a folder) was a sqlite3.DatabaseError / StoreError
    traceback from `start` and `abci`; one line naming it and the way out (move it away: cometbft
    replays its blocks into a new one)."""
    import shutil

    from node.local.config import Ports, tune_cometbft_config
    from tests.kits.nodekit import free_port_base

    base = free_port_base()  # `start` checks its ports before it opens the store
    tune_cometbft_config(home, "m", Ports(base, base + 1, base + 2, base + 3))
    db = home / "data" / "app.db"
    db.parent.mkdir(parents=True, exist_ok=True)
    if kind == "garbage":
        db.write_text("garbage " * 10)
    else:
        db.mkdir()
    try:
        for cmd in ("abci", "start"):
            r = run(cmd, "--home", str(home), timeout=30)
            assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
            assert f"cannot open the app's state {db}" in r.stderr and "mv " in r.stderr
    finally:
        shutil.rmtree(db) if db.is_dir() else db.unlink()


REVEAL = ("tx", "round", "reveal", "1", "0", "--segment", "0", "--start-location", "http://x")


@pytest.mark.parametrize(
    "args",
    [
        ("tx", "broadcast", "{f}"),
        ("tx", "sign", "{f}"),
        ("tx", "job", "create", "--spec", "{f}"),
        (*REVEAL, "--trace-file", "{f}"),
    ],
)
@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_invalid_input_file_that_is_a_fifo_or_device(
    home: Path, tmp_path: Path, args: tuple[str, ...], kind: str
) -> None:
    """A FIFO with no writer as the file made the command hang for ever (open() waits for a
    writer), and /dev/zero was read until memory ran out; both are one line naming the file."""
    import os

    if kind == "fifo":
        f = str(tmp_path / "pipe")
        os.mkfifo(f)
    else:
        f = kind
    argv = [a.replace("{f}", f) for a in args]
    if argv[1] != "broadcast":
        argv += ["--from", "validator", "--home", str(home), "--node", "http://127.0.0.1:9"]
    r = run(*argv, timeout=20)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and f in r.stderr, r.stderr
    assert "not a regular file" in r.stderr, r.stderr
