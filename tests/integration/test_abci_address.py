"""The ABCI connection defaults to a Unix socket in the node home (issue 12, item 0): only the
node's own user can open it; TCP only when asked for."""

from __future__ import annotations

import asyncio
import os
import stat
import tomllib
from pathlib import Path

from abci_app.app import Application
from abci_app.server import ABCIServer
from abci_app.store import MerkleStore
from node.local.config import AppConfig, resolve_abci_address
from node.local.init import init_home


def test_init_defaults_to_a_private_unix_socket(tmp_path: Path) -> None:
    home = tmp_path / "home"
    init_home(home, chain_id="t")
    cfg = AppConfig.load(home)
    assert cfg.abci_address == f"unix://{home.resolve()}/data/abci.sock"
    proxy = tomllib.loads((home / "config" / "config.toml").read_text())["proxy_app"]
    assert proxy == cfg.abci_address  # cometbft dials what the app listens on
    assert stat.S_IMODE((home / "data").stat().st_mode) == 0o700

    async def listen() -> int:
        srv = ABCIServer(Application(MerkleStore(None)), cfg.abci_address)
        await srv.start()
        mode = stat.S_IMODE(os.stat(cfg.abci_address.removeprefix("unix://")).st_mode)
        await srv.stop()
        return mode

    assert asyncio.run(listen()) == 0o600


def test_tcp_only_on_request(tmp_path: Path) -> None:
    home = tmp_path / "home"
    init_home(home, chain_id="t", abci_address="tcp://127.0.0.1:26658")
    assert AppConfig.load(home).abci_address == "tcp://127.0.0.1:26658"
    assert (
        tomllib.loads((home / "config" / "config.toml").read_text())["proxy_app"]
        == "tcp://127.0.0.1:26658"
    )


def test_socket_path_too_long_for_sun_path_moves_to_tmp(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 120)
    a = resolve_abci_address(deep, "unix://data/abci.sock")
    path = a.removeprefix("unix://")
    assert len(path.encode()) <= 100 and path.startswith(f"/tmp/loconet-{os.getuid()}/")
    # stable: same home, same socket
    assert a == resolve_abci_address(deep, "unix://data/abci.sock")
    assert a != resolve_abci_address(tmp_path / ("e" * 120), "unix://data/abci.sock")
