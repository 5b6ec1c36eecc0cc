"""A lying CometBFT RPC endpoint, in process (httpx.MockTransport behind node.client.rpc.Client): it
serves a chain it made up itself: its own state tree, its own validator (its own ed25519 key),
headers and commits it signs itself."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
from nacl.signing import SigningKey

from abci_app.store import MerkleStore
from node.client import light


def _ts(h: int) -> str:
    return f"2026-01-01T00:00:{h:02d}.000000001Z"


def header_of(
    chain_id: str,
    h: int,
    time: str,
    validators_hash: bytes,
    next_validators_hash: bytes,
    app_hash: bytes,
    proposer: bytes,
) -> dict[str, Any]:
    """A CometBFT v0.38 header as /commit shows it (the fields light.header_hash reads)."""
    hx = lambda b: b.hex().upper()  # noqa: E731
    return {
        "version": {"block": "11", "app": "0"},
        "chain_id": chain_id,
        "height": str(h),
        "time": time,
        "last_block_id": {"hash": "", "parts": {"total": 0, "hash": ""}},
        "last_commit_hash": "",
        "data_hash": "",
        "validators_hash": hx(validators_hash),
        "next_validators_hash": hx(next_validators_hash),
        "consensus_hash": "",
        "app_hash": hx(app_hash),
        "last_results_hash": "",
        "evidence_hash": "",
        "proposer_address": hx(proposer),
    }


class FakeChain:
    def __init__(self, state: dict[bytes, bytes], chain_id: str = "loconet-local") -> None:
        self.store = MerkleStore(None)
        self.store.stage(1, state)
        self.root = self.store.commit()  # state after block 1 -> app hash of header 2
        self.chain_id = chain_id
        self.key = SigningKey(b"\x07" * 32)
        self.pub = bytes(self.key.verify_key)
        self.val = light.Validator(b"\xaa" * 20, self.pub, 10)
        self.answers: dict[str, Any] = {}  # abci_query path -> (value bytes, [keys to prove])

    def header(self, h: int) -> dict[str, Any]:
        vh = light.validator_set_hash([self.val])
        return header_of(self.chain_id, h, _ts(h), vh, vh, self.root, self.val.address)

    def commit(self, h: int) -> dict[str, Any]:
        hdr = self.header(h)
        bid = {
            "hash": light.header_hash(hdr).hex().upper(),
            "parts": {"total": 1, "hash": "00" * 32},
        }
        msg = light.vote_sign_bytes(self.chain_id, h, 0, bid, _ts(h))
        sig = base64.b64encode(self.key.sign(msg).signature).decode()
        return {
            "signed_header": {
                "header": hdr,
                "commit": {
                    "height": str(h),
                    "round": 0,
                    "block_id": bid,
                    "signatures": [
                        {
                            "block_id_flag": 2,
                            "validator_address": self.val.address.hex().upper(),
                            "timestamp": _ts(h),
                            "signature": sig,
                        }
                    ],
                },
            }
        }

    def rpc(self, method: str, p: dict[str, Any]) -> Any:
        if method == "status":
            return {
                "sync_info": {"latest_block_height": "5"},
                "node_info": {"network": self.chain_id},
            }
        if method == "commit":
            return self.commit(int(p["height"]))
        if method == "validators":
            return {
                "validators": [
                    {
                        "address": self.val.address.hex().upper(),
                        "pub_key": {
                            "type": "tendermint/PubKeyEd25519",
                            "value": base64.b64encode(self.pub).decode(),
                        },
                        "voting_power": str(self.val.power),
                    }
                ],
                "total": "1",
            }
        if method == "abci_query":
            value, keys = self.answers[p["path"]]
            ops = [
                {
                    "type": "loconet:smt",
                    "key": base64.b64encode(k).decode(),
                    "data": base64.b64encode(self.store.prove(k, 1).to_bytes()).decode(),
                }
                for k in keys
            ]
            return {
                "response": {
                    "code": 0,
                    "height": "1",
                    "value": base64.b64encode(value).decode(),
                    "proofOps": {"ops": ops} if p.get("prove") else None,
                }
            }
        raise AssertionError(method)

    def transport(self) -> httpx.MockTransport:
        def handle(req: httpx.Request) -> httpx.Response:
            body = json.loads(req.content)
            return httpx.Response(
                200,
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "result": self.rpc(body["method"], body["params"]),
                },
            )

        return httpx.MockTransport(handle)


def install(monkeypatch: Any, chain: FakeChain) -> None:
    """Every node.client.rpc.Client in this test talks to ``chain``."""
    from node.client import rpc

    orig = rpc.Client.__init__

    def init(
        self: Any, url: str = rpc.DEFAULT_NODE, timeout: float = 10.0, transport: Any = None
    ) -> None:
        orig(self, url, timeout, chain.transport())

    monkeypatch.setattr(rpc.Client, "__init__", init)
