"""What the explorer reads from CometBFT's RPC rather than from proven state: blocks and their
times, transactions and their events, payouts. Signed by the chain (block ids, results), not
state proofs, so nothing here is checked against an app hash; ``node/explorer/data.py``'s
``Collector`` does the proven part and puts the two together."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from abci_app.codec.address import to_bech32
from abci_app.codec.tx import decode_tx
from node.client.light import parse_time
from node.client.rpc import Client

# tx kinds the round pages link to: event type -> (label, attribute naming the actor)
TX_EVENTS = {
    "update.submitted": ("commit", "provider"),
    "segment.revealed": ("reveal", "provider"),
    "verdict.posted": ("verdict", "verifier"),
    "attestation.posted": ("attest", "provider"),
}
BLOCK_TIME_WINDOW = 20
RECENT = 20  # recent blocks and txs on the network page
ADDRESS_FIELDS = ("address", "provider", "signer", "owner", "verifier", "delegator", "operator")


def event_attrs(ev: dict[str, Any]) -> dict[str, str]:
    """CometBFT JSON event attributes (plain strings in v0.38; base64 in older nodes)."""
    out = {}
    for a in ev.get("attributes", []):
        k, v = a.get("key", ""), a.get("value", "")
        out[k] = v
    return out


def plain(m: Any) -> dict[str, Any]:
    """A protobuf message as the pages show it: bytes as hex (20-byte fields named like an
    address as ``loco1…``), integers as numbers (MessageToDict writes 64-bit ones as strings),
    enums by name, nested messages and lists alike."""
    out: dict[str, Any] = {}
    for fd, value in m.ListFields():

        def one(v: Any, fd: Any = fd) -> Any:
            if fd.type == fd.TYPE_MESSAGE:
                return plain(v)
            if fd.type == fd.TYPE_BYTES:
                if len(v) == 20 and any(w in fd.name for w in ADDRESS_FIELDS):
                    return to_bech32(v)
                return v.hex()
            if fd.type == fd.TYPE_ENUM:
                ev = fd.enum_type.values_by_number.get(v)
                return ev.name if ev else v
            return v

        repeated = fd.is_repeated
        out[fd.name] = [one(v) for v in value] if repeated else one(value)
    return out


def tx_summary(t: dict[str, Any]) -> dict[str, Any]:
    """One line of a tx list from a tx_search entry: hash (hex), height, result code, signer,
    fee, the kinds of its messages and the (job, round) its events name."""
    signer, fee, kinds, where = "", 0, [], []
    for ev in t["tx_result"].get("events", []):
        a = event_attrs(ev)
        if ev["type"] == "tx":
            signer = a.get("signer", signer)
            fee = int(a["fee"]) if a.get("fee", "").isdigit() else fee
        elif ev["type"] != "message":
            kinds.append(ev["type"])
        if a.get("job_id", "").isdigit():
            jr = (int(a["job_id"]), int(a["round"]) if a.get("round", "").isdigit() else None)
            if jr not in where:
                where.append(jr)
    return {
        "hash": t["hash"],
        "height": int(t["height"]),
        "code": int(t["tx_result"].get("code", 0)),
        "signer": signer,
        "fee": fee,
        "kinds": sorted(set(kinds)),
        "job_rounds": where,
    }


def _decoded(raw_tx: str) -> dict[str, Any]:
    """A tx's signer, fee, sequence, memo and messages (``abci_app.codec.tx``); a tx the node
    holds but this client cannot decode says so (``decode_error``)."""
    info: dict[str, Any] = {"messages": []}
    try:
        tx = decode_tx(base64.b64decode(raw_tx))
        info = {
            "signer": to_bech32(tx.signer),
            "fee": tx.fee,
            "sequence": tx.sequence,
            "memo": tx.memo,
            "messages": [{"type": name, "body": plain(m)} for name, m in tx.msgs],
        }
    except Exception as e:  # noqa: BLE001 (a tx the node holds but this client cannot decode: say so)
        info["decode_error"] = str(e)
    return info


class ChainLog:
    """The RPC reads of one node (module docstring). Block times and the txs of closed jobs never
    change: they are cached for the life of the object."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self._closed_txs: dict[int, dict[str, list[dict[str, Any]]]] = {}
        self._times: dict[int, float] = {}  # block height -> header time (unix s), immutable

    def recent_blocks(self, latest: int) -> list[dict[str, Any]]:
        lo = max(1, latest - RECENT + 1)
        metas = self.client.call("blockchain", minHeight=str(lo), maxHeight=str(latest))[
            "block_metas"
        ]
        return sorted(
            (
                {
                    "height": int(m["header"]["height"]),
                    "time": m["header"]["time"],
                    "hash": m["block_id"]["hash"],
                    "proposer": m["header"]["proposer_address"],
                    "num_txs": int(m.get("num_txs", 0)),
                }
                for m in metas
            ),
            key=lambda b: -b["height"],
        )

    def tx_list(self, query: str, limit: int = RECENT) -> tuple[list[dict[str, Any]], int]:
        """The newest txs matching a tx_search query, each summarized (hash, height, code,
        signer, its message kinds and the job/round they name) and its total count."""
        res = self.client.call(
            "tx_search", query=query, per_page=str(limit), page="1", order_by="desc"
        )
        return [tx_summary(t) for t in res["txs"]], int(res["total_count"])

    def block_times(self, heights: set[int]) -> dict[int, float]:
        """Header times (unix seconds) of the given heights, from CometBFT's ``blockchain``
        endpoint 20 at a time, cached for good (a block's time never changes)."""
        todo = sorted(x for x in heights if x > 0 and x not in self._times)
        while todo:
            lo = todo[0]
            hi = min(lo + 19, todo[-1])
            metas = self.client.call("blockchain", minHeight=str(lo), maxHeight=str(hi))
            for m in metas["block_metas"]:
                sec, nano = parse_time(m["header"]["time"])
                self._times[int(m["header"]["height"])] = sec + nano / 1e9
            todo = [x for x in todo if x > hi]
        return {x: self._times[x] for x in heights if x in self._times}

    def block_time_ms(self, latest: int) -> int | None:
        """The mean block interval over the last BLOCK_TIME_WINDOW blocks, in milliseconds."""
        lo = max(1, latest - BLOCK_TIME_WINDOW)
        if latest - lo < 1:
            return None
        metas = self.client.call("blockchain", minHeight=str(lo), maxHeight=str(latest))[
            "block_metas"
        ]
        times = sorted((int(m["header"]["height"]), parse_time(m["header"]["time"])) for m in metas)
        if len(times) < 2:
            return None
        (h0, (s0, n0)), (h1, (s1, n1)) = times[0], times[-1]
        return ((s1 - s0) * 10**9 + (n1 - n0)) // (h1 - h0) // 10**6

    def job_txs(self, job: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
        """:meth:`round_txs` of a job (its JSON), kept for good once the job is closed."""
        txs = self.round_txs(job["id"])
        if job["status"] in ("completed", "cancelled"):
            self._closed_txs[job["id"]] = txs
        return txs

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

    def rewards(self, address: str) -> list[dict[str, Any]]:
        """What ``address`` was paid (market payouts, validator rewards), newest first, from the
        block events that name it (the newest 30 blocks of each kind)."""
        rewards: list[dict[str, Any]] = []
        for etype in ("reward.paid", "fee.distributed"):
            res = self.client.call(
                "block_search",
                query=f"{etype}.recipient='{address}'",
                page="1",
                per_page="30",
                order_by="desc",
            )
            for blk in res.get("blocks") or []:
                bh = int(blk["block"]["header"]["height"])
                br = self.client.call("block_results", height=str(bh))
                for bev in br.get("finalize_block_events") or []:
                    ea = event_attrs(bev)
                    if bev["type"] == etype and ea.get("recipient") == address:
                        rewards.append(
                            {
                                "height": bh,
                                "kind": ea.get("payout", "validator"),
                                "amount": int(ea.get("amount", 0)),
                                "job": int(ea["job_id"]) if "job_id" in ea else None,
                                "round": int(ea["round"]) if "round" in ea else None,
                            }
                        )
        rewards.sort(key=lambda r: -r["height"])
        return rewards

    def tx(self, tx_hash: str) -> dict[str, Any] | None:
        """A tx by hash with its messages decoded (``abci_app.codec.tx``) and its events."""
        res = self.client.tx(tx_hash)
        if res is None:
            return None
        info = _decoded(res["tx"])
        r = res["tx_result"]
        links: list[tuple[int, int | None]] = []
        for m in info["messages"]:
            jid, rn = m["body"].get("job_id"), m["body"].get("round")
            if isinstance(jid, int) and (jid, rn) not in links:
                links.append((jid, rn if isinstance(rn, int) else None))
        return {
            "hash": res["hash"],
            "job_rounds": links or tx_summary(res)["job_rounds"],
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
