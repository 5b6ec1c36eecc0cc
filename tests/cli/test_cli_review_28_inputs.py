"""Issue #28, reviewed with inputs the first fixes' tests did not try:

- a key file that is a FIFO (or a link to /dev/zero) blocked `keys show` for ever, and a 1 GB
  NAME.json was read whole by `keys list` (a MemoryError traceback under a memory limit);
- `keys import` of an armor asking scrypt n=2^20, r=32, p=16 derived 4 GiB (a MemoryError
  traceback, or minutes of CPU) although the module promises at most 1 GiB;
- a 100 KB file given to `keys import` was "larger than 0 MiB";
- `LOCONET_HOME` naming a file: `keys list` said it "does not exist";
- `init --p2p-port 26657` (the RPC's default port) was accepted, so the node could not start;
- `--quota -1GiB` was told "an amount is e.g. 5loco"; `--quota ""` was ignored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from node.cli import common
from node.cli import main as cli
from node.client.keys import KeyError_, Keyring, export_armor, import_armor

ROOT = Path(__file__).resolve().parents[2]
PASS = "correct horse battery"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    (h / "config").mkdir(parents=True)
    return h


def test_key_file_that_is_a_fifo_does_not_block_keys_show(home: Path) -> None:
    Keyring(home).add("alice")
    os.mkfifo(home / "keyring" / "pipe.json")
    (home / "keyring" / "zero.json").symlink_to("/dev/zero")
    for name in ("pipe", "zero"):
        r = subprocess.run(  # a subprocess: the old code never returned
            [sys.executable, "-m", "node.cli", "keys", "show", name, "--home", str(home)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 1, r
        assert "Traceback" not in r.stderr and "not a regular file" in r.stderr, r.stderr


def test_huge_key_file_is_not_read_whole_and_the_others_are_listed(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    alice = Keyring(home).add("alice").address
    with open(home / "keyring" / "huge.json", "wb") as f:
        f.truncate(1 << 30)  # sparse: no disk used
    (home / "keyring" / "folder.json").mkdir()
    assert cli.main(["keys", "list", "--home", str(home), "-o", "json"]) == 1
    doc = {e["name"]: e for e in json.loads(capsys.readouterr().out)}
    assert doc["alice"]["address"] == alice
    assert "larger than 64 KiB" in doc["huge"]["error"]
    assert cli.main(["keys", "show", "folder", "--home", str(home)]) == 1
    assert "it is a folder" in capsys.readouterr().err


def test_import_armor_asking_more_than_1_gib_of_scrypt_is_refused_before_deriving(
    home: Path,
) -> None:
    armor = export_armor(Keyring(home).add("alice"), PASS)
    greedy = armor.replace("n=32768,r=8,p=1", "n=1048576,r=32,p=16")
    with pytest.raises(KeyError_, match="out of the range this reads"):
        import_armor(greedy, PASS)  # refused at once: no 4 GiB derivation (the header is in the
    # AEAD's data, so a tag check after deriving would have failed it too, minutes later)
    with pytest.raises(KeyError_, match="out of the range"):
        import_armor(armor.replace("n=32768,r=8,p=1", "n=1048576,r=8,p=2"), PASS)
    assert len(import_armor(armor, PASS)) == 32  # the shipped parameters still import


def test_key_file_too_large_for_keys_import_says_its_limit_in_kib(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    big = tmp_path / "big.armor"
    big.write_bytes(b"x" * 100_000)
    assert cli.main(["keys", "import", "k", str(big), "--home", str(home)]) == 1
    err = capsys.readouterr().err
    assert "larger than 64 KiB" in err and "0 MiB" not in err, err


def test_loconet_home_that_is_a_file_is_not_a_folder_not_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "file"
    f.write_text("")
    monkeypatch.setenv("LOCONET_HOME", str(f))
    assert cli.main(["keys", "list"]) == 1
    err = capsys.readouterr().err
    assert "is not a folder" in err and "does not exist" not in err, err


@pytest.mark.parametrize(
    "flags,says",
    [
        (["--p2p-port", "26657"], "--p2p-port 26657 is the RPC port too"),
        (["--rpc-port", "26656"], "--rpc-port 26656 is the P2P port too"),
        (["--rpc.laddr", "tcp://0.0.0.0:26656"], "--rpc-port 26656 is the P2P port too"),
    ],
)
def test_init_port_equal_to_the_other_default_port_is_refused(
    tmp_path: Path, flags: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    h = tmp_path / "h"
    assert cli.main(["init", "--home", str(h), *flags]) == 1
    assert says in capsys.readouterr().err
    assert not (h / "config" / "genesis.json").exists()


def test_negative_quota_is_refused_as_a_size_not_as_an_amount(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"x")
    with pytest.raises(SystemExit):
        cli.main(["blob", "put", str(f), "--dir", str(tmp_path / "s"), "--quota", "-1GiB"])
    err = capsys.readouterr().err
    assert "nor sizes" in err and "10GiB" in err, err


def test_empty_quota_is_refused_not_ignored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"x")
    assert cli.main(["blob", "put", str(f), "--dir", str(tmp_path / "s"), "--quota", ""]) == 1
    assert "--quota '': bad size" in capsys.readouterr().err


class _Terminal:
    """stdin as a person at a terminal who types ``answer``."""

    def __init__(self, answer: str) -> None:
        import io

        self._text = io.StringIO(answer)

    def isatty(self) -> bool:
        return True

    def readline(self) -> str:
        return self._text.readline()

    def read(self, n: int = -1) -> str:
        return self._text.read(n)


def test_keys_delete_question_at_a_terminal_keeps_json_stdout_one_document(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    Keyring(home).add("alice")
    monkeypatch.setattr("sys.stdin", _Terminal("y\n"))
    assert cli.main(["keys", "delete", "alice", "--home", str(home), "-o", "json"]) == 0
    o = capsys.readouterr()
    assert json.loads(o.out)["deleted"] is True  # input() put the question here
    assert "delete key 'alice'" in o.err


def test_loconet_home_with_a_literal_tilde_is_the_users_home_not_a_folder_named_tilde(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LOCONET_HOME", "~/node")
    assert cli.main(["init", "--moniker", "m"]) == 0
    capsys.readouterr()
    assert (tmp_path / "node" / "config" / "genesis.json").is_file()
    assert not (tmp_path / "~").exists()


@pytest.mark.parametrize("fee", ["0.0", "-0", "+0"])
def test_unit_less_zero_fee_spellings_name_0uloco_not_1uloco(fee: str) -> None:
    from node.errors import UsageError

    with pytest.raises(UsageError, match="write 0uloco"):
        common.parse_fee(fee)
