"""`make demo-node`: a single local loconet node, end to end, with the commands a user would type.

1. `loconet init` a fresh home in .loconet-demo-node/ (ports chosen free, so a running node is
untouched)
2. `loconet start` it in the background and wait for blocks
3. `loconet keys add alice`, `loconet tx bank send <alice> 2.5loco --from validator`
4. the balances (with Merkle proofs verified against the next header's app hash) and the block
   the transfer landed in
5. stop the node cleanly (SIGTERM) and check both processes exited
6. the trainer on its own: a short DiLoCo simulation with compressed updates, and a verifier
   re-executing one committed segment
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from node.client.rpc import Client, RpcError
from node.local.config import Ports, tune_cometbft_config
from node.ports import find_free_base

ROOT = Path(__file__).resolve().parent.parent
HOME = ROOT / ".loconet-demo-node"
LOCONET = [sys.executable, "-m", "node.cli"]


def step(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m", flush=True)


def run(*args: str, show: bool = True) -> str:
    if show:
        print("$ loconet " + " ".join(shlex.quote(a) for a in args), flush=True)
    r = subprocess.run([*LOCONET, *args], capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        sys.exit(f"demo failed: loconet {' '.join(args)}\n{r.stdout}{r.stderr}")
    if show:
        text = (r.stderr + r.stdout) if "train" in args[:1] else r.stdout
        print(text.rstrip(), flush=True)
    return r.stdout


def free_base() -> int:
    # P2P, RPC, ABCI, -, CometBFT and app metrics
    return find_free_base(range(26656, 40000, 100), range(6))


def init_node() -> str:
    """Step 1: a fresh node home (on free ports when the defaults are busy); its RPC URL."""
    if HOME.exists():
        shutil.rmtree(HOME)
    step("1. initialise a node")
    run("init", "--home", str(HOME), "--chain-id", "loconet-demo", "--moniker", "demo")
    base = free_base()
    ports = Ports(p2p=base, rpc=base + 1, abci=base + 2, metrics=base + 4)
    if base != 26656:
        print(f"(default ports busy: using {base}..{base + 5})")
        tune_cometbft_config(HOME, "demo", ports)
    return f"http://127.0.0.1:{ports.rpc}"


def wait_blocks(node: str, proc: subprocess.Popen[bytes]) -> None:
    """Until the node has made 2 blocks (60 s at most, or it exited: the demo fails)."""
    with Client(node, timeout=3) as c:
        deadline = time.monotonic() + 60
        while True:
            try:
                if c.latest_height() >= 2:
                    break
            except (RpcError, KeyError, TypeError, ValueError):
                pass  # the node is still starting
            if proc.poll() is not None or time.monotonic() > deadline:
                sys.exit(
                    f"demo failed: node did not produce blocks; see {HOME / 'node.out'} and "
                    f"{HOME / 'cometbft.log'}"
                )
            print(".", end="", flush=True)
            time.sleep(0.5)
    print()


def transfer_and_show(node: str) -> None:
    """Steps 3 and 4: a new account, a transfer to it, both balances proven, its block."""
    step("3. a new account, and a transfer to it")
    alice = json.loads(run("keys", "add", "alice", "--home", str(HOME), "-o", "json", show=False))[
        "address"
    ]
    print(f"$ loconet keys add alice --home {HOME}\nadded key 'alice'\naddress: {alice}")
    validator = run("keys", "show", "validator", "--home", str(HOME), show=False).strip()
    sent = run(
        "tx",
        "bank",
        "send",
        alice,
        "2.5loco",
        "--from",
        "validator",
        "--home",
        str(HOME),
        "--node",
        node,
    )
    height = int(sent.split("height:")[1].split()[0])

    step("4. balances, proven against the app hash, and the block the transfer landed in")
    run("query", "account", alice, "--prove", "--node", node)
    run("query", "account", validator, "--prove", "--node", node)
    with Client(node) as c:
        blk = c.block(height)
    hdr = blk["block"]["header"]
    print(
        f"block {hdr['height']}: hash {blk['block_id']['hash']}, "
        f"{len(blk['block']['data']['txs'])} tx, proposer {hdr['proposer_address']}, time "
        f"{hdr['time']}"
    )


def stop_node(proc: subprocess.Popen[bytes]) -> tuple[int, bool]:
    """Step 5: SIGTERM to the node; its exit status and whether any of its group lives on."""
    step("5. stop the node cleanly")
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(30)
    try:
        os.killpg(proc.pid, 0)
        alive = True
    except ProcessLookupError:
        alive = False
    print(
        f"node exited with status {rc}; cometbft and the ABCI server "
        f"{'STILL RUNNING' if alive else 'both stopped'}"
    )
    return rc, alive


def train_and_verify() -> None:
    """Step 6: the trainer's simulation and a verifier's re-execution of a segment."""
    step(
        "6. the trainer: 2 providers, 3 DiLoCo rounds with compressed updates, then a verifier "
        "re-executes a segment"
    )
    run(
        "train",
        "simulate",
        "--workers",
        "2",
        "--rounds",
        "3",
        "--inner-steps",
        "20",
        "--model-size",
        "tiny",
        "--compression",
        "topk:0.05+int8",
        "--out",
        str(HOME / "train"),
    )
    run("train", "verify", "--segment", str(HOME / "train" / "segment"))
    print(f"plots: {HOME / 'train' / 'val_loss.png'}, {HOME / 'train' / 'bytes_per_round.png'}")


def main() -> int:
    node = init_node()
    step("2. start it (cometbft + ABCI app) and wait for blocks")
    print(f"$ loconet start --home {HOME}   (in the background; log in {HOME / 'node.out'})")
    log = open(HOME / "node.out", "wb")  # noqa: SIM115 (the node's log for as long as it runs)
    proc = subprocess.Popen(
        [*LOCONET, "start", "--home", str(HOME)],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_blocks(node, proc)
        run("status", "--node", node)
        transfer_and_show(node)
    finally:
        rc, alive = stop_node(proc)
    train_and_verify()
    print("\ndemo done. Explore further: loconet --help")
    return 0 if rc == 0 and not alive else 1


if __name__ == "__main__":
    sys.exit(main())
