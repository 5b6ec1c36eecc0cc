"""What the explorer shows, read from a node's RPC and checked like ``--prove`` does.

``Collector.snapshot()`` reads the state of one height H (the latest block but one, so that the
header H+1 carrying its app hash exists): it checks header H+1 once as a light client does
(``node.client.light.verified_app_hash``: header hash = signed block id, validator-set hash, > 2/3
of the power signed), then asks every query with ``prove=true`` at height H, checks every proof
against that app hash (``node.client.proofs.verify_ops``) and re-derives each record from the proven
bytes with the chain's own ``*_to_json``: a node whose answer differs from its proof is reported
on the page, not shown as truth. (A list is as complete as the node makes it: every listed record
is proven, but without range proofs a node could leave one out.) Blocks, validators and transactions
come from CometBFT's RPC (signed by the chain, not state proofs: ``chain_log.py``); a provider's
live training figures from its worker (``live.py``); the reputation history is sampled
from the node's store at past heights when the collector starts, then once per new height.

Everything here is synchronous (httpx via ``node.client.rpc.Client``); the server runs it in a
thread.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from abci_app.auth.keys import account_key
from abci_app.bank.keys import balance_key
from abci_app.codec.address import from_bech32
from abci_app.encoding import decode_amount, decode_msg
from abci_app.jobs import sla
from abci_app.jobs.keys import job_key, round_key, sla_key
from abci_app.jobs.queries import job_to_json, round_to_json, sla_to_json
from abci_app.pb import jobs_pb2, providers_pb2, staking_pb2, state_pb2
from abci_app.providers.keys import provider_key
from abci_app.providers.queries import provider_to_json
from abci_app.slashing.keys import signing_info_key
from abci_app.slashing.params import slashing_pb2
from abci_app.staking.keys import bond_key, validator_key
from node.client.light import HeaderInvalid, verified_app_hash
from node.client.proofs import ProofInvalid, proven_record, proven_records, verify_ops
from node.client.rpc import Client, RpcError
from node.explorer.chain_log import ChainLog
from node.explorer.live import LiveFigures

if TYPE_CHECKING:
    from node.client.trust import TrustStore

HISTORY_SAMPLES = 24
ACCOUNT_TXS = 50  # txs listed on an account page
RECENT_TX_HEIGHTS = 5000  # the recent txs list looks this far back
MAX_ROUNDS_PER_JOB = 100


class Untrusted(Exception):
    """The node's answer disagrees with its proof, or a proof or header does not check."""


@dataclass
class Snapshot:
    height: int  # the state shown: after block `height`
    latest_height: int
    chain_id: str
    moniker: str
    latest_time: str
    app_hash: str  # of header height+1, checked
    block_time_ms: int | None
    validators: list[dict[str, Any]]
    providers: list[dict[str, Any]]  # provider JSON + "sla"
    jobs: list[dict[str, Any]]  # job JSON + "round_records" (its rounds) + "txs"
    proven_keys: int
    untrusted: str = ""  # non-empty: why this node's answers cannot be trusted
    reputation_history: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    recent_blocks: list[dict[str, Any]] = field(default_factory=list)
    recent_txs: list[dict[str, Any]] = field(default_factory=list)
    block_times: dict[int, float] = field(default_factory=dict)  # height -> unix seconds

    def provider(self, address: str) -> dict[str, Any] | None:
        return next((p for p in self.providers if p["address"] == address), None)

    def job(self, job_id: int) -> dict[str, Any] | None:
        return next((j for j in self.jobs if j["id"] == job_id), None)


class Collector:
    """One node's state for the pages: the proven queries here, the RPC reads in ``self.chain``
    and the providers' live figures in ``self.live``, put together by :meth:`snapshot`."""

    def __init__(self, url: str, timeout: float = 10.0, trust: TrustStore | None = None) -> None:
        self.url = url
        self.client = Client(url, timeout=timeout)
        self.trust = trust  # signers trusted from a node home's genesis (node/client/trust.py)
        self._lock = threading.Lock()
        self.chain = ChainLog(self.client)  # blocks, txs, events: signed, not state proofs
        self.live = LiveFigures()  # providers' self-reported training figures
        self._history: dict[str, list[tuple[int, int]]] = {}
        self._history_to = 0
        self.proven_keys = 0

    def close(self) -> None:
        self.client.close()

    # -- proven queries -------------------------------------------------------------------------
    def _query(self, path: str, height: int, root: bytes) -> tuple[Any, dict[bytes, bytes | None]]:
        qr = self.client.abci_query(path, height=height, prove=True)
        if qr.code != 0:
            raise RpcError(f"query {path} failed (code {qr.code}): {qr.log}")
        data = json.loads(qr.value)
        proven = verify_ops(qr, root) if qr.proof_ops else {}
        self.proven_keys += len(proven)
        return data, proven

    @staticmethod
    def _records(
        proven: dict[bytes, bytes | None],
        decode: Callable[[bytes], Any],
        key_of: Callable[[Any], bytes],
        what: str,
    ) -> list[Any]:
        """A proven list's records, each under the key its own id makes (node/client/proofs.py)."""
        try:
            return proven_records(proven, decode, key_of)
        except ProofInvalid as e:
            raise Untrusted(f"the node's {what}: {e}: do not trust this node") from None

    @staticmethod
    def _same(what: str, node_said: Any, proven: Any) -> None:
        if node_said != proven:
            raise Untrusted(
                f"the node's {what} disagrees with its own proof: do not trust this node"
            )

    def _providers(self, h: int, root: bytes) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        start = 0
        while True:
            data, proven = self._query(f"/providers?from={start}&limit=200", h, root)
            page = data["providers"]
            derived = [
                provider_to_json(p)
                for p in self._records(
                    proven,
                    lambda b: decode_msg(providers_pb2.Provider, b),
                    lambda p: provider_key(p.address),
                    "provider list",
                )
            ]
            self._same(
                "provider list",
                sorted(page, key=lambda p: p["address"]),
                sorted(derived, key=lambda p: p["address"]),
            )
            out += page
            start += len(page)
            if not page or start >= data["total"]:
                return out

    def _sla(self, address: str, h: int, root: bytes) -> dict[str, Any]:
        data, proven = self._query(f"/provider/{address}/sla", h, root)
        try:  # exactly this provider's key: another's SLA, or an unrelated absence, verified too
            raw = proven_record(proven, sla_key(from_bech32(address)))
        except ProofInvalid as e:
            raise Untrusted(f"SLA proof of {address}: {e}: do not trust this node") from None
        self._same(
            f"SLA of {address}",
            data,
            sla_to_json(from_bech32(address), sla.Sla() if raw is None else sla.decode_sla(raw)),
        )
        return data

    def _jobs(self, h: int, root: bytes) -> list[dict[str, Any]]:
        data, proven = self._query("/jobs?limit=100", h, root)
        derived = [
            job_to_json(j)
            for j in self._records(
                proven, lambda b: decode_msg(jobs_pb2.Job, b), lambda j: job_key(j.id), "job list"
            )
        ]
        self._same(
            "job list",
            sorted(data["jobs"], key=lambda j: j["id"]),
            sorted(derived, key=lambda j: j["id"]),
        )
        jobs = data["jobs"]
        for j in jobs:
            rd, rproven = self._query(f"/rounds/{j['id']}?limit={MAX_ROUNDS_PER_JOB}", h, root)
            jid = int(j["id"])

            def where(r: Any, jid: int = jid) -> bytes:  # this job's round, under its key
                return round_key(jid, r.round) if r.job_id == jid else b""

            rderived = [
                round_to_json(r)
                for r in self._records(
                    rproven, lambda b: decode_msg(jobs_pb2.Round, b), where, f"rounds of job {jid}"
                )
            ]
            self._same(f"rounds of job {j['id']}", rd["rounds"], rderived)
            j["round_records"] = rd["rounds"]
        return jobs

    def _validators(self, h: int, root: bytes, power: dict[str, int]) -> list[dict[str, Any]]:
        """The validator set of height h (CometBFT's, with its power) joined with each one's
        staking record (moniker, stake, status: proven, re-derived from its stored bytes) and its
        signing info (missed blocks in the slashing window: proven too). Uptime is the share of
        the window's blocks it signed."""
        data, proven = self._query("/validators", h, root)
        out = []
        for v in data:
            cons = bytes.fromhex(v["address"])
            # the list's proof covers every listed validator's key: this one's must be among them
            raw = proven.get(validator_key(cons))
            if raw is None:
                raise Untrusted(
                    f"validator {v['address']}: the proof does not cover its record: do not trust "
                    "this node"
                )
            rec = decode_msg(staking_pb2.Validator, raw)
            self._same(
                f"validator {v['address']}",
                [v["moniker"], v["power"], v["tokens"], v["jailed"], v["tombstoned"], v["slashed"]],
                [rec.moniker, rec.power, rec.tokens, rec.jailed, rec.tombstoned, rec.slashed],
            )
            si, sproven = self._query(f"/signing_info/{v['address']}", h, root)
            try:
                sraw = proven_record(sproven, signing_info_key(cons))
            except ProofInvalid as e:
                raise Untrusted(
                    f"signing info {v['address']}: {e}: do not trust this node"
                ) from None
            info = decode_msg(slashing_pb2.SigningInfo, sraw) if sraw is not None else None
            missed = info.missed_blocks_counter if info else 0
            self._same(f"signing info of {v['address']}", si["missed_blocks_counter"], missed)
            seen = min(si["window"], max(1, h - (info.start_height if info else 0) + 1))
            out.append(
                {
                    **v,
                    "power": power.get(v["address"], 0),  # CometBFT's set at h (0: not in it)
                    "staking_power": v["power"],
                    "missed_blocks": missed,
                    "window": si["window"],
                    "max_missed": si["max_missed"],
                    "uptime_bps": max(0, (seen - missed) * 10_000 // seen),
                }
            )
        return sorted(out, key=lambda v: (-v["power"], -v["tokens"], v["address"]))

    def _sample_history(self, h: int) -> None:
        """Reputation of every provider at up to HISTORY_SAMPLES past heights (once), then at each
        new height: the store keeps history, so past answers are the chain's own."""
        if self._history_to == 0:
            step = max(1, h // HISTORY_SAMPLES)
            heights = list(range(max(1, h % step or step), h, step))
        else:
            heights = list(range(self._history_to + 1, h))[-HISTORY_SAMPLES:]
        for x in [*heights, h]:
            if x <= self._history_to:
                continue
            try:
                qr = self.client.abci_query("/providers?limit=200", height=x)
            except RpcError:
                continue
            if qr.code != 0:
                continue
            for p in json.loads(qr.value)["providers"]:
                self._history.setdefault(p["address"], []).append((x, p["reputation"]))
            self._history_to = x

    # -- the snapshot ---------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        with self._lock:
            return self._snapshot()

    def _snapshot(self) -> Snapshot:
        st = self.client.status()
        latest = int(st["sync_info"]["latest_block_height"])
        if latest < 2:
            raise RpcError(f"the node is at height {latest}: waiting for two blocks")
        h = latest - 1
        try:
            root = verified_app_hash(self.client, h + 1, trust=self.trust)
        except HeaderInvalid as e:
            raise Untrusted(f"header {h + 1} does not check: {e}") from None
        self.proven_keys = 0
        untrusted = ""
        try:
            providers, jobs = self._market(h, root)
        except (Untrusted, ProofInvalid) as e:
            untrusted, providers, jobs = str(e), [], []
        heights = self._attach_txs(jobs)
        self._attach_live(providers, jobs)
        power = {v["address"]: int(v["voting_power"]) for v in self.client.validators(h)}
        validators = sorted(
            ({"address": a, "power": p} for a, p in power.items()),
            key=lambda v: (-v["power"], v["address"]),
        )
        if not untrusted:
            try:
                validators = self._validators(h, root, power)
            except (Untrusted, ProofInvalid) as e:
                untrusted = str(e)
        self._sample_history(h)
        recent_blocks = self.chain.recent_blocks(latest)
        recent_txs = self.chain.tx_list(f"tx.height>={max(1, latest - RECENT_TX_HEIGHTS)}")[0]
        return Snapshot(
            height=h,
            latest_height=latest,
            chain_id=st["node_info"]["network"],
            moniker=st["node_info"]["moniker"],
            latest_time=st["sync_info"]["latest_block_time"],
            app_hash=root.hex().upper(),
            block_time_ms=self.chain.block_time_ms(latest),
            validators=validators,
            recent_blocks=recent_blocks,
            recent_txs=recent_txs,
            block_times=self.chain.block_times(heights),
            providers=providers,
            jobs=jobs,
            proven_keys=self.proven_keys,
            untrusted=untrusted,
            reputation_history={a: list(s) for a, s in self._history.items()},
        )

    def _market(self, h: int, root: bytes) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The providers (each with its SLA) and the jobs (each with its rounds) at height h,
        every record proven against ``root``."""
        providers = self._providers(h, root)
        for p in providers:
            p["sla"] = self._sla(p["address"], h, root)
        return providers, self._jobs(h, root)

    def _attach_txs(self, jobs: list[dict[str, Any]]) -> set[int]:
        """Each job's txs by round (``"txs"``); returns the heights its page dates (creation,
        round windows, finalization, commitments)."""
        heights: set[int] = set()
        for j in jobs:
            j["txs"] = self.chain.job_txs(j)
            heights.add(j["created_height"])
            for r in j["round_records"]:
                heights |= {r["windows"]["open_height"], r["finalized_height"]}
                heights |= {p["commitment"]["height"] for p in r["participants"] if p["commitment"]}
        return heights

    def _attach_live(self, providers: list[dict[str, Any]], jobs: list[dict[str, Any]]) -> None:
        """A provider in one of the last three rounds of an active job gets its worker's live
        figures (``"live"``); the others ``{}`` (nothing is asked of them)."""
        for p in providers:
            active = any(
                q["address"] == p["address"]
                for j in jobs
                if j["status"] == "active"
                for r in j["round_records"][-3:]
                for q in r["participants"]
            )
            p["live"] = self.live.progress(p["endpoint"]) if active and p["endpoint"] else {}

    # -- single records the pages link to -------------------------------------------------------
    def account(self, address: str, h: int, root: bytes) -> dict[str, Any]:
        """An account at height h (balance and sequence proven against the app hash ``root`` the
        snapshot checked, re-derived from the stored bytes), its newest txs (signed by it, or
        sending to it) and what it was paid (market payouts, validator rewards: block events)."""
        data, proven = self._query(f"/account/{address}", h, root)
        a = from_bech32(address)
        bk, ak = balance_key(a), account_key(a)
        if set(proven) != {bk, ak}:
            raise Untrusted(
                f"account {address}: the proof does not cover exactly its balance and sequence "
                "keys: do not trust this node"
            )
        raw_bal, raw_acc = proven[bk], proven[ak]
        seq = decode_msg(state_pb2.Account, raw_acc).sequence if raw_acc else 0
        self._same(
            f"account {address}",
            [data["balance"], data["sequence"]],
            [decode_amount(raw_bal), seq],
        )
        signed, n_signed = self.chain.tx_list(f"tx.signer='{address}'", ACCOUNT_TXS)
        received, n_received = self.chain.tx_list(f"transfer.recipient='{address}'", ACCOUNT_TXS)
        txs = {t["hash"]: t for t in [*signed, *received]}
        rewards = self.chain.rewards(address)
        return {
            "address": address,
            "height": h,
            "balance": data["balance"],
            "sequence": data["sequence"],
            "txs": sorted(txs.values(), key=lambda t: -t["height"])[:ACCOUNT_TXS],
            "txs_signed": n_signed,
            "txs_received": n_received,
            "rewards": rewards,
            "rewards_total": sum(r["amount"] for r in rewards),
        }

    def validator(self, cons_hex: str, h: int, root: bytes) -> dict[str, Any] | None:
        """A validator at height h: its record and self-bond proven against ``root`` (the
        snapshot's checked app hash); its other bonds and unbonding entries as the node lists them
        (a list without range proofs, labelled so on the page). None: no such validator."""
        qr = self.client.abci_query(f"/validator/{cons_hex}", height=h, prove=True)
        if qr.code != 0:
            return None
        data = json.loads(qr.value)
        proven = verify_ops(qr, root) if qr.proof_ops else {}
        cons = bytes.fromhex(cons_hex)
        vk, bk = validator_key(cons), bond_key(cons, from_bech32(data["operator"]))
        if vk not in proven or bk not in proven or proven[vk] is None:
            raise Untrusted(
                f"validator {cons_hex}: the proof does not cover its record and self-bond: do not "
                "trust this node"
            )
        rec = decode_msg(staking_pb2.Validator, proven[vk] or b"")
        self._same(
            f"validator {cons_hex}",
            [data["moniker"], data["power"], data["tokens"], data["self_bond"], data["slashed"]],
            [rec.moniker, rec.power, rec.tokens, decode_amount(proven[bk]), rec.slashed],
        )
        return data
