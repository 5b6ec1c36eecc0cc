"""Node home layout and configuration.

    HOME/
      config/config.toml      cometbft's config, tuned by ``tune_cometbft_config``
      config/genesis.json     chain id, validators, ``app_state`` (bank balances, staking)
      config/app.toml         loconet's own settings (ABCI address, versions kept)
      config/priv_validator_key.json, node_key.json   cometbft's keys
      data/                   cometbft's block store and state; ``data/app.db`` is loconet's store
      data/abci.sock          the ABCI socket between cometbft and the app (data/ is mode 0700)
      keyring/NAME.json       account keys (mode 0600)

The ABCI connection is a Unix socket in the home by default: only the node's own user can open
it, so no other process can send the app a Commit or a FinalizeBlock (an ABCI connection is
trusted with the state machine). ``abci_address`` in app.toml may name another socket
(``unix://PATH``, relative to the home) or TCP (``tcp://127.0.0.1:26658``) when cometbft runs
elsewhere; ``loconet start`` passes the resolved address to cometbft as ``--proxy_app``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from abci_app.snapshots import Snapshotter
from abci_app.vote_extensions import ExtensionKeys
from node.atomic import write_atomic
from node.client import settlement_key
from node.errors import UsageError

if TYPE_CHECKING:
    from abci_app.app import Application
    from abci_app.store import MerkleStore

DEFAULT_ABCI_ADDRESS = "unix://data/abci.sock"
_MAX_UNIX_PATH = 100  # sun_path holds 108 bytes on Linux, 104 on macOS


def resolve_abci_address(home: Path, address: str) -> str:
    """``unix://REL`` -> ``unix:///abs/home/REL``; a path too long for a Unix socket becomes
    ``/tmp/loconet-UID/<hash of the path>.sock`` (same home, same socket). TCP is returned as is."""
    if not address.startswith("unix://"):
        return address
    path = Path(address.removeprefix("unix://"))
    if not path.is_absolute():
        path = Path(home).resolve() / path
    if len(str(path).encode()) > _MAX_UNIX_PATH:
        digest = hashlib.sha256(str(path).encode()).hexdigest()[:16]
        path = Path(f"/tmp/loconet-{os.getuid()}/{digest}.sock")
    return f"unix://{path}"


def abci_address_problem(address: str) -> str | None:
    """None if ``address`` is ``unix://PATH`` or ``tcp://HOST:PORT`` with a port 1..65535, else
    what is wrong with it, naming both forms."""
    if address.startswith("unix://") and len(address) > len("unix://"):
        return None
    host, sep, port = address.removeprefix("tcp://").rpartition(":")
    if (
        address.startswith("tcp://")
        and sep
        and host
        and port.isascii()
        and port.isdigit()
        and 0 < int(port[:6]) < 65536
    ):
        return None
    return (
        f"{address[:80]!r} is not unix://PATH (relative to the home) or tcp://HOST:PORT "
        "(e.g. tcp://127.0.0.1:26658, a port 1..65535)"
    )


# Settings for a node on one machine (loopback). Defaults are tuned for a LAN/WAN; on loopback
# they add hundreds of ms per block for nothing.
LOCAL_TUNING: dict[str, dict[str, str]] = {
    "": {"log_level": '"main:info,state:info,consensus:error,p2p:error,*:error"'},
    "p2p": {
        # default 100ms: batches p2p writes; needless on loopback
        "flush_throttle_timeout": '"10ms"',
        "allow_duplicate_ip": "true",  # several nodes on 127.0.0.1
        "addr_book_strict": "false",  # accept private/loopback peer addresses
    },
    "consensus": {
        "timeout_propose": '"1s"',  # default 3s: how long to wait for a missing proposal
        # default 1s: the pause after each commit = the block time floor
        "timeout_commit": '"500ms"',
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


def metrics_listen_addr(port: int) -> str:
    """CometBFT's ``prometheus_listen_addr`` as init writes it: loopback only."""
    return f"127.0.0.1:{port}"


@dataclass(frozen=True, slots=True)
class Ports:
    p2p: int = 26656
    rpc: int = 26657
    abci: int = 26658
    metrics: int = 26660

    @classmethod
    def for_node(cls, i: int) -> Ports:
        """docs/design.md §1: node i of a local testnet adds 100·i to every default port."""
        return cls(26656 + 100 * i, 26657 + 100 * i, 26658 + 100 * i, 26660 + 100 * i)


def tune_cometbft_config(
    home: Path,
    moniker: str,
    ports: Ports,
    persistent_peers: str = "",
    abci_address: str = DEFAULT_ABCI_ADDRESS,
) -> None:
    path = home / "config" / "config.toml"
    values = {k: dict(v) for k, v in LOCAL_TUNING.items()}
    values[""]["moniker"] = json.dumps(moniker)  # a TOML basic string: quotes escaped
    values[""]["proxy_app"] = f'"{resolve_abci_address(home, abci_address)}"'
    values["rpc"]["laddr"] = f'"tcp://127.0.0.1:{ports.rpc}"'
    values["p2p"]["laddr"] = f'"tcp://127.0.0.1:{ports.p2p}"'
    values["p2p"]["persistent_peers"] = f'"{persistent_peers}"'
    # CometBFT's own Prometheus metrics (consensus, p2p, mempool) at 127.0.0.1:metrics/metrics,
    # loopback like the RPC (":PORT" listened on every interface); an operator who scrapes from
    # another host sets prometheus_listen_addr = "0.0.0.0:PORT" in config.toml, as for [rpc]
    # laddr (no flag: one place for every listen address). The app's metrics are one port up
    # (AppConfig.metrics_listen, node/metrics.py)
    values["instrumentation"] = {
        "prometheus": "true",
        "prometheus_listen_addr": f'"{metrics_listen_addr(ports.metrics)}"',
    }
    write_atomic(path, set_toml_values(path.read_text(), values))


@dataclass(frozen=True, slots=True)
class AppConfig:
    abci_address: str = DEFAULT_ABCI_ADDRESS
    keep_recent: int = 1000  # committed versions kept for queries at past heights
    check_invariants: bool = False
    snapshot_interval: int = 0  # state-sync snapshot every N committed heights (0: none)
    snapshot_keep: int = 2  # snapshots kept on disk
    snapshot_chunk_bytes: int = 1 << 20  # nodes with the same value serve the same snapshot
    metrics_address: str | None = None  # app /metrics; None: CometBFT's metrics port + 1; "": off

    def metrics_listen(self, home: Path) -> str:
        """HOST:PORT of the app's /metrics ("" = off): ``metrics_address`` in app.toml, else one
        port above CometBFT's ``prometheus_listen_addr`` on 127.0.0.1 (26661 + 100·i in a
        testnet)."""
        if self.metrics_address is not None:
            return self.metrics_address
        try:
            ctoml = tomllib.loads((home / "config" / "config.toml").read_text())
            port = int(str(ctoml["instrumentation"]["prometheus_listen_addr"]).rsplit(":", 1)[1])
        except (OSError, KeyError, TypeError, ValueError, IndexError, RecursionError):
            port = Ports().metrics
        return f"127.0.0.1:{port + 1}"

    def to_toml(self) -> str:
        return (
            "# loconet application settings\n"
            "# ABCI listen address: unix://PATH (relative to the home) or tcp://HOST:PORT\n"
            f'abci_address = "{self.abci_address}"\n'
            "# committed state versions kept for `query --height` (older ones are pruned)\n"
            f"keep_recent = {self.keep_recent}\n"
            "# check every module invariant after each block (slow; for debugging)\n"
            f"check_invariants = {'true' if self.check_invariants else 'false'}\n"
            "# state-sync snapshots of the committed state every N heights (0: none), written in\n"
            "# the background to data/snapshots/; new nodes join from them (`[statesync]` in "
            "config.toml)\n"
            f"snapshot_interval = {self.snapshot_interval}\n"
            f"snapshot_keep = {self.snapshot_keep}\n"
            "# chunk size; peers with the same value serve the same snapshot\n"
            f"snapshot_chunk_bytes = {self.snapshot_chunk_bytes}\n"
            "# the app's Prometheus /metrics (node/metrics.py): HOST:PORT, "
            '"" for none; default one port\n'
            "# above CometBFT's prometheus_listen_addr in config.toml, on 127.0.0.1\n"
            + (
                f'metrics_address = "{self.metrics_address}"\n'
                if self.metrics_address is not None
                else '# metrics_address = "127.0.0.1:26661"\n'
            )
        )

    @classmethod
    def load(cls, home: Path) -> AppConfig:
        """The home's app.toml, with ``abci_address`` resolved (``resolve_abci_address``). A file
        that is not TOML, or a value of the wrong type, is a UsageError naming the file and key."""

        path = home / "config" / "app.toml"
        try:
            data = tomllib.loads(path.read_text())
        except (tomllib.TOMLDecodeError, RecursionError) as e:  # [[[[...: RecursionError
            raise UsageError(
                f"{path} is not valid TOML ({e}); fix it, or move it away and rerun "
                "`loconet init` in a new home to see the defaults"
            ) from None
        abci = str(data.get("abci_address", DEFAULT_ABCI_ADDRESS))
        problem = abci_address_problem(abci)
        if problem:
            raise UsageError(f"{path}: abci_address {problem}")
        try:
            cfg = cls(
                abci_address=resolve_abci_address(home, abci),
                keep_recent=int(data.get("keep_recent", 1000)),
                check_invariants=bool(data.get("check_invariants", False)),
                snapshot_interval=int(data.get("snapshot_interval", 0)),
                snapshot_keep=int(data.get("snapshot_keep", 2)),
                snapshot_chunk_bytes=int(data.get("snapshot_chunk_bytes", 1 << 20)),
                metrics_address=str(data["metrics_address"]) if "metrics_address" in data else None,
            )
        except (TypeError, ValueError) as e:
            raise UsageError(
                f"{path}: a value has the wrong type ({e}); keep_recent, snapshot_interval, "
                "snapshot_keep and snapshot_chunk_bytes are integers"
            ) from None
        # out-of-range values were tracebacks at start (StoreError, the metrics ValueError)
        for key, value, lo in (
            ("keep_recent", cfg.keep_recent, 1),
            ("snapshot_interval", cfg.snapshot_interval, 0),
            ("snapshot_keep", cfg.snapshot_keep, 1),
            ("snapshot_chunk_bytes", cfg.snapshot_chunk_bytes, 1),
        ):
            if not lo <= value < 2**63:
                raise UsageError(f"{path}: {key} must be between {lo} and 2^63-1, got {value}")
        if cfg.metrics_address:
            from node.metrics import parse_listen  # lazy: imports abci_app.app (0.2 s)

            try:
                parse_listen(cfg.metrics_address)
            except ValueError as e:
                raise UsageError(f"{path}: metrics_address: {e}") from None
        return cfg

    def application(self, home: Path, store: MerkleStore, metrics: Any = None) -> Application:
        """The node's Application over ``store``, with its snapshots in HOME/data/snapshots
        (measured by node.metrics.MeteredApplication when ``metrics`` is a NodeMetrics)."""
        from abci_app.app import Application  # lazy: the whole app, 0.2 s at every --help

        if self.snapshot_interval < 0 or self.snapshot_keep < 1 or self.snapshot_chunk_bytes < 1:
            raise ValueError(
                f"{home / 'config' / 'app.toml'}: snapshot_interval must be >= 0, snapshot_keep "
                ">= 1 and snapshot_chunk_bytes >= 1"
            )
        snaps = Snapshotter(
            store,
            home / "data" / "snapshots",
            interval=self.snapshot_interval,
            keep=self.snapshot_keep,
            chunk_bytes=self.snapshot_chunk_bytes,
        )

        # the beacon share (abci_app/beacon.py)
        keys = ExtensionKeys(
            settlement=settlement_key.load(home),  # signs checkpoints in ExtendVote
            consensus=consensus_seed(home),
        )
        if metrics is not None:
            from node.metrics import MeteredApplication  # lazy: imports abci_app.app

            return MeteredApplication(
                store,
                check_invariants=self.check_invariants,
                snapshots=snaps,
                metrics=metrics,
                extension_keys=keys,
            )
        return Application(
            store, check_invariants=self.check_invariants, snapshots=snaps, extension_keys=keys
        )


def read_priv_validator_key(path: Path) -> tuple[bytes, bytes]:
    """(consensus address, ed25519 public key) of a CometBFT priv_validator_key.json; a
    UsageError naming the file when it is not one (a JSONDecodeError / binascii.Error /
    TypeError traceback in create-validator and set-key)."""

    try:
        d = json.loads(path.read_text())
        address = bytes.fromhex(d["address"])
        pub = base64.b64decode(d["pub_key"]["value"], validate=True)
        if len(address) != 20 or len(pub) != 32:
            raise ValueError("the address must be 20 bytes and the public key 32")
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror}") from None
    except (ValueError, KeyError, TypeError, RecursionError) as e:
        raise UsageError(
            f"{path} is not a CometBFT priv_validator_key.json ({type(e).__name__}: {e}); give "
            "the home of an initialized node"
        ) from None
    return address, pub


def consensus_seed(home: Path) -> bytes | None:
    """The 32-byte ed25519 seed of config/priv_validator_key.json (CometBFT writes seed | public
    key, base64), or None without the file (a node with a remote signer produces no beacon share, so
    the other validators refuse its vote extensions: keep the key file on a validator)."""

    p = Path(home) / "config" / "priv_validator_key.json"
    if not p.exists():
        return None
    try:
        raw = base64.b64decode(json.loads(p.read_text())["priv_key"]["value"], validate=True)
    except (ValueError, KeyError, TypeError, RecursionError) as e:  # KeyError was a traceback
        raise ValueError(
            f"{p} is not a CometBFT key file ({type(e).__name__}: {e}); restore it from your "
            "backup (a validator's consensus key cannot be regenerated)"
        ) from None
    if len(raw) != 64:
        raise ValueError(f"{p}: priv_key.value must be 64 bytes (ed25519 seed | public key)")
    return raw[:32]


def cometbft_rpc_url(home: Path) -> str:
    data = tomllib.loads((home / "config" / "config.toml").read_text())
    return "http://" + data["rpc"]["laddr"].removeprefix("tcp://")
