"""Text rendering of compute-market query answers (the JSON of abci_app/*/queries.py) for the
CLI without ``-o json``. Pure functions: JSON dict in, text out."""

from __future__ import annotations

from typing import Any

from node.client.units import fmt_loco


def provider_text(p: dict[str, Any], height: int) -> str:
    hw = ", ".join(f"{g['count']}x {g['model']} ({g['memory_mib']} MiB)" for g in p["hardware"])
    return (
        f"provider:   {p['address']}\n"
        f"status:     {p['status']}\n"
        f"bond:       {p['bond']} uloco ({fmt_loco(p['bond'])})\n"
        f"unbonding:  {p['unbonding']} uloco (at height {p['unbonding_height']})\n"
        f"reputation: {p['reputation']} / 10000\n"
        f"hardware:   {hw}\n"
        f"throughput: {p['throughput_tokens_per_sec']} tokens/s\n"
        f"region:     {p['region']}\n"
        f"endpoint:   {p['endpoint']}\n"
        f"slashed:    {p['slashed_total']} uloco\n"
        + (sla_text(p["sla"]) + "\n" if p.get("sla") else "")
        + f"height:     {height}"
    )


def _pct(bps: int | None) -> str:
    return "-" if bps is None else f"{bps / 100:.2f} %"


def sla_text(s: dict[str, Any]) -> str:
    """SLA figures (``/provider/{addr}/sla``): each duty as kept/due with its rate."""
    return (
        f"sla:        uptime {_pct(s['uptime_bps'])} over its last {s['window_len']} duties "
        f"(window {s['window_size']}; last duty at height {s['last_duty_height']})\n"
        f"  rounds drawn      {s['rounds_drawn']}\n"
        f"  committed on time {s['committed_on_time']}/{s['commits_due']} "
        f"({_pct(s['commit_rate_bps'])})\n"
        f"  revealed          {s['revealed']}/{s['reveals_due']} challenged "
        f"({_pct(s['reveal_rate_bps'])})\n"
        f"  verdicts          {s['verdicts_accepted']} accepted, {s['verdicts_against']} rejected "
        "or fraud\n"
        f"  attested          {s['attested']}/{s['attests_due']}\n"
        f"  verifier votes    {s['verifier_voted']}/{s['verifier_assigned']} "
        f"({_pct(s['verifier_duty_bps'])})\n"
        f"earned:     {s['earned_total']} uloco ({fmt_loco(s['earned_total'])}): "
        f"{s['earned_participant']} training, {s['earned_verifier']} verifying, "
        f"{s['earned_bounty']} bounties; slashed in rounds {s['slashed']} uloco"
    )


def providers_table(res: dict[str, Any]) -> str:
    rows = [f"{'address':44s} {'status':8s} {'bond (uloco)':>16s} {'rep':>5s}  region"]
    rows += [
        f"{p['address']:44s} {p['status']:8s} {p['bond']:>16d} {p['reputation']:>5d}  {p['region']}"
        for p in res["result"]["providers"]
    ]
    return "\n".join(rows) + f"\n{res['result']['total']} provider(s) at height {res['height']}"


def job_text(j: dict[str, Any], height: int) -> str:
    s = j["spec"]
    w, m = s["windows"], s["model"]
    return "\n".join(
        [
            f"job:         {j['id']} ({j['status']})",
            f"owner:       {j['owner']}",
            f"rounds:      {j['rounds_finalized']} finalized / {j['rounds_opened']} opened / "
            f"{j['rounds']}",
            (
                f"reward:      {fmt_loco(j['reward_per_round'])} per round to participants + "
                f"{fmt_loco(j['verifier_reward_per_round'])} to verifiers"
            ),
            (
                f"escrow:      {fmt_loco(j['escrow'])} (funded {fmt_loco(j['escrow_funded'])}, "
                f"paid {fmt_loco(j['paid_total'])}, refunded {fmt_loco(j['refunded'])})"
            ),
            f"model:       {j['current_model_hash']}",
            f"dataset:     {s['dataset_id']}",
            (
                f"training:    H={s['inner_steps']} inner steps, trace every "
                f"k={s['trace_interval']}, {s['tokens_per_step']} tokens/step, compression "
                f"{s['compression_policy']}"
            ),
            (
                f"network:     {m['n_layers']} layers, {m['n_heads']} heads, d_model "
                f"{m['d_model']}, context {m['context_len']}, vocab {m['vocab_size']}"
            ),
            (
                f"draw:        {s['participants_per_round']} participants over {s['num_shards']} "
                f"shards; challenge {s['challenge_bps'] / 100:g} %, "
                f"{s['verifiers_per_challenge']} verifier(s) each"
            ),
            f"windows:     commit {w['commit']}, reveal {w['reveal']}, verdict {w['verdict']}, "
            f"attest {w['attest']} blocks",
            f"height:      {height}",
        ]
    )


def jobs_table(res: dict[str, Any]) -> str:
    rows = [f"{'id':>5s} {'status':10s} {'rounds':>9s} {'escrow (uloco)':>16s}  owner"]
    rows += [
        f"{j['id']:>5d} {j['status']:10s} {j['rounds_finalized']:>4d}/{j['rounds']:<4d} "
        f"{j['escrow']:>16d}  {j['owner']}"
        for j in res["result"]["jobs"]
    ]
    return "\n".join(rows) + f"\n{res['result']['total']} job(s) at height {res['height']}"


def reward_reason(r: dict[str, Any], p: dict[str, Any]) -> str:
    """Why a participant's reward is 0 (or "" when it was paid, or its round is still open), from
    the round's JSON alone: the chain's rules (abci_app/jobs/rounds.py ``is_paid_attester``) pay
    an accepted participant that attested the model 2/3 of the accepted stake attested, with its
    update in it; or, when no model reached that quorum, one that attested some model."""
    if p["reward"] or r["phase"] != "finalized":
        return ""
    o = p["outcome"]
    if o == "missed_commit":
        return "no commitment before the commit deadline: nothing to pay for"
    if o == "missed_reveal":
        return "challenged and never revealed: treated as fraud"
    if o in ("fraud", "rejected"):
        return f"verifiers found its update {o}"
    if o == "declined":
        return "it declined the slot"
    if o == "undecided":
        return "the verifiers' votes reached no 2/3 majority (undecided): not paid, not slashed"
    if o != "accepted":
        return o
    if not r["attested_model_hash"] and not p["attested_hash"]:
        return (
            "no model reached the 2/3 attestation quorum and it did not attest (silence never "
            "pays: missed_attest)"
        )
    if not p["attested_hash"]:
        return "it did not attest the round's model (pay needs the attestation: missed_attest)"
    if p["attested_hash"] != r["attested_model_hash"]:
        return "it attested another model than the quorum's (missed_attest)"
    if not (p["commitment"] or {}).get("tokens_processed"):
        return "its weight (tokens x reputation) is 0"
    return (
        "its update was screened out of the aggregate (pay follows the model), or it is tombstoned"
    )


def reputation_reason(r: dict[str, Any], p: dict[str, Any]) -> str:
    """Why a participant's reputation moved (or did not) in a finalized round."""
    if r["phase"] != "finalized":
        return ""
    d, o = p["reputation_delta"], p["outcome"]
    if o == "missed_commit":
        return "lost for a missed commit"
    if o in ("missed_reveal", "fraud"):
        return f"set to 0 ({o}; jailed)"
    if o == "accepted" and d < 0:
        return "lost as for a missed commit: accepted, but it did not attest the round's model"
    if o == "accepted" and d > 0:
        return "gained: accepted work a verifier panel checked, scaled by its pay"
    if o == "accepted" and not p["challenge"]:
        return "unchanged: not challenged (reputation grows only from verified work)"
    if o == "accepted" and not p["reward"]:
        return "unchanged: unpaid work gains nothing"
    return ""


def round_table(r: dict[str, Any]) -> str:
    """A readable table of one round (``query round`` without ``-o json``)."""
    w = r["windows"]

    def short(x: str) -> str:
        return (x[:12] + "…") if x else "-"

    lines = [
        f"round {r['job_id']}/{r['round']}  phase {r['phase']}",
        f"windows: opened {w['open_height']} | commit ≤{int(w['commit_deadline']) - 1} | reveal "
        f"≤{w['reveal_end']} | votes ≤{w['verdict_end']} | opened ≤{w['vote_reveal_end']} | "
        + (
            f"appeal ≤{w['appeal_end']} | opened ≤{w['appeal_reveal_end']} | "
            if w.get("appeal_end")
            else ""
        )
        + (
            f"final ≤{w['final_end']} | opened ≤{w['final_reveal_end']} | "
            if w.get("final_end")
            else ""
        )
        + f"attest ≤{w['attest_end']}"
        + (f" | finalized at {r['finalized_height']}" if r["finalized_height"] else ""),
        f"base model: {short(r['base_model_hash'])}   attested: {short(r['attested_model_hash'])}",
        "",
        (
            f"{'participant':44s} {'shard':>5s} {'rep':>5s} {'commit':6s} {'seg':>3s} "
            f"{'reveal':6s} {'votes':9s} {'outcome':13s} {'quality':>7s} {'reward':>10s} "
            f"{'slashed':>10s}"
        ),
    ]
    for p in r["participants"]:
        ch = p["challenge"]
        votes = "-"
        if ch:
            vs = ch["verifiers"]
            na = sum(bool(v["voted"] and v.get("unavailable")) for v in vs)
            votes = (
                f"{sum(v['voted'] and v['valid'] for v in vs)}✓"
                f"{sum(v['voted'] and not v['valid'] for v in vs) - na}✗"
                + (f"{na}?" if na else "")
                + f"/{len(vs)}"
                + ("↑" if p.get("escalated") else "")
            )
        seg = str(ch["segment"]) if ch else "-"
        reveal = ("yes" if ch["reveal"] else "no") if ch else "-"
        lines.append(
            f"{p['address']:44s} {p['shard']:>5d} {p['reputation']:>5d} "
            f"{'yes' if p['commitment'] else 'no':6s} {seg:>3s} {reveal:6s} {votes:9s} "
            f"{p['outcome']:13s} {p['quality']:>7d} {p['reward']:>10d} {p['slashed']:>10d}"
        )
    why = []
    for p in r["participants"]:  # an accepted update unpaid, or losing reputation: say why
        if p["outcome"] != "accepted" or not (p["reward"] == 0 or p["reputation_delta"] < 0):
            continue
        if reward_reason(r, p):
            why.append(f"why: {p['address']} reward 0: {reward_reason(r, p)}")
        if reputation_reason(r, p):
            why.append(
                f"why: {p['address']} reputation {p['reputation_delta']:+d}: "
                f"{reputation_reason(r, p)}"
            )
    lines.append("")
    lines += why
    lines.append(
        f"paid: {r['reward_paid']} uloco to participants, {r['verifier_paid']} uloco to verifiers; "
        f"{r['returned_to_escrow']} uloco back to escrow"
    )
    for s in r["slashes"]:
        lines.append(
            f"slashed: {s['address']} {s['amount']} uloco ({s['reason']}; {s['burned']} burned)"
        )
    for p in r["payouts"]:
        if p["kind"] == "bounty":
            lines.append(f"bounty: {p['address']} {p['amount']} uloco")
    return "\n".join(lines)


def rounds_table(res: dict[str, Any]) -> str:
    rows = [
        f"{'round':>5s} {'phase':10s} {'participants':>12s} {'accepted':>8s} {'paid':>10s}  "
        "attested"
    ]
    for r in res["result"]["rounds"]:
        acc = sum(p["outcome"] == "accepted" for p in r["participants"])
        rows.append(
            f"{r['round']:>5d} {r['phase']:10s} {len(r['participants']):>12d} {acc:>8d} "
            f"{r['reward_paid'] + r['verifier_paid']:>10d}  {r['attested_model_hash'][:16] or '-'}"
        )
    return "\n".join(rows) + f"\n{res['result']['total']} round(s) opened; height {res['height']}"


def market_params_text(d: dict[str, Any]) -> str:
    return "\n".join(
        [f"providers.{k} = {v}" for k, v in d["providers"].items()]
        + [f"jobs.{k} = {v}" for k, v in d["jobs"].items()]
    )
