"""A local testnet of N validators on loopback: the folder, its nodes' processes, their state.
The ``loconet testnet`` commands on top of it are ``node.cli.testnet``.

Layout of a testnet folder (default ``./.loconet-testnet``)::

    DIR/testnet.json          what `up` created: version, chain id, base port, nodes (name, home,
                              ports, node id, consensus address); `up` refuses another version
    DIR/keyring/              shared keyring: validator0..N-1 (operators), account0..K-1
    DIR/genesis.json          the one genesis every node has a copy of
    DIR/nodeI/                a node home (config/, data/, cometbft.log, node.log, loconet.pid)
    DIR/wan/                  with ``--wan``: toxiproxy.pid, toxiproxy.log (node/local/wan.py)

Ports, docs/design.md §1: node i adds 100·i to p2p base, RPC base+1, ABCI base+2, metrics base+4
(base 26656 unless ``--base-port``); a WAN testnet (``--wan``, node/local/wan.py) adds toxiproxy's
API at base+30 and its link proxies at base + 100·i + 40..89. Each node is one ``loconet start``
process (its own session: cometbft is its child), so stopping or ``kill -9`` of the process
group takes both. The config is ``node.local.config.LOCAL_TUNING`` plus ``TESTNET_TUNING`` below;
measured block times are in networks/local/README.md.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypedDict

from rich.console import Console

from abci_app.auth import params as auth_params
from abci_app.jobs import params as jobs_params
from abci_app.settlement import params as settlement_params
from abci_app.slashing import params as slashing_params
from abci_app.staking import params as staking_params
from node.atomic import copy_atomic, write_atomic
from node.client import settlement_key
from node.client.keys import Keyring
from node.client.rpc import Client, RpcError
from node.local import procs
from node.local import wan as wan_mod
from node.local.config import AppConfig, Ports, set_toml_values, tune_cometbft_config
from node.local.manifest import (
    TESTNET_VERSION,
    NodeInfo,
    TestnetError,
    find_node,
    load,
    nodes_of,
    save,
)
from node.paths import cometbft_binary
from node.ports import is_port_free

DEFAULT_DIR = ".loconet-testnet"
CHAIN_ID = "loconet-testnet"
LOCO = 1_000_000
ACCOUNT_FUNDS = 1_000_000 * LOCO
SELF_BOND = 100_000 * LOCO

# Genesis params for a local network: short periods so unbonding, jail and unjail can be seen
# in a minute. Override with --param module.key=value.
TESTNET_PARAMS: dict[str, dict[str, int]] = {
    "staking": {"block_reward": LOCO, "unbonding_blocks": 50},
    "slashing": {
        "signed_blocks_window": 50,
        "downtime_jail_blocks": 20,
        "max_evidence_age_blocks": 50,
    },
    # verifiers are never a round's participants: with 4 providers, 2 train and 2 verify, and 2
    # invalid votes prove fraud (node/local/testnet_market.py)
    "jobs": {"min_fraud_verifiers": 2},
}

# On top of LOCAL_TUNING (node/local/config.py): a 4-node net on 2 cores.
TESTNET_TUNING: dict[str, dict[str, str]] = {
    "p2p": {"pex": "false"},  # every peer is a persistent peer; no address book chatter
    "consensus": {
        "timeout_prevote": '"500ms"',
        "timeout_precommit": '"500ms"',
    },  # only used when a node is down
}


# Bounded blocks: a proposer takes at most this many tx bytes from its mempool (CometBFT's default,
# 21 MiB, takes the whole mempool: under a backlog every node then executes blocks of 5,000-9,000
# transfers and block time and latency grow with the backlog; benchmarks/RESULTS.md). 512 KiB is
# ~3,300 signed transfers (152 B + framing), ~80 ms of FinalizeBlock per node. Half of it (the
# bound until 2026-12-01) capped a 4-validator net at ~1,650 txs per block, i.e. below 2,500 tx/s
# once blocks come slower than every 0.66 s (they do under load), and a backlog of B txs costs
# B - (block size) rechecks per block in every node: at 2,000 tx/s offered, 512 KiB blocks halved
# the rechecks per committed tx (3.0 -> 1.4) and cut the CPU per tx by 14 % (RESULTS.md). The
# largest tx (64 KiB, abci_app.codec.tx.MAX_TX_BYTES) fits eight times. CometBFT requires
# evidence.max_bytes <= block.max_bytes (default 1 MiB): a quarter, ~200 duplicate-vote evidences.
BLOCK_MAX_BYTES = 512 * 1024


def bound_blocks(genesis: dict[str, Any]) -> None:
    """Set BLOCK_MAX_BYTES (and the evidence bound under it) in a genesis document's consensus
    params."""
    genesis["consensus_params"]["block"]["max_bytes"] = str(BLOCK_MAX_BYTES)
    genesis["consensus_params"]["evidence"]["max_bytes"] = str(BLOCK_MAX_BYTES // 4)


# app.toml of every node: a state-sync snapshot every 20 blocks (~10 s); small chunks, so a local
# net's few-KiB state is served and verified in several chunks
class SnapshotSettings(TypedDict):
    """The app.toml settings every testnet node gets (the rest are AppConfig's defaults)."""

    snapshot_interval: int
    snapshot_chunk_bytes: int


TESTNET_APP: SnapshotSettings = {"snapshot_interval": 20, "snapshot_chunk_bytes": 1024}


def check_port_range(base: int, validators: int) -> None:
    """Node i takes ports base + 100·i .. + 99: all of them must be real ports, checked before
    anything is written (``--validators 500`` wrote 500 homes, then failed on ports past 65535)."""
    top = base + 100 * (validators - 1) + 99
    if not 1 <= base or top > 65535:
        most = max(0, (65535 - 99 - base) // 100 + 1) if base >= 1 else 0
        raise TestnetError(
            f"ports {base}..{top} do not fit in 1..65535 (each node takes 100 from --base-port): "
            f"with --base-port {base} at most {most} validators; lower --base-port or --validators"
        )


def node_ports(base: int, i: int) -> Ports:
    o = base + 100 * i
    return Ports(p2p=o, rpc=o + 1, abci=o + 2, metrics=o + 4)


# ------------------------------------------------------------------------------- the folder


def _node_id(home: Path) -> str:
    nk = json.loads((home / "config" / "node_key.json").read_text())
    pub = base64.b64decode(nk["priv_key"]["value"])[32:]
    return hashlib.sha256(pub).digest()[:20].hex()


def _cometbft_init(home: Path) -> None:
    r = subprocess.run(
        [cometbft_binary(), "init", "--home", str(home)],
        capture_output=True,
        text=True,
        check=False,
    )
    if r.returncode != 0:
        raise TestnetError(f"cometbft init failed: {r.stderr.strip() or r.stdout.strip()}")


def _configure(
    home: Path,
    name: str,
    ports: Ports,
    peers: str,
    overrides: dict[str, dict[str, str]] | None = None,
) -> None:
    tune_cometbft_config(home, name, ports, persistent_peers=peers)
    values = {k: dict(v) for k, v in TESTNET_TUNING.items()}
    for s, kv in (overrides or {}).items():
        values.setdefault(s, {}).update(kv)
    cfg = home / "config" / "config.toml"
    write_atomic(cfg, set_toml_values(cfg.read_text(), values))
    # ABCI on a Unix socket in the home; snapshots for `add-node --state-sync`
    write_atomic(home / "config" / "app.toml", AppConfig(**TESTNET_APP).to_toml())


def persistent_peers(nodes: list[NodeInfo], exclude: str, wan_base: int | None = None) -> str:
    """Every node but ``exclude``, at its p2p port; with ``wan_base`` (the base port of a WAN
    testnet) at the toxiproxy link ports node ``exclude`` dials instead (node/local/wan.py)."""
    if wan_base is not None:
        me = next(n for n in nodes if n.name == exclude)
        return wan_mod.peers(wan_base, nodes, me)
    return ",".join(f"{n.node_id}@127.0.0.1:{n.p2p}" for n in nodes if n.name != exclude)


def parse_params(items: list[str]) -> dict[str, dict[str, int]]:
    out = {m: dict(kv) for m, kv in TESTNET_PARAMS.items()}
    for it in items:
        key, sep, val = it.partition("=")
        mod, dot, name = key.partition(".")
        if not sep or not dot or not (val.isascii() and val.isdigit()):
            raise TestnetError(
                f"bad --param {it!r}: write module.key=INTEGER, e.g. "
                "slashing.signed_blocks_window=10"
            )
        out.setdefault(mod, {})[name] = int(val)
    check_params(out)
    return out


def check_params(params: dict[str, dict[str, int]]) -> None:
    """Each module's own genesis check, before anything is created: a bad --param made the
    node's InitChain fail and ``up`` waited out its timeout ('did not produce agreeing
    blocks'), and a module the genesis does not carry was silently dropped."""

    checks = {
        "auth": auth_params.params_from_json,
        "jobs": jobs_params.params_from_json,
        "settlement": settlement_params.params_from_json,
        "slashing": slashing_params.params_from_json,
        "staking": staking_params.params_from_json,
    }
    for mod, kv in sorted(params.items()):
        if mod not in checks:
            raise TestnetError(
                f"bad --param {mod}.*: --param takes the params of {', '.join(checks)} "
                "(module.key=INTEGER)"
            )
        try:
            checks[mod]({k: str(v) for k, v in kv.items()})
        except (ValueError, TypeError, KeyError) as e:
            raise TestnetError(f"bad --param for {mod}: {e}") from None


def create(
    d: Path,
    validators: int,
    accounts: int,
    base_port: int,
    params: dict[str, dict[str, int]],
    providers: int = 0,
    wan: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write a new network: keys (``provider{i}`` too, funded), one genesis, N node homes. Starts
    nothing. ``wan`` (``node.local.wan.WanSpec.to_json()``): the nodes peer through toxiproxy's link
    proxies, and the manifest keeps it."""
    if validators < 1:
        raise TestnetError("--validators must be at least 1")
    if accounts < 0 or providers < 0:
        raise TestnetError("--accounts and --providers must be 0 or more")
    check_port_range(base_port, validators)
    if wan:
        wan_mod.check_size(validators)
    d.mkdir(parents=True, exist_ok=True)
    if any(d.iterdir()):
        raise TestnetError(f"{d} is not empty and holds no testnet: pick another --dir or empty it")
    keyring = Keyring(d)
    nodes, state = _validator_homes(d, keyring, validators, base_port)
    others = [f"account{j}" for j in range(accounts)] + [f"provider{j}" for j in range(providers)]
    for name in others:  # funded like the operators
        state["balances"].append(
            {"address": keyring.add(name).address, "amount": str(ACCOUNT_FUNDS)}
        )
    genesis = json.loads((Path(nodes[0].home) / "config" / "genesis.json").read_text())
    text = json.dumps(_testnet_genesis(genesis, params, state), indent=2) + "\n"
    write_atomic(d / "genesis.json", text)
    for n in nodes:
        write_atomic(n.path / "config" / "genesis.json", text)
        _configure(
            n.path,
            n.name,
            node_ports(base_port, int(n.name[4:])),
            persistent_peers(nodes, n.name, base_port if wan else None),
        )
    m = {
        "version": TESTNET_VERSION,
        "chain_id": CHAIN_ID,
        "base_port": base_port,
        "validators": validators,
        "nodes": [asdict(n) for n in nodes],
    }
    if wan:
        m["wan"] = wan
    save(d, m)
    return m


def _validator_homes(
    d: Path, keyring: Keyring, validators: int, base_port: int
) -> tuple[list[NodeInfo], dict[str, list[dict[str, Any]]]]:
    """``validators`` node homes (cometbft's keys, a settlement key) and their operators' keys;
    (the nodes, the genesis entries they need: "balances", "staking" validators, "settlement"
    keys)."""
    nodes: list[NodeInfo] = []
    state: dict[str, list[dict[str, Any]]] = {"balances": [], "staking": [], "settlement": []}
    for i in range(validators):
        home = (d / f"node{i}").resolve()
        _cometbft_init(home)
        ports = node_ports(base_port, i)
        pv = json.loads((home / "config" / "priv_validator_key.json").read_text())
        op = keyring.add(f"validator{i}")
        nodes.append(
            NodeInfo(
                f"node{i}",
                str(home),
                ports.p2p,
                ports.rpc,
                ports.abci,
                ports.metrics,
                _node_id(home),
                pv["address"],
                f"validator{i}",
            )
        )
        state["balances"].append({"address": op.address, "amount": str(ACCOUNT_FUNDS)})
        state["staking"].append(
            {
                "pub_key": pv["pub_key"]["value"],
                "operator": op.address,
                "moniker": f"node{i}",
                "self_bond": str(SELF_BOND),
            }
        )
        state["settlement"].append(
            {"validator": pv["address"], "evm_address": settlement_key.create(home)}
        )
    return nodes, state


def _testnet_genesis(
    genesis: dict[str, Any],
    params: dict[str, dict[str, int]],
    state: dict[str, list[dict[str, Any]]],
) -> dict[str, Any]:
    """cometbft's genesis of node0 made the testnet's: its chain id, consensus params and app
    state (``state`` from ``_validator_homes``, with the other accounts' balances)."""
    genesis["chain_id"] = CHAIN_ID
    genesis["initial_height"] = "1"
    genesis["validators"] = []  # the app's InitChain computes the set from the genesis bonds
    # CometBFT drops evidence older than this; keep it equal to the app's own limit
    age = params.get("slashing", {}).get(
        "max_evidence_age_blocks", TESTNET_PARAMS["slashing"]["max_evidence_age_blocks"]
    )
    genesis["consensus_params"]["evidence"]["max_age_num_blocks"] = str(age)
    bound_blocks(genesis)
    # vote extensions from the first block: validators sign settlement checkpoints in ExtendVote
    genesis["consensus_params"]["abci"]["vote_extensions_enable_height"] = "1"
    genesis["app_state"] = {
        # the chain's default minimum fee (abci_app/auth/params.py) unless --param auth.KEY=N;
        # every account starts with 1,000,000 LOCO, and the CLI and workers pay it (--fee auto)
        "auth": {"params": {k: str(v) for k, v in params.get("auth", {}).items()}},
        "bank": {"balances": state["balances"]},
        "staking": {
            "params": {k: str(v) for k, v in params.get("staking", {}).items()},
            "validators": state["staking"],
        },
        "slashing": {"params": {k: str(v) for k, v in params.get("slashing", {}).items()}},
        "jobs": {"params": {k: str(v) for k, v in params.get("jobs", {}).items()}},
        "settlement": {
            "params": {k: str(v) for k, v in params.get("settlement", {}).items()},
            "keys": state["settlement"],
        },
    }
    return genesis


def add_node(
    d: Path, *, clone_key_of: str | None = None, overrides: dict[str, dict[str, str]] | None = None
) -> NodeInfo:
    """A new full node (index = number of nodes) peered with every node. ``clone_key_of`` copies
    that node's consensus key (a twin that double-signs, as CometBFT's e2e tests make
    equivocation)."""
    m = load(d)
    nodes = nodes_of(m)
    i = max(int(n.name[4:]) for n in nodes) + 1
    name = f"node{i}"
    if m.get("wan"):
        wan_mod.check_size(i + 1)
    home = (d / name).resolve()
    _cometbft_init(home)
    if clone_key_of:
        src = find_node(m, clone_key_of)
        # atomic: a copy cut by a crash left a key file cometbft cannot read, and every rerun
        # of add-node failed on it
        copy_atomic(
            Path(src.home) / "config" / "priv_validator_key.json",
            home / "config" / "priv_validator_key.json",
            mode=0o600,
        )
    copy_atomic(d / "genesis.json", home / "config" / "genesis.json")
    ports = node_ports(m["base_port"], i)
    pv = json.loads((home / "config" / "priv_validator_key.json").read_text())
    n = NodeInfo(
        name,
        str(home),
        ports.p2p,
        ports.rpc,
        ports.abci,
        ports.metrics,
        _node_id(home),
        pv["address"],
    )
    wan_base = m["base_port"] if m.get("wan") else None
    _configure(home, name, ports, persistent_peers([*nodes, n], name, wan_base), overrides)
    m["nodes"].append(asdict(n))
    save(d, m)
    return n


# ------------------------------------------------------------------------------- processes


def pid_of(n: NodeInfo) -> int | None:
    """The pid of the node's ``loconet start`` if it runs; else None."""
    return procs.running(n.path / "loconet.pid", "node.cli")


def is_running(n: NodeInfo) -> bool:
    return pid_of(n) is not None


def start_node(n: NodeInfo) -> int:
    """Start ``loconet start`` for the node in its own session; returns its pid."""
    pid = pid_of(n)
    if pid is not None:
        return pid
    for port, what in ((n.p2p, "P2P"), (n.rpc, "RPC")):  # ABCI is a Unix socket in the node's home
        deadline = time.monotonic() + 10  # a node just killed may leave its ports a moment
        while not is_port_free(port):
            if time.monotonic() > deadline:
                raise TestnetError(
                    f"{n.name}: port {port} ({what}) is in use by another process: stop it, or "
                    "move the network: `loconet testnet down` then `loconet testnet up "
                    "--base-port P` (same --dir)"
                )
            time.sleep(0.2)
    argv = [sys.executable, "-m", "node.cli", "start", "--home", n.home]
    return procs.spawn(argv, log=n.path / "node.log", pid_file=n.path / "loconet.pid")


def stop_node(n: NodeInfo, *, kill: bool = False, timeout: float = 20.0) -> bool:
    """SIGTERM (or SIGKILL with ``kill``) to the node's process group; returns whether it ran."""
    pid = procs.read_pid(n.path / "loconet.pid")
    if pid is None:
        return False
    if not is_running(n):
        # the app died alone (kill -9, OOM): its cometbft child may live on in the group,
        # holding the node's ports; stop what is left of the group
        procs.kill_members(pid)
        return False
    return procs.stop_group(pid, kill=kill, timeout=timeout)


# ------------------------------------------------------------------------------- observing


def node_status(n: NodeInfo) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": n.name,
        "rpc": n.rpc_url,
        "running": is_running(n),
        "height": None,
        "app_hash": None,
        "peers": None,
        "catching_up": None,
    }
    if not out["running"]:
        return out
    try:
        with Client(n.rpc_url, timeout=2.0) as c:
            st = c.status()
            out["height"] = int(st["sync_info"]["latest_block_height"])
            out["app_hash"] = st["sync_info"]["latest_app_hash"]
            out["catching_up"] = bool(st["sync_info"]["catching_up"])
            out["peers"] = int(c.call("net_info")["n_peers"])
    except RpcError:
        pass
    return out


def header_app_hash(n: NodeInfo, height: int) -> str | None:
    try:
        with Client(n.rpc_url, timeout=2.0) as c:
            return c.app_hash_at(height).hex().upper()
    except (RpcError, KeyError):
        return None


def check_agreement(
    nodes: list[NodeInfo], statuses: list[dict[str, Any]]
) -> tuple[int, dict[str, str | None]]:
    """App hash in the header at the highest height every answering node has: name -> hash."""
    heights = [s["height"] for s in statuses if s["height"]]
    if not heights:
        return 0, {}
    h = min(heights)
    return h, {
        n.name: header_app_hash(n, h) for n, s in zip(nodes, statuses, strict=True) if s["height"]
    }


def wait_producing(
    nodes: list[NodeInfo], min_height: int = 2, timeout: float = 90.0, progress: bool = True
) -> list[dict[str, Any]]:
    """Wait until every node is at >= min_height and all agree on the app hash. Progress goes
    to stderr: a rich status line (spinner, each node's height) on a terminal, a line every 5 s
    otherwise."""
    deadline = time.monotonic() + timeout
    start = time.monotonic()
    status = None
    if progress and sys.stderr.isatty():
        status = Console(stderr=True).status("waiting for blocks")
        status.start()
    next_line = start + 5
    try:
        while True:
            sts = [node_status(n) for n in nodes]
            if all(
                s["height"] is not None and s["height"] >= min_height and not s["catching_up"]
                for s in sts
            ):
                _, hashes = check_agreement(nodes, sts)
                if len(set(hashes.values())) == 1 and None not in hashes.values():
                    return sts
            if progress:
                line = f"waiting for blocks ({time.monotonic() - start:4.1f}s): " + " ".join(
                    f"{s['name']}={s['height'] if s['height'] is not None else '-'}" for s in sts
                )
                if status is not None:
                    status.update(line)
                elif time.monotonic() >= next_line:
                    print(line, file=sys.stderr, flush=True)
                    next_line += 5
            if time.monotonic() > deadline:
                down = [s["name"] for s in sts if s["height"] is None]
                hint = (
                    f"; not answering: {', '.join(down)} (see `loconet testnet logs NODE`)"
                    if down
                    else ""
                )
                raise TestnetError(
                    f"the network did not produce agreeing blocks within {timeout:.0f}s{hint}"
                )
            time.sleep(0.3)
    finally:
        if status is not None:
            status.stop()


def validator_table(nodes: list[NodeInfo]) -> list[dict[str, Any]]:
    powers: dict[str, int] = {}
    for n in nodes:
        try:
            with Client(n.rpc_url, timeout=2.0) as c:
                powers = {v["address"]: int(v["voting_power"]) for v in c.validators()}
            break
        except RpcError:
            continue
    return [
        {
            "moniker": n.name,
            "rpc": n.rpc_url,
            "validator_address": n.validator_address,
            "power": powers.get(n.validator_address, 0),
            "running": is_running(n),
        }
        for n in nodes
    ]
