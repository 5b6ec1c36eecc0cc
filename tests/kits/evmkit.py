"""EVM test kit: an in-process chain (web3 + eth-tester on py-evm), validator signer sets, and
checkpoints in the JSON shape loconet's ``/checkpoint/{n}`` query answers."""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass
from typing import Any

from eth_account import Account
from eth_tester.exceptions import TransactionFailed
from web3 import EthereumTesterProvider, Web3
from web3.exceptions import ContractCustomError, ContractLogicError

from abci_app.settlement import evm
from node.evm import client

CHAIN_ID = "loconet-test"
EVM_CHAIN_ID = 131277322940537  # eth-tester's
DEPLOYER_KEY = hashlib.sha256(b"evmkit/deployer").digest()
# where EVM() deploys (its deployer's first contract): the deployment checkpoints name
DEPLOYMENT = (EVM_CHAIN_ID, evm.create_address(evm.address_of_private_key(DEPLOYER_KEY), 0))


@dataclass(frozen=True)
class Member:
    key: bytes
    address: bytes
    power: int


def member(seed: str, power: int) -> Member:
    key = hashlib.sha256(b"evmkit/" + seed.encode()).digest()
    return Member(key, evm.address_of_private_key(key), power)


def make_set(n: int, powers: list[int] | None = None, tag: str = "a") -> list[Member]:
    ms = [member(f"{tag}{i}", powers[i] if powers else 1) for i in range(n)]
    return sorted(ms, key=lambda m: m.address)


def set_json(ms: list[Member]) -> list[dict[str, Any]]:
    return [{"evm_address": "0x" + m.address.hex(), "power": m.power} for m in ms]


def set_hash(ms: list[Member], keyless: int = 0) -> bytes:
    return evm.set_hash([m.address for m in ms], [m.power for m in ms], keyless)


def checkpoint(
    number: int,
    signing: list[Member],
    next_set: list[Member] | None = None,
    signed_by: list[Member] | None = None,
    *,
    root: bytes = bytes(32),
    height: int | None = None,
    chain_id: str = CHAIN_ID,
    app_hash: bytes = b"\x11" * 32,
    deployment: tuple[int, bytes] = DEPLOYMENT,
    keyless: int = 0,
    next_keyless: int | None = None,
) -> dict[str, Any]:
    nxt = signing if next_set is None else next_set
    next_keyless = keyless if next_keyless is None else next_keyless
    height = number * 10 if height is None else height
    d = evm.checkpoint_digest(
        chain_id, *deployment, number, height, app_hash, root, set_hash(nxt, next_keyless)
    )
    by = signing if signed_by is None else signed_by
    return {
        "number": number,
        "height": height,
        "app_hash": app_hash.hex(),
        "rewards_root": root.hex(),
        "set_hash": set_hash(signing, keyless).hex(),
        "next_set_hash": set_hash(nxt, next_keyless).hex(),
        "signers": set_json(signing),
        "next_set": set_json(nxt),
        "keyless_power": keyless,
        "next_keyless_power": next_keyless,
        "signatures": [
            {"evm_address": "0x" + m.address.hex(), "signature": evm.sign_digest(m.key, d).hex()}
            for m in by
        ],
    }


class EVM:
    """An in-process EVM with the three contracts deployed."""

    def __init__(
        self,
        signing: list[Member],
        start_number: int = 0,
        *,
        keyless: int = 0,
        mint_limit: int = client.DEFAULT_MINT_LIMIT,
        mint_window: int = client.DEFAULT_MINT_WINDOW,
    ) -> None:
        self.w3 = Web3(EthereumTesterProvider())
        self.sender = Account.from_key(DEPLOYER_KEY)
        funder = self.w3.eth.accounts[0]
        self.w3.eth.send_transaction(
            {"from": funder, "to": self.sender.address, "value": Web3.to_wei(1000, "ether")}
        )
        addrs, powers = (
            [Web3.to_checksum_address(m.address) for m in signing],
            [m.power for m in signing],
        )
        self.d = client.deploy(
            self.w3,
            self.sender,
            CHAIN_ID,
            addrs,
            powers,
            start_number,
            keyless_power=keyless,
            mint_limit=mint_limit,
            mint_window=mint_window,
            expect_address=DEPLOYMENT[1],
        )
        self.cp = client.checkpoints(self.w3, self.d)
        self.dist = client.distributor(self.w3, self.d)
        self.token = client.token(self.w3, self.d)

    def submit(self, cp: dict[str, Any], *, args: tuple[Any, ...] | None = None) -> Any:
        return client.send(
            self.w3, self.cp.functions.submit(*(args or client.submit_args(cp))), self.sender
        )

    def claim(
        self, account: bytes, cumulative: int, proof: list[bytes], number: int | None = None
    ) -> Any:
        """Claim against checkpoint ``number``'s root (default: the latest accepted)."""
        n = self.cp.functions.lastNumber().call() if number is None else number
        fn = self.dist.functions.claim(Web3.to_checksum_address(account), cumulative, n, proof)
        return client.send(self.w3, fn, self.sender)


def selector(signature: str) -> str:
    return "0x" + evm.keccak256(signature.encode())[:4].hex()


def _revert_data(e: Exception) -> bytes | None:
    data = getattr(e, "data", None)
    if isinstance(data, str) and data.startswith("0x"):
        return bytes.fromhex(data[2:])
    msg = str(e.args[0]) if e.args else ""
    if isinstance(e.args[0] if e.args else None, bytes):
        return e.args[0]
    if msg.startswith("execution reverted: b"):
        raw = ast.literal_eval(msg.removeprefix("execution reverted: "))
        return raw if isinstance(raw, bytes) else None
    return None


def assert_reverts(error_signature: str, fn: Any, *args: Any, **kw: Any) -> None:
    """``fn(*args)`` must revert with the custom error ``error_signature``
    ("BadSignature(uint256)")."""
    try:
        fn(*args, **kw)
    except (ContractCustomError, ContractLogicError, TransactionFailed) as e:
        data = _revert_data(e)
        assert data is not None and data[:4].hex() == selector(error_signature)[2:], (
            e,
            error_signature,
        )
        return
    raise AssertionError(f"did not revert; wanted {error_signature}")
