"""Node home layout and configuration.

    HOME/
      config/config.toml      cometbft's config, tuned by ``tune_cometbft_config``
      config/genesis.json     chain id, validators, ``app_state`` (bank balances, staking)
      config/app.toml         loconet's own settings (ABCI address, versions kept)
      config/priv_validator_key.json, node_key.json   cometbft's keys
      data/                   cometbft's block store and state; ``data/app.db`` is loconet's store
      keyring/NAME.json       account keys (mode 0600)
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

# Settings for a node on one machine (loopback). Defaults are tuned for a LAN/WAN; on loopback
# they add hundreds of ms per block for nothing.
LOCAL_TUNING: dict[str, dict[str, str]] = {
    "": {"log_level": '"main:info,state:info,consensus:error,p2p:error,*:error"'},
    "p2p": {
        "flush_throttle_timeout": '"10ms"',  # default 100ms: batches p2p writes; needless on loopback
        "allow_duplicate_ip": "true",  # several nodes on 127.0.0.1
        "addr_book_strict": "false",  # accept private/loopback peer addresses
    },
    "consensus": {
        "timeout_propose": '"1s"',  # default 3s: how long to wait for a missing proposal
        "timeout_commit": '"500ms"',  # default 1s: the pause after each commit = the block time floor
        "peer_gossip_sleep_duration": '"10ms"',  # default 100ms: gossip loop sleep
    },
    "mempool": {"size": "20000", "cache_size": "100000"},
    "rpc": {"timeout_broadcast_tx_commit": '"30s"'},
}


def set_toml_values(text: str, values: dict[str, dict[str, str]]) -> str:
    """Set ``key = value`` lines inside ``[section]`` of a TOML text (section "" = top level).
    Keeps comments and layout; raises KeyError if a key is not found (a config template change)."""
    lines = text.splitlines()
    section = ""
    pending = {s: dict(kv) for s, kv in values.items()}
    for i, line in enumerate(lines):
        m = re.match(r"^\[([^\]]+)\]\s*$", line)
        if m:
            section = m.group(1)
            continue
        m = re.match(r"^([A-Za-z0-9_\-]+)\s*=", line)
        if m and m.group(1) in pending.get(section, {}):
            lines[i] = f"{m.group(1)} = {pending[section].pop(m.group(1))}"
    missing = [f"[{s}] {k}" for s, kv in pending.items() for k in kv]
    if missing:
        raise KeyError(f"config keys not found: {missing}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class Ports:
    p2p: int = 26656
    rpc: int = 26657
    abci: int = 26658
    metrics: int = 26660

    @classmethod
    def for_node(cls, i: int) -> Ports:
        """DESIGN §1: node i of a local testnet adds 100·i to every default port."""
        return cls(26656 + 100 * i, 26657 + 100 * i, 26658 + 100 * i, 26660 + 100 * i)


def tune_cometbft_config(home: Path, moniker: str, ports: Ports, persistent_peers: str = "") -> None:
    path = home / "config" / "config.toml"
    values = {k: dict(v) for k, v in LOCAL_TUNING.items()}
    values[""]["moniker"] = f'"{moniker}"'
    values[""]["proxy_app"] = f'"tcp://127.0.0.1:{ports.abci}"'
    values["rpc"]["laddr"] = f'"tcp://127.0.0.1:{ports.rpc}"'
    values["p2p"]["laddr"] = f'"tcp://127.0.0.1:{ports.p2p}"'
    values["p2p"]["persistent_peers"] = f'"{persistent_peers}"'
    values["instrumentation"] = {"prometheus_listen_addr": f'":{ports.metrics}"'}
    path.write_text(set_toml_values(path.read_text(), values))


@dataclass(frozen=True, slots=True)
class AppConfig:
    abci_address: str = "tcp://127.0.0.1:26658"
    keep_recent: int = 1000  # committed versions kept for queries at past heights
    check_invariants: bool = False

    def to_toml(self) -> str:
        return (
            "# loconet application settings\n"
            f'abci_address = "{self.abci_address}"\n'
            "# committed state versions kept for `query --height` (older ones are pruned)\n"
            f"keep_recent = {self.keep_recent}\n"
            "# check every module invariant after each block (slow; for debugging)\n"
            f"check_invariants = {'true' if self.check_invariants else 'false'}\n"
        )

    @classmethod
    def load(cls, home: Path) -> AppConfig:
        data = tomllib.loads((home / "config" / "app.toml").read_text())
        return cls(
            abci_address=str(data.get("abci_address", "tcp://127.0.0.1:26658")),
            keep_recent=int(data.get("keep_recent", 1000)),
            check_invariants=bool(data.get("check_invariants", False)),
        )


def cometbft_rpc_url(home: Path) -> str:
    data = tomllib.loads((home / "config" / "config.toml").read_text())
    return "http://" + data["rpc"]["laddr"].removeprefix("tcp://")
