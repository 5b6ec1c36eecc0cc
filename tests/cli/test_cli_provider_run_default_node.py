"""`loconet provider run --home H --from bob` without --node: the default node address was
filled in as a string where the command expects the list `--node` (append) builds, so the worker
tried the nodes "h", "t", "t", "p", ":" ... and finally called a registered provider "not a
registered provider" (#28 item 1). A default filled into any append option is now a list of one:
the home's client config node, else its config.toml RPC address, else the built-in default."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from node.cli import main as cli
from node.client.keys import Keyring
from node.worker import worker as worker_mod


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The WorkerConfig `provider run` builds; the worker itself never starts."""
    got: list[Any] = []

    class FakeWorker:
        def __init__(self, cfg: Any) -> None:
            got.append(cfg)
            self.stop_event = None

        def run(self) -> int:
            return 0

    monkeypatch.setattr(worker_mod, "ProviderWorker", FakeWorker)
    monkeypatch.setattr(cli.signal, "signal", lambda *a: None)  # keep pytest's handlers
    return got


def _home(tmp_path: Path, name: str) -> Path:
    home = tmp_path / name
    (home / "config").mkdir(parents=True)
    Keyring(home).add("bob")
    return home


def test_provider_run_without_node_uses_the_client_config_node_as_a_list(
    tmp_path: Path, seen: list[Any]
) -> None:
    home = _home(tmp_path, "h")
    assert cli.main(["config", "set", "node", "tcp://10.1.2.3:26657", "--home", str(home)]) == 0
    assert cli.main(["provider", "run", "--home", str(home), "--from", "bob"]) == 0
    assert seen[-1].nodes == ["http://10.1.2.3:26657"]


def test_provider_run_without_node_or_client_config_uses_the_home_or_the_default(
    tmp_path: Path, seen: list[Any]
) -> None:
    bare = _home(tmp_path, "bare")
    assert cli.main(["provider", "run", "--home", str(bare), "--from", "bob"]) == 0
    assert seen[-1].nodes == [cli.DEFAULT_NODE]
    node_home = _home(tmp_path, "node")  # a node home: its config.toml says where RPC listens
    (node_home / "config" / "config.toml").write_text('[rpc]\nladdr = "tcp://0.0.0.0:31657"\n')
    assert cli.main(["provider", "run", "--home", str(node_home), "--from", "bob"]) == 0
    assert seen[-1].nodes == ["http://127.0.0.1:31657"]


def test_provider_run_without_home_or_node_uses_the_default_home(
    tmp_path: Path, seen: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _home(tmp_path, "env-home")
    monkeypatch.setenv("LOCONET_HOME", str(home))
    assert cli.main(["config", "set", "node", "10.9.9.9:1234"]) == 0
    assert cli.main(["provider", "run", "--from", "bob"]) == 0
    assert seen[-1].nodes == ["http://10.9.9.9:1234"] and seen[-1].home == home


def test_explicit_nodes_are_kept_in_order(tmp_path: Path, seen: list[Any]) -> None:
    home = _home(tmp_path, "h")
    argv = ["provider", "run", "--home", str(home), "--from", "bob"]
    assert cli.main([*argv, "--node", "http://a:1", "--node", "b:2"]) == 0
    assert seen[-1].nodes == ["http://a:1", "b:2"]


def test_every_append_option_filled_by_a_default_gets_a_list(tmp_path: Path) -> None:
    """All commands, not only `provider run`: resolve_defaults fills --node, -o and --chain-id;
    where one of them is an append option, the default is a list."""
    parser = cli.build_parser()

    def leaves(p: argparse.ArgumentParser) -> Any:
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            yield p
        for s in subs:
            for child in s.choices.values():
                yield from leaves(child)

    checked = 0
    for p in leaves(parser):
        appends = {a.dest for a in p._actions if isinstance(a, argparse._AppendAction)}
        for dest in appends & {"node", "output", "chain_id"}:
            ns = argparse.Namespace(**{dest: None}, **p._defaults)
            ns.home = str(tmp_path / "nowhere")
            cli.resolve_defaults(ns)
            assert isinstance(getattr(ns, dest), list), (p.prog, dest, getattr(ns, dest))
            checked += 1
    assert checked >= 1  # provider run --node
