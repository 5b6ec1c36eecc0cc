"""``loconet init``: a node home with cometbft's config and keys, loconet's app config, a
genesis with this node as the only validator, and a funded ``validator`` account key."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from node.atomic import Held, hold, write_atomic
from node.client import settlement_key
from node.client.keys import Keyring
from node.local.config import (
    DEFAULT_ABCI_ADDRESS,
    AppConfig,
    Ports,
    abci_address_problem,
    set_toml_values,
    tune_cometbft_config,
)
from node.paths import cometbft_binary

ULOCO_PER_LOCO = 1_000_000
VALIDATOR_FUNDS = 1_000_000 * ULOCO_PER_LOCO


class InitError(Exception):
    pass


MAX_CHAIN_ID = 50  # CometBFT's MaxChainIDLen: a longer one is refused by `cometbft start`
MAX_MONIKER = 64  # the staking module's limit for create-validator


def check_chain_id(chain_id: str) -> None:
    """1..50 printable ASCII characters without spaces or quotes (CometBFT refuses an empty or
    longer one only at `start`; the client config refuses spaces and quotes)."""
    if not (
        1 <= len(chain_id) <= MAX_CHAIN_ID
        and chain_id.isascii()
        and chain_id.isprintable()
        and not any(c.isspace() or c in "\"'\\" for c in chain_id)
    ):
        raise InitError(
            f"bad --chain-id {chain_id[:60]!r}: 1..{MAX_CHAIN_ID} ASCII characters without spaces "
            "or quotes, e.g. loconet-local"
        )


def check_moniker(moniker: str) -> None:
    if not 1 <= len(moniker) <= MAX_MONIKER or not moniker.isprintable():
        raise InitError(
            f"bad --moniker {moniker[:80]!r}: 1..{MAX_MONIKER} printable characters (no newline "
            "or control characters), e.g. alice"
        )


def check_abci_address(address: str) -> None:
    """``unix://PATH`` or ``tcp://HOST:PORT`` (``garbage`` or port 99999 made `loconet start`
    fail with a traceback)."""
    problem = abci_address_problem(address)
    if problem:
        raise InitError(f"bad --abci-address: {problem}")


def init_home(
    home: Path,
    chain_id: str = "loconet-local",
    moniker: str = "node0",
    ports: Ports | None = None,
    abci_address: str = DEFAULT_ABCI_ADDRESS,
    listen: dict[str, tuple[str, int]] | None = None,
) -> dict[str, Any]:
    """``listen``: {"rpc"|"p2p": (host, port)} for cometbft's listen addresses (``init
    --rpc-port``, ``--rpc.laddr`` ...), written into config.toml; the others keep ``ports``."""
    home = Path(home)
    check_chain_id(chain_id)
    check_moniker(moniker)
    check_abci_address(abci_address)
    listen = dict(listen or {})
    ports = ports or Ports()
    if listen:
        ports = dataclasses.replace(ports, **{k: port for k, (_, port) in listen.items()})
        taken = {ports.metrics: "cometbft's metrics", ports.metrics + 1: "the app's metrics"}
        for what, (_, port) in listen.items():
            if port in taken:
                raise InitError(
                    f"--{what}-port {port} is {taken[port]} port: pick another (a port other than "
                    f"{ports.metrics} and {ports.metrics + 1})"
                )
        if ports.rpc == ports.p2p:  # `--p2p-port 26657` alone: the RPC's default port
            given = "p2p" if "p2p" in listen and "rpc" not in listen else "rpc"
            other = "RPC" if given == "p2p" else "P2P"
            raise InitError(
                f"--{given}-port {ports.rpc} is the {other} port too: cometbft cannot listen twice "
                f"on it; pick another (or move the {other} port with --{other.lower()}-port)"
            )
    gpath = home / "config" / "genesis.json"
    _refuse_existing(home, gpath, unfinished_too=False)  # unfinished: maybe one running now
    try:  # cometbft answers an uncreatable home with a Go panic and its stack: say it in one line
        home.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InitError(
            f"cannot create the home {home}: {e.strerror or e}; pick a --home you can write to"
        ) from None

    lock = home / ".init.lock"
    try:  # two inits of one home at once mixed their configs and keys
        fd = hold(lock)
    except Held as e:
        raise InitError(f"another `loconet init` (pid {e.pid}) is creating {home}") from None
    try:
        _refuse_existing(home, gpath)  # again, under the lock: the other one may have finished
        return _init_locked(home, gpath, chain_id, moniker, ports, abci_address, listen)
    finally:
        lock.unlink(missing_ok=True)
        os.close(fd)


def unfinished_init_message(home: Path) -> str:
    return (
        f"{home} holds an unfinished init (interrupted?): remove it (`rm -r {home}`) and rerun "
        "`loconet init`"
    )


def genesis_unfinished(gpath: Path) -> bool:
    """The genesis is still cometbft's own: `loconet init` writes the finished one (with
    ``app_state``) last. A byte scan, not a parse: a node's start reads a genesis of any size
    (71 MB with 1M funded accounts) without holding it as Python objects."""
    try:
        return b'"app_state"' not in gpath.read_bytes()
    except OSError:
        return False  # unreadable: cometbft names the file and the error itself


def _refuse_existing(home: Path, gpath: Path, unfinished_too: bool = True) -> None:
    if gpath.exists():
        try:
            finished = "app_state" in json.loads(gpath.read_text())
        except (OSError, ValueError, RecursionError):
            finished = False
        if not finished and not unfinished_too:
            return
        if not finished:  # cometbft's own genesis, not yet ours: an init stopped midway
            raise InitError(unfinished_init_message(home))
        raise InitError(f"{home} is already initialized: pick another --home or remove it")


def _init_locked(
    home: Path,
    gpath: Path,
    chain_id: str,
    moniker: str,
    ports: Ports,
    abci_address: str,
    listen: dict[str, tuple[str, int]],
) -> dict[str, Any]:
    r = subprocess.run(
        [cometbft_binary(), "init", "--home", str(home)],
        capture_output=True,
        text=True,
        check=False,
    )
    if r.returncode != 0:
        raise InitError(f"cometbft init failed: {r.stderr.strip() or r.stdout.strip()}")
    tune_cometbft_config(home, moniker, ports, abci_address=abci_address)
    hosts = {what: host for what, (host, _) in listen.items() if host != "127.0.0.1"}
    if hosts:  # tune_cometbft_config listens on loopback; --rpc.laddr tcp://0.0.0.0:P asks more
        ctoml = home / "config" / "config.toml"
        port = {"rpc": ports.rpc, "p2p": ports.p2p}
        values = {w: {"laddr": f'"tcp://{h}:{port[w]}"'} for w, h in hosts.items()}
        write_atomic(ctoml, set_toml_values(ctoml.read_text(), values))
    write_atomic(home / "config" / "app.toml", AppConfig(abci_address=abci_address).to_toml())
    (home / "data").mkdir(mode=0o700, exist_ok=True)
    (home / "data").chmod(0o700)
    key = Keyring(home).add("validator")

    genesis = json.loads(gpath.read_text())
    pv = json.loads((home / "config" / "priv_validator_key.json").read_text())
    genesis["chain_id"] = chain_id
    genesis["initial_height"] = "1"
    genesis["validators"][0]["name"] = moniker
    # CometBFT drops evidence older than this; equal to slashing.max_evidence_age_blocks (100),
    # which may not exceed staking.unbonding_blocks (100)
    genesis["consensus_params"]["evidence"]["max_age_num_blocks"] = "100"
    # vote extensions from the first block: validators sign settlement checkpoints in ExtendVote
    genesis["consensus_params"]["abci"]["vote_extensions_enable_height"] = "1"

    evm_address = settlement_key.create(home)
    genesis["app_state"] = {
        "settlement": {"keys": [{"validator": pv["address"], "evm_address": evm_address}]},
        "bank": {"balances": [{"address": key.address, "amount": str(VALIDATOR_FUNDS)}]},
        # the genesis self-bond (100,000 of the 1,000,000 LOCO) gives the validator its power
        "staking": {
            "params": {"block_reward": str(ULOCO_PER_LOCO)},
            "validators": [
                {
                    "pub_key": pv["pub_key"]["value"],
                    "operator": key.address,
                    "moniker": moniker,
                    "self_bond": str(VALIDATOR_FUNDS // 10),
                }
            ],
        },
    }
    # last, in one step: until this rename the genesis is cometbft's (no app_state), which the
    # check above reads as an unfinished init
    write_atomic(gpath, json.dumps(genesis, indent=2) + "\n")
    return {
        "home": str(home),
        "chain_id": chain_id,
        "moniker": moniker,
        "validator_address": pv["address"],
        "validator_account": key.address,
        "rpc": f"tcp://{listen.get('rpc', ('127.0.0.1',))[0]}:{ports.rpc}",
        "p2p": f"tcp://{listen.get('p2p', ('127.0.0.1',))[0]}:{ports.p2p}",
    }
