"""What the explorer shows, read from a node's RPC and checked like ``--prove`` does.

``Collector.snapshot()`` reads the state of one height H (the latest block but one, so that the
header H+1 carrying its app hash exists): it checks header H+1 once as a light client does
(``node.light.verified_app_hash``: header hash = signed block id, validator-set hash, > 2/3 of
the power signed), then asks every query with ``prove=true`` at height H, checks every proof
against that app hash (``node.proofs.verify_ops``) and re-derives each record from the proven
bytes with the chain's own ``*_to_json``: a node whose answer differs from its proof is reported
on the page, not shown as truth. (A list is as complete as the node makes it: every listed record
is proven, but without range proofs a node could leave one out.) Blocks, validators and transactions
come from CometBFT's RPC (signed by the chain, not state proofs); the reputation history is sampled
from the node's store at past heights when the collector starts, then once per new height.

Everything here is synchronous (httpx via ``node.rpc.Client``); the server runs it in a thread.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from abci_app.codec.address import from_bech32
from abci_app.encoding import decode_msg
from abci_app.jobs import sla
from abci_app.jobs.keys import job_key, round_key, sla_key
from abci_app.jobs.queries import job_to_json, round_to_json, sla_to_json
from abci_app.pb import jobs_pb2, providers_pb2
from abci_app.providers.keys import provider_key
from abci_app.providers.queries import provider_to_json
from node.light import HeaderInvalid, verified_app_hash
from node.proofs import ProofInvalid, proven_record, proven_records, verify_ops
from node.rpc import Client, RpcError

if TYPE_CHECKING:
    from node.trust import TrustStore

# tx kinds the round pages link to: event type -> (label, attribute naming the actor)
TX_EVENTS = {
    "update.submitted": ("commit", "provider"),
    "segment.revealed": ("reveal", "provider"),
    "verdict.posted": ("verdict", "verifier"),
    "attestation.posted": ("attest", "provider"),
}
HISTORY_SAMPLES = 24
BLOCK_TIME_WINDOW = 20
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

    def provider(self, address: str) -> dict[str, Any] | None:
        return next((p for p in self.providers if p["address"] == address), None)

    def job(self, job_id: int) -> dict[str, Any] | None:
        return next((j for j in self.jobs if j["id"] == job_id), None)


def _b64(s: str) -> str:
    return base64.b64decode(s).decode(errors="replace") if s else ""


def event_attrs(ev: dict[str, Any]) -> dict[str, str]:
    """CometBFT JSON event attributes (plain strings in v0.38; base64 in older nodes)."""
    out = {}
    for a in ev.get("attributes", []):
        k, v = a.get("key", ""), a.get("value", "")
        out[k] = v
    return out


class Collector:
    def __init__(self, url: str, timeout: float = 10.0, trust: TrustStore | None = None) -> None:
        self.url = url
        self.client = Client(url, timeout=timeout)
        self.trust = trust  # signers trusted from a node home's genesis (node/trust.py)
        self._lock = threading.Lock()
        self._history: dict[str, list[tuple[int, int]]] = {}
        self._history_to = 0
        self._closed_txs: dict[int, dict[str, list[dict[str, Any]]]] = {}
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
        """A proven list's records, each under the key its own id makes (node/proofs.py)."""
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

    # -- RPC (signed blocks, not state) ---------------------------------------------------------
    def _block_time_ms(self, latest: int) -> int | None:
        lo = max(1, latest - BLOCK_TIME_WINDOW)
        if latest - lo < 1:
            return None
        from node.light import parse_time

        metas = self.client.call("blockchain", minHeight=str(lo), maxHeight=str(latest))[
            "block_metas"
        ]
        times = sorted((int(m["header"]["height"]), parse_time(m["header"]["time"])) for m in metas)
        if len(times) < 2:
            return None
        (h0, (s0, n0)), (h1, (s1, n1)) = times[0], times[-1]
        return ((s1 - s0) * 10**9 + (n1 - n0)) // (h1 - h0) // 10**6

    def round_txs(self, job_id: int) -> dict[str, list[dict[str, Any]]]:
        """{"round": [{"kind", "actor", "target", "hash", "height"}...]} of a job from tx_search
        over the indexed events (cached once the job is closed)."""
        if job_id in self._closed_txs:
            return self._closed_txs[job_id]
        out: dict[str, list[dict[str, Any]]] = {}
        for etype, (label, actor_key) in TX_EVENTS.items():
            page = 1
            while True:
                res = self.client.call(
                    "tx_search",
                    query=f"{etype}.job_id={job_id}",
                    per_page="100",
                    page=str(page),
                    order_by="asc",
                )
                for t in res["txs"]:
                    for ev in t["tx_result"].get("events", []):
                        if ev["type"] != etype:
                            continue
                        a = event_attrs(ev)
                        out.setdefault(a.get("round", "?"), []).append(
                            {
                                "kind": label,
                                "actor": a.get(actor_key, ""),
                                "target": a.get("provider", ""),
                                "hash": t["hash"],
                                "height": int(t["height"]),
                            }
                        )
                if page * 100 >= int(res["total_count"]):
                    break
                page += 1
        return out

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
            providers = self._providers(h, root)
            for p in providers:
                p["sla"] = self._sla(p["address"], h, root)
            jobs = self._jobs(h, root)
        except (Untrusted, ProofInvalid) as e:
            untrusted, providers, jobs = str(e), [], []
        for j in jobs:
            txs = self.round_txs(j["id"])
            if j["status"] in ("completed", "cancelled"):
                self._closed_txs[j["id"]] = txs
            j["txs"] = txs
        vals = self.client.validators(h)
        self._sample_history(h)
        return Snapshot(
            height=h,
            latest_height=latest,
            chain_id=st["node_info"]["network"],
            moniker=st["node_info"]["moniker"],
            latest_time=st["sync_info"]["latest_block_time"],
            app_hash=root.hex().upper(),
            block_time_ms=self._block_time_ms(latest),
            validators=sorted(
                ({"address": v["address"], "power": int(v["voting_power"])} for v in vals),
                key=lambda v: (-v["power"], v["address"]),
            ),
            providers=providers,
            jobs=jobs,
            proven_keys=self.proven_keys,
            untrusted=untrusted,
            reputation_history={a: list(s) for a, s in self._history.items()},
        )

    # -- single records the pages link to -------------------------------------------------------
    def tx(self, tx_hash: str) -> dict[str, Any] | None:
        """A tx by hash with its messages decoded (``abci_app.codec.tx``) and its events."""
        from google.protobuf.json_format import MessageToDict

        from abci_app.codec.address import to_bech32
        from abci_app.codec.tx import decode_tx

        res = self.client.tx(tx_hash)
        if res is None:
            return None
        info: dict[str, Any] = {"messages": []}
        try:
            tx = decode_tx(base64.b64decode(res["tx"]))
            info = {
                "signer": to_bech32(tx.signer),
                "fee": tx.fee,
                "sequence": tx.sequence,
                "memo": tx.memo,
                "messages": [
                    {"type": name, "body": MessageToDict(m, preserving_proto_field_name=True)}
                    for name, m in tx.msgs
                ],
            }
        except Exception as e:  # noqa: BLE001 (a tx the node holds but this client cannot decode: say so)
            info["decode_error"] = str(e)
        r = res["tx_result"]
        return {
            "hash": res["hash"],
            "height": int(res["height"]),
            "code": int(r.get("code", 0)),
            "log": r.get("log", ""),
            "codespace": r.get("codespace", ""),
            **info,
            "events": [
                {"type": e["type"], "attributes": event_attrs(e)} for e in r.get("events", [])
            ],
        }

    def block(self, height: int) -> dict[str, Any]:
        """A block's header facts, its tx hashes and the events of its end-block (payouts,
        slashes)."""
        import hashlib

        b = self.client.block(height)
        res = self.client.call("block_results", height=str(height))
        hdr = b["block"]["header"]
        txs = [
            hashlib.sha256(base64.b64decode(t)).hexdigest().upper()
            for t in b["block"]["data"]["txs"] or []
        ]
        return {
            "height": int(hdr["height"]),
            "time": hdr["time"],
            "proposer": hdr["proposer_address"],
            "hash": b["block_id"]["hash"],
            "app_hash": hdr["app_hash"],
            "txs": txs,
            "events": [
                {"type": e["type"], "attributes": event_attrs(e)}
                for e in res.get("finalize_block_events") or []
            ],
        }
