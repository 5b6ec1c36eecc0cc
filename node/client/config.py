"""The client config in a node home, ``HOME/config/client.toml`` (as ``client.toml`` in a Cosmos
SDK home): defaults for the flags of commands that talk to a node.

    node = "http://127.0.0.1:26657"   # --node
    chain-id = "loconet-local"        # --chain-id (checked against the node; used offline)
    output = "text"                   # -o/--output

``loconet config set KEY VALUE --home HOME`` writes it, ``loconet config get [KEY] --home HOME``
reads it. Where a command gets its node address when ``--node`` is absent, first to last:
``node`` in the client config, the RPC address in the home's ``config/config.toml`` (the
address ``loconet start`` listens on), node0 of a testnet folder (``testnet.json``), then
``http://127.0.0.1:26657``.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from node.atomic import locked, write_atomic
from node.client.rpc import NodeUnreachable, normalize_url
from node.errors import UsageError

KEYS = ("node", "chain-id", "output")
DEFAULT_NODE = "http://127.0.0.1:26657"


def path_of(home: Path) -> Path:
    return Path(home) / "config" / "client.toml"


def load(home: Path | str | None) -> dict[str, str]:
    """The client config of ``home`` ({} when there is none)."""
    if not home:
        return {}
    p = path_of(Path(home))
    if not p.is_file():
        return {}
    try:
        data = tomllib.loads(p.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError) as e:
        raise UsageError(f"cannot read {p}: {e}; fix it or remove it") from None
    return {k: str(v) for k, v in data.items() if k in KEYS}


def check_value(key: str, value: str) -> str:
    """The value to store for ``key``, or UsageError naming the accepted values."""
    if key not in KEYS:
        raise UsageError(f"unknown client config key {key!r}: use one of {', '.join(KEYS)}")
    if key == "node":
        try:
            return normalize_url(value)
        except NodeUnreachable as e:
            raise UsageError(str(e)) from None
    if key == "output" and value not in ("text", "json"):
        raise UsageError(f"output must be text or json, not {value!r}")
    if key == "chain-id" and (not value or any(c.isspace() or c == '"' for c in value)):
        raise UsageError(f"bad chain id {value!r}: no spaces or quotes")
    return value


def set_value(home: Path, key: str, value: str) -> dict[str, str]:
    home = Path(home)
    if not home.is_dir():
        raise UsageError(
            f"{home} does not exist: create a home with `loconet init --home {home}` first"
        )
    checked = check_value(key, value)
    p = path_of(home)
    p.parent.mkdir(parents=True, exist_ok=True)
    # read-modify-write under a lock (two `config set` at once keep both keys), written to a
    # private temp file renamed into place (a kill -9 leaves the old file or the new one)
    with locked(p):
        cfg = load(home)
        cfg[key] = checked
        body = (
            "# loconet client config: defaults for --node, --chain-id and -o (loconet config set "
            "KEY VALUE)\n"
        )
        body += "".join(f"{k} = {json.dumps(cfg[k])}\n" for k in KEYS if k in cfg)
        write_atomic(p, body)
    return cfg


def node_from_home(home: Path | str | None) -> str | None:
    """The RPC address of the node whose home this is (client config, config.toml, testnet.json)."""
    if not home:
        return None
    home = Path(home)
    cfg = load(home)
    if cfg.get("node"):
        return cfg["node"]
    ctoml = home / "config" / "config.toml"
    if ctoml.is_file():
        try:
            laddr = str(tomllib.loads(ctoml.read_text())["rpc"]["laddr"])
        except (OSError, KeyError, TypeError, ValueError, RecursionError):  # TOMLDecodeError too
            return None
        hostport = laddr.split("://", 1)[-1]
        host, _, port = hostport.rpartition(":")
        if host in ("0.0.0.0", "", "[::]"):
            host = "127.0.0.1"
        return f"http://{host}:{port}"
    manifest = home / "testnet.json"
    if manifest.is_file():
        try:
            nodes: list[dict[str, Any]] = json.loads(manifest.read_text())["nodes"]
            return f"http://127.0.0.1:{int(nodes[0]['rpc'])}"
        except (OSError, ValueError, KeyError, IndexError, TypeError):
            return None
    return None
