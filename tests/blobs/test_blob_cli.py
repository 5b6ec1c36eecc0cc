"""`loconet blob put|get|ls|gc|pin` end to end (in process, against the real server on loopback)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from node.blobs import BlobServer, BlobStore
from node.cli.main import main
from tests.kits.blobkit import sha


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    o = capsys.readouterr()
    return rc, o.out, o.err


def test_put_ls_gc_pin(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = str(tmp_path / "home")
    f = tmp_path / "model.bin"
    f.write_bytes(os.urandom(5000))
    rc, h, _ = run(
        capsys, "blob", "put", str(f), "--home", home, "--tier", "temp", "--round", "job1/r0"
    )
    assert rc == 0 and h.strip() == sha(f.read_bytes())
    h = h.strip()
    rc, o, _ = run(capsys, "blob", "ls", "--home", home, "-o", "json")
    listing = json.loads(o)
    assert listing["count"] == 1 and listing["used_bytes"] == 5000
    assert listing["blobs"][0]["tier"] == "temp" and listing["blobs"][0]["rounds"] == ["job1/r0"]
    rc, o, _ = run(capsys, "blob", "pin", h, "--home", home, "-o", "json")
    assert rc == 0 and json.loads(o)["pinned"] is True
    rc, o, _ = run(capsys, "blob", "gc", "--home", home, "--verify", "-o", "json")
    rep = json.loads(o)
    assert rc == 0 and rep["count"] == 1 and rep["corrupt_removed"] == []
    rc, o, _ = run(capsys, "blob", "ls", "--home", home)
    assert h in o and "cold" in o and "1 blob(s)" in o


def test_get_from_a_peer_verifies_and_copies(
    served: tuple[BlobStore, BlobServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, server = served
    data = os.urandom(70_000)
    h = src.put_bytes(data)
    dest = tmp_path / "copy.bin"
    rc, o, _ = run(
        capsys,
        "blob",
        "get",
        h,
        "--source",
        "http://127.0.0.1:9",
        "--source",
        server.url,
        "--dir",
        str(tmp_path / "mine"),
        "--to",
        str(dest),
        "-o",
        "json",
    )
    got = json.loads(o)
    assert rc == 0 and got["size"] == len(data) and dest.read_bytes() == data
    assert Path(got["path"]).read_bytes() == data


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["blob", "get", "NOT-A-HASH", "--source", "http://127.0.0.1:9"], "invalid_hash"),
        (["blob", "get", "a" * 64, "--source", "http://127.0.0.1:9"], "fetch_failed"),
        (["blob", "put", "/no/such/file"], "is not a file"),
        (["blob", "pin", "b" * 64], "not_found"),
        (["blob", "gc", "--quota", "lots"], "bad size"),
    ],
)
def test_invalid_cli_input_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    (tmp_path / "h").mkdir()
    rc, o, err = run(capsys, *argv, "--home", str(tmp_path / "h"))
    assert rc == 1 and o == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0]


@pytest.mark.parametrize("cmd", ["put", "get", "ls", "gc", "pin", "serve"])
def test_help_has_an_example(cmd: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["blob", cmd, "--help"])
    assert e.value.code == 0
    assert f"example:\n  loconet blob {cmd}" in capsys.readouterr().out


def test_serve_in_the_foreground_until_interrupted(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    import httpx

    from node.paths import PROJECT_ROOT
    from node.ports import find_free_base, random_bases

    with BlobStore(tmp_path / "s", 1 << 20) as s:
        h = s.put_bytes(b"served by the CLI")
    port = find_free_base(random_bases(40_000, 45_000, 1), [0])
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "node.cli",
            "blob",
            "serve",
            "--dir",
            str(tmp_path / "s"),
            "--listen",
            f"127.0.0.1:{port}",
        ],
        cwd=PROJECT_ROOT,
        stderr=subprocess.PIPE,
        # started as a shell's `cmd &` starts it: SIGINT ignored, inherited by the child;
        # Ctrl-C must still stop the server
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/blob/{h}")
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.1)
        assert r.status_code == 200 and r.content == b"served by the CLI"
    finally:
        proc.send_signal(signal.SIGINT)
        # a generous bound: on a loaded machine the interpreter's exit alone can take seconds
        assert proc.wait(60) == 0
        assert proc.stderr is not None
        proc.stderr.close()


@pytest.mark.parametrize("cmd", [["ls"], ["gc"], ["pin", "b" * 64], ["unpin", "b" * 64], ["serve"]])
def test_invalid_home_that_does_not_exist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cmd: list[str]
) -> None:
    """`blob ls --home TYPO` created TYPO/blobs and answered "0 blob(s)": a mistyped home looked
    like an empty store. The commands that only read or serve refuse it, creating nothing."""
    home = tmp_path / "typo"
    rc, o, err = run(capsys, "blob", *cmd, "--home", str(home))
    assert rc == 1 and "is not a node home" in err and "--dir" in err, err
    assert not home.exists()


def test_invalid_damaged_metadata_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A blobs/meta.db that is not SQLite was a sqlite3.DatabaseError traceback from every blob
    command; one line naming it, and moving it away brings the blob files back (adopted)."""
    home = tmp_path / "home"
    f = tmp_path / "m.bin"
    f.write_bytes(os.urandom(3000))
    rc, h, _ = run(capsys, "blob", "put", str(f), "--home", str(home))
    assert rc == 0
    meta = home / "blobs" / "meta.db"
    for side in home.glob("blobs/meta.db*"):
        side.unlink()
    meta.write_text("garbage " * 20)
    for argv in (["ls"], ["put", str(f)], ["gc"]):
        rc, _, err = run(capsys, "blob", *argv, "--home", str(home))
        assert rc == 1 and f"metadata {meta} is damaged" in err and "mv " in err, err
    meta.rename(meta.with_suffix(".bad"))
    rc, o, _ = run(capsys, "blob", "ls", "--home", str(home), "-o", "json")
    assert rc == 0 and [b["hash"] for b in json.loads(o)["blobs"]] == [h.strip()]
