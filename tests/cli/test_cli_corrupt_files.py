"""Corrupt files in a home (red-team regressions): a key file that is not JSON (or holds no
32-byte seed) and an app.toml that is not TOML or has a mistyped value raised JSONDecodeError /
TOMLDecodeError tracebacks; each is now one line naming the file and the fix, exit 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clikit import run


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    h = tmp_path_factory.mktemp("corrupt") / "home"
    r = run("init", "--home", str(h), "--chain-id", "t", "--moniker", "m")
    assert r.returncode == 0, r.stderr
    return h


@pytest.mark.parametrize("body", ["{not json", '{"seed": "abcd"}', '{"seed": 5}', "[]"])
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


@pytest.mark.parametrize("extra", ["x = [", 'keep_recent = "many"\n'])
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
