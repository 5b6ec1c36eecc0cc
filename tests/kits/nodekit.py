"""Run real loconet nodes (cometbft + ABCI server) in temp dirs for integration tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from node.client.rpc import Client, NodeUnreachable, RpcError
from node.local.config import AppConfig, Ports, tune_cometbft_config
from node.ports import find_free_base, random_bases

LOCONET = [sys.executable, "-m", "node.cli"]
ROOT = Path(__file__).resolve().parents[2]


def free_port_base() -> int:
    """A base port p such that p..p+4 are free (so a test never collides with a user's node)."""
    return find_free_base(random_bases(30000, 60000, 10), range(5))


def cli(*args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([*LOCONET, *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(
            f"loconet {' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
        )
    return r


class Node:
    def __init__(self, home: Path) -> None:
        self.home = home
        base = free_port_base()
        self.ports = Ports(p2p=base, rpc=base + 1, abci=base + 2, metrics=base + 3)
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"http://127.0.0.1:{self.ports.rpc}"

    def init(self) -> dict:
        out = json.loads(
            cli("init", "--home", str(self.home), "--chain-id", "loconet-it", "-o", "json").stdout
        )
        tune_cometbft_config(self.home, "node0", self.ports)
        (self.home / "config" / "app.toml").write_text(AppConfig(check_invariants=True).to_toml())
        return out

    def start(self) -> None:
        self.log = open(self.home / "node.out", "ab")  # noqa: SIM115 (kept while the node runs)
        self.proc = subprocess.Popen(
            [*LOCONET, "start", "--home", str(self.home)],
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group: kill -9 of the group takes both processes
        )

    def client(self) -> Client:
        return Client(self.url, timeout=5)

    def wait_height(self, h: int, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        with self.client() as c:
            while True:
                try:
                    cur = c.latest_height()
                    if cur >= h:
                        return cur
                except (NodeUnreachable, RpcError):
                    pass
                if self.proc is not None and self.proc.poll() is not None:
                    raise AssertionError(f"node exited with {self.proc.returncode}:\n{self.tail()}")
                if time.monotonic() > deadline:
                    raise AssertionError(f"height {h} not reached in {timeout}s:\n{self.tail()}")
                time.sleep(0.2)

    def tail(self, n: int = 40) -> str:
        parts = []
        for name in ("node.out", "cometbft.log"):
            p = self.home / name
            if p.exists():
                parts.append(
                    f"--- {name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-n:])
                )
        return "\n".join(parts)

    def kill9(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self._wait_gone()

    def stop(self) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(30)
        self._wait_gone()
        return rc

    def _wait_gone(self) -> None:
        """Wait until every process of the group is gone (cometbft included)."""
        assert self.proc is not None
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
        raise AssertionError("node processes still alive")
