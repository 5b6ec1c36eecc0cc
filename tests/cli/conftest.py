"""Every CLI test runs with ``$LOCONET_HOME`` naming a folder that does not exist: a command
given no --home (the default home, node/cli/main.py ``default_home``) never reads or writes the real
``~/.loconet``. Subprocesses inherit it."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _no_real_default_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCONET_HOME", str(tmp_path / "no-default-home"))
