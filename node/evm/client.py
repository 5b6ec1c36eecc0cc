"""web3.py glue between loconet's settlement queries and the contracts in contracts/.

A *deployment file* (JSON) records where the contracts live::

    {"evm_chain_id": 31337, "loconet_chain_id": "...", "checkpoints": "0x..",
     "distributor": "0x..", "token": "0x..", "start_number": 3, "block": 1,
     "signers": ["0x..", ...], "powers": [100000, ...], "keyless_power": 0,
     "guardian": "0x..", "mint_limit": 100000000000, "mint_window": 3600}

(``checkpoints`` and ``distributor`` are one address: the distributor is the light client.)

``submit_args`` turns a ``/checkpoint/{n}`` answer into the arguments of
``Checkpoints.submit``; ``claim_args`` turns a ``/claim/{address}`` answer into ``claim``'s.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from web3 import Web3
from web3.contract import Contract

from abci_app.settlement.evm import create_address
from contracts import artifact
from node.atomic import write_atomic


@dataclass
class Deployment:
    evm_chain_id: int
    loconet_chain_id: str
    checkpoints: str
    distributor: str
    token: str
    start_number: int
    block: int
    # the set deployed with (signs checkpoint start_number+1)
    signers: list[str] = field(default_factory=list)
    powers: list[int] = field(default_factory=list)
    keyless_power: int = 0
    guardian: str = ""
    mint_limit: int = 0
    mint_window: int = 0

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # complete or absent: a relayer or `evm claim` never reads half a deployment
        write_atomic(path, json.dumps(asdict(self), indent=1, sort_keys=True) + "\n")

    @classmethod
    def load(cls, path: Path) -> Deployment:
        try:
            d = json.loads(Path(path).read_text())
            return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d or k not in OPTIONAL})
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ValueError(
                f"deployment file {path}: {e}; write one with `loconet evm deploy`"
            ) from e


OPTIONAL = ("signers", "powers", "keyless_power", "guardian", "mint_limit", "mint_window")
# the rate limit `loconet evm deploy` sets unless told otherwise: 100,000 LOCO an hour
DEFAULT_MINT_LIMIT = 100_000 * 1_000_000
DEFAULT_MINT_WINDOW = 3600


def contract(w3: Web3, name: str, address: str) -> Contract:
    return w3.eth.contract(address=Web3.to_checksum_address(address), abi=artifact(name)["abi"])


def checkpoints(w3: Web3, d: Deployment) -> Contract:
    return contract(w3, "Checkpoints", d.checkpoints)


def distributor(w3: Web3, d: Deployment) -> Contract:
    return contract(w3, "RewardsDistributor", d.distributor)


def token(w3: Web3, d: Deployment) -> Contract:
    return contract(w3, "LocoToken", d.token)


def _b32(h: str) -> bytes:
    b = bytes.fromhex(h.removeprefix("0x"))
    if len(b) != 32:
        raise ValueError(f"expected 32 bytes of hex, got {h!r}")
    return b


def set_of(entries: list[dict[str, Any]]) -> tuple[list[str], list[int]]:
    """A signer set from a checkpoint's ``signers``/``next_set`` (already ascending by address)."""
    return [Web3.to_checksum_address(e["evm_address"]) for e in entries], [
        int(e["power"]) for e in entries
    ]


def submit_args(cp: dict[str, Any]) -> tuple[Any, ...]:
    """(checkpoint, current set, signer indices, signatures, next set) for Checkpoints.submit;
    a set is (signers, powers, keyless power)."""
    signers, powers = set_of(cp["signers"])
    index = {a.lower(): i for i, a in enumerate(signers)}
    sigs = sorted(cp["signatures"], key=lambda s: index[s["evm_address"].lower()])
    idx = [index[s["evm_address"].lower()] for s in sigs]
    raw = [bytes.fromhex(s["signature"].removeprefix("0x")) for s in sigs]
    rotates = cp["next_set_hash"] != cp["set_hash"]
    nxt = (
        (*set_of(cp["next_set"]), int(cp.get("next_keyless_power", 0))) if rotates else ([], [], 0)
    )
    head = (
        int(cp["number"]),
        int(cp["height"]),
        _b32(cp["app_hash"]),
        _b32(cp["rewards_root"]),
        _b32(cp["next_set_hash"]),
    )
    return head, (signers, powers, int(cp.get("keyless_power", 0))), idx, raw, nxt


def claim_args(claim: dict[str, Any], number: int) -> tuple[str, int, int, list[bytes]]:
    """``claim``'s arguments: a ``/claim/{address}`` answer and the number of the checkpoint whose
    rewards root its proof is against."""
    return (
        Web3.to_checksum_address(claim["evm_address"]),
        int(claim["cumulative"]),
        int(number),
        [_b32(p) for p in claim["proof"]],
    )


def send(
    w3: Web3, fn: Any, sender: Any, *, gas: int | None = None, nonce: int | None = None
) -> Any:
    """Sign ``fn`` (a bound contract call or constructor) with ``sender`` (an eth_account
    LocalAccount), send it, wait for the receipt; raise if it reverted."""
    tx: dict[str, Any] = {
        "from": sender.address,
        "chainId": w3.eth.chain_id,
        "nonce": w3.eth.get_transaction_count(sender.address, "pending")
        if nonce is None
        else nonce,
    }
    if gas is not None:
        tx["gas"] = gas
    built = fn.build_transaction(tx)
    signed = sender.sign_transaction(built)
    h = w3.eth.send_raw_transaction(signed.raw_transaction)
    receipt = w3.eth.wait_for_transaction_receipt(h, timeout=60)
    if receipt["status"] != 1:
        raise RuntimeError(f"EVM transaction {h.hex()} reverted")
    return receipt


def deploy(
    w3: Web3,
    sender: Any,
    loconet_chain_id: str,
    signers: Sequence[str],
    powers: Sequence[int],
    start_number: int,
    *,
    keyless_power: int = 0,
    guardian: str | None = None,
    mint_limit: int = DEFAULT_MINT_LIMIT,
    mint_window: int = DEFAULT_MINT_WINDOW,
    expect_address: bytes | None = None,
) -> Deployment:
    """Deploy the RewardsDistributor (a Checkpoints light client with the signer set that signs
    checkpoint start_number+1), which deploys its LocoToken. ``guardian`` (default: the sender)
    may pause it. ``expect_address``: the contract loconet's genesis names (settlement params
    ``evm_contract``); the deployment is refused before sending when the sender's next nonce
    would put it elsewhere (validators sign checkpoints for that address only)."""
    nonce = w3.eth.get_transaction_count(sender.address, "pending")
    if expect_address is not None:
        lands = create_address(bytes.fromhex(sender.address[2:]), nonce)
        if lands != expect_address:
            raise ValueError(
                f"loconet signs checkpoints for contract 0x{expect_address.hex()}, but "
                f"{sender.address} would deploy at 0x{lands.hex()} (nonce {nonce}): deploy from "
                "the account and nonce the genesis was written for (settlement params evm_contract)"
            )
    guardian = guardian or sender.address
    b = artifact("RewardsDistributor")
    dist = w3.eth.contract(abi=b["abi"], bytecode=b["bytecode"])
    ctor = dist.constructor(
        loconet_chain_id,
        list(signers),
        list(powers),
        keyless_power,
        start_number,
        Web3.to_checksum_address(guardian),
        mint_limit,
        mint_window,
    )
    r = send(w3, ctor, sender, nonce=nonce)
    dist_c = contract(w3, "RewardsDistributor", r["contractAddress"])
    return Deployment(
        evm_chain_id=w3.eth.chain_id,
        loconet_chain_id=loconet_chain_id,
        checkpoints=r["contractAddress"],  # the distributor is the light client
        distributor=r["contractAddress"],
        token=dist_c.functions.token().call(),
        start_number=start_number,
        block=r["blockNumber"],
        signers=list(signers),
        powers=list(powers),
        keyless_power=keyless_power,
        guardian=Web3.to_checksum_address(guardian),
        mint_limit=mint_limit,
        mint_window=mint_window,
    )
