"""``loconet init``: a node home with cometbft's config and keys, loconet's app config, a
genesis with this node as the only validator, and a funded ``validator`` account key."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from node.config import DEFAULT_ABCI_ADDRESS, AppConfig, Ports, tune_cometbft_config
from node.keys import Keyring
from node.paths import cometbft_binary

ULOCO_PER_LOCO = 1_000_000
VALIDATOR_FUNDS = 1_000_000 * ULOCO_PER_LOCO


class InitError(Exception):
    pass


def init_home(
    home: Path,
    chain_id: str = "loconet-local",
    moniker: str = "node0",
    ports: Ports | None = None,
    abci_address: str = DEFAULT_ABCI_ADDRESS,
) -> dict[str, Any]:
    home = Path(home)
    if (home / "config" / "genesis.json").exists():
        raise InitError(f"{home} is already initialized: pick another --home or remove it")
    ports = ports or Ports()
    try:  # cometbft answers an uncreatable home with a Go panic and its stack: say it in one line
        home.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InitError(f"cannot create the home {home}: {e.strerror or e}; pick a --home you can write to") from None
    r = subprocess.run(
        [cometbft_binary(), "init", "--home", str(home)], capture_output=True, text=True, check=False
    )
    if r.returncode != 0:
        raise InitError(f"cometbft init failed: {r.stderr.strip() or r.stdout.strip()}")
    tune_cometbft_config(home, moniker, ports, abci_address=abci_address)
    (home / "config" / "app.toml").write_text(AppConfig(abci_address=abci_address).to_toml())
    (home / "data").mkdir(mode=0o700, exist_ok=True)
    (home / "data").chmod(0o700)
    key = Keyring(home).add("validator")

    gpath = home / "config" / "genesis.json"
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
    from node import settlement_key

    evm_address = settlement_key.create(home)
    genesis["app_state"] = {
        "settlement": {"keys": [{"validator": pv["address"], "evm_address": evm_address}]},
        "bank": {"balances": [{"address": key.address, "amount": str(VALIDATOR_FUNDS)}]},
        "staking": {  # the genesis self-bond (100,000 of the 1,000,000 LOCO) gives the validator its power
            "params": {"block_reward": str(ULOCO_PER_LOCO)},
            "validators": [{"pub_key": pv["pub_key"]["value"], "operator": key.address, "moniker": moniker,
                            "self_bond": str(VALIDATOR_FUNDS // 10)}],
        },
    }
    gpath.write_text(json.dumps(genesis, indent=2) + "\n")
    return {
        "home": str(home),
        "chain_id": chain_id,
        "moniker": moniker,
        "validator_address": pv["address"],
        "validator_account": key.address,
    }
