"""Issue 28, item 4 and *every listener is on loopback unless the operator asks*: cometbft's
Prometheus listened on every interface (``prometheus_listen_addr = ":26660"``). One test starts
what a user runs with its defaults (a node with ``loconet start``, a provider worker with
``loconet provider run`` and its registered loopback endpoint, ``loconet blob serve`` and
``loconet explorer``), lists the TCP/UDP sockets their processes listen on from
/proc/net/{tcp,tcp6,udp,udp6} and their /proc/PID/fd links, and checks each is bound to 127.0.0.1
or ::1.

cometbft's P2P port is the one a validator of a real multi-host network must expose (other
validators dial it), and the operator opens it by setting ``[p2p] laddr`` in config.toml (as
``[rpc] laddr`` and ``prometheus_listen_addr``); ``loconet init`` writes it on 127.0.0.1 like the
rest, so it is held to loopback here too."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from node.local.config import AppConfig, Ports
from node.local.init import init_home
from node.ports import is_port_free
from tests.kits.nodekit import LOCONET, ROOT, Node, cli, free_port_base

LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def _addr(hexaddr: str) -> tuple[str, int]:
    host, port = hexaddr.split(":")
    raw = b"".join(
        int(host[i : i + 8], 16).to_bytes(4, sys.byteorder) for i in range(0, len(host), 8)
    )
    family = socket.AF_INET if len(raw) == 4 else socket.AF_INET6
    return socket.inet_ntop(family, raw), int(port, 16)


def listening() -> dict[int, tuple[str, str, int]]:
    """inode -> (protocol, host, port) of every listening TCP socket and unconnected bound UDP
    socket of this network namespace."""
    out = {}
    for proto in ("tcp", "tcp6", "udp", "udp6"):
        try:
            lines = Path(f"/proc/net/{proto}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            local, remote, state, inode = f[1], f[2], f[3], int(f[9])
            if proto.startswith("tcp") and state != "0A":  # TCP_LISTEN
                continue
            if proto.startswith("udp") and _addr(remote)[1] != 0:  # connected: not listening
                continue
            out[inode] = (proto, *_addr(local))
    return out


def descendants(pid: int) -> set[int]:
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, todo = {pid}, [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p and c not in found]
        found.update(kids)
        todo += kids
    return found


def sockets_of(pids: set[int]) -> set[int]:
    inodes = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(int(link[8:-1]))
    return inodes


def listen_arg(default_port: int) -> list[str]:
    """Nothing (the command's default) when its default port is free, else an explicit
    loopback port (a developer's own demo may hold the default); the default's host is then
    checked in the parser (test below)."""
    return [] if is_port_free(default_port) else ["--listen", f"127.0.0.1:{free_port_base()}"]


def wait_listening(pids: set[int], port: int, what: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while True:
        socks = listening()
        if any(socks[i][2] == port for i in sockets_of(pids) if i in socks):
            return
        assert proc.poll() is None, f"{what} exited with {proc.returncode}"
        assert time.monotonic() < deadline, f"{what} not listening on port {port}"
        time.sleep(0.2)


def test_cometbft_prometheus_listens_on_loopback(tmp_path: Path) -> None:
    base = free_port_base()
    home = tmp_path / "home"
    init_home(home, chain_id="t", ports=Ports(base, base + 1, base + 2, base + 3))
    cfg = tomllib.loads((home / "config" / "config.toml").read_text())
    assert cfg["instrumentation"]["prometheus_listen_addr"] == f"127.0.0.1:{base + 3}"
    assert cfg["rpc"]["laddr"] == f"tcp://127.0.0.1:{base + 1}"
    assert cfg["p2p"]["laddr"] == f"tcp://127.0.0.1:{base}"
    # the app's own metrics are still one port above cometbft's
    assert AppConfig.load(home).metrics_listen(home) == f"127.0.0.1:{base + 4}"


def test_default_listen_addresses_of_blob_serve_and_explorer_are_loopback() -> None:
    from node.cli.main import build_parser

    parser = build_parser()
    blob = parser.parse_args(["blob", "serve", "--home", "h"])
    explorer = parser.parse_args(["explorer"])
    assert blob.listen.rpartition(":")[0] == "127.0.0.1"
    assert explorer.listen.rpartition(":")[0] == "127.0.0.1"


@pytest.mark.integration
def test_every_listener_is_on_loopback(tmp_path: Path) -> None:
    node = Node(tmp_path / "home")
    node.init()
    home = str(node.home)
    blob_port = free_port_base()
    procs: dict[str, subprocess.Popen] = {}
    logs = []
    try:
        node.start()
        node.wait_height(1)
        assert node.proc is not None
        r = cli(
            *("tx", "provider", "register", "--bond", "2000loco", "--throughput", "1000"),
            *("--region", "eu", "--endpoint", f"http://127.0.0.1:{blob_port}"),
            *("--from", "validator", "--home", home, "--node", node.url, "-o", "json"),
        )
        tx = json.loads(r.stdout)
        assert tx.get("code", 0) == 0, r.stdout

        def spawn(name: str, *args: str) -> subprocess.Popen:
            log = open(tmp_path / f"{name}.log", "wb")  # noqa: SIM115 (closed below)
            logs.append(log)
            p = subprocess.Popen([*LOCONET, *args], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
            procs[name] = p
            return p

        blob_args = listen_arg(26680)
        explorer_args = listen_arg(8080)
        spawn(
            "worker",
            *("provider", "run", "--home", home, "--from", "validator", "--node", node.url),
            *("--device", "cpu", "--data-dir", str(tmp_path / "worker")),
        )
        spawn("blob", "blob", "serve", "--home", home, *blob_args)
        spawn("explorer", "explorer", "--node", node.url, *explorer_args)
        port_of = {
            "worker": blob_port,
            "blob": int(blob_args[1].rsplit(":", 1)[1]) if blob_args else 26680,
            "explorer": int(explorer_args[1].rsplit(":", 1)[1]) if explorer_args else 8080,
        }
        for name, p in procs.items():
            wait_listening(descendants(p.pid), port_of[name], name, p)

        owners = {"node": descendants(node.proc.pid)} | {
            name: descendants(p.pid) for name, p in procs.items()
        }
        socks = listening()
        found: dict[str, list[tuple[str, str, int]]] = {
            name: sorted(socks[i] for i in sockets_of(pids) if i in socks)
            for name, pids in owners.items()
        }
        ports = {name: {port for _, _, port in s} for name, s in found.items()}
        # the listeners this test is about are all there (it is not vacuous)
        np = node.ports
        assert {np.p2p, np.rpc, np.metrics, np.metrics + 1} <= ports["node"], found
        for name in procs:
            assert port_of[name] in ports[name], found
        exposed = [
            (name, s) for name, socks_ in found.items() for s in socks_ if s[1] not in LOOPBACK
        ]
        assert not exposed, f"listening beyond loopback: {exposed}"
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for log in logs:
            log.close()
        node.stop()
