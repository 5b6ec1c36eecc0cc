"""`tx job create --spec FILE` reads whole numbers strictly (attacker-review regression): a
list where an object belongs (``"model": [1]``) and ``1e999`` were tracebacks, and ``true``,
``10.99`` and non-ASCII digits were read as 1, 10 and 12, so the owner signed other numbers
than the file held. Each is now one line naming the field; a well-typed spec still builds."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.kits.clikit import offline, run

H = "ab" * 32
BASE = {
    "rounds": 1,
    "reward_per_round": 1_000_000,
    "inner_steps": 960,
    "trace_interval": 1,
    "participants_per_round": 1,
    "num_shards": 2,
    "tokens_per_step": 1024,
    "initial_model_hash": H,
    "dataset_id": H,
}


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    h = tmp_path_factory.mktemp("spec") / "home"
    assert run("init", "--home", str(h), "--chain-id", "c").returncode == 0
    return h


def _create(home: Path, tmp: Path, text: str) -> subprocess.CompletedProcess[str]:
    f = tmp / "spec.json"
    f.write_text(text)
    return run(*offline(home, "tx", "job", "create", "--spec", str(f), "--from", "validator"))


def test_a_well_typed_spec_builds(home: Path, tmp_path: Path) -> None:
    r = _create(home, tmp_path, json.dumps(BASE | {"rounds": "3"}))
    assert r.returncode == 0, r.stderr
    (msg,) = json.loads(r.stdout)["messages"]
    assert int(msg["create_job"]["rounds"]) == 3


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ('"model": [1]', "model"),
        ('"compression_params": [1]', "compression_params"),
        ('"rounds": 1e999', "rounds"),
        ('"rounds": true', "rounds"),
        ('"reward_per_round": 10.99', "reward_per_round"),
        ('"inner_steps": 40.7', "inner_steps"),
        ('"rounds": "\\u0661\\u0662"', "rounds"),
        ('"model": {"n_layers": 2.5}', "model.n_layers"),
    ],
)
def test_wrong_types_are_one_line_errors(
    home: Path, tmp_path: Path, extra: str, field: str
) -> None:
    text = json.dumps(BASE)[:-1] + ", " + extra + "}"
    r = _create(home, tmp_path, text)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-800:]
    assert len(r.stderr.strip().splitlines()) == 1 and field in r.stderr, r.stderr
