"""anvil (from npm, installed into contracts/node_modules by `make setup`) as a child process."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx

from contracts import anvil_path

# anvil's well-known development accounts (mnemonic "test test ... junk"): never use on a real chain
DEV_KEYS = (
    "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
    "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
    "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
)


def start(port: int, log_path: Path, state: Path | None = None) -> subprocess.Popen[bytes]:
    """Start anvil on 127.0.0.1:port (auto-mining: one block per tx) and wait until it answers.
    ``state``: load the chain from this file if it exists and write it back on exit (SIGTERM)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    logf = open(log_path, "ab")  # noqa: SIM115 - owned by the child
    extra = ["--state", str(state)] if state is not None else []
    p = subprocess.Popen(
        [
            str(anvil_path()),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--chain-id",
            "31337",
            *extra,
        ],
        stdout=logf,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if p.poll() is not None:
            raise RuntimeError(f"anvil exited with {p.returncode}; see {log_path}")
        try:
            r = httpx.post(
                url,
                json={"jsonrpc": "2.0", "id": 1, "method": "eth_chainId", "params": []},
                timeout=1,
            )
            if r.status_code == 200:
                return p
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    p.kill()
    raise RuntimeError(f"anvil did not answer on {url} within 30 s; see {log_path}")
