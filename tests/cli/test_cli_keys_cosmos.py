"""Keyring regressions of #28 items 7 and 10: one corrupt key file made `keys list` fail for
every key; recovering one mnemonic under a second name silently gave two names to one address
(the Cosmos SDK keyring refuses that: ErrDuplicatedAddress); `keys export` / `keys import`
(a passphrase-encrypted ASCII armor, as the Cosmos SDK's) did not exist."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from node.cli import main as cli
from node.client.keys import KeyError_, Keyring, export_armor, import_armor, new_mnemonic

PASS = "correct horse battery"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    (h / "config").mkdir(parents=True)
    return h


def main(argv: list[str], stdin: str | None, monkeypatch: pytest.MonkeyPatch) -> int:
    if stdin is not None:
        import io

        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    return cli.main(argv)


def test_invalid_corrupt_key_file_does_not_hide_the_other_keys(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ring = Keyring(home)
    good = {n: ring.add(n).address for n in ("alice", "carol")}
    bad = home / "keyring" / "bob.json"
    bad.write_text("{not json")
    assert cli.main(["keys", "list", "--home", str(home)]) == 1
    o = capsys.readouterr()
    assert [line.split() for line in o.out.splitlines()] == [[n, a] for n, a in good.items()]
    lines = o.err.strip().splitlines()
    assert len(lines) == 1 and "bob.json is corrupt" in lines[0], o.err
    assert "keys add bob --recover" in lines[0] and f"mv {bad}" in lines[0]  # the fix
    assert cli.main(["keys", "list", "--home", str(home), "-o", "json"]) == 1
    o = capsys.readouterr()
    rows = {r["name"]: r for r in json.loads(o.out)}
    assert {n: rows[n]["address"] for n in good} == good
    assert "is corrupt" in rows["bob"]["error"] and "address" not in rows["bob"]
    assert o.err == ""
    bad.unlink()  # fixed: exit 0 again
    assert cli.main(["keys", "list", "--home", str(home)]) == 0


def test_invalid_recover_of_a_key_already_in_the_keyring_names_the_existing_name(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    words = new_mnemonic()
    argv = ["keys", "add", "bob", "--recover", "--home", str(home), "-o", "json"]
    assert main(argv, words + "\n", monkeypatch) == 0
    address = json.loads(capsys.readouterr().out)["address"]
    assert main([*argv[:2], "bob2", *argv[3:]], words + "\n", monkeypatch) == 1
    err = json.loads(capsys.readouterr().out)["error"]
    assert "already in the keyring as 'bob'" in err and address in err, err
    assert not (home / "keyring" / "bob2.json").exists()
    assert Keyring(home).names() == ["bob"]


def test_keys_export_import_round_trip(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    address = Keyring(home).add("alice").address
    f = tmp_path / "alice.key"
    argv = ["keys", "export", "alice", "--to", str(f), "--home", str(home)]
    assert main(argv, PASS + "\n", monkeypatch) == 0
    assert stat.S_IMODE(f.stat().st_mode) == 0o600
    armor = f.read_text()
    assert armor.startswith("-----BEGIN LOCONET PRIVATE KEY-----\n") and address in armor
    seed_hex = json.loads((home / "keyring" / "alice.json").read_text())["seed"]
    assert seed_hex not in armor.lower()  # encrypted, not encoded
    capsys.readouterr()
    # into another home (the same one refuses: one name per address)
    other = tmp_path / "other"
    (other / "config").mkdir(parents=True)
    imp = ["keys", "import", "alice2", str(f), "--home", str(other), "-o", "json"]
    assert main(imp, PASS + "\n", monkeypatch) == 0
    assert json.loads(capsys.readouterr().out) == {
        "name": "alice2",
        "address": address,
        "imported": True,
    }
    k = other / "keyring" / "alice2.json"
    assert stat.S_IMODE(k.stat().st_mode) == 0o600
    assert json.loads(k.read_text())["seed"] == seed_hex
    same = ["keys", "import", "again", str(f), "--home", str(home), "-o", "json"]
    assert main(same, PASS + "\n", monkeypatch) == 1
    assert "already in the keyring as 'alice'" in json.loads(capsys.readouterr().out)["error"]


def test_keys_export_to_stdout_and_import_refusals(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    Keyring(home).add("alice")
    assert main(["keys", "export", "alice", "--home", str(home)], PASS, monkeypatch) == 0
    armor = capsys.readouterr().out
    f = tmp_path / "k.armor"
    f.write_text(armor)
    other = tmp_path / "other"
    imp = ["keys", "import", "a", str(f), "--home", str(other)]
    assert main(imp, "wrong passphrase\n", monkeypatch) == 1
    assert "wrong passphrase" in capsys.readouterr().err
    f.write_text(armor.replace("type: ed25519\n", "type: ed25519\nnote: x\n"))  # altered header
    assert main(imp, PASS + "\n", monkeypatch) == 1
    assert "wrong passphrase, or the file was altered" in capsys.readouterr().err
    assert not (other / "keyring" / "a.json").exists()
    # a short passphrase, an existing --to: nothing written
    short = ["keys", "export", "alice", "--to", str(tmp_path / "s.key"), "--home", str(home)]
    assert main(short, "short\n", monkeypatch) == 1
    assert "at least 8 characters" in capsys.readouterr().err
    assert not (tmp_path / "s.key").exists()
    taken = ["keys", "export", "alice", "--to", str(f), "--home", str(home)]
    assert main(taken, PASS + "\n", monkeypatch) == 1
    assert "exists" in capsys.readouterr().err


def test_import_armor_refuses_what_it_cannot_read() -> None:
    from abci_app.codec.tx import Ed25519Signer
    from node.client.keys import Key

    armor = export_armor(Key("k", Ed25519Signer(bytes(range(32)))), PASS)
    assert import_armor(armor, PASS) == bytes(range(32))
    for broken, why in [
        ("hello", "no -----BEGIN"),
        (armor.replace("kdf: scrypt", "kdf: bcrypt"), "kdf is 'bcrypt'"),
        (armor.replace("n=32768", "n=1073741824"), "kdf-params"),
        (armor.replace("n=32768", "n=33000"), "out of the range"),
    ]:
        with pytest.raises(KeyError_, match=why):
            import_armor(broken, PASS)
