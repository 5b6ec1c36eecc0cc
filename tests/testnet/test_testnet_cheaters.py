"""Every cheater behaviour on a real network: 4 validators and 6 provider workers (3 honest, one
``poison``, one ``withhold``, one ``lazy-verifier``) run the built-in job (challenge rate 100 %)
for 3 rounds over real cometbft, real HTTP blob servers and real processes (~3.5 min on 2
shared cores).

Who is examined is fixed by construction, not left to the draw (``testnet up --fixed-roles``,
node/local/testnet_market.py ``plan_roles``): the job has 3 training slots and 3 verifier seats;
provider0 (honest), the poisoner and the withholder train, and exactly those 3 are eligible
participants, so all 3 are drawn in every round until jailed; provider1, provider2 (honest) and
the lazy verifier register with an opt-in policy that takes no training slot, so they are the
only verifier candidates and every challenge's panel is exactly those 3. There is nobody left
for an appeal panel, so the first panel decides (⅔ of its stake; fraud needs the testnet's
``min_fraud_verifiers`` = 2 invalid voters). Round 1 opens at round 0's commit deadline, before
round 0's verdict: both cheaters are drawn in rounds 0 and 1; round 2 opens once round 0 is final
(with these windows) and draws provider0 alone.

Checked from chain queries (and blobs fetched over HTTP for the models), per round and in total:

- withhold: its challenge is never revealed; ``missed_reveal``, slashed the fraud fraction of its
  bond (all burned: nobody proved anything), no reward, jailed;
- poison: revealed, voted INVALID by both honest verifiers (the payload check), ``fraud``,
  slashed the fraud fraction (a bounty to the two honest verifiers), no reward, jailed;
- lazy verifier: votes VALID on the poisoned update, against the final verdict: slashed
  ``slash_fraction_wrong_vote_bps`` of its bond (or, where its vote cannot be opened without the
  evidence only re-execution yields, slashed as silent), and its verifier pay is exactly its
  share for the votes on the side of the verdict (its votes on honest work), nothing for the
  poisoner; over the job it earns less than it loses;
- honest providers: provider0 accepted and paid in every round, the verifiers paid every round
  and given the bounties, none ever slashed, all active;
- the attested model: every accepted participant attested it, and it equals an independent
  recomputation from the accepted updates only (the poisoned payload is not in it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from node.local.manifest import NodeInfo, load, workers_of
from node.local.testnet_market import CHEATER_BOND_FACTOR, PROVIDER_BOND
from tests.kits.tnkit import blob_reader, cli, network, query, recompute_model, wait_for

pytestmark = pytest.mark.integration
ROUNDS = 3
BPS = 10_000


def _cut(bond: int, bps: int) -> int:
    """A slash of ``bps`` of ``bond``: rounded up (abci_app/providers keeper.slash)."""
    return -(-bond * bps // BPS)


def _slashes(r: dict[str, Any], addr: str) -> list[dict[str, Any]]:
    return [s for s in r["slashes"] if s["address"] == addr]


def _paid(r: dict[str, Any], addr: str, kind: str) -> int:
    return sum(p["amount"] for p in r["payouts"] if p["address"] == addr and p["kind"] == kind)


def _verifier_shares(r: dict[str, Any], budget: int) -> dict[str, int]:
    """What the verifier budget pays each verifier: one unit per opened vote on the side of the
    final verdict (accepted, fraud or rejected), floor(budget x units / all units)."""
    units: dict[str, int] = {}
    for p in r["participants"]:
        ch = p["challenge"]
        if not ch or p["outcome"] not in ("accepted", "fraud", "rejected"):
            continue
        for v in ch["verifiers"]:
            if v["voted"] and v["valid"] == (p["outcome"] == "accepted"):
                units[v["address"]] = units.get(v["address"], 0) + 1
    total = sum(units.values())
    return {a: budget * u // total for a, u in units.items()}


def test_each_cheater_is_caught_slashed_and_unpaid(tmp_path: Path) -> None:
    extra = (
        "--providers",
        "6",
        "--cheaters",
        "poison:1,withhold:1,lazy-verifier:1",
        "--fixed-roles",
        "--rounds",
        str(ROUNDS),
    )
    with network(tmp_path, extra=extra) as (d, nodes):
        check_cheaters(d, nodes[0], tmp_path)


# long: one live testnet's finished job checked round by round, threading one bond ledger
def check_cheaters(d: Path, n0: NodeInfo, tmp_path: Path) -> None:
    """The assertions above, on the testnet in ``d`` (its job run to completion)."""
    m = load(d)
    job_id = m["job_id"]
    workers = workers_of(m)
    by_kind = {w.behaviour: w for w in workers if w.behaviour != "honest"}
    poison, withhold, lazy = (by_kind[k].address for k in ("poison", "withhold", "lazy-verifier"))
    trainers = {w.address for w in workers if w.behaviour == "honest" and w.role == "train"}
    checkers = {w.address for w in workers if w.behaviour == "honest" and w.role == "verify"}
    assert len(trainers) == 1 and len(checkers) == 2, [(w.behaviour, w.role) for w in workers]
    honest = trainers | checkers
    st = json.loads(cli("testnet", "status", "--dir", str(d), "-o", "json", check=False).stdout)
    assert {w["name"]: w["role"] for w in st["workers"]} == {w.name: w.role for w in workers}
    assert "ROLE" in cli("testnet", "status", "--dir", str(d), check=False).stdout
    job = wait_for(
        "the job to complete",
        lambda: (j := query(n0, f"/job/{job_id}"))["status"] == "completed" and j,
        timeout=400,
        every=1.0,
    )
    params = query(n0, "/market_params")["jobs"]
    fraud_bps, wrong_bps = (
        params["slash_fraction_fraud_bps"],
        params["slash_fraction_wrong_vote_bps"],
    )
    bounty_bps = params["fraud_bounty_bps"]
    lazy_bps = {"wrong_vote": wrong_bps, "verifier_silent": params["slash_fraction_liveness_bps"]}
    rounds = query(n0, f"/rounds/{job_id}")["rounds"]
    assert len(rounds) == ROUNDS and job["rounds_finalized"] == ROUNDS
    V = job["verifier_reward_per_round"]

    # bonds as they were before each round's finalize (rounds finalize in order)
    bond = dict.fromkeys(honest | {lazy}, PROVIDER_BOND)
    bond |= dict.fromkeys((poison, withhold), PROVIDER_BOND * CHEATER_BOND_FACTOR)
    lazy_paid = lazy_slashed = lazy_seats = 0
    for r in rounds:
        rn = r["round"]
        by = {p["address"]: p for p in r["participants"]}
        # by construction: the honest trainer always, never a verify-only provider, and both
        # cheaters in every round opened before round 0's finalize jailed them (rounds 0 and 1:
        # round r+1 opens at r's commit deadline; the finalize runs before an open in a block)
        jailed_at = rounds[0]["finalized_height"]
        want = trainers | ({poison, withhold} if r["windows"]["open_height"] < jailed_at else set())
        assert rn > 1 or want == trainers | {poison, withhold}, rn
        assert set(by) == want, (rn, sorted(by))
        # the verifiers are drawn at the commit deadline D from the providers as they were at the
        # start of that block, less those the block itself slashes (providers README, "Draws see
        # the state before the seeded block"): round r-1 finalizes in round r's D block, so the
        # lazy verifier may sit out a round when a slash of round r-1 lands in that block before
        # the draw (the records carry no height: which of its slashes does is not visible here)
        prev = rounds[rn - 1] if rn else None
        may_sit_out = (
            prev is not None
            and prev["finalized_height"] == r["windows"]["commit_deadline"]
            and bool(_slashes(prev, lazy))
        )
        panels = [
            {v["address"] for v in p["challenge"]["verifiers"]}
            for p in r["participants"]
            if p["challenge"]
        ]
        for panel in panels:
            assert checkers <= panel <= checkers | {lazy}, (rn, panel)
            assert lazy in panel or may_sit_out, (rn, panel)
        sat_out = bool(panels) and all(lazy not in panel for panel in panels)
        lazy_seats += sum(lazy in panel for panel in panels)
        assert all(p["challenge"] for p in r["participants"]), rn  # challenge rate 100 %

        # withhold: never revealed -> missed_reveal, slashed as fraud, all burned, unpaid
        if withhold in by:
            w = by[withhold]
            assert w["commitment"] and w["challenge"]["reveal"] is None, (rn, w)
            assert w["outcome"] == "missed_reveal" and w["reward"] == 0, (rn, w)
            (s,) = _slashes(r, withhold)
            assert s["reason"] == "missed_reveal" and s["amount"] == _cut(bond[withhold], fraud_bps)
            assert s["burned"] == s["amount"] and w["slashed"] == s["amount"], (rn, s)
            assert not any(p["address"] == withhold for p in r["payouts"]), rn
            bond[withhold] -= s["amount"]

        # poison: revealed, the two honest verifiers vote INVALID, the lazy one VALID -> fraud
        if poison in by:
            p = by[poison]
            assert p["challenge"]["reveal"] is not None, (rn, p)
            seats = p["challenge"]["verifiers"]
            for v in seats:
                if v["address"] in checkers:
                    assert v["voted"] and not v["valid"], (rn, v)
            mine = [v for v in seats if v["address"] == lazy]
            assert all(v["valid"] for v in mine if v["voted"]), mine  # it never re-executes
            assert p["outcome"] == "fraud" and p["reward"] == 0, (rn, p)
            (s,) = _slashes(r, poison)
            assert s["reason"] == "fraud" and s["amount"] == _cut(bond[poison], fraud_bps)
            assert p["slashed"] == s["amount"], (rn, p)
            # the bounty (floor of bounty_bps, split by stake: the split's dust is burned)
            bounty = s["amount"] * bounty_bps // BPS
            assert 0 <= bounty - (s["amount"] - s["burned"]) < len(checkers), s
            assert not any(q["address"] == poison for q in r["payouts"]), rn
            bond[poison] -= s["amount"]
            # the lazy verifier's seat on the poisoner costs it: a VALID vote is against the
            # verdict (wrong_vote); a vote it could not open (no evidence without
            # re-executing) is silence (verifier_silent)
            assert sat_out or any(v["slashed"] > 0 for v in mine), mine
            if any(v["voted"] for v in mine):
                assert "wrong_vote" in {s["reason"] for s in _slashes(r, lazy)}, r["slashes"]
        # each slash of the lazy verifier: at most the fraction its reason names of its starting
        # bond (slashes of neighbouring rounds land in the same blocks in either round's order,
        # so the bond at each moment is not known here; the exact books are checked against the
        # provider record at the end)
        for s in _slashes(r, lazy):
            assert 0 < s["amount"] <= _cut(PROVIDER_BOND, lazy_bps[s["reason"]]), (rn, s)
            bond[lazy] -= s["amount"]
            lazy_slashed += s["amount"]
        shares = _verifier_shares(r, V)
        assert _paid(r, lazy, "verifier") == shares.get(lazy, 0), (rn, r["payouts"])
        assert _paid(r, lazy, "bounty") == 0, rn
        lazy_paid += _paid(r, lazy, "verifier")

        # honest: accepted and paid, verifiers paid, nobody honest slashed
        for a in trainers:
            assert by[a]["outcome"] == "accepted" and by[a]["reward"] > 0, (rn, by[a])
        for a in checkers:
            assert _paid(r, a, "verifier") == shares[a] > 0, (rn, r["payouts"])
            if poison in by:  # proved the fraud: the bounty, by stake
                assert _paid(r, a, "bounty") > 0, (rn, r["payouts"])
        assert not any(s["address"] in honest for s in r["slashes"]), (rn, r["slashes"])

        # the attested model: agreed by every accepted participant
        accepted = [p for p in r["participants"] if p["outcome"] == "accepted"]
        assert r["attested_model_hash"], f"round {rn} has no attested model"
        assert all(p["attested_hash"] == r["attested_model_hash"] for p in accepted), rn

    # what each ended with, from the provider records
    for a in (poison, withhold):
        rec = query(n0, f"/provider/{a}")
        sla = query(n0, f"/provider/{a}/sla")
        assert rec["status"] == "jailed" and rec["reputation"] == 0, rec
        assert (
            rec["bond"] == bond[a]
            and rec["slashed_total"] == PROVIDER_BOND * CHEATER_BOND_FACTOR - bond[a]
        )
        assert sla["earned_total"] == 0, sla
    assert lazy_seats > 0  # the lazy verifier judged at least one commitment
    rec, sla = query(n0, f"/provider/{lazy}"), query(n0, f"/provider/{lazy}/sla")
    assert rec["bond"] == bond[lazy] and rec["slashed_total"] == lazy_slashed > 0, rec
    assert sla["earned_total"] == lazy_paid < lazy_slashed, sla
    for a in honest:
        rec, sla = query(n0, f"/provider/{a}"), query(n0, f"/provider/{a}/sla")
        assert rec["status"] == "active" and rec["slashed_total"] == 0, rec
        assert rec["bond"] == PROVIDER_BOND and sla["earned_total"] > 0, (rec, sla)

    # the attested models, recomputed from the accepted updates only (fetched over HTTP)
    with blob_reader(tmp_path, [w.endpoint for w in workers]) as blob:
        for r in rounds:
            model, included, excluded = recompute_model(job, r, blob)
            assert sorted(included) == sorted(trainers) and not excluded, (r["round"], excluded)
            assert model == r["attested_model_hash"], f"round {r['round']}"
