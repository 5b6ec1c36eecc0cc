"""loconet's EVM settlement contracts (Solidity sources in contracts/src, README.md beside).

``make setup`` compiles them with the solc pinned in contracts/package.json into
contracts/build/NAME.json ({"abi", "bytecode", "solc"}); ``artifact(NAME)`` loads one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BUILD = HERE / "build"
ANVIL = HERE / "node_modules" / "@foundry-rs" / "anvil-linux-amd64" / "bin" / "anvil"
NAMES = ("Checkpoints", "LocoToken", "RewardsDistributor")


class MissingArtifact(RuntimeError):
    pass


def artifact(name: str) -> dict[str, Any]:
    path = BUILD / f"{name}.json"
    if not path.is_file():
        raise MissingArtifact(
            f"{path} is missing: run `make setup` (it compiles contracts/src with solc from npm)"
        )
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def anvil_path() -> Path:
    if not ANVIL.is_file():
        raise MissingArtifact(
            f"{ANVIL} is missing: run `make setup` (it installs anvil from npm into contracts/)"
        )
    return ANVIL
