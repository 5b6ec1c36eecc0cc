"""Does cheating still lose at the shipped defaults, and what does verification cost? (issue 29)

Pure arithmetic over the chain's own formulas (no training, no chain): for a job at the defaults
``tx job create`` ships (node/client/market_msgs.py DEFAULT_*) and, for comparison, at the old ones
(every commitment challenged, 15 segments), per fake fraction f of a provider's steps:

    catch / round   P = abci_app.jobs.audit.compute_catch_bps(n, s, c, f)  (one round, and 3)
    bond            the collateral the chain requires to draw a participant
                    (abci_app.jobs.incentives.compute_required_bond: margin x slot / (c x fraud))
    gain / round    the compute the cheat saves: f x train cost (train cost = TRAIN_BPS of the
                    slot, as in benchmarks/incentives.py)
    loss / round    P x (the slot it is not paid + fraud slash x bond)
    margin          loss / gain: how many times its gain a cheater loses on average (>= 2 wanted)

and the verification's cost: the verifiers' expected compute per provider step
(node/client/market_msgs.py ``expected_verifier_work_bps``) and the round's verification bytes per
participant, served and fetched (trainer/netmodel.py), as a fraction of per-step fp32 ring
AllReduce for the same steps, with the whole round's reduction for an int8 payload all-gathered
and a base-model download in a quarter of the rounds. The simulation on the real state machine of
the same strategies at 500 bps is benchmarks/incentives.py (RESULTS.md *Incentives*).

    .venv/bin/python benchmarks/deterrence.py [--participants 4] [--inner-steps 100]
        [--trace-interval 1]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from abci_app.jobs.audit import compute_catch_bps  # noqa: E402
from abci_app.jobs.incentives import compute_required_bond  # noqa: E402
from abci_app.jobs.params import DEFAULTS  # noqa: E402
from node.client.market_msgs import (  # noqa: E402
    DEFAULT_CHALLENGE_BPS,
    DEFAULT_SEGMENTS_PER_CHALLENGE,
    DEFAULT_VERIFIERS_PER_CHALLENGE,
    expected_verifier_work_bps,
)
from trainer.netmodel import reveal_bytes_per_round, round_traffic_per_worker  # noqa: E402

LOCO = 1_000_000
REWARD = 10 * LOCO  # per round, as in benchmarks/incentives.py
TRAIN_BPS = 6_000  # a slot's train cost, as in benchmarks/incentives.py
FAKES_BPS = (100, 1_000, 10_000)  # 1 %, 10 %, 100 % of the steps


def rows(c: int, s: int, n: int, participants: int) -> list[dict]:
    slot = REWARD // participants
    fraud = DEFAULTS["slash_fraction_fraud_bps"]
    bond = compute_required_bond(REWARD, participants, c, fraud, DEFAULTS["collateral_margin_bps"])
    out = []
    for f in FAKES_BPS:
        p1 = compute_catch_bps(n, s, c, f, 1) / 10_000
        p3 = compute_catch_bps(n, s, c, f, 3) / 10_000
        gain = f / 10_000 * slot * TRAIN_BPS / 10_000
        loss = p1 * (slot + fraud / 10_000 * bond)
        out.append(
            {
                "f": f,
                "p1": p1,
                "p3": p3,
                "bond": bond,
                "gain": gain,
                "loss": loss,
                "margin": loss / gain,
            }
        )
    return out


def costs(c: int, s: int, v: int, H: int, k: int, participants: int) -> dict:
    n = H // k
    P = 1.0  # bytes per parameter: every term scales with the parameter count
    reveal = reveal_bytes_per_round(
        P,
        challenge_bps=c,
        segments=min(s, n),
        verifiers=v,
        audit_bps=DEFAULTS["audit_bps"],
        audit_verifiers=DEFAULTS["audit_verifiers"],
        payload_bytes=1.0,  # int8: ~1 B/param, fetched by each verifier
    )
    t = round_traffic_per_worker(
        P,
        workers=participants,
        H=H,
        payload_bytes=1.0,
        reveal_bytes=reveal,
        model_bytes=8.0,  # parameters + outer momentum
        model_download_share=0.25,
    )
    return {
        "compute_bps": expected_verifier_work_bps(n, s, c, k, v),
        "verification_share": t["verification"] / t["allreduce"],
        "reduction": t["reduction"],
        "breakdown": t,
    }


def render(a: argparse.Namespace) -> str:
    H, k, N = a.inner_steps, a.trace_interval, a.participants
    n = H // k
    v = DEFAULT_VERIFIERS_PER_CHALLENGE
    settings = [
        ("shipped defaults", DEFAULT_CHALLENGE_BPS, DEFAULT_SEGMENTS_PER_CHALLENGE),
        ("old defaults", 10_000, 15),
    ]
    L = [
        f"Command: `.venv/bin/python benchmarks/deterrence.py {' '.join(sys.argv[1:])}`".rstrip()
        + " (pure arithmetic over the chain's formulas).",
        "",
        f"H = {H}, k = {k} (n = {n} segments), {N} participants, reward {REWARD // LOCO} LOCO a "
        f"round (slot {REWARD // N / LOCO:g} LOCO), train cost {TRAIN_BPS / 100:g} % of a slot, "
        f"fraud slash {DEFAULTS['slash_fraction_fraud_bps'] / 100:g} %, collateral margin "
        f"{DEFAULTS['collateral_margin_bps'] / 10_000:g}x, audits {DEFAULTS['audit_bps'] / 100:g} "
        f"% x {DEFAULTS['audit_verifiers']} seat, {v} first-panel verifier.",
        "",
        "| settings | fake f | catch / round | within 3 rounds | bond (LOCO) | gain / round (LOCO) "
        "| loss / round (LOCO) | margin |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, c, s in settings:
        for r in rows(c, s, n, N):
            L.append(
                f"| {name} (c {c / 100:g} %, s {s}) | {r['f'] / 100:g} % | {100 * r['p1']:.2f} % "
                f"| {100 * r['p3']:.2f} % | {r['bond'] / LOCO:,.0f} | {r['gain'] / LOCO:.4f} | "
                f"{r['loss'] / LOCO:.4f} | **{r['margin']:.1f}** |"
            )
    L += [
        "",
        "| settings | verifiers' compute / provider's | verification bytes / AllReduce | "
        "whole round: reduction vs fp32 AllReduce |",
        "|---|---:|---:|---:|",
    ]
    for name, c, s in settings:
        x = costs(c, s, v, H, k, N)
        L.append(
            f"| {name} (c {c / 100:g} %, s {s}) | "
            + (f"{x['compute_bps'] / 100:.2f} %" if x["compute_bps"] else "< 0.01 %")
            + " | "
            f"1/{1 / x['verification_share']:,.0f} | **{x['reduction']:,.0f}x** |"
        )
    b = costs(DEFAULT_CHALLENGE_BPS, DEFAULT_SEGMENTS_PER_CHALLENGE, v, H, k, N)["breakdown"]
    L += [
        "",
        "Whole round at the shipped defaults, bytes per parameter per participant (sent + "
        f"received): payloads {b['payloads']:.2f} (int8, all-gather), verification "
        f"{b['verification']:.2f}, base model {b['models']:.2f} (8 B/param in 1/4 of the rounds); "
        f"fp32 ring AllReduce {b['allreduce']:,.0f}.",
    ]
    return "\n".join(L)


def seeded_table(path: Path) -> str:
    """The whole-round bytes of a saved seeded table (benchmarks/diloco_seeds.py's table.json,
    e.g. benchmarks/diloco_seeds_runs/h100_60rounds_seeds3.json) at the shipped defaults: each
    row's payloads all-gathered (sent to the W-1 others and theirs received: no int/low-rank/
    sparse payload can be summed on a ring; an uncompressed float32 one is, on a ring), its
    verification served and fetched (trainer/netmodel.py, the row's payload size per round),
    against fp32 ring AllReduce sent and
    received. The row's loss and gap are the table's."""
    res = json.loads(path.read_text())
    W, P, rounds = res["workers"], res["n_params"], res["steps"] // res["H"]
    ar = 2 * res["allreduce_bytes"]
    L = [
        f"Rows of `{path}` ({P:,} parameters, {W} workers, H = {res['H']}, {rounds} rounds); "
        "bytes per worker for the run, sent + received; verification at the shipped defaults "
        f"(c {DEFAULT_CHALLENGE_BPS / 100:g} %, {DEFAULT_SEGMENTS_PER_CHALLENGE} segment, "
        f"1 verifier + audits {DEFAULTS['audit_bps'] / 100:g} % x {DEFAULTS['audit_verifiers']}); "
        f"fp32 ring AllReduce both ways {ar:,.0f} B.",
        "",
        "| run | gap to AllReduce | payloads (both ways; ring for float32) | verification | "
        "whole run | reduction |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in res["rows"]:
        if r["group"] == "a" or r.get("steps_mult", 1) != 1:
            continue
        per_round = r["bytes_upload"] / rounds
        ver = (
            2
            * rounds
            * reveal_bytes_per_round(
                P,
                challenge_bps=DEFAULT_CHALLENGE_BPS,
                segments=DEFAULT_SEGMENTS_PER_CHALLENGE,
                verifiers=DEFAULT_VERIFIERS_PER_CHALLENGE,
                audit_bps=DEFAULTS["audit_bps"],
                audit_verifiers=DEFAULTS["audit_verifiers"],
                payload_bytes=per_round,
                trace_entries=res["H"] + 1,
            )
        )
        # uncompressed float32 updates are the one payload a ring can sum on the way
        ring = r.get("bytes_ring") is not None and " + " not in r["run"]
        pay = 2 * (r["bytes_ring"] if ring else r["bytes_allgather"])
        L.append(
            f"| {r['run']} | {r['gap']:+.2f} % | {pay:,.0f} | {ver:,.0f} | {pay + ver:,.0f} | "
            f"**{ar / (pay + ver):,.0f}x** |"
        )
    return "\n".join(L)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description="catch rate, deterrence margin and verification cost at the shipped defaults",
        epilog="example: .venv/bin/python benchmarks/deterrence.py --inner-steps 100",
    )
    p.add_argument("--participants", type=int, default=4)
    p.add_argument("--inner-steps", type=int, default=100)
    p.add_argument("--trace-interval", type=int, default=1)
    p.add_argument(
        "--seeded",
        type=Path,
        metavar="TABLE_JSON",
        help="also the whole-round bytes of a saved seeded table's rows at the shipped defaults",
    )
    a = p.parse_args(argv)
    if a.participants < 2 or a.inner_steps < 1 or a.trace_interval < 1:
        p.error("--participants >= 2, --inner-steps and --trace-interval >= 1")
    if a.inner_steps % a.trace_interval:
        p.error("--trace-interval must divide --inner-steps")
    print(render(a))
    if a.seeded:
        print()
        print(seeded_table(a.seeded))
    return 0


if __name__ == "__main__":
    sys.exit(main())
