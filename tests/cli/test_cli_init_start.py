"""``loconet init`` and ``loconet start`` against hostile arguments and half-made homes
(red-team regressions).

Found: ``init --moniker 'a"b'`` (or a newline) wrote a config.toml that is not TOML, and
``start`` died in a TOMLDecodeError traceback; ``init --chain-id ''`` (or 51 characters) made a
home whose cometbft refuses to start; ``--abci-address garbage`` / ``tcp://...:99999`` gave
ValueError / OverflowError tracebacks at start; a broken config.toml was a traceback; a kill -9
mid-init left cometbft's own genesis, and the rerun said "already initialized"; when cometbft
exited, start said only "see the log"; two ``start``/``abci`` on one home were not refused (the
second opened the same store and unlinked the first one's ABCI socket)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from node.local.config import Ports, tune_cometbft_config
from node.local.supervisor import cometbft_failure, lock_home
from tests.kits.clikit import ROOT, run
from tests.kits.nodekit import free_port_base


@pytest.mark.parametrize(
    "flags,says",
    [
        (("--moniker", "line1\nline2"), "bad --moniker"),
        (("--moniker", ""), "bad --moniker"),
        (("--moniker", "m" * 65), "bad --moniker"),
        (("--chain-id", ""), "bad --chain-id"),
        (("--chain-id", "c" * 51), "bad --chain-id"),
        (("--chain-id", "a b"), "bad --chain-id"),
        (("--chain-id", 'a"b'), "bad --chain-id"),
        (("--chain-id", "caf\u00e9"), "bad --chain-id"),
        (("--abci-address", "garbage"), "bad --abci-address"),
        (("--abci-address", "tcp://127.0.0.1:99999"), "bad --abci-address"),
        (("--abci-address", "tcp://:26658"), "bad --abci-address"),
        (("--abci-address", "unix://"), "bad --abci-address"),
    ],
)
def test_invalid_init_arguments_write_nothing(tmp_path: Path, flags, says: str) -> None:
    home = tmp_path / "home"
    r = run("init", "--home", str(home), *flags, "-o", "json")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert json.loads(r.stdout)["error"].startswith(says)
    assert not home.exists()


def test_moniker_with_quotes_is_escaped_in_config_toml(tmp_path: Path) -> None:
    home = tmp_path / "home"
    r = run("init", "--home", str(home), "--moniker", 'a"b\\c \u00e9')
    assert r.returncode == 0, r.stderr
    cfg = tomllib.loads((home / "config" / "config.toml").read_text())
    assert cfg["moniker"] == 'a"b\\c \u00e9'
    genesis = json.loads((home / "config" / "genesis.json").read_text())
    assert genesis["app_state"]["staking"]["validators"][0]["moniker"] == 'a"b\\c \u00e9'


_FREEZE_GENESIS = """
import sys, time
from pathlib import Path
import node.local.init as init
real = init.write_atomic
def frozen(path, data, mode=0o644):
    if Path(path).name == "genesis.json":
        print("writing", flush=True)
        time.sleep(600)
    real(path, data, mode)
init.write_atomic = frozen
init.init_home(Path(sys.argv[1]))
"""


def test_invalid_init_killed_midway_is_named_on_rerun(tmp_path: Path) -> None:
    home = tmp_path / "home"
    p = subprocess.Popen(
        [sys.executable, "-c", _FREEZE_GENESIS, str(home)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout is not None and p.stdout.readline().strip() == "writing"
    p.send_signal(signal.SIGKILL)
    p.wait(10)
    assert "app_state" not in json.loads((home / "config" / "genesis.json").read_text())
    r = run("init", "--home", str(home))
    assert r.returncode == 1 and "unfinished init" in r.stderr and "rm -r" in r.stderr, r.stderr
    # start says the same, before cometbft runs (it halted at InitChain with "staking genesis
    # bonds no validator", which did not point at the interrupted init)
    r = run("start", "--home", str(home))
    assert r.returncode == 1 and "unfinished init" in r.stderr and "rm -r" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    h = tmp_path_factory.mktemp("start") / "home"
    assert run("init", "--home", str(h)).returncode == 0
    base = free_port_base()
    tune_cometbft_config(h, "m", Ports(base, base + 1, base + 2, base + 3))
    return h


@pytest.mark.parametrize(
    "edit",
    [
        lambda t: t + "\nx = [\n",
        lambda t: t.replace('laddr = "tcp://127.0.0.1:', 'laddr = "unix:///tmp/x.sock#', 1),
        lambda t: t.replace("[rpc]", "[rpc_renamed]", 1),
        lambda t: t + "\nx = " + "[" * 3000,  # RecursionError from tomllib
    ],
    ids=["not-toml", "no-port", "no-rpc-section", "deep"],
)
def test_invalid_config_toml_is_one_line_at_start(home: Path, edit) -> None:
    path = home / "config" / "config.toml"
    good = path.read_text()
    path.write_text(edit(good))
    try:
        r = run("start", "--home", str(home), timeout=30)
    finally:
        path.write_text(good)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith(f"error: {path} is not a usable cometbft config"), r.stderr


def test_invalid_abci_address_in_app_toml_is_one_line(home: Path) -> None:
    path = home / "config" / "app.toml"
    good = path.read_text()
    path.write_text(good.replace('abci_address = "unix://data/abci.sock"', 'abci_address = "x"'))
    try:
        for cmd in ("start", "abci"):
            r = run(cmd, "--home", str(home), timeout=30)
            assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
            assert "abci_address 'x' is not unix://PATH" in r.stderr
    finally:
        path.write_text(good)
    r = run("abci", "--home", str(home), "--address", "tcp://127.0.0.1:70000", timeout=30)
    assert r.returncode == 1 and "bad --address" in r.stderr and "Traceback" not in r.stderr


_HOLD = """
import sys, time
from pathlib import Path
from node.local.supervisor import lock_home
lock_home(Path(sys.argv[1]))
print("held", flush=True)
time.sleep(600)
"""


def test_invalid_second_node_on_one_home(home: Path) -> None:
    p = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(home)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "held"
        for cmd in ("start", "abci"):
            r = run(cmd, "--home", str(home), timeout=30)
            assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
            assert f"another loconet node (pid {p.pid}) runs on" in r.stderr, r.stderr
        assert not (home / "data" / "abci.sock").exists()  # never bound, never unlinked
    finally:
        p.send_signal(signal.SIGKILL)  # the kernel drops the lock with the process
        p.wait(10)
    os.close(lock_home(home))  # free again


def test_cometbft_failure_reason_is_read_from_its_log(tmp_path: Path) -> None:
    log = tmp_path / "cometbft.log"
    old = "ERROR: failed to create node: an old run's failure\n"
    log.write_text(old)
    start = log.stat().st_size
    with log.open("a") as f:
        f.write("I[2026] starting\nE[2026] consensus connection terminated\n")
        f.write("ERROR: failed to create node: genesis doc must include non-empty chain_id\n")
    assert cometbft_failure(log, start) == (
        "failed to create node: genesis doc must include non-empty chain_id"
    )
    log.write_text(old + "E[2026] something broke\n")
    assert cometbft_failure(log, len(old)) == "E[2026] something broke"
    assert cometbft_failure(log, log.stat().st_size) == ""
    assert cometbft_failure(tmp_path / "missing.log", 0) == ""


@pytest.mark.integration
def test_start_says_why_cometbft_exited(tmp_path: Path) -> None:
    h = tmp_path / "home"
    assert run("init", "--home", str(h)).returncode == 0
    base = free_port_base()
    tune_cometbft_config(h, "m", Ports(base, base + 1, base + 2, base + 3))
    gpath = h / "config" / "genesis.json"
    g = json.loads(gpath.read_text())
    g["chain_id"] = ""  # cometbft refuses it when it starts
    gpath.write_text(json.dumps(g))
    r = run("start", "--home", str(h), "--no-log-console", timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "cometbft exited with status 1: failed to create node" in r.stderr
    assert "non-empty chain_id" in r.stderr


def test_concurrent_inits_of_one_home_make_one_consistent_home(tmp_path: Path) -> None:
    """Two `init` of one home at once interleaved: one wrote config.toml with its moniker, the
    other the genesis with its own; now one creates it, the other is refused (naming the
    running one, or the finished home)."""
    from concurrent.futures import ThreadPoolExecutor

    home = tmp_path / "home"
    with ThreadPoolExecutor(3) as ex:
        rs = list(
            ex.map(
                lambda m: run("init", "--home", str(home), "--moniker", m, "-o", "json"),
                ["m0", "m1", "m2"],
            )
        )
    won = [r for r in rs if r.returncode == 0]
    assert len(won) == 1, [r.stdout + r.stderr for r in rs]
    for r in rs:
        if r.returncode != 0:
            err = json.loads(r.stdout)["error"]
            assert "another `loconet init`" in err or "already initialized" in err, err
    moniker = json.loads(won[0].stdout)["moniker"]
    genesis = json.loads((home / "config" / "genesis.json").read_text())
    key = json.loads((home / "keyring" / "validator.json").read_text())
    assert tomllib.loads((home / "config" / "config.toml").read_text())["moniker"] == moniker
    assert genesis["validators"][0]["name"] == moniker
    assert genesis["app_state"]["bank"]["balances"][0]["address"] == key["address"]
    assert not (home / ".init.lock").exists()
