"""Pure derivations from a snapshot's JSON (the chain's own query answers) to what the pages
show: rewards over time, a provider's earnings and slashes, a job's lineage and loss curve."""

from __future__ import annotations

from typing import Any

KINDS = ("participant", "verifier", "bounty")


def finalized_rounds(jobs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return sorted(
        ((j, r) for j in jobs for r in j.get("round_records", []) if r["finalized_height"]),
        key=lambda jr: (jr[1]["finalized_height"], jr[0]["id"], jr[1]["round"]),
    )


def rewards_over_time(jobs: list[dict[str, Any]]) -> dict[str, list[tuple[int, int]]]:
    """Cumulative uloco paid per payout kind, one point per finalize height (payouts happen
    there)."""
    acc = dict.fromkeys(KINDS, 0)
    by_h: dict[int, dict[str, int]] = {}
    for _, r in finalized_rounds(jobs):
        for p in r["payouts"]:
            acc[p["kind"]] = acc.get(p["kind"], 0) + p["amount"]
        by_h[r["finalized_height"]] = dict(acc)
    return {
        k: [(h, v[k]) for h, v in sorted(by_h.items())]
        for k in KINDS
        if any(v[k] for v in by_h.values())
    }


def provider_record(address: str, jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """Rounds this address took part in (as participant or verifier), its payouts and slashes."""
    rows, pays, slashes = [], [], []
    for j in jobs:
        for r in j.get("round_records", []):
            role = ""
            for p in r["participants"]:
                if p["address"] == address:
                    role = "participant"
                    rows.append(
                        {
                            "job": j["id"],
                            "round": r["round"],
                            "role": role,
                            "outcome": p["outcome"],
                            "reward": p["reward"],
                            "slashed": p["slashed"],
                            "reputation": p["reputation"],
                            "reputation_delta": p["reputation_delta"],
                            "phase": r["phase"],
                        }
                    )
                ch = p["challenge"]
                for v in (ch or {}).get("verifiers", []):
                    if v["address"] == address:
                        rows.append(
                            {
                                "job": j["id"],
                                "round": r["round"],
                                "role": "verifier of " + p["address"][:12] + "…",
                                "outcome": (
                                    "voted unavailable"
                                    if v.get("unavailable")
                                    else "voted " + ("valid" if v["valid"] else "invalid")
                                )
                                if v["voted"]
                                else "silent",
                                "reward": 0,
                                "slashed": 0,
                                "reputation": None,
                                "reputation_delta": None,
                                "phase": r["phase"],
                            }
                        )
            for p in r["payouts"]:
                if p["address"] == address:
                    pays.append(
                        {
                            "job": j["id"],
                            "round": r["round"],
                            "kind": p["kind"],
                            "amount": p["amount"],
                            "height": r["finalized_height"],
                        }
                    )
            for s in r["slashes"]:
                if s["address"] == address:
                    slashes.append(
                        {"job": j["id"], "round": r["round"], **s, "height": r["finalized_height"]}
                    )
    return {"rounds": rows, "payouts": pays, "slashes": slashes}


def earnings_over_time(address: str, jobs: list[dict[str, Any]]) -> list[tuple[int, int]]:
    total, pts = 0, []
    for _, r in finalized_rounds(jobs):
        got = sum(p["amount"] for p in r["payouts"] if p["address"] == address)
        if got:
            total += got
            pts.append((r["finalized_height"], total))
    return pts


def lineage(job: dict[str, Any]) -> list[dict[str, Any]]:
    """The job's model chain: initial model, then each round's base and attested hash."""
    out = [
        {
            "label": "initial",
            "hash": job["spec"]["initial_model_hash"],
            "round": None,
            "height": job["created_height"],
        }
    ]
    for r in sorted(job.get("round_records", []), key=lambda r: r["round"]):
        if r["attested_model_hash"]:
            out.append(
                {
                    "label": f"round {r['round']}",
                    "hash": r["attested_model_hash"],
                    "round": r["round"],
                    "base": r["base_model_hash"],
                    "stake": r["attest_stake"],
                    "height": r["finalized_height"],
                }
            )
    return out


def loss_curve(job: dict[str, Any]) -> dict[str, list[tuple[int, float]]]:
    """Per round, the mean of the committed losses (nats) before and after the inner steps, as
    the providers reported them in their commitments (the chain records, it does not compute)."""
    before, after = [], []
    for r in sorted(job.get("round_records", []), key=lambda r: r["round"]):
        cs = [p["commitment"] for p in r["participants"] if p["commitment"]]
        if cs:
            before.append((r["round"], sum(c["loss_before_mnats"] for c in cs) / len(cs) / 1000))
            after.append((r["round"], sum(c["loss_after_mnats"] for c in cs) / len(cs) / 1000))
    return {"loss before inner steps": before, "loss after inner steps": after} if after else {}


def tx_index(job: dict[str, Any]) -> dict[tuple[int, str, str, str], list[dict[str, Any]]]:
    """(round, kind, actor, target) -> its txs in block order, from the job's indexed events
    (a challenge with several segments has one reveal tx per segment)."""
    out: dict[tuple[int, str, str, str], list[dict[str, Any]]] = {}
    for rn, txs in job.get("txs", {}).items():
        for t in sorted(txs, key=lambda t: t["height"]):
            out.setdefault((int(rn), t["kind"], t["actor"], t["target"]), []).append(t)
    return out


def short(x: str, n: int = 10) -> str:
    return x if len(x) <= n + 2 else x[:n] + "…"


# -- charts (inline SVG from svg.py) --------------------------------------------------------------


def _loco_tick(v: float) -> str:
    return f"{v / 1_000_000:g}"


def _span(pts: list[tuple[int, int]], start: int, now: int) -> list[tuple[int, int]]:
    """A cumulative series from 0 at ``start`` to its last value at ``now`` (a step chart then
    shows when the money came, not just that it did)."""
    if not pts:
        return []
    out = ([(start, 0)] if start < pts[0][0] else []) + pts
    return out + ([(now, pts[-1][1])] if now > pts[-1][0] else [])


def rewards_chart(jobs: list[dict[str, Any]], now: int = 0) -> str:
    from node.explorer.svg import line_chart

    rw = rewards_over_time(jobs)
    start = min((j["created_height"] for j in jobs), default=0)
    return line_chart(
        [(f"to {k}s", _span(pts, start, now)) for k, pts in rw.items()],
        title="Rewards paid, cumulative",
        x_label="block height",
        y_label="LOCO",
        y_fmt=_loco_tick,
        step=True,
    )


def reputation_chart(history: dict[str, list[tuple[int, int]]], only: str | None = None) -> str:
    from node.explorer.svg import line_chart

    series = [
        (short(a, 14), pts) for a, pts in sorted(history.items()) if only is None or a == only
    ]
    return line_chart(
        series,
        title="Reputation (of 10000)",
        x_label="block height",
        y_label="reputation",
        step=True,
        y_from_zero=False,
    )


def earnings_chart(address: str, jobs: list[dict[str, Any]], since: int = 0, now: int = 0) -> str:
    from node.explorer.svg import line_chart

    return line_chart(
        [("earned", _span(earnings_over_time(address, jobs), since, now))],
        title="Earnings, cumulative",
        x_label="block height",
        y_label="LOCO",
        y_fmt=_loco_tick,
        step=True,
    )


def loss_chart(job: dict[str, Any]) -> str:
    from node.explorer.svg import line_chart

    lc = loss_curve(job)
    return line_chart(
        list(lc.items()),
        title="Loss reported in the commitments (mean over participants)",
        x_label="round",
        y_label="loss (nats)",
        y_fmt=lambda v: f"{v:.2f}",
        y_from_zero=False,
    )
