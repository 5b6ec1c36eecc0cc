"""A typo'd --home was "no key named 'validator' in HOME/keyring (known: none); add it with
`loconet keys add`" (and `keys list` printed "no keys", exit 0): it now names the missing home
and the fix (new-user review regression)."""

from __future__ import annotations

import json

import pytest

from tests.kits.clikit import run


@pytest.mark.parametrize(
    "args",
    [
        ("keys", "show", "validator"),
        ("keys", "list"),
        (
            "tx",
            "bank",
            "send",
            "loco1fx9yx4cdc0p7e5vx5h2m66dfpanv527l2aavz3",
            "1loco",
            "--from",
            "validator",
            "--yes",
            "--node",
            "http://127.0.0.1:1",
        ),
    ],
)
def test_invalid_missing_home_is_named(tmp_path, args: tuple[str, ...]) -> None:
    home = tmp_path / "typo"
    r = run(*args, "--home", str(home))
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"{home} does not exist: check --home" in r.stderr, r.stderr
    assert "loconet keys add" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not home.exists()
    j = run(*args, "--home", str(home), "-o", "json")
    assert j.returncode == 1 and "check --home" in json.loads(j.stdout)["error"]
