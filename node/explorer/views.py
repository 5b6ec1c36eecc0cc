"""Pure derivations from a snapshot's JSON (the chain's own query answers) to what the pages
show: rewards over time, a provider's earnings and slashes, a job's lineage and loss curve."""

from __future__ import annotations

from typing import Any

from abci_app.codec.address import from_bech32
from node.client.market_render import reputation_reason, reward_reason
from node.client.units import fmt_loco
from node.explorer.svg import line_chart

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
                            "why": reasons(r, p),
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
                                "why": {"reward": "", "reputation": ""},
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
    return line_chart(
        [("earned", _span(earnings_over_time(address, jobs), since, now))],
        title="Earnings, cumulative",
        x_label="block height",
        y_label="LOCO",
        y_fmt=_loco_tick,
        step=True,
    )


def loss_chart(job: dict[str, Any]) -> str:
    lc = loss_curve(job)
    return line_chart(
        list(lc.items()),
        title="Loss reported in the commitments (mean over participants)",
        x_label="round",
        y_label="loss (nats)",
        y_fmt=lambda v: f"{v:.2f}",
        y_from_zero=False,
    )


# -- values the pages decode: amounts in LOCO, addresses, heights, jobs and hashes as links ------

AMOUNT_KEYS = frozenset(
    {
        "amount",
        "fee",
        "reward",
        "slashed",
        "burned",
        "bond",
        "escrow",
        "stake",
        "paid",
        "bounty",
        "refund",
        "refunded",
        "balance",
        "tokens_uloco",
        "total_stake",
        "attest_stake",
        "reward_per_round",
        "verifier_reward_per_round",
        "max_fee",
    }
)


def attr_view(key: str, value: str, attrs: dict[str, str] | None = None) -> dict[str, Any]:
    """One event attribute as the pages show it: ``{"text", "href", "title", "kind"}``. An
    amount (by its key, in uloco) reads in LOCO with the uloco on hover; a ``loco1…`` address
    links to its account, a job id to its job (a round to the round), a height to its block, a
    hash is shortened with the full hex on hover."""
    attrs = attrs or {}
    v = value
    digits = v.isascii() and v.isdigit()
    if key in AMOUNT_KEYS and digits:
        return {
            "text": fmt_loco(int(v)),
            "href": "",
            "title": f"{int(v):,} uloco",
            "kind": "amount",
        }
    if v.startswith("loco1") and len(v) >= 39:
        return {"text": short(v, 16), "href": f"/account/{v}", "title": v, "kind": "address"}
    if key == "job_id" and digits:
        return {"text": f"job {v}", "href": f"/job/{v}", "title": "", "kind": "job"}
    if key == "round" and digits and attrs.get("job_id", "").isdigit():
        href = f"/job/{attrs['job_id']}#round-{v}"
        return {"text": f"round {v}", "href": href, "title": "", "kind": "round"}
    if (key == "height" or key.endswith("_height")) and digits and int(v) > 0:
        return {"text": v, "href": f"/block/{v}", "title": "", "kind": "height"}
    if len(v) == 64 and is_hex(v):
        return {"text": short(v, 12), "href": "", "title": v, "kind": "hash"}
    if len(v) == 40 and is_hex(v) and key in ("validator", "address", "proposer"):
        return {"text": short(v, 12), "href": "", "title": v, "kind": "validator"}
    return {"text": v, "href": "", "title": "", "kind": "number" if digits else "text"}


def is_hex(text: str) -> bool:
    return bool(text) and text.isascii() and all(c in "0123456789abcdefABCDEF" for c in text)


def search_targets(
    q: str, jobs: list[dict[str, Any]], providers: list[dict[str, Any]]
) -> list[dict[str, str]]:
    """What a search box query can name, most specific first: ``[{"what", "href"}]``. A
    number is a block height and, when such a job exists, a job id (``job 3`` or ``#3``: only the
    job); a ``loco1…`` address its account (whose page links to its provider page); 64 hex
    characters a tx hash and, when a job's lineage holds it, a model hash (the page checks the
    tx exists); 40 hex characters a validator."""
    q = q.strip()
    low = q.lower()
    out: list[dict[str, str]] = []
    job_ids = {int(j["id"]) for j in jobs}
    for prefix in ("job ", "job", "#"):
        if low.startswith(prefix) and low[len(prefix) :].strip().isdigit():
            n = int(low[len(prefix) :].strip())
            if n in job_ids:
                return [{"what": f"job {n}", "href": f"/job/{n}"}]
            return []
    if q.isascii() and q.isdigit() and len(q) <= 20:
        n = int(q)
        if n in job_ids:
            out.append({"what": f"job {n}", "href": f"/job/{n}"})
        if n > 0:
            out.append({"what": f"block {n}", "href": f"/block/{n}"})
        return out
    if low.startswith("loco1"):
        try:
            from_bech32(low)
        except Exception:  # noqa: BLE001 (not an address: no target)
            return []
        # one target: the account page links to the provider page when it is one
        return [{"what": f"account {low}", "href": f"/account/{low}"}]
    h = low.removeprefix("0x")
    if len(h) == 64 and is_hex(h):
        for j in jobs:
            for m in lineage(j):
                if m["hash"] == h:
                    anchor = f"#round-{m['round']}" if m["round"] is not None else ""
                    out.append(
                        {
                            "what": f"model {h[:12]}… ({m['label']} of job {j['id']})",
                            "href": f"/job/{j['id']}{anchor}",
                        }
                    )
        out.append({"what": f"tx {h.upper()}", "href": f"/tx/{h.upper()}"})
        return out
    if len(h) == 40 and is_hex(h):
        out.append({"what": f"validator {h.upper()}", "href": f"/validator/{h.upper()}"})
    return out


def reasons(r: dict[str, Any], p: dict[str, Any]) -> dict[str, str]:
    """Why a participant's reward is 0 and why its reputation moved, as the CLI's round table
    says (node/client/market_render.py)."""
    return {"reward": reward_reason(r, p), "reputation": reputation_reason(r, p)}


def moniker_of(address: str, validators: list[dict[str, Any]]) -> str:
    """A validator's moniker (its short address when it has none)."""
    for v in validators:
        if v["address"] == address and v.get("moniker"):
            return str(v["moniker"])
    return short(address, 12)


# -- the job page as a training dashboard ---------------------------------------------------------


def n_params(model: dict[str, Any]) -> int:
    """Parameters of the job's GPT (trainer/model.py: token and position embeddings, L blocks of
    two LayerNorms, attention and a 4x MLP with biases, a final LayerNorm, an untied head)."""
    d, v, t, n = model["d_model"], model["vocab_size"], model["context_len"], model["n_layers"]
    return 2 * v * d + t * d + n * (12 * d * d + 13 * d) + 2 * d


def dashboard(
    job: dict[str, Any],
    times: dict[int, float],
    heldout: Any = None,
    now: float | None = None,
) -> dict[str, Any]:
    """What the job page charts and tabulates, per round and in total, from the proven rounds
    and the signed headers' times: tokens (the commitments'), wall time (open to finalize),
    throughput (tokens / wall time), time per inner step (round open to commitment / H: fetch
    included), bytes committed and their reduction against dense fp32 updates, reported and
    held-out loss (``heldout``: node/explorer/heldout.py; None when not computed) and an ETA."""
    spec = job["spec"]
    H = max(1, int(spec["inner_steps"]))
    dense = 4 * n_params(spec["model"])
    t0 = times.get(job["created_height"])
    rows: list[dict[str, Any]] = []
    cum_tokens = 0
    for r in sorted(job.get("round_records", []), key=lambda r: r["round"]):
        w = r["windows"]
        cs = [p["commitment"] for p in r["participants"] if p["commitment"]]
        tokens = sum(c["tokens_processed"] for c in cs)
        nbytes = sum(c["payload_size"] for c in cs)
        t_open, t_fin = times.get(w["open_height"]), times.get(r["finalized_height"])
        wall = (t_fin - t_open) if t_open is not None and t_fin is not None else None
        steps = [
            (times[c["height"]] - t_open) / H
            for c in cs
            if t_open is not None and c["height"] in times
        ]
        if r["phase"] == "finalized":
            cum_tokens += tokens
        loss = None
        if heldout is not None and r["attested_model_hash"]:
            loss = heldout.get(r["attested_model_hash"])
        rows.append(
            {
                "round": r["round"],
                "phase": r["phase"],
                "tokens": tokens,
                "cum_tokens": cum_tokens,
                "wall_s": wall,
                "throughput": tokens / wall if wall else None,
                "step_s": sum(steps) / len(steps) if steps else None,
                "bytes": nbytes,
                "reduction": dense * len(cs) / nbytes if nbytes else None,
                "reported_loss": (
                    sum(c["loss_after_mnats"] for c in cs) / len(cs) / 1000 if cs else None
                ),
                "heldout": loss,
                "model": r["attested_model_hash"],
                "at_s": (t_fin - t0) if t_fin is not None and t0 is not None else None,
            }
        )
    done = [x for x in rows if x["phase"] == "finalized"]
    walls = [x["wall_s"] for x in done if x["wall_s"]]
    mean_wall = sum(walls) / len(walls) if walls else None
    left = int(job["rounds"]) - len(done)
    # rounds overlap (round r+1 opens before round r is final): the ETA is the mean time between
    # finalizations, not the mean round wall time
    fins = sorted(x["at_s"] for x in done if x["at_s"] is not None)
    gap = fins[-1] / len(fins) if fins else None
    initial = heldout.get(spec["initial_model_hash"]) if heldout is not None else None
    total_tokens = sum(x["tokens"] for x in done)
    total_wall = fins[-1] if fins else None
    return {
        "rows": rows,
        "dense_bytes": dense,
        "n_params": dense // 4,
        "tokens": total_tokens,
        "mean_wall_s": mean_wall,
        "throughput": total_tokens / total_wall if total_wall else None,
        "eta_s": gap * left if gap is not None and job["status"] == "active" else None,
        "rounds_left": left if job["status"] == "active" else 0,
        "bytes_per_round": sum(x["bytes"] for x in done) / len(done) if done else None,
        "reduction": _mean_reduction(done),
        "initial_heldout": initial,
        "elapsed_s": (now - t0) if now is not None and t0 is not None else None,
    }


def _mean_reduction(rows: list[dict[str, Any]]) -> float | None:
    xs = [x["reduction"] for x in rows if x["reduction"]]
    return sum(xs) / len(xs) if xs else None


def fmt_duration(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 90:
        return f"{s:.1f} s"
    if s < 5400:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def dashboard_charts(job: dict[str, Any], dash: dict[str, Any]) -> list[str]:
    """Loss against tokens and against wall time (held-out of the attested models, where
    computed, and the mean the providers reported), throughput and bytes per round."""
    done = [x for x in dash["rows"] if x["phase"] == "finalized"]
    held_tok = ([(0, dash["initial_heldout"])] if dash["initial_heldout"] is not None else []) + [
        (x["cum_tokens"], x["heldout"]) for x in done if x["heldout"] is not None
    ]
    rep_tok = [(x["cum_tokens"], x["reported_loss"]) for x in done if x["reported_loss"]]
    held_t = ([(0.0, dash["initial_heldout"])] if dash["initial_heldout"] is not None else []) + [
        (x["at_s"] / 60, x["heldout"]) for x in done if x["heldout"] is not None and x["at_s"]
    ]
    rep_t = [(x["at_s"] / 60, x["reported_loss"]) for x in done if x["reported_loss"] and x["at_s"]]

    def loss_fmt(v: float) -> str:
        return f"{v:.2f}"

    return [
        line_chart(
            [("held-out loss of the attested model", held_tok), ("reported by providers", rep_tok)],
            title="Loss against tokens trained",
            x_label="tokens (committed, cumulative)",
            y_label="loss (nats/byte)",
            y_fmt=loss_fmt,
            y_from_zero=False,
        ),
        line_chart(
            [("held-out loss of the attested model", held_t), ("reported by providers", rep_t)],
            title="Loss against wall time",
            x_label="minutes since the job was created",
            y_label="loss (nats/byte)",
            y_fmt=loss_fmt,
            y_from_zero=False,
            x_integer=False,
        ),
        line_chart(
            [("tokens/s", [(x["round"], x["throughput"]) for x in done if x["throughput"]])],
            title="Throughput per round (tokens / round wall time)",
            x_label="round",
            y_label="tokens/s",
            y_fmt=lambda v: f"{v:,.0f}",
        ),
        line_chart(
            [("bytes committed", [(x["round"], x["bytes"]) for x in done if x["bytes"]])],
            title="Update bytes per round (all participants)",
            x_label="round",
            y_label="bytes",
            y_fmt=lambda v: fmt_bytes(v),
        ),
    ]
