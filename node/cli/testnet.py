"""``loconet testnet up|status|stop|start|down|logs|add-node``: the commands (argument parsing,
progress, text and ``-o json`` output). What they do to a testnet folder and its processes is
``node.local.testnet`` (a library the benchmarks and tests drive too)."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from node.atomic import write_atomic
from node.cli.common import (
    U64,
    add_command,
    add_output_flag,
    out,
    positive_seconds,
    report_error,
    uint_arg,
)
from node.client.rpc import Client, RpcError
from node.evm import testnet_evm
from node.local import manifest, wan
from node.local import testnet_market as tm
from node.local.config import set_toml_values
from node.local.manifest import (
    NodeInfo,
    TestnetError,
    find_node,
    load,
    manifest_path,
    nodes_of,
    save,
)
from node.local.testnet import (
    DEFAULT_DIR,
    TESTNET_APP,
    add_node,
    check_agreement,
    check_port_range,
    create,
    is_running,
    node_ports,
    node_status,
    parse_params,
    persistent_peers,
    pid_of,
    start_node,
    stop_node,
    validator_table,
    wait_producing,
)

# ------------------------------------------------------------------------------- commands


def _dir(args: argparse.Namespace) -> Path:
    return Path(args.dir).resolve()


def cmd_up(args: argparse.Namespace) -> int:
    d = _dir(args)
    t0 = time.monotonic()
    fresh = not manifest_path(d).exists()
    behaviours: list[str] = []
    if fresh:
        m, spec, behaviours = _create_network(args, d)
    else:
        m, spec = _reopen_network(args, d)
    nodes = nodes_of(m)
    data = _start_network(args, d, m, spec, behaviours if fresh else None)
    rows = validator_table(nodes)
    elapsed = time.monotonic() - t0
    workers = manifest.workers_of(m)
    text = _up_text(args, d, m, rows, data, spec, elapsed)
    out(
        args,
        {
            "dir": str(d),
            "chain_id": m["chain_id"],
            "seconds": round(elapsed, 1),
            "nodes": rows,
            "workers": [asdict(w) for w in workers],
            "wan": spec.to_json() if spec else None,
            **data,
        },
        text,
    )
    return 0


def _reopen_network(args: argparse.Namespace, d: Path) -> tuple[dict[str, Any], Any]:
    """``up`` on a folder that holds a network: (its manifest, its WAN spec or None), with the
    ports and WAN moved as asked; a creation-time flag that would be silently ignored is
    refused."""
    if args.cheaters or args.fixed_roles or args.determinism:
        # the workers' behaviours and roles (and the built-in job) are fixed when the network
        # is created: on a restart they would be silently ignored
        raise TestnetError(
            f"{d} already holds a network: --cheaters, --fixed-roles and --determinism apply"
            " when one is created; remove it first with `loconet testnet down --purge --dir"
            f" {args.dir}`"
        )
    m = load(d)
    given = {
        "--validators": (args.validators, m.get("validators")),
        "--providers": (args.providers, len(manifest.workers_of(m))),
    }
    for flag, (want, have) in given.items():
        if want is not None and want != have:
            # a restart keeps the network it finds: a new size would be silently ignored
            raise TestnetError(
                f"{d} already holds a network with {flag} {have}; {flag} {want} applies "
                "when one is created: remove it first with `loconet testnet down --purge "
                f"--dir {args.dir}` (or pick another --dir)"
            )
    if args.base_port is not None and args.base_port != m["base_port"]:
        check_port_range(args.base_port, len(nodes_of(m)))
        m = move_ports(d, m, args.base_port)
    if args.wan is not None:
        m = set_wan(d, m, args.wan)
    spec = wan.spec_of(m)
    print(
        f"restarting the existing {m['validators']}-validator network in {d} (base port "
        f"{m['base_port']}{f', WAN {spec.text}' if spec else ''})",
        file=sys.stderr,
    )
    return m, spec


def _create_network(args: argparse.Namespace, d: Path) -> tuple[dict[str, Any], Any, list[str]]:
    """``up`` on an empty folder: the defaults filled into ``args``, every flag checked before
    anything is written, then the network created; (its manifest, its WAN spec or None, the
    providers' behaviours)."""
    args.base_port = 26656 if args.base_port is None else args.base_port
    args.validators = 4 if args.validators is None else args.validators
    args.accounts = 2 if args.accounts is None else args.accounts
    args.providers = args.providers or 0
    args.rounds = 5 if args.rounds is None else args.rounds
    if args.providers and not args.no_job and not 1 <= args.rounds <= 2**32 - 1:
        raise TestnetError(f"--rounds must be between 1 and 2^32-1, got {args.rounds}")
    params = parse_params(args.param or [])
    behaviours = tm.parse_cheaters(args.cheaters or [], args.providers)
    tm.plan_roles(behaviours, args.fixed_roles)  # refuse a bad role split before creating
    spec = wan.parse_wan(args.wan) if args.wan else None
    if spec is not None:  # refused before anything is written
        wan.check_size(args.validators)
        wan.toxiproxy_binary()
    print(
        f"creating a {args.validators}-validator network in {d} (base port {args.base_port}"
        f"{f', WAN {spec.text} through toxiproxy' if spec else ''})",
        file=sys.stderr,
    )
    m = create(
        d,
        args.validators,
        args.accounts,
        args.base_port,
        params,
        providers=args.providers,
        wan=spec.to_json() if spec else None,
    )
    return m, spec, behaviours


def _start_network(
    args: argparse.Namespace,
    d: Path,
    m: dict[str, Any],
    spec: Any,
    behaviours: list[str] | None,
) -> dict[str, Any]:
    """Start the proxies, nodes, workers and EVM side of the network in ``d`` and wait for
    blocks; on a fresh network with providers (``behaviours`` not None) register them and create
    the built-in job first. The JSON fields this adds to ``up``'s answer (job_id, evm)."""
    nodes = nodes_of(m)
    try:
        if spec is not None:  # toxiproxy and every link proxy before the nodes dial them
            wan.up(d, m)
        for n in nodes:
            start_node(n)
        wait_producing(nodes, timeout=args.timeout)
        data: dict[str, Any] = {}
        if behaviours is not None and args.providers:
            data = _up_market(d, m, behaviours, args)
        for w in manifest.workers_of(m):
            tm.start_worker(d, w)
        if args.evm:  # anvil, the settlement contracts and a relayer (node/evm/testnet_evm.py)
            data["evm"] = testnet_evm.up(d, nodes[0].rpc_url, args.evm_port)
    except BaseException as e:
        # a wait that timed out (nodes up, workers serving), a failed step or Ctrl-C: what this
        # command started is stopped, never left running with nobody told how to stop it
        stopped = _stop_all(d)
        what = f"stopped {', '.join(stopped)}" if stopped else "nothing was left running"
        if isinstance(e, TestnetError):
            raise TestnetError(
                f"{e}\n{what}; the network's files stay in {d}: `loconet testnet up --dir "
                f"{args.dir}` tries again, `loconet testnet down --purge --dir {args.dir}` removes "
                "them"
            ) from e
        print(f"testnet up did not finish: {what}", file=sys.stderr)
        raise
    return data


def _up_text(
    args: argparse.Namespace,
    d: Path,
    m: dict[str, Any],
    rows: list[dict[str, Any]],
    data: dict[str, Any],
    spec: Any,
    elapsed: float,
) -> str:
    """``up``'s text answer: the validators, the workers, the job, the EVM side, the WAN, and
    how to stop it."""
    text = f"{'MONIKER':8s} {'RPC':24s} {'VALIDATOR ADDRESS':40s} {'POWER':>7s}\n" + "\n".join(
        f"{r['moniker']:8s} {r['rpc']:24s} {r['validator_address']:40s} {r['power']:>7d}"
        for r in rows
    )
    workers = manifest.workers_of(m)
    if workers:
        text += (
            f"\n\n{'WORKER':10s} {'BLOB ENDPOINT':24s} {'BEHAVIOUR':14s} {'ROLE':6s} ADDRESS\n"
            + "\n".join(
                f"{w.name:10s} {w.endpoint:24s} {w.behaviour:14s} {w.role:6s} {w.address}"
                for w in workers
            )
        )
    if data.get("job_id"):
        text += (
            "\n"
            f"job {data['job_id']} created: follow it with `loconet query rounds {data['job_id']} "
            f"--node {nodes_of(m)[0].rpc_url}`"
        )
    if data.get("evm"):
        ev = data["evm"]
        text += (
            "\n"
            f"EVM: anvil at {ev['evm_rpc']}, Checkpoints {ev['checkpoints']}, LOCO token "
            f"{ev['token']}, relayer running; deployment {ev['deployment']}; a user key with ETH: "
            f"{ev['user_key']} ({ev['user_address']})"
        )
    if spec is not None:
        text += (
            f"\nWAN {spec.text}: every p2p link and blob endpoint through toxiproxy "
            f"({spec.rtt_ms} ms RTT, {spec.rate_kbs} KB/s each way; API "
            f"http://127.0.0.1:{wan.api_port(m['base_port'])}, log {wan.wan_dir(d)}/toxiproxy.log)"
        )
    text += (
        "\n"
        f"network {m['chain_id']} is producing blocks ({elapsed:.1f}s); keys in {d / 'keyring'}; "
        f"stop it with `loconet testnet down --dir {args.dir}`"
    )
    return text


def _up_market(
    d: Path, m: dict[str, Any], behaviours: list[str], args: argparse.Namespace
) -> dict[str, Any]:
    """Register the providers, hand them the job's blobs, start their workers, and once every
    worker serves its blobs create the built-in job (so round 0 finds them all listening)."""
    workers = tm.plan_workers(d, m, behaviours, fixed_roles=args.fixed_roles)
    rpc = nodes_of(m)[0].rpc_url
    print(f"registering {len(workers)} provider(s)...", file=sys.stderr)
    tm.register_providers(d, rpc, workers)
    m["workers"] = [asdict(w) for w in workers]
    save(d, m)
    if m.get("wan"):  # each worker's endpoint becomes its proxy before the worker starts
        wan.up(d, m)
    job = None
    if not args.no_job:
        job, dataset, model = tm.builtin_job(args.rounds, workers, args.determinism or "exact")
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


def _running_names(m: dict[str, Any]) -> list[str]:
    return [n.name for n in nodes_of(m) if is_running(n)] + [
        w.name for w in manifest.workers_of(m) if tm.is_running(w)
    ]


def set_wan(d: Path, m: dict[str, Any], text: str) -> dict[str, Any]:
    """``up --wan SPEC|off`` on an existing network: a changed setting is written to every node's
    ``persistent_peers`` and the manifest (the network must be stopped: its peers and workers
    listen elsewhere behind a WAN); the same setting changes nothing."""
    spec = wan.parse_wan(text)
    old = wan.spec_of(m)
    if (spec.text if spec else None) == (old.text if old else None):
        return m
    running = _running_names(m)
    if running:
        raise TestnetError(
            f"{', '.join(running)} still running without the new --wan: stop the network first "
            f"(`loconet testnet down --dir {d}`), then `loconet testnet up --wan {text} --dir {d}`"
        )
    if spec is not None:
        wan.check_size(len(nodes_of(m)))
        wan.toxiproxy_binary()
        m["wan"] = spec.to_json()
    else:
        m.pop("wan", None)
        wan.stop_server(d)
    _write_peers(m)
    save(d, m)
    print(
        f"WAN of the network in {d}: {spec.text if spec else 'off'} (was "
        f"{old.text if old else 'off'})",
        file=sys.stderr,
    )
    return m


def _write_peers(m: dict[str, Any]) -> None:
    """Every node's ``persistent_peers`` in config.toml from the manifest (through the WAN's
    link proxies when it has one)."""
    nodes = nodes_of(m)
    wan_base = m["base_port"] if m.get("wan") else None
    for n in nodes:
        cfg = n.path / "config" / "config.toml"
        write_atomic(
            cfg,
            set_toml_values(
                cfg.read_text(),
                {"p2p": {"persistent_peers": f'"{persistent_peers(nodes, n.name, wan_base)}"'}},
            ),
        )


def move_ports(d: Path, m: dict[str, Any], base: int) -> dict[str, Any]:
    """Give a stopped testnet another base port: every node's P2P, RPC and metrics addresses and
    peer lists in config.toml, and the manifest (node identities and data are kept)."""
    nodes = nodes_of(m)
    running = [n.name for n in nodes if is_running(n)]
    if running:
        raise TestnetError(
            f"{', '.join(running)} still running on base port {m['base_port']}: stop the network "
            f"first (`loconet testnet down --dir {d}`), then `loconet testnet up --base-port "
            f"{base} --dir {d}`"
        )
    wan.stop_server(d)  # its API and proxies move too: `up` starts it again on the new ports
    for n in nodes:
        ports = node_ports(base, int(n.name[4:]))
        n.p2p, n.rpc, n.abci, n.metrics = ports.p2p, ports.rpc, ports.abci, ports.metrics
    wan_base = base if m.get("wan") else None
    for n in nodes:
        cfg = n.path / "config" / "config.toml"
        write_atomic(  # a kill -9 here left a stopped node with half a config.toml
            cfg,
            set_toml_values(
                cfg.read_text(),
                {
                    "rpc": {"laddr": f'"tcp://127.0.0.1:{n.rpc}"'},
                    "p2p": {
                        "laddr": f'"tcp://127.0.0.1:{n.p2p}"',
                        "persistent_peers": f'"{persistent_peers(nodes, n.name, wan_base)}"',
                    },
                    # loopback, as init writes it (node/local/config.py)
                    "instrumentation": {"prometheus_listen_addr": f'"127.0.0.1:{n.metrics}"'},
                },
            ),
        )
    m["base_port"] = base
    m["nodes"] = [asdict(n) for n in nodes]
    save(d, m)
    print(f"moved the network in {d} to base port {base}", file=sys.stderr)
    return m


_LOG_LINE = re.compile(
    r"^\d{4}-\d\d-\d\d[ T](\d\d:\d\d:\d\d)(?:[,.]\d+)? (?:loconet[.\w]* )?(?:INFO )?(.*)$"
)


def log_column(line: str, width: int = 90) -> str:
    """A worker's last log line for the status table: its time of day (the date and milliseconds
    dropped, the logger name too) and its message, cut at the end with an ellipsis. Cutting the
    front to the last ``width`` characters left half a timestamp (``6:52,769 loconet...``)."""
    m = _LOG_LINE.match(line)
    text = f"{m.group(1)} {m.group(2)}" if m else line
    return text if len(text) <= width else text[: width - 1] + "…"


def cmd_status(args: argparse.Namespace) -> int:
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
        f"{s['name']:8s} {s['height'] if s['height'] is not None else '-':>7} "
        f"{s['peers'] if s['peers'] is not None else '-':>5}  {s['app_hash'] or '-':64s}  "
        f"{' '.join(s['flags']) or 'ok'}"
        for s in sts
    )
    ws = [tm.worker_status(w) for w in manifest.workers_of(m)]
    if ws:
        text += (
            f"\n\n{'WORKER':10s} {'STATE':8s} {'BLOBS':6s} {'BEHAVIOUR':14s} {'ROLE':6s} "
            "LAST LOG LINE\n"
            + "\n".join(
                f"{w['name']:10s} {'running' if w['running'] else 'STOPPED':8s} "
                f"{'up' if w['serving'] else 'down':6s} {w['behaviour']:14s} {w['role']:6s} "
                f"{log_column(w['last'])}"
                for w in ws
            )
        )
    m_wan: dict[str, Any] | None = None
    if m.get("wan"):
        m_wan = {**m["wan"], "toxiproxy_running": wan.server_pid(_dir(args)) is not None}
        cut: list[str] = []
        if m_wan["toxiproxy_running"]:
            try:
                cut = wan.Wan(_dir(args), m).partitioned()
            except TestnetError:
                cut = []
        m_wan["partitioned"] = cut
        text += f"\n\nWAN {m_wan['spec']} through toxiproxy: " + (
            ("partitioned proxies: " + ", ".join(cut) if cut else "all links up")
            if m_wan["toxiproxy_running"]
            else "toxiproxy NOT RUNNING (`loconet testnet up` starts it)"
        )
    out(args, {"agreement_height": h, "nodes": sts, "workers": ws, "wan": m_wan}, text)
    ok = all(not s["flags"] for s in sts) and all(w["running"] for w in ws)
    return 0 if ok else 1


def cmd_stop(args: argparse.Namespace) -> int:
    m = load(_dir(args))
    w = manifest.find_worker(m, args.node)
    if w is not None:
        name, kind, ran = w.name, "worker", tm.stop_worker(w, kill=args.kill)
    else:
        n = find_node(m, args.node)
        name, kind, ran = n.name, "node", stop_node(n, kill=args.kill)
    verb = "killed" if args.kill else "stopped"
    out(
        args,
        {"name": name, "kind": kind, "was_running": bool(ran), "killed": bool(args.kill)},
        f"{name} {verb}" if ran else f"{name} was not running",
    )
    return 0


def cmd_start(args: argparse.Namespace) -> int:
    m = load(_dir(args))
    w = manifest.find_worker(m, args.node)
    if w is not None:
        pid = tm.start_worker(_dir(args), w)
        log = w.path / "worker.log"
        out(
            args,
            {"name": w.name, "kind": "worker", "pid": pid, "log": str(log)},
            f"{w.name} started (pid {pid}); log in {log}",
        )
        return 0
    n = find_node(m, args.node)
    if is_running(n):
        out(
            args,
            {"name": n.name, "kind": "node", "pid": pid_of(n), "rpc": n.rpc_url, "started": False},
            f"{n.name} is already running (pid {pid_of(n)}, RPC {n.rpc_url}); stop it first with "
            f"`loconet testnet stop {n.name}`",
        )
        return 0
    others = [node_status(o) for o in nodes_of(m) if o.name != n.name]
    target = max([s["height"] or 0 for s in others] + [1])
    pid = start_node(n)
    print(
        f"{n.name} started (pid {pid}); waiting for it to reach height {target}...", file=sys.stderr
    )
    data: dict[str, Any] = {
        "name": n.name,
        "kind": "node",
        "pid": pid,
        "rpc": n.rpc_url,
        "started": True,
        "height": None,
    }
    text = f"{n.name} started (pid {pid}), RPC {n.rpc_url}"
    if not args.no_wait:
        wait_producing([n], min_height=target, timeout=args.timeout)
        data["height"] = node_status(n)["height"]
        text = f"{n.name} at height {data['height']}, RPC {n.rpc_url}"
    out(args, data, text)
    return 0


def state_sync_config(d: Path) -> dict[str, dict[str, str]]:
    """``[statesync]`` for a node joining from a snapshot: two running nodes' RPC for the light
    client, and a trusted height and block hash read from a running node (the light client
    verifies every header it uses, the snapshot's app hash included, from this one)."""
    nodes = nodes_of(load(d))
    running = [n for n in nodes if is_running(n)]
    if not running:
        raise TestnetError(
            "no node is running: `loconet testnet up` first (state sync needs peers that serve "
            "snapshots)"
        )
    snaps = [
        int(p.name)
        for n in nodes
        for p in (n.path / "data" / "snapshots").glob("*")
        if p.name.isdigit()
    ]
    if not snaps:
        raise TestnetError(
            "no node has a state-sync snapshot yet: wait for a multiple of snapshot_interval "
            f"(app.toml; {TESTNET_APP['snapshot_interval']} for new testnets), or add the node "
            "without --state-sync"
        )
    try:
        with Client(running[0].rpc_url, timeout=5.0) as c:
            trust_height = c.latest_height() - 1
            trust_hash = c.call("commit", height=str(trust_height))["signed_header"]["commit"][
                "block_id"
            ]["hash"]
    except (RpcError, KeyError) as e:
        raise TestnetError(f"cannot read a trusted block from {running[0].name}: {e}") from None
    # cometbft wants two (the same twice is allowed)
    servers = [f"http://127.0.0.1:{n.rpc}" for n in (running * 2)[:2]]
    return {
        "statesync": {
            "enable": "true",
            "rpc_servers": f'"{",".join(servers)}"',
            "trust_height": str(trust_height),
            "trust_hash": f'"{trust_hash}"',
            "trust_period": '"168h0m0s"',
            "discovery_time": '"5s"',
        }
    }


def cmd_add_node(args: argparse.Namespace) -> int:
    d = _dir(args)
    up = [s for s in (node_status(o) for o in nodes_of(load(d))) if s["height"] is not None]
    if not up:
        raise TestnetError(
            f"the network in {d} is down (no node answers): start it with "
            f"`loconet testnet up --dir {d}`, then add the node"
        )
    n = add_node(d, overrides=state_sync_config(d) if args.state_sync else None)
    try:
        m = load(d)
        if m.get("wan"):  # the new node's link proxies (it dials every node through them)
            wan.up(d, m)
        start_node(n)
        wait_producing([n], min_height=1, timeout=args.timeout)
    except (TestnetError, KeyboardInterrupt):
        remove_node(d, n)
        m = load(d)
        if m.get("wan"):  # its proxies go too
            wan.up(d, m)
        raise
    try:
        with Client(n.rpc_url, timeout=5.0) as c:
            earliest: int | None = int(c.status()["sync_info"]["earliest_block_height"])
    except (RpcError, KeyError, ValueError):
        earliest = None
    text = (
        f"{n.name} joined from a state-sync snapshot: its block store starts at height {earliest}\n"
        if args.state_sync
        else ""
    )
    text += (
        f"{n.name} (full node) is in sync: RPC {n.rpc_url}, home {n.home}\n"
        "make it a validator: loconet tx staking create-validator --from account0 "
        f"--validator-home {n.home} --self-bond 100000loco --moniker {n.name} --home {d} --node "
        f"{n.rpc_url}\nthen give it a settlement key (no key, no seat in the set): loconet tx "
        f"settlement set-key --validator-home {n.home} --from account0 --home {d} --node "
        f"{n.rpc_url}, and restart {n.name}"
    )
    out(
        args,
        {
            "name": n.name,
            "rpc": n.rpc_url,
            "home": n.home,
            "state_sync": bool(args.state_sync),
            "earliest_block_height": earliest,
        },
        text,
    )
    return 0


def remove_node(d: Path, n: NodeInfo) -> None:
    """Undo ``add_node``: stop the node, delete its home, drop it from the manifest."""
    stop_node(n, kill=True)
    shutil.rmtree(n.path, ignore_errors=True)
    m = load(d)
    m["nodes"] = [x for x in m["nodes"] if x["name"] != n.name]
    save(d, m)
    print(f"{n.name} did not sync; it was stopped and removed", file=sys.stderr)


def _stop_all(d: Path) -> list[str]:
    """Stop every worker, node and EVM process of the testnet in ``d`` that runs; their names.
    Best effort: a manifest that cannot be read stops what it names and nothing else."""
    try:
        m = load(d)
    except TestnetError:
        return []
    return (
        testnet_evm.down(d)
        + [w.name for w in manifest.workers_of(m) if tm.stop_worker(w)]
        + [n.name for n in nodes_of(m) if stop_node(n)]
        + wan.stop_server(d)
    )


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
    try:
        workers = manifest.workers_of(load(d))
    except TestnetError:
        workers = []
    stopped = (
        testnet_evm.down(d)
        + [w.name for w in workers if tm.stop_worker(w)]
        + [n.name for n in nodes if stop_node(n)]
        + wan.stop_server(d)
    )
    text = f"stopped {', '.join(stopped) or 'nothing (no node was running)'}"
    if args.purge:
        shutil.rmtree(d)
        text += f"\nremoved {d}"
    out(args, {"dir": str(d), "stopped": stopped, "purged": bool(args.purge)}, text)
    return 0


def tail_lines(path: Path, n: int, block: int = 1 << 16) -> list[str]:
    """The last ``n`` lines of ``path``, read backwards from its end in blocks (the whole file
    was read: seconds and gigabytes for `logs -n 20` of a long-running node's log); ``n`` 0 is
    none (``lines[-0:]`` was all of them)."""
    if n <= 0:
        return []
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        end = pos = f.tell()
        data = b""
        while pos > 0 and data.count(b"\n") <= n:
            pos = max(0, pos - block)
            f.seek(pos)
            data = f.read(end - pos)
    return data.decode(errors="replace").splitlines()[-n:]


def cmd_logs(args: argparse.Namespace) -> int:

    m = load(_dir(args))
    w = manifest.find_worker(m, args.node)
    if w is not None:
        path, name = w.path / "worker.log", w.name
    else:
        n = find_node(m, args.node)
        path, name = n.path / ("node.log" if args.app else "cometbft.log"), n.name
    if not path.exists():
        raise TestnetError(f"{path} does not exist yet: has {name} been started?")
    tail = tail_lines(path, args.lines)
    if tail:
        print("\n".join(tail))
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
            return report_error(args, str(e), None, None)

    return run


def register(root_sub: Any, tx_sub: Any, query_sub: Any) -> None:
    tn = root_sub.add_parser(
        "testnet", help="a local multi-validator network on loopback"
    ).add_subparsers(dest="testnet_cmd", required=True, metavar="TESTNET_COMMAND")
    _register_up(tn)
    _register_node_commands(tn)
    _register_down_and_logs(tn)


def _dir_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", default=DEFAULT_DIR, help=f"testnet folder (default {DEFAULT_DIR})")


def _register_up(tn: Any) -> None:
    """testnet up: its flags say how a new network is made (a restart keeps what it finds)."""
    p = add_command(
        tn,
        "up",
        "create (or restart) and start a local network; returns once it produces blocks "
        "(with --providers: workers registered and started, and a training job created)",
        "loconet testnet up --validators 4 --providers 4 --cheaters random-root:1",
        _main_wrap(cmd_up),
    )
    # None = not given: on an existing network a size given with another value is refused
    p.add_argument("--validators", type=int, default=None, help="validators (default 4)")
    p.add_argument("--accounts", type=int, default=None, help="funded account keys (default 2)")
    p.add_argument(
        "--base-port",
        type=int,
        default=None,
        help="p2p port of node0; node i adds 100*i (default 26656); on an existing network it "
        "moves the stopped nodes to these ports",
    )
    p.add_argument(
        "--param",
        action="append",
        metavar="MODULE.KEY=N",
        help="genesis param, e.g. slashing.signed_blocks_window=10 or auth.min_fee_per_byte=20 "
        "(repeatable)",
    )
    p.add_argument(
        "--timeout",
        type=positive_seconds,
        default=300.0,
        help="seconds to wait for blocks, then for the workers to serve (default 300: a busy "
        "machine is slow to start torch); on a timeout what it started is stopped",
    )
    _add_up_provider_flags(p)
    p.add_argument(
        "--wan",
        metavar="RTT:BANDWIDTH",
        default=None,
        help="a WAN on one machine: latency and a bandwidth limit on every p2p link between "
        "nodes and on every worker's blob endpoint, through toxiproxy (make setup builds it), "
        "e.g. 100ms:100mbit (RTT in ms or s, RTT/2 each way; bandwidth in kbit, mbit or gbit, "
        "each way, per connection); kept in testnet.json so a restart brings it back; on an "
        "existing (stopped) network it changes it, `off` removes it",
    )
    p.add_argument(
        "--evm",
        action="store_true",
        help="also start anvil, deploy the settlement contracts and run a relayer (DIR/evm)",
    )
    p.add_argument(
        "--evm-port",
        type=uint_arg(16, lo=1),  # 99999 failed only after the whole network had started
        default=8545,
        help="anvil's port with --evm (default 8545)",
    )
    _dir_flag(p)
    add_output_flag(p)


def _add_up_provider_flags(p: argparse.ArgumentParser) -> None:
    """up's --providers and what the workers do: cheaters, roles, the built-in job."""
    p.add_argument(
        "--providers",
        type=int,
        default=None,
        help="provider workers to run beside the validators (default 0)",
    )
    p.add_argument(
        "--cheaters",
        action="append",
        metavar="KIND:COUNT[,KIND:COUNT...]",
        help="the last providers cheat (tests/demos): random-root, withhold, lazy-verifier or "
        "poison, e.g. --cheaters poison:1,withhold:1,lazy-verifier:1 (repeatable)",
    )
    p.add_argument(
        "--fixed-roles",
        action="store_true",
        help="with --providers: fix who trains and who verifies instead of drawing it (lazy "
        "verifiers and the last honest providers only verify, the others train every round), so "
        "every cheater is examined every round until jailed",
    )
    p.add_argument(
        "--no-job", action="store_true", help="with --providers: do not create the built-in job"
    )
    p.add_argument(
        "--rounds", type=int, default=None, help="rounds of the built-in job (default 5)"
    )
    p.add_argument(
        "--determinism",
        choices=("exact", "tolerance"),
        default=None,
        help="the built-in job's determinism mode (default exact: every worker shares this"
        " machine's stack; tolerance: 1,000 ppm, probes and MsgOpenEnd, jobs README)",
    )


def _register_node_commands(tn: Any) -> None:
    """testnet status|stop|start|add-node: one node or worker of a running network."""
    p = add_command(
        tn,
        "status",
        "height, app hash and peers of every node; flags nodes behind or disagreeing",
        "loconet testnet status",
        _main_wrap(cmd_status),
    )
    _dir_flag(p)
    add_output_flag(p)
    p = add_command(
        tn,
        "stop",
        "stop one node (cometbft and its ABCI app) or one worker (provider1)",
        "loconet testnet stop node2",
        _main_wrap(cmd_stop),
    )
    p.add_argument(
        "node", metavar="NODE", help="node name (node2), index (2) or worker (provider1)"
    )
    p.add_argument("--kill", action="store_true", help="SIGKILL instead of a clean stop")
    _dir_flag(p)
    add_output_flag(p)
    p = add_command(
        tn,
        "start",
        "start one stopped node (and wait until it has caught up) or worker",
        "loconet testnet start node2",
        _main_wrap(cmd_start),
    )
    p.add_argument("node", metavar="NODE")
    p.add_argument("--no-wait", action="store_true")
    p.add_argument("--timeout", type=positive_seconds, default=120.0)
    _dir_flag(p)
    add_output_flag(p)
    p = add_command(
        tn,
        "add-node",
        "add and start a full node (then make it a validator with tx staking create-validator)",
        "loconet testnet add-node --state-sync",
        _main_wrap(cmd_add_node),
    )
    p.add_argument(
        "--state-sync",
        action="store_true",
        help="join from a running node's snapshot (light-client verified) instead of replaying "
        "every block",
    )
    p.add_argument("--timeout", type=positive_seconds, default=120.0)
    _dir_flag(p)
    add_output_flag(p)


def _register_down_and_logs(tn: Any) -> None:
    """testnet down|logs."""
    p = add_command(
        tn,
        "down",
        "stop every node (--purge also deletes the folder)",
        "loconet testnet down --purge",
        _main_wrap(cmd_down),
    )
    p.add_argument("--purge", action="store_true")
    _dir_flag(p)
    add_output_flag(p)
    p = add_command(
        tn,
        "logs",
        "print a node's cometbft log (or its ABCI app log with --app), or a worker's log",
        "loconet testnet logs provider1 -n 50",
        _main_wrap(cmd_logs),
    )
    p.add_argument("node", metavar="NODE")
    p.add_argument("-n", "--lines", type=U64, default=40, help="last lines shown (default 40)")
    p.add_argument("-f", "--follow", action="store_true")
    p.add_argument(
        "--app", action="store_true", help="the loconet process log instead of cometbft's"
    )
    _dir_flag(p)
