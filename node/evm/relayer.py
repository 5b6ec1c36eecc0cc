"""The relayer: posts final loconet checkpoints to the Checkpoints contract.

The contract is the source of truth: each pass reads ``lastNumber()`` and posts, in order, the
final checkpoints after it that the contract needs: every one that moves the signer set (a
valset update, or an interval checkpoint whose next set differs), and the newest; others are
skipped (the contract accepts numbers that skip, by at most MAX_NUMBER_GAP, when the set did not
move), so a relayer that lagged for a day catches up in one transaction per set change, and a
claim is always against a recent root. Checkpoints that never became final (superseded by a
valset update) are never posted. One transaction at a time (nonce from the chain, gas estimated,
receipt awaited).

Any number of relayers may run: ``submit`` is open to anyone, and a relayer whose transaction
lost the race (another posted that number first) logs it and moves on. Nobody reimburses a
relayer: a checkpoint costs its gas (benchmarks/RESULTS.md, *Settlement an auditor would sign*);
validators or the claimants run one (``loconet evm claim`` posts what it needs itself).

Before sending, the relayer writes a journal entry (checkpoint number, tx hash,
nonce) next to the deployment file; after a restart it first waits for the journalled tx and for
any pending tx of its account, then re-reads ``lastNumber()``: a checkpoint is never sent twice.
Errors from either side (loconet node or EVM node down, a reverted or dropped tx) are logged and
retried after a pause; the loop never exits on them."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from eth_typing import HexStr
from web3 import Web3

from node.atomic import write_atomic
from node.client.rpc import Client
from node.evm import client

log = logging.getLogger("loconet.relayer")
MAX_NUMBER_GAP = 1000  # Checkpoints.MAX_NUMBER_GAP


class CheckpointSource(Protocol):
    """Where the relayer reads final checkpoints (a node; the tests' in-process chain)."""

    def latest_final(self) -> dict[str, Any] | None: ...

    def checkpoint(self, n: int) -> dict[str, Any] | None: ...

    def block_time(self, height: int) -> float | None: ...


class LoconetSource:
    """Reads checkpoints from a loconet node's ABCI queries."""

    def __init__(self, node_url: str) -> None:
        self.node_url = node_url

    def _query(self, path: str) -> Any | None:
        with Client(self.node_url, timeout=5) as c:
            qr = c.abci_query(path)
        return json.loads(qr.value) if qr.code == 0 else None

    def latest_final(self) -> dict[str, Any] | None:
        return self._query("/checkpoint/latest")

    def checkpoint(self, n: int) -> dict[str, Any] | None:
        return self._query(f"/checkpoint/{n}")

    def block_time(self, height: int) -> float | None:
        with Client(self.node_url, timeout=5) as c:
            t = c.block(height)["block"]["header"]["time"]
        return datetime.fromisoformat(t[:26].rstrip("Z")).replace(tzinfo=UTC).timestamp()


@dataclass
class Posted:
    number: int
    tx_hash: str
    gas_used: int
    evm_block: int
    latency_s: float | None  # from the loconet block that made it final to the EVM receipt


class Relayer:
    def __init__(
        self,
        w3: Web3,
        deployment: client.Deployment,
        account: Any,
        source: CheckpointSource,
        journal: Path,
        *,
        on_post: Callable[[Posted], None] | None = None,
    ) -> None:
        self.w3, self.d, self.account, self.src, self.journal = (
            w3,
            deployment,
            account,
            source,
            journal,
        )
        self.contract = client.checkpoints(w3, deployment)
        self.on_post = on_post

    # -- journal ---------------------------------------------------------------------------------
    def _read_journal(self) -> dict[str, Any] | None:
        try:
            data: dict[str, Any] = json.loads(self.journal.read_text())
            return data
        except (OSError, ValueError):
            return None

    def _write_journal(self, entry: dict[str, Any] | None) -> None:
        write_atomic(self.journal, json.dumps(entry, sort_keys=True) + "\n")  # fsynced

    def settle_inflight(self, timeout: float = 120.0) -> None:
        """Wait for a journalled tx and for every pending tx of the account to be mined."""
        entry = self._read_journal()
        if entry and entry.get("tx_hash"):
            try:
                r = self.w3.eth.wait_for_transaction_receipt(
                    HexStr(entry["tx_hash"]), timeout=timeout
                )
                log.info(
                    "journalled tx %s for checkpoint %s mined (status %s)",
                    entry["tx_hash"],
                    entry["number"],
                    r["status"],
                )
            except Exception as e:  # noqa: BLE001 - dropped from the pool: the nonce check below decides
                log.warning("journalled tx %s not found (%s)", entry["tx_hash"], e)
        deadline = time.monotonic() + timeout
        addr = self.account.address
        while self.w3.eth.get_transaction_count(
            addr, "pending"
        ) > self.w3.eth.get_transaction_count(addr, "latest"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{addr} still has pending transactions")
            time.sleep(0.5)
        self._write_journal(None)

    # -- one pass --------------------------------------------------------------------------------
    def step(self) -> list[Posted]:
        self.settle_inflight()
        done: list[Posted] = []
        latest = self.src.latest_final()
        if latest is None:
            return done
        on_chain = int(self.contract.functions.lastNumber().call())
        gap = MAX_NUMBER_GAP
        last_posted = on_chain
        newest = int(latest["number"])
        held: dict[str, Any] | None = None  # the newest final one not posted yet
        for n in range(on_chain + 1, newest + 1):
            cp = latest if n == newest else self.src.checkpoint(n)
            if cp is None:
                break
            if not cp["final"]:
                continue  # superseded (or still pending): never posted
            if held is not None and n - last_posted > gap:
                # posting cp would jump too far: post the one held first
                p = self._post_or_raced(held)
                if p is None:
                    return done
                done.append(p)
                last_posted = int(held["number"])
            held = cp
            if cp["next_set_hash"] != cp["set_hash"] or n == newest:
                p = self._post_or_raced(cp)
                if p is None:
                    return done
                done.append(p)
                last_posted, held = n, None
        return done

    def _post_or_raced(self, cp: dict[str, Any]) -> Posted | None:
        """Post ``cp``; None when another relayer posted it (or a newer one) first."""
        try:
            return self.post(cp)
        except Exception:
            if int(self.contract.functions.lastNumber().call()) >= int(cp["number"]):
                log.info("checkpoint %s was posted by another relayer first", cp["number"])
                return None
            raise

    def post(self, cp: dict[str, Any]) -> Posted:
        fn = self.contract.functions.submit(*client.submit_args(cp))
        nonce = self.w3.eth.get_transaction_count(self.account.address, "pending")
        built = fn.build_transaction(
            {"from": self.account.address, "nonce": nonce, "chainId": self.w3.eth.chain_id}
        )
        signed = self.account.sign_transaction(built)
        tx_hash = "0x" + bytes(signed.hash).hex()
        self._write_journal({"number": cp["number"], "tx_hash": tx_hash, "nonce": nonce})
        self.w3.eth.send_raw_transaction(signed.raw_transaction)
        receipt = self.w3.eth.wait_for_transaction_receipt(HexStr(tx_hash), timeout=120)
        self._write_journal(None)
        if receipt["status"] != 1:
            raise RuntimeError(f"checkpoint {cp['number']}: tx {tx_hash} reverted")
        latency = None
        try:
            t_final = self.src.block_time(int(cp["final_height"]))
            if t_final is not None:
                latency = time.time() - t_final
        except Exception as e:  # noqa: BLE001 - the figure is optional
            log.debug("no latency figure: %s", e)
        p = Posted(
            int(cp["number"]),
            tx_hash,
            int(receipt["gasUsed"]),
            int(receipt["blockNumber"]),
            latency,
        )
        log.info(
            "posted checkpoint %d (height %s, %d signatures) in %s: gas %d, EVM block %d%s",
            p.number,
            cp["height"],
            len(cp["signatures"]),
            tx_hash,
            p.gas_used,
            p.evm_block,
            f", {latency:.2f}s after its final loconet block" if latency is not None else "",
        )
        if self.on_post:
            self.on_post(p)
        return p

    def run(
        self, poll: float = 1.0, until: int | None = None, stop: Callable[[], bool] = lambda: False
    ) -> None:
        backoff = poll
        while not stop():
            try:
                posted = self.step()
                backoff = poll
                if until is not None and int(self.contract.functions.lastNumber().call()) >= until:
                    return
                if posted:
                    continue
            except Exception as e:  # noqa: BLE001 - either node may be down: keep going
                log.warning("relayer pass failed: %s; retrying in %.1fs", e, backoff)
                backoff = min(backoff * 2, 30.0)
            time.sleep(backoff)
