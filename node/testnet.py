"""``loconet testnet up|status|stop|start|down|logs|add-node``: N validators on loopback.

Layout of a testnet folder (default ``./.loconet-testnet``)::

    DIR/testnet.json          what `up` created: version, chain id, base port, nodes (name, home,
                              ports, node id, consensus address); `up` refuses another version
    DIR/keyring/              shared keyring: validator0..N-1 (operators), account0..K-1
    DIR/genesis.json          the one genesis every node has a copy of
    DIR/nodeI/                a node home (config/, data/, cometbft.log, node.log, loconet.pid)

Ports follow DESIGN §1: node i adds 100·i to p2p base, RPC base+1, ABCI base+2, metrics base+4
(base 26656 unless ``--base-port``). Each node is one ``loconet start`` process (its own
session: cometbft is its child), so stopping or ``kill -9`` of the process group takes both.
The config is ``node.config.LOCAL_TUNING`` plus ``TESTNET_TUNING`` below; measured block times
are in networks/local/README.md.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from node.config import AppConfig, Ports, set_toml_values, tune_cometbft_config
from node.paths import PROJECT_ROOT, cometbft_binary
from node.ports import is_port_free

TESTNET_VERSION = 1
DEFAULT_DIR = ".loconet-testnet"
CHAIN_ID = "loconet-testnet"
LOCO = 1_000_000
ACCOUNT_FUNDS = 1_000_000 * LOCO
SELF_BOND = 100_000 * LOCO

# Genesis params for a local network: short periods so unbonding, jail and unjail can be seen
# in a minute. Override with --param module.key=value.
TESTNET_PARAMS: dict[str, dict[str, int]] = {
    "staking": {"block_reward": LOCO, "unbonding_blocks": 50},
    "slashing": {"signed_blocks_window": 50, "downtime_jail_blocks": 20, "max_evidence_age_blocks": 50},
    # verifiers are never a round's participants: with 4 providers, 2 train and 2 verify, and 2
    # invalid votes prove fraud (node/testnet_market.py)
    "jobs": {"min_fraud_verifiers": 2},
}

# On top of LOCAL_TUNING (node/config.py): a 4-node net on 2 cores.
TESTNET_TUNING: dict[str, dict[str, str]] = {
    "p2p": {"pex": "false"},  # every peer is a persistent peer; no address book chatter
    "consensus": {"timeout_prevote": '"500ms"', "timeout_precommit": '"500ms"'},  # only used when a node is down
}


# Bounded blocks: a proposer takes at most this many tx bytes from its mempool (CometBFT's default,
# 21 MiB, takes the whole mempool: under a backlog every node then executes blocks of 5,000-9,000
# transfers and block time and latency grow with the backlog; benchmarks/RESULTS.md). 256 KiB is
# ~1,650 signed transfers (151 B + framing), i.e. ~3,000 tx/s at the 0.5 s block-time floor; the
# largest tx (64 KiB, abci_app.codec.tx.MAX_TX_BYTES) still fits four times. CometBFT requires
# evidence.max_bytes <= block.max_bytes (default 1 MiB): a quarter, ~100 duplicate-vote evidences.
BLOCK_MAX_BYTES = 256 * 1024


def bound_blocks(genesis: dict[str, Any]) -> None:
    """Set BLOCK_MAX_BYTES (and the evidence bound under it) in a genesis document's consensus params."""
    genesis["consensus_params"]["block"]["max_bytes"] = str(BLOCK_MAX_BYTES)
    genesis["consensus_params"]["evidence"]["max_bytes"] = str(BLOCK_MAX_BYTES // 4)


# app.toml of every node: a state-sync snapshot every 20 blocks (~10 s); small chunks, so a local
# net's few-KiB state is served and verified in several chunks
TESTNET_APP: dict[str, int] = {"snapshot_interval": 20, "snapshot_chunk_bytes": 1024}


class TestnetError(Exception):
    pass


@dataclass(slots=True)
class NodeInfo:
    name: str
    home: str
    p2p: int
    rpc: int
    abci: int
    metrics: int
    node_id: str
    validator_address: str  # consensus address (hex); a full node has one too (unused)
    operator_key: str = ""  # keyring key of the operator ("" for a full node)

    @property
    def rpc_url(self) -> str:
        return f"http://127.0.0.1:{self.rpc}"

    @property
    def path(self) -> Path:
        return Path(self.home)


def check_port_range(base: int, validators: int) -> None:
    """Node i takes ports base + 100·i .. + 99: all of them must be real ports, checked before
    anything is written (``--validators 500`` wrote 500 homes, then failed on ports past 65535)."""
    top = base + 100 * (validators - 1) + 99
    if not 1 <= base or top > 65535:
        most = max(0, (65535 - 99 - base) // 100 + 1) if base >= 1 else 0
        raise TestnetError(f"ports {base}..{top} do not fit in 1..65535 (each node takes 100 from --base-port): "
                           f"with --base-port {base} at most {most} validators; lower --base-port or --validators")


def node_ports(base: int, i: int) -> Ports:
    o = base + 100 * i
    return Ports(p2p=o, rpc=o + 1, abci=o + 2, metrics=o + 4)


# ------------------------------------------------------------------------------- the folder


def manifest_path(d: Path) -> Path:
    return d / "testnet.json"


def load(d: Path) -> dict[str, Any]:
    p = manifest_path(d)
    if not p.exists():
        raise TestnetError(f"no testnet in {d}: create one with `loconet testnet up --dir {d}`")
    m = json.loads(p.read_text())
    if m.get("version") != TESTNET_VERSION:
        raise TestnetError(
            f"{d} holds a testnet of format version {m.get('version')!r}; this loconet writes version {TESTNET_VERSION}: "
            f"remove it with `loconet testnet down --purge --dir {d}` (or pick another --dir)")
    return m


def nodes_of(m: dict[str, Any]) -> list[NodeInfo]:
    return [NodeInfo(**n) for n in m["nodes"]]


def save(d: Path, m: dict[str, Any]) -> None:
    tmp = manifest_path(d).with_suffix(".tmp")
    tmp.write_text(json.dumps(m, indent=2) + "\n")
    tmp.replace(manifest_path(d))


def find_node(m: dict[str, Any], name: str) -> NodeInfo:
    for n in nodes_of(m):
        if name in (n.name, n.name.removeprefix("node")):
            return n
    raise TestnetError(f"no node {name!r}; nodes: {', '.join(n.name for n in nodes_of(m))}")


def _node_id(home: Path) -> str:
    nk = json.loads((home / "config" / "node_key.json").read_text())
    pub = base64.b64decode(nk["priv_key"]["value"])[32:]
    return hashlib.sha256(pub).digest()[:20].hex()


def _cometbft_init(home: Path) -> None:
    r = subprocess.run([cometbft_binary(), "init", "--home", str(home)], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise TestnetError(f"cometbft init failed: {r.stderr.strip() or r.stdout.strip()}")


def _configure(home: Path, name: str, ports: Ports, peers: str, overrides: dict[str, dict[str, str]] | None = None) -> None:
    tune_cometbft_config(home, name, ports, persistent_peers=peers)
    values = {k: dict(v) for k, v in TESTNET_TUNING.items()}
    for s, kv in (overrides or {}).items():
        values.setdefault(s, {}).update(kv)
    cfg = home / "config" / "config.toml"
    cfg.write_text(set_toml_values(cfg.read_text(), values))
    # ABCI on a Unix socket in the home; snapshots for `add-node --state-sync`
    (home / "config" / "app.toml").write_text(AppConfig(**TESTNET_APP).to_toml())


def _peers(nodes: list[NodeInfo], exclude: str) -> str:
    return ",".join(f"{n.node_id}@127.0.0.1:{n.p2p}" for n in nodes if n.name != exclude)


def parse_params(items: list[str]) -> dict[str, dict[str, int]]:
    out = {m: dict(kv) for m, kv in TESTNET_PARAMS.items()}
    for it in items:
        key, sep, val = it.partition("=")
        mod, dot, name = key.partition(".")
        if not sep or not dot or not val.isdigit():
            raise TestnetError(f"bad --param {it!r}: write module.key=INTEGER, e.g. slashing.signed_blocks_window=10")
        out.setdefault(mod, {})[name] = int(val)
    return out


def create(d: Path, validators: int, accounts: int, base_port: int, params: dict[str, dict[str, int]],
           providers: int = 0) -> dict[str, Any]:
    """Write a new network: keys (``provider{i}`` too, funded), one genesis, N node homes. Starts nothing."""
    from node.keys import Keyring

    if validators < 1:
        raise TestnetError("--validators must be at least 1")
    if accounts < 0 or providers < 0:
        raise TestnetError("--accounts and --providers must be 0 or more")
    check_port_range(base_port, validators)
    d.mkdir(parents=True, exist_ok=True)
    if any(d.iterdir()):
        raise TestnetError(f"{d} is not empty and holds no testnet: pick another --dir or empty it")
    keyring = Keyring(d)
    nodes: list[NodeInfo] = []
    from node import settlement_key

    balances, staking_vals, settlement_keys = [], [], []
    for i in range(validators):
        home = (d / f"node{i}").resolve()
        _cometbft_init(home)
        ports = node_ports(base_port, i)
        pv = json.loads((home / "config" / "priv_validator_key.json").read_text())
        op = keyring.add(f"validator{i}")
        nodes.append(NodeInfo(f"node{i}", str(home), ports.p2p, ports.rpc, ports.abci, ports.metrics,
                              _node_id(home), pv["address"], f"validator{i}"))
        balances.append({"address": op.address, "amount": str(ACCOUNT_FUNDS)})
        staking_vals.append({"pub_key": pv["pub_key"]["value"], "operator": op.address, "moniker": f"node{i}", "self_bond": str(SELF_BOND)})
        settlement_keys.append({"validator": pv["address"], "evm_address": settlement_key.create(home)})
    for j in range(accounts):
        balances.append({"address": keyring.add(f"account{j}").address, "amount": str(ACCOUNT_FUNDS)})
    for j in range(providers):
        balances.append({"address": keyring.add(f"provider{j}").address, "amount": str(ACCOUNT_FUNDS)})
    genesis = json.loads((Path(nodes[0].home) / "config" / "genesis.json").read_text())
    genesis["chain_id"] = CHAIN_ID
    genesis["initial_height"] = "1"
    genesis["validators"] = []  # the app's InitChain computes the set from the genesis bonds
    # CometBFT drops evidence older than this; keep it equal to the app's own limit
    age = params.get("slashing", {}).get("max_evidence_age_blocks", TESTNET_PARAMS["slashing"]["max_evidence_age_blocks"])
    genesis["consensus_params"]["evidence"]["max_age_num_blocks"] = str(age)
    bound_blocks(genesis)
    # vote extensions from the first block: validators sign settlement checkpoints in ExtendVote
    genesis["consensus_params"]["abci"]["vote_extensions_enable_height"] = "1"
    genesis["app_state"] = {
        "bank": {"balances": balances},
        "staking": {"params": {k: str(v) for k, v in params.get("staking", {}).items()}, "validators": staking_vals},
        "slashing": {"params": {k: str(v) for k, v in params.get("slashing", {}).items()}},
        "jobs": {"params": {k: str(v) for k, v in params.get("jobs", {}).items()}},
        "settlement": {"params": {k: str(v) for k, v in params.get("settlement", {}).items()}, "keys": settlement_keys},
    }
    text = json.dumps(genesis, indent=2) + "\n"
    (d / "genesis.json").write_text(text)
    for n in nodes:
        (n.path / "config" / "genesis.json").write_text(text)
        _configure(n.path, n.name, node_ports(base_port, int(n.name[4:])), _peers(nodes, n.name))
    m = {"version": TESTNET_VERSION, "chain_id": CHAIN_ID, "base_port": base_port, "validators": validators,
         "nodes": [asdict(n) for n in nodes]}
    save(d, m)
    return m


def add_node(d: Path, *, clone_key_of: str | None = None, overrides: dict[str, dict[str, str]] | None = None) -> NodeInfo:
    """A new full node (index = number of nodes) peered with every node. ``clone_key_of`` copies
    that node's consensus key (a twin that double-signs, as CometBFT's e2e tests make equivocation)."""
    m = load(d)
    nodes = nodes_of(m)
    i = max(int(n.name[4:]) for n in nodes) + 1
    name = f"node{i}"
    home = (d / name).resolve()
    _cometbft_init(home)
    if clone_key_of:
        src = find_node(m, clone_key_of)
        shutil.copy(Path(src.home) / "config" / "priv_validator_key.json", home / "config" / "priv_validator_key.json")
    shutil.copy(d / "genesis.json", home / "config" / "genesis.json")
    ports = node_ports(m["base_port"], i)
    pv = json.loads((home / "config" / "priv_validator_key.json").read_text())
    n = NodeInfo(name, str(home), ports.p2p, ports.rpc, ports.abci, ports.metrics, _node_id(home), pv["address"])
    _configure(home, name, ports, _peers(nodes, name), overrides)
    m["nodes"].append(asdict(n))
    save(d, m)
    return n


# ------------------------------------------------------------------------------- processes


def _pid(n: NodeInfo) -> int | None:
    p = n.path / "loconet.pid"
    if not p.exists():
        return None
    try:
        return int(p.read_text().strip())
    except ValueError:
        return None


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def is_running(n: NodeInfo) -> bool:
    pid = _pid(n)
    if pid is None or not _alive(pid):
        return False
    try:
        return "node.cli" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False




def start_node(n: NodeInfo) -> int:
    """Start ``loconet start`` for the node in its own session; returns its pid."""
    if is_running(n):
        return _pid(n) or 0
    for port, what in ((n.p2p, "P2P"), (n.rpc, "RPC")):  # ABCI is a Unix socket in the node's home
        deadline = time.monotonic() + 10  # a node just killed may leave its ports a moment
        while not is_port_free(port):
            if time.monotonic() > deadline:
                raise TestnetError(f"{n.name}: port {port} ({what}) is in use by another process: stop it, or move "
                                   f"the network: `loconet testnet down` then `loconet testnet up --base-port P` (same --dir)")
            time.sleep(0.2)
    log = open(n.path / "node.log", "ab")  # noqa: SIM115 (handed to the detached child)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "node.cli", "start", "--home", n.home],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, env=env, cwd=str(PROJECT_ROOT),
    )
    log.close()
    (n.path / "loconet.pid").write_text(f"{proc.pid}\n")
    return proc.pid


def stop_node(n: NodeInfo, *, kill: bool = False, timeout: float = 20.0) -> bool:
    """SIGTERM (or SIGKILL with ``kill``) to the node's process group; returns whether it ran."""
    pid = _pid(n)
    if pid is None:
        return False
    if not is_running(n):
        # the app died alone (kill -9, OOM): its cometbft child may live on in the group,
        # holding the node's ports; stop what is left of the group
        left = _group_members(pid)
        for member in left:
            try:
                os.kill(member, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return False
    return stop_group(pid, kill=kill, timeout=timeout)


def _group_members(pgid: int) -> list[int]:
    """Processes of group ``pgid`` that are loconet's (cometbft or ``node.cli``), from /proc."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
            if int(fields[2]) != pgid or fields[0] == "Z":
                continue
            cmd = (entry / "cmdline").read_bytes().decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        if "cometbft" in cmd or "node.cli" in cmd:
            out.append(int(entry.name))
    return out


def stop_group(pid: int, *, kill: bool = False, timeout: float = 20.0) -> bool:
    """SIGTERM (SIGKILL with ``kill``) to process group ``pid``; wait up to ``timeout`` for it,
    then SIGKILL what is left of the group. False if it was already gone."""
    try:
        os.killpg(pid, signal.SIGKILL if kill else signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
        try:  # reap it if we are its parent (tests), else it lingers as a zombie
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
    try:
        os.killpg(pid, signal.SIGKILL)  # whatever is left of the group (cometbft after a stuck stop)
    except ProcessLookupError:
        pass
    return True


# ------------------------------------------------------------------------------- observing


def node_status(n: NodeInfo) -> dict[str, Any]:
    from node.rpc import Client, RpcError

    out: dict[str, Any] = {"name": n.name, "rpc": n.rpc_url, "running": is_running(n), "height": None,
                           "app_hash": None, "peers": None, "catching_up": None}
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
    from node.rpc import Client, RpcError

    try:
        with Client(n.rpc_url, timeout=2.0) as c:
            return c.app_hash_at(height).hex().upper()
    except (RpcError, KeyError):
        return None


def check_agreement(nodes: list[NodeInfo], statuses: list[dict[str, Any]]) -> tuple[int, dict[str, str | None]]:
    """App hash in the header at the highest height every answering node has: name -> hash."""
    heights = [s["height"] for s in statuses if s["height"]]
    if not heights:
        return 0, {}
    h = min(heights)
    return h, {n.name: header_app_hash(n, h) for n, s in zip(nodes, statuses) if s["height"]}


def wait_producing(nodes: list[NodeInfo], min_height: int = 2, timeout: float = 90.0, progress: bool = True) -> list[dict[str, Any]]:
    """Wait until every node is at >= min_height and all agree on the app hash. Progress goes
    to stderr: a rich status line (spinner, each node's height) on a terminal, a line every 5 s
    otherwise."""
    deadline = time.monotonic() + timeout
    start = time.monotonic()
    status = None
    if progress and sys.stderr.isatty():
        from rich.console import Console

        status = Console(stderr=True).status("waiting for blocks")
        status.start()
    next_line = start + 5
    try:
        while True:
            sts = [node_status(n) for n in nodes]
            if all(s["height"] is not None and s["height"] >= min_height and not s["catching_up"] for s in sts):
                _, hashes = check_agreement(nodes, sts)
                if len(set(hashes.values())) == 1 and None not in hashes.values():
                    return sts
            if progress:
                line = f"waiting for blocks ({time.monotonic() - start:4.1f}s): " + " ".join(
                    f"{s['name']}={s['height'] if s['height'] is not None else '-'}" for s in sts)
                if status is not None:
                    status.update(line)
                elif time.monotonic() >= next_line:
                    print(line, file=sys.stderr, flush=True)
                    next_line += 5
            if time.monotonic() > deadline:
                down = [s["name"] for s in sts if s["height"] is None]
                hint = f"; not answering: {', '.join(down)} (see `loconet testnet logs NODE`)" if down else ""
                raise TestnetError(f"the network did not produce agreeing blocks within {timeout:.0f}s{hint}")
            time.sleep(0.3)
    finally:
        if status is not None:
            status.stop()


def validator_table(nodes: list[NodeInfo]) -> list[dict[str, Any]]:
    from node.rpc import Client, RpcError

    powers: dict[str, int] = {}
    for n in nodes:
        try:
            with Client(n.rpc_url, timeout=2.0) as c:
                powers = {v["address"]: int(v["voting_power"]) for v in c.validators()}
            break
        except RpcError:
            continue
    return [{"moniker": n.name, "rpc": n.rpc_url, "validator_address": n.validator_address,
             "power": powers.get(n.validator_address, 0), "running": is_running(n)} for n in nodes]


# ------------------------------------------------------------------------------- commands


def _dir(args: argparse.Namespace) -> Path:
    return Path(args.dir).resolve()


def cmd_up(args: argparse.Namespace) -> int:
    from node import testnet_market as tm
    from node.cli import out

    d = _dir(args)
    t0 = time.monotonic()
    fresh = not manifest_path(d).exists()
    if not fresh:
        m = load(d)
        if args.base_port is not None and args.base_port != m["base_port"]:
            check_port_range(args.base_port, len(nodes_of(m)))
            m = move_ports(d, m, args.base_port)
        print(f"restarting the existing {m['validators']}-validator network in {d} (base port {m['base_port']})",
              file=sys.stderr)
    else:
        args.base_port = 26656 if args.base_port is None else args.base_port
        params = parse_params(args.param or [])
        behaviours = tm.parse_cheaters(args.cheaters or [], args.providers)
        print(f"creating a {args.validators}-validator network in {d} (base port {args.base_port})", file=sys.stderr)
        m = create(d, args.validators, args.accounts, args.base_port, params, providers=args.providers)
    nodes = nodes_of(m)
    for n in nodes:
        start_node(n)
    wait_producing(nodes, timeout=args.timeout)
    data: dict[str, Any] = {}
    if fresh and args.providers:
        data = _up_market(d, m, behaviours, args)
    for w in tm.workers_of(m):
        tm.start_worker(d, w)
    if args.evm:  # anvil, the settlement contracts and a relayer (node/evm/testnet_evm.py)
        from node.evm import testnet_evm

        data["evm"] = testnet_evm.up(d, nodes[0].rpc_url, args.evm_port)
    rows = validator_table(nodes)
    elapsed = time.monotonic() - t0
    text = f"{'MONIKER':8s} {'RPC':24s} {'VALIDATOR ADDRESS':40s} {'POWER':>7s}\n" + "\n".join(
        f"{r['moniker']:8s} {r['rpc']:24s} {r['validator_address']:40s} {r['power']:>7d}" for r in rows)
    workers = tm.workers_of(m)
    if workers:
        text += f"\n\n{'WORKER':10s} {'BLOB ENDPOINT':24s} {'BEHAVIOUR':14s} ADDRESS\n" + "\n".join(
            f"{w.name:10s} {w.endpoint:24s} {w.behaviour:14s} {w.address}" for w in workers)
    if data.get("job_id"):
        text += f"\njob {data['job_id']} created: follow it with `loconet query rounds {data['job_id']} --node {nodes[0].rpc_url}`"
    if data.get("evm"):
        ev = data["evm"]
        text += (f"\nEVM: anvil at {ev['evm_rpc']}, Checkpoints {ev['checkpoints']}, LOCO token {ev['token']}, relayer running; "
                 f"deployment {ev['deployment']}; a user key with ETH: {ev['user_key']} ({ev['user_address']})")
    text += f"\nnetwork {m['chain_id']} is producing blocks ({elapsed:.1f}s); keys in {d / 'keyring'}; stop it with `loconet testnet down --dir {args.dir}`"
    out(args, {"dir": str(d), "chain_id": m["chain_id"], "seconds": round(elapsed, 1), "nodes": rows,
               "workers": [asdict(w) for w in workers], **data}, text)
    return 0


def _up_market(d: Path, m: dict[str, Any], behaviours: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """Register the providers, hand them the job's blobs, start their workers, and once every
    worker serves its blobs create the built-in job (so round 0 finds them all listening)."""
    from node import testnet_market as tm

    workers = tm.plan_workers(d, m, behaviours)
    rpc = nodes_of(m)[0].rpc_url
    print(f"registering {len(workers)} provider(s)...", file=sys.stderr)
    tm.register_providers(d, rpc, workers)
    m["workers"] = [asdict(w) for w in workers]
    save(d, m)
    job = None
    if not args.no_job:
        job, dataset, model = tm.builtin_job(args.rounds, workers)
        tm.seed_stores(workers, [dataset, model])
    for w in workers:
        tm.start_worker(d, w)
    print("waiting for the workers to serve their blobs...", file=sys.stderr)
    tm.wait_serving(workers, timeout=args.timeout)
    if job is None:
        return {}
    job_id = tm.create_job(d, rpc, "validator0", job)
    m["job_id"] = job_id
    save(d, m)
    return {"job_id": job_id}


def move_ports(d: Path, m: dict[str, Any], base: int) -> dict[str, Any]:
    """Give a stopped testnet another base port: every node's P2P, RPC and metrics addresses and
    peer lists in config.toml, and the manifest (node identities and data are kept)."""
    nodes = nodes_of(m)
    running = [n.name for n in nodes if is_running(n)]
    if running:
        raise TestnetError(f"{', '.join(running)} still running on base port {m['base_port']}: stop the network "
                           f"first (`loconet testnet down --dir {d}`), then `loconet testnet up --base-port {base} --dir {d}`")
    for n in nodes:
        ports = node_ports(base, int(n.name[4:]))
        n.p2p, n.rpc, n.abci, n.metrics = ports.p2p, ports.rpc, ports.abci, ports.metrics
    for n in nodes:
        cfg = n.path / "config" / "config.toml"
        cfg.write_text(set_toml_values(cfg.read_text(), {
            "rpc": {"laddr": f'"tcp://127.0.0.1:{n.rpc}"'},
            "p2p": {"laddr": f'"tcp://127.0.0.1:{n.p2p}"', "persistent_peers": f'"{_peers(nodes, n.name)}"'},
            "instrumentation": {"prometheus_listen_addr": f'":{n.metrics}"'}}))
    m["base_port"] = base
    m["nodes"] = [asdict(n) for n in nodes]
    save(d, m)
    print(f"moved the network in {d} to base port {base}", file=sys.stderr)
    return m


def cmd_status(args: argparse.Namespace) -> int:
    from node.cli import out

    m = load(_dir(args))
    nodes = nodes_of(m)
    sts = [node_status(n) for n in nodes]
    h, hashes = check_agreement(nodes, sts)
    top = max((s["height"] or 0) for s in sts)
    majority = max(set(hashes.values()), key=list(hashes.values()).count) if hashes else None
    for s in sts:
        flags = []
        if not s["running"]:
            flags.append("STOPPED")
        elif s["height"] is None:
            flags.append("NOT ANSWERING")
        else:
            if s["height"] < top - 2:
                flags.append(f"BEHIND by {top - s['height']}")
            if hashes.get(s["name"]) != majority:
                flags.append(f"DISAGREES at height {h}")
        s["flags"] = flags
    text = f"{'NODE':8s} {'HEIGHT':>7s} {'PEERS':>5s}  {'APP HASH':64s}  FLAGS\n" + "\n".join(
        f"{s['name']:8s} {s['height'] if s['height'] is not None else '-':>7} {s['peers'] if s['peers'] is not None else '-':>5}  "
        f"{s['app_hash'] or '-':64s}  {' '.join(s['flags']) or 'ok'}" for s in sts)
    from node import testnet_market as tm

    ws = [tm.worker_status(w) for w in tm.workers_of(m)]
    if ws:
        text += f"\n\n{'WORKER':10s} {'STATE':8s} {'BLOBS':6s} {'BEHAVIOUR':14s} LAST LOG LINE\n" + "\n".join(
            f"{w['name']:10s} {'running' if w['running'] else 'STOPPED':8s} {'up' if w['serving'] else 'down':6s} "
            f"{w['behaviour']:14s} {w['last'][-90:]}" for w in ws)
    out(args, {"agreement_height": h, "nodes": sts, "workers": ws}, text)
    ok = all(not s["flags"] for s in sts) and all(w["running"] for w in ws)
    return 0 if ok else 1


def cmd_stop(args: argparse.Namespace) -> int:
    from node import testnet_market as tm

    m = load(_dir(args))
    w = tm.find_worker(m, args.node)
    if w is not None:
        ran = tm.stop_worker(w, kill=args.kill)
        print(f"{w.name} {'killed' if args.kill else 'stopped'}" if ran else f"{w.name} was not running")
        return 0
    n = find_node(m, args.node)
    ran = stop_node(n, kill=args.kill)
    print(f"{n.name} {'killed' if args.kill else 'stopped'}" if ran else f"{n.name} was not running")
    return 0


def cmd_start(args: argparse.Namespace) -> int:
    from node import testnet_market as tm

    m = load(_dir(args))
    w = tm.find_worker(m, args.node)
    if w is not None:
        print(f"{w.name} started (pid {tm.start_worker(_dir(args), w)}); log in {w.path / 'worker.log'}")
        return 0
    n = find_node(m, args.node)
    if is_running(n):
        print(f"{n.name} is already running (pid {_pid(n)}, RPC {n.rpc_url}); stop it first with "
              f"`loconet testnet stop {n.name}`")
        return 0
    others = [node_status(o) for o in nodes_of(m) if o.name != n.name]
    target = max([s["height"] or 0 for s in others] + [1])
    pid = start_node(n)
    print(f"{n.name} started (pid {pid}); waiting for it to reach height {target}...", file=sys.stderr)
    if not args.no_wait:
        wait_producing([n], min_height=target, timeout=args.timeout)
        st = node_status(n)
        print(f"{n.name} at height {st['height']}, RPC {n.rpc_url}")
    return 0


def state_sync_config(d: Path) -> dict[str, dict[str, str]]:
    """``[statesync]`` for a node joining from a snapshot: two running nodes' RPC for the light
    client, and a trusted height and block hash read from a running node (the light client
    verifies every header it uses, the snapshot's app hash included, from this one)."""
    from node.rpc import Client, RpcError

    nodes = nodes_of(load(d))
    running = [n for n in nodes if is_running(n)]
    if not running:
        raise TestnetError("no node is running: `loconet testnet up` first (state sync needs peers that serve snapshots)")
    snaps = [int(p.name) for n in nodes for p in (n.path / "data" / "snapshots").glob("*") if p.name.isdigit()]
    if not snaps:
        raise TestnetError("no node has a state-sync snapshot yet: wait for a multiple of snapshot_interval (app.toml; "
                           f"{TESTNET_APP['snapshot_interval']} for new testnets), or add the node without --state-sync")
    try:
        with Client(running[0].rpc_url, timeout=5.0) as c:
            trust_height = c.latest_height() - 1
            trust_hash = c.call("commit", height=str(trust_height))["signed_header"]["commit"]["block_id"]["hash"]
    except (RpcError, KeyError) as e:
        raise TestnetError(f"cannot read a trusted block from {running[0].name}: {e}") from None
    servers = [f"http://127.0.0.1:{n.rpc}" for n in (running * 2)[:2]]  # cometbft wants two (the same twice is allowed)
    return {"statesync": {
        "enable": "true", "rpc_servers": f'"{",".join(servers)}"', "trust_height": str(trust_height),
        "trust_hash": f'"{trust_hash}"', "trust_period": '"168h0m0s"', "discovery_time": '"5s"',
    }}


def cmd_add_node(args: argparse.Namespace) -> int:
    from node.rpc import Client, RpcError

    d = _dir(args)
    up = [s for s in (node_status(o) for o in nodes_of(load(d))) if s["height"] is not None]
    if not up:
        raise TestnetError(f"the network in {d} is down (no node answers): start it with "
                           f"`loconet testnet up --dir {d}`, then add the node")
    n = add_node(d, overrides=state_sync_config(d) if args.state_sync else None)
    try:
        start_node(n)
        wait_producing([n], min_height=1, timeout=args.timeout)
    except (TestnetError, KeyboardInterrupt):
        remove_node(d, n)
        raise
    from node.cli import out

    try:
        with Client(n.rpc_url, timeout=5.0) as c:
            earliest: int | None = int(c.status()["sync_info"]["earliest_block_height"])
    except (RpcError, KeyError, ValueError):
        earliest = None
    text = (f"{n.name} joined from a state-sync snapshot: its block store starts at height {earliest}\n"
            if args.state_sync else "")
    text += (f"{n.name} (full node) is in sync: RPC {n.rpc_url}, home {n.home}\n"
             f"make it a validator: loconet tx staking create-validator --from account0 --validator-home {n.home} "
             f"--self-bond 100000loco --moniker {n.name} --home {d} --node {n.rpc_url}")
    out(args, {"name": n.name, "rpc": n.rpc_url, "home": n.home, "state_sync": bool(args.state_sync),
               "earliest_block_height": earliest}, text)
    return 0


def remove_node(d: Path, n: NodeInfo) -> None:
    """Undo ``add_node``: stop the node, delete its home, drop it from the manifest."""
    stop_node(n, kill=True)
    shutil.rmtree(n.path, ignore_errors=True)
    m = load(d)
    m["nodes"] = [x for x in m["nodes"] if x["name"] != n.name]
    save(d, m)
    print(f"{n.name} did not sync; it was stopped and removed", file=sys.stderr)


def cmd_down(args: argparse.Namespace) -> int:
    d = _dir(args)
    if not manifest_path(d).exists():
        if args.purge and d.exists() and not any(d.iterdir()):
            d.rmdir()
        raise TestnetError(f"no testnet in {d}")
    try:
        nodes = nodes_of(load(d))
    except TestnetError:
        if not args.purge:
            raise
        nodes = []
    from node import testnet_market as tm

    try:
        workers = tm.workers_of(load(d))
    except TestnetError:
        workers = []
    from node.evm import testnet_evm

    stopped = testnet_evm.down(d) + [w.name for w in workers if tm.stop_worker(w)] + [n.name for n in nodes if stop_node(n)]
    print(f"stopped {', '.join(stopped) or 'nothing (no node was running)'}")
    if args.purge:
        shutil.rmtree(d)
        print(f"removed {d}")
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    from node import testnet_market as tm

    m = load(_dir(args))
    w = tm.find_worker(m, args.node)
    if w is not None:
        path, name = w.path / "worker.log", w.name
    else:
        n = find_node(m, args.node)
        path, name = n.path / ("node.log" if args.app else "cometbft.log"), n.name
    if not path.exists():
        raise TestnetError(f"{path} does not exist yet: has {name} been started?")
    lines = path.read_text(errors="replace").splitlines()
    print("\n".join(lines[-args.lines:]))
    if args.follow:
        with open(path, errors="replace") as f:
            f.seek(0, os.SEEK_END)
            try:
                while True:
                    line = f.readline()
                    if line:
                        print(line, end="", flush=True)
                    else:
                        time.sleep(0.2)
            except KeyboardInterrupt:
                pass
    return 0


def _main_wrap(fn: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            return int(fn(args))
        except TestnetError as e:
            from node.cli import report_error  # plain text, or JSON with -o json

            return report_error(args, str(e), None, None)
    return run


def register(root_sub: Any, tx_sub: Any, query_sub: Any) -> None:
    from node.cli import add_command, add_output_flag

    tn = root_sub.add_parser("testnet", help="a local multi-validator network on loopback").add_subparsers(dest="testnet_cmd", required=True, metavar="TESTNET_COMMAND")

    def dir_flag(p: argparse.ArgumentParser) -> None:
        p.add_argument("--dir", default=DEFAULT_DIR, help=f"testnet folder (default {DEFAULT_DIR})")

    p = add_command(tn, "up", "create (or restart) and start a local network; returns once it produces blocks "
                    "(with --providers: workers registered and started, and a training job created)",
                    "loconet testnet up --validators 4 --providers 4 --cheaters random-root:1", _main_wrap(cmd_up))
    p.add_argument("--validators", type=int, default=4); p.add_argument("--accounts", type=int, default=2, help="funded account keys (default 2)")
    p.add_argument("--base-port", type=int, default=None,
                   help="p2p port of node0; node i adds 100*i (default 26656); on an existing network it moves "
                        "the stopped nodes to these ports")
    p.add_argument("--param", action="append", metavar="MODULE.KEY=N", help="genesis param, e.g. slashing.signed_blocks_window=10 (repeatable)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for blocks (default 120)")
    p.add_argument("--providers", type=int, default=0, help="provider workers to run beside the validators (default 0)")
    p.add_argument("--cheaters", action="append", metavar="KIND:COUNT",
                   help="the last COUNT providers cheat: random-root, withhold, lazy-verifier or poison (tests/demos)")
    p.add_argument("--no-job", action="store_true", help="with --providers: do not create the built-in job")
    p.add_argument("--rounds", type=int, default=5, help="rounds of the built-in job (default 5)")
    p.add_argument("--evm", action="store_true", help="also start anvil, deploy the settlement contracts and run a relayer (DIR/evm)")
    p.add_argument("--evm-port", type=int, default=8545, help="anvil's port with --evm (default 8545)")
    dir_flag(p); add_output_flag(p)
    p = add_command(tn, "status", "height, app hash and peers of every node; flags nodes behind or disagreeing",
                    "loconet testnet status", _main_wrap(cmd_status))
    dir_flag(p); add_output_flag(p)
    p = add_command(tn, "stop", "stop one node (cometbft and its ABCI app) or one worker (provider1)", "loconet testnet stop node2", _main_wrap(cmd_stop))
    p.add_argument("node", metavar="NODE", help="node name (node2), index (2) or worker (provider1)"); p.add_argument("--kill", action="store_true", help="SIGKILL instead of a clean stop")
    dir_flag(p)
    p = add_command(tn, "start", "start one stopped node (and wait until it has caught up) or worker", "loconet testnet start node2", _main_wrap(cmd_start))
    p.add_argument("node", metavar="NODE"); p.add_argument("--no-wait", action="store_true"); p.add_argument("--timeout", type=float, default=120.0)
    dir_flag(p)
    p = add_command(tn, "add-node", "add and start a full node (then make it a validator with tx staking create-validator)",
                    "loconet testnet add-node --state-sync", _main_wrap(cmd_add_node))
    p.add_argument("--state-sync", action="store_true",
                   help="join from a running node's snapshot (light-client verified) instead of replaying every block")
    p.add_argument("--timeout", type=float, default=120.0); dir_flag(p); add_output_flag(p)
    p = add_command(tn, "down", "stop every node (--purge also deletes the folder)", "loconet testnet down --purge", _main_wrap(cmd_down))
    p.add_argument("--purge", action="store_true"); dir_flag(p)
    p = add_command(tn, "logs", "print a node's cometbft log (or its ABCI app log with --app), or a worker's log", "loconet testnet logs provider1 -n 50", _main_wrap(cmd_logs))
    p.add_argument("node", metavar="NODE"); p.add_argument("-n", "--lines", type=int, default=40); p.add_argument("-f", "--follow", action="store_true")
    p.add_argument("--app", action="store_true", help="the loconet process log instead of cometbft's"); dir_flag(p)
