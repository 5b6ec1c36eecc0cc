"""State files of a home under crashes and concurrency (red-team regressions).

``keys add`` wrote HOME/keyring/NAME.json in place: a ``kill -9`` mid-write left a half key
under a valid name (``keys list`` then failed on it, and the name was taken). The settlement key
was written the same way, and ``config set`` used one fixed temp name (``client.tmp``), so two at
once failed with ENOENT or lost one update. Each is now a private temp file, fsynced, renamed
(or linked, for keys: never overwritten) into place (node/atomic.py); ``config set`` holds a lock
around its read-modify-write. The crash is a real SIGKILL of a process stopped between writing
the bytes and naming the file."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.kits.clikit import ROOT, run

# a process that writes a state file through the named call, frozen at its fsync (the bytes are
# written, the file is not yet named), then killed with SIGKILL by the test
_FREEZE = """
import os, sys, time
from pathlib import Path
real_fsync = os.fsync
def frozen(fd):
    print("writing", flush=True)
    time.sleep(600)
os.fsync = frozen
home = Path(sys.argv[1])
what = sys.argv[2]
if what == "key":
    from node.client.keys import Keyring
    Keyring(home).add("half")
elif what == "settlement":
    from node.client import settlement_key
    settlement_key.create(home)
elif what == "copy":
    from node.atomic import copy_atomic
    copy_atomic(home / "src.bin", home / "out.bin")
elif what == "deployment":
    from node.evm.client import Deployment
    Deployment(1, "c", "0x1", "0x2", "0x3", 0, 0).save(home / "deployment.json")
else:
    from node.client import config as client_config
    client_config.set_value(home, "node", "http://127.0.0.1:1")
"""


def _kill_mid_write(home: Path, what: str) -> None:
    p = subprocess.Popen(
        [sys.executable, "-c", _FREEZE, str(home), what],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout is not None
    assert p.stdout.readline().strip() == "writing"
    p.send_signal(signal.SIGKILL)
    p.wait(10)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    (h / "config").mkdir(parents=True)
    return h


def test_invalid_half_written_key_never_carries_a_name(home: Path) -> None:
    _kill_mid_write(home, "key")
    assert not (home / "keyring" / "half.json").exists()
    r = run("keys", "list", "--home", str(home), "-o", "json")
    assert r.returncode == 0 and json.loads(r.stdout) == [], r.stdout + r.stderr
    r = run("keys", "add", "half", "--home", str(home), "-o", "json")  # the name is still free
    assert r.returncode == 0, r.stderr
    key = json.loads((home / "keyring" / "half.json").read_text())
    assert key["address"] == json.loads(r.stdout)["address"]
    assert (home / "keyring" / "half.json").stat().st_mode & 0o777 == 0o600


def test_invalid_half_written_settlement_key_never_carries_a_name(home: Path) -> None:
    from node.client import settlement_key

    _kill_mid_write(home, "settlement")
    assert settlement_key.load(home) is None
    addr = settlement_key.create(home)
    assert settlement_key.address(home) == addr
    with pytest.raises(FileExistsError):
        settlement_key.create(home)


def test_invalid_half_written_client_config_keeps_the_old_one(home: Path) -> None:
    assert run("config", "set", "output", "json", "--home", str(home)).returncode == 0
    before = (home / "config" / "client.toml").read_text()
    _kill_mid_write(home, "config")
    assert (home / "config" / "client.toml").read_text() == before
    r = run("config", "get", "--home", str(home), "-o", "json")
    assert r.returncode == 0 and json.loads(r.stdout) == {"output": "json"}


def test_concurrent_config_set_keeps_every_key(home: Path) -> None:
    sets = [("node", "http://127.0.0.1:5"), ("chain-id", "c1"), ("output", "json")]
    for _ in range(2):
        with ThreadPoolExecutor(3) as ex:
            results = list(ex.map(lambda kv: run("config", "set", *kv, "--home", str(home)), sets))
        assert all(r.returncode == 0 for r in results), [r.stderr for r in results]
        r = run("config", "get", "--home", str(home), "-o", "json")
        assert json.loads(r.stdout) == {
            "node": "http://127.0.0.1:5",
            "chain-id": "c1",
            "output": "json",
        }
        (home / "config" / "client.toml").unlink()


def test_concurrent_keys_add_of_one_name_makes_one_key(home: Path) -> None:
    with ThreadPoolExecutor(3) as ex:
        results = list(
            ex.map(
                lambda _: run("keys", "add", "same", "--home", str(home), "-o", "json"), range(3)
            )
        )
    won = [json.loads(r.stdout)["address"] for r in results if r.returncode == 0]
    lost = [r for r in results if r.returncode != 0]
    assert len(won) == 1, [r.stdout + r.stderr for r in results]
    assert all("already exists" in json.loads(r.stdout)["error"] for r in lost)
    assert json.loads((home / "keyring" / "same.json").read_text())["address"] == won[0]


def test_keys_list_skips_files_that_are_not_keys(home: Path) -> None:
    assert run("keys", "add", "good", "--home", str(home)).returncode == 0
    (home / "keyring" / "notes 2.json").write_text("{}")
    (home / "keyring" / "folder.json").mkdir()
    (home / "keyring" / ".good.json.x1.tmp").write_text("{")  # a writer's leftover temp file
    r = run("keys", "list", "--home", str(home), "-o", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert [k["name"] for k in json.loads(r.stdout)] == ["good"]


def test_invalid_config_path_that_is_a_folder_is_named(home: Path) -> None:
    (home / "config" / "client.toml").mkdir()
    r = run("config", "set", "output", "json", "--home", str(home))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip() == f"error: Is a directory: {home / 'config' / 'client.toml'}"
    assert not list((home / "config").glob("*.tmp"))  # no temp file left


def test_invalid_half_written_deployment_keeps_the_old_one(home: Path) -> None:
    from node.evm.client import Deployment

    old = Deployment(1, "old", "0xa", "0xb", "0xc", 0, 0)
    old.save(home / "deployment.json")
    _kill_mid_write(home, "deployment")
    assert Deployment.load(home / "deployment.json") == old


@pytest.mark.parametrize(
    "body",
    [
        '{"version": 1',
        "[]",
        '{"version": 1, "nodes": [{"name": "x"}]}',
        '{"version": 1, "nodes": [], "workers": [{"name": "p"}]}',
    ],
)
def test_invalid_testnet_manifest_is_one_line_and_purgeable(tmp_path: Path, body: str) -> None:
    """A half-written or hand-edited testnet.json was a JSONDecodeError / AttributeError /
    TypeError traceback from every testnet command; now one line naming `down --purge`, which
    removes the folder."""
    d = tmp_path / "net"
    d.mkdir()
    (d / "testnet.json").write_text(body)
    for args in (("status", "-o", "json"), ("up", "-o", "json"), ("logs", "node0"), ("stop", "x")):
        r = run("testnet", *args, "--dir", str(d))
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        err = json.loads(r.stdout)["error"] if "json" in args else r.stderr
        assert "is not a testnet manifest" in err and "down --purge" in err, err
    r = run("testnet", "down", "--purge", "--dir", str(d))
    assert r.returncode == 0 and not d.exists(), r.stderr


def test_invalid_unreadable_keyring_is_named_not_empty(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`keys list` on a keyring the user cannot read said "no keys" (Path.glob swallows
    PermissionError); it names the folder and the fix. (Root reads everything, so the denial is
    injected where the folder is listed.)"""
    import os

    from node.client.keys import KeyError_, Keyring

    ring = Keyring(home)
    ring.add("a")
    real = os.scandir

    def denied(path: Any) -> Any:
        if Path(str(path)) == ring.dir:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", denied)
    with pytest.raises(KeyError_, match="cannot read the keyring .*Permission denied"):
        ring.list()
    monkeypatch.undo()
    assert ring.names() == ["a"]


def test_invalid_half_copied_output_never_carries_its_name(home: Path) -> None:
    """`blob get --to FILE` copied in place and `tx sign --output-document` wrote in place: a
    kill -9 mid-copy left part of the blob (or of the signed tx) under the name asked for."""
    (home / "src.bin").write_bytes(b"x" * (3 << 20))
    _kill_mid_write(home, "copy")
    assert not (home / "out.bin").exists()
    from node.atomic import copy_atomic

    copy_atomic(home / "src.bin", home / "out.bin")
    assert (home / "out.bin").read_bytes() == (home / "src.bin").read_bytes()
    with pytest.raises(FileNotFoundError) as e:
        copy_atomic(home / "src.bin", home / "missing" / "out.bin")
    assert e.value.filename == str(home / "missing" / "out.bin")  # not the temp file's name


def test_invalid_client_toml_nested_deep_is_one_line(home: Path) -> None:
    """tomllib raises RecursionError (not TOMLDecodeError) for `x = [[[[...`: a traceback from
    every command reading the client config."""
    (home / "config" / "client.toml").write_text("x = " + "[" * 3000)
    r = run("config", "get", "--home", str(home))
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "client.toml" in r.stderr and "fix it or remove it" in r.stderr
