"""Issue 31, item 5, the gap it left: a later-panel seat that copies the earlier panels' INVALID
verdict. An invalid vote only has to differ from the committed ends somewhere, so a copied one
used to pass and be paid like a re-executed one. Now, when a later panel's window closes, every
opened vote's evidence on each of the panel's fresh segments is compared with what the panel's
opened stake settled (jobs/evidence.py): the provider's end when a strict majority of the stake
matches it, else (exact mode) one divergent state a strict majority of the invalid stake names. A
vote that fails is ``unevidenced`` and judged as silence (unpaid, the liveness slash). On the real
app, with balances before and after (docs/threat-model.md *Fresh segments for the later panels*)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import pytest

from abci_app.bank import keeper as bank
from abci_app.jobs.incentives import (
    compute_blind_vote_hash,
    compute_evidence,
    compute_fresh_segments,
    compute_panel_reveals,
    compute_vote_hash,
)
from abci_app.jobs.probe import PROBE_DIM, compute_probe_evidence
from abci_app.pb import abci, jobs_pb2, tx_pb2
from tests.kits.marketkit import (
    VOTE_PANEL,
    Market,
    actors_block,
    events_of,
    h,
    honest_probe,
    honest_state,
    new_market,
    reveal_vote_msg,
    verdict_msg,
    vote_msgs,
    vote_salt,
)

P = jobs_pb2
EXACT = {"determinism_mode": P.DETERMINISM_MODE_EXACT, "tolerance_ppm": 0, "stack": "cpu-test"}
MODES: dict[str, dict[str, Any]] = {"exact": EXACT, "tolerance": {}}
N_SEG = 8  # H/k: room for fresh segments for both later panels
Votes = tuple[tx_pb2.Msg, tx_pb2.Msg]
# a hand-made vote: (market, round, target, verifier, panel) -> (MsgVerdict, MsgRevealVote)
HandVote = Callable[[Market, jobs_pb2.Round, jobs_pb2.Participant, bytes, int], Votes]
# which seats of a later panel vote by hand: (panel, its seats, the earlier panels' seats)
Plan = Callable[[int, list[bytes], set[bytes]], dict[bytes, HandVote]]


def wealth(m: Market, addr: bytes) -> int:
    p = m.provider(addr)
    return bank.get_balance(m.store, addr) + (p.bond + p.unbonding if p else 0)


def market(mode: str) -> Market:
    """Eight providers, one participant, two first-panel seats, three appeal seats, no audits:
    the final panel is the seven providers outside the round."""
    m = new_market(n_providers=8, jobs_params={"audit_bps": 0, "appeal_verifiers": 3})
    m.create_job(
        rounds=1,
        participants_per_round=1,
        num_shards=1,
        verifiers_per_challenge=2,
        inner_steps=2 * N_SEG,
        trace_interval=2,
        **MODES[mode],
    )
    m.until(m.height + 1)
    return m


def is_exact(m: Market, r: jobs_pb2.Round) -> bool:
    return m.job(r.job_id).spec.determinism_mode == P.DETERMINISM_MODE_EXACT


def invalid_votes(
    m: Market,
    r: jobs_pb2.Round,
    t: jobs_pb2.Participant,
    verifier: bytes,
    panel: int,
    reached: Callable[[jobs_pb2.Reveal, int], bytes],
    probes: Callable[[jobs_pb2.Reveal, int], list[int]],
) -> Votes:
    """An invalid vote whose evidence for each segment the panel judges (segment order) is
    ``reached(opening, position)`` (exact) or ``probes(opening, position)`` (tolerance)."""
    judged = compute_panel_reveals(t, panel)
    salt = vote_salt(verifier, r.job_id, r.round, t.address)
    if is_exact(m, r):
        states = [reached(o, i) for i, o in enumerate(judged)]
        ev = compute_evidence(states)
        hsh = compute_vote_hash(r.job_id, r.round, t.address, verifier, False, 0, ev, salt)
        opening = reveal_vote_msg(r.job_id, r.round, t.address, False, 0, ev, salt, states)
        return verdict_msg(r.job_id, r.round, t.address, hsh), opening
    flat = [x for i, o in enumerate(judged) for x in probes(o, i)]
    ev = compute_probe_evidence(flat)
    hsh = compute_blind_vote_hash(r.job_id, r.round, t.address, verifier, ev, salt)
    opening = reveal_vote_msg(r.job_id, r.round, t.address, False, 0, ev, salt)
    opening.reveal_vote.probes.extend(flat)
    return verdict_msg(r.job_id, r.round, t.address, hsh), opening


def recomputed(t: jobs_pb2.Participant, r: jobs_pb2.Round, seg: int, tag: bytes) -> bytes:
    """A state a re-execution reaches where the provider's end is not the honest one (the kits'
    first-panel invalid voters open ``tag`` = b"recomputed")."""
    return hashlib.sha256(tag + honest_state(t.address, r.job_id, r.round, seg + 1)).digest()


def copier(
    m: Market, r: jobs_pb2.Round, t: jobs_pb2.Participant, verifier: bytes, panel: int
) -> Votes:
    """Copies the earlier panels' invalid verdict and re-executes nothing: for the segments they
    judged, what their openings published (exact: the reached states in their MsgRevealVote
    txs; tolerance: their probes on chain); for the panel's fresh segments, the best public data
    gives: a guess (exact, claiming the end diverges), the previous step's probe (tolerance)."""
    earlier = [v for v in t.verifiers if v.panel == 0 and v.voted and not v.valid]
    order = [o.segment for o in compute_panel_reveals(t, 0)]

    def probes(o: jobs_pb2.Reveal, _: int) -> list[int]:
        if o.panel == 0:
            i = order.index(o.segment)
            return list(earlier[0].probes[i * PROBE_DIM : (i + 1) * PROBE_DIM])
        return honest_probe(t.address, r.job_id, r.round, o.segment)

    def reached(o: jobs_pb2.Reveal, _: int) -> bytes:
        if o.panel == 0:
            return recomputed(t, r, o.segment, b"recomputed")
        return h(f"guess/{o.segment}")

    return invalid_votes(m, r, t, verifier, panel, reached, probes)


def true_probe(
    t: jobs_pb2.Participant, r: jobs_pb2.Round, seg: int, scale: int, noise_ppm: int
) -> list[int]:
    """Tolerance mode: the probe a re-execution of segment ``seg`` reaches where the provider's
    committed end is faked: ``scale`` times the committed one (far out of the bound), each
    component ``noise_ppm`` millionths off (another verifier's floats)."""
    return [
        scale * x + scale * x * noise_ppm // 1_000_000
        for x in honest_probe(t.address, r.job_id, r.round, seg + 1)
    ]


def divergent(tag: bytes, scale: int = 2, noise_ppm: int = 0, fresh_too: bool = True) -> HandVote:
    """An invalid vote reaching other ends than the provider's: exact, ``recomputed(tag)`` (on
    the earlier panels' segments always b"recomputed", what the first panel's re-executions
    reached); tolerance, ``true_probe(scale, noise_ppm)`` on the panel's fresh segments, the
    honest probe elsewhere (the earlier segments are the kits' honest trace). ``fresh_too``
    False: the honest end on the fresh segments. Honest re-executions of faked fresh ends use
    ``tag`` b"recomputed" / ``scale`` 2; another tag or scale names other ends."""

    def make(
        m: Market, r: jobs_pb2.Round, t: jobs_pb2.Participant, verifier: bytes, panel: int
    ) -> Votes:
        def reached(o: jobs_pb2.Reveal, _: int) -> bytes:
            if o.panel == panel and not fresh_too:
                return honest_state(t.address, r.job_id, r.round, o.segment + 1)
            return recomputed(t, r, o.segment, tag if o.panel == panel else b"recomputed")

        def probes(o: jobs_pb2.Reveal, _: int) -> list[int]:
            if o.panel == panel and fresh_too:
                return true_probe(t, r, o.segment, scale, noise_ppm)
            return honest_probe(t.address, r.job_id, r.round, o.segment + 1)

        return invalid_votes(m, r, t, verifier, panel, reached, probes)

    return make


def valid_colluder(
    m: Market, r: jobs_pb2.Round, t: jobs_pb2.Participant, verifier: bytes, panel: int
) -> Votes:
    """A valid vote naming the provider's committed ends (a colluder the cheater told them)."""
    return vote_msgs(r, t.address, verifier, True, 8_000, tolerance=not is_exact(m, r), panel=panel)


def drive(
    m: Market,
    first: Callable[[bytes, list[bytes]], tuple[bool, int]],
    later: tuple[bool, int],
    plan: Plan,
) -> list[abci.ResponseFinalizeBlock]:
    """Run the round: the first panel votes ``first(verifier, its seats)``; in each later panel
    the seats ``plan`` names vote by hand (committed once the provider opened the panel's fresh
    segments), every other seat re-executes and votes ``later`` (the kits' diligent evidence).
    Returns every block's response."""
    resps: list[abci.ResponseFinalizeBlock] = []
    hands: dict[int, dict[bytes, HandVote]] = {}

    def vote(verifier: bytes, target: bytes) -> tuple[bool, int] | None:
        r = m.round(1, 0)
        panel = VOTE_PANEL[r.phase]
        (t,) = r.participants
        if panel == 0:
            return first(verifier, sorted(v.address for v in t.verifiers if v.panel == 0))
        return None if verifier in hands.get(panel, {}) else later

    for _ in range(400):
        r = m.round(1, 0)
        if r.phase == P.PHASE_FINALIZED:
            return resps
        (t,) = r.participants
        panel = VOTE_PANEL.get(r.phase, 0)
        fresh = set(compute_fresh_segments(t, panel)) if panel else set()
        opened = {o.segment for o in t.reveals if o.panel == panel}
        if panel and panel not in hands and fresh <= opened:
            seats = sorted(v.address for v in t.verifiers if v.panel == panel)
            hands[panel] = plan(panel, seats, {v.address for v in t.verifiers if v.panel < panel})
            commits = []
            for addr, make in hands[panel].items():
                commit, opening = make(m, r, t, addr, panel)
                commits.append((m.key(addr), commit))
                m.pending_votes[(1, 0, t.address, addr)] = opening
            if commits:  # in one block: the window is short
                res = m.block(commits)
                assert all(x.code == 0 for x in res.tx_results), [x.log for x in res.tx_results]
                resps.append(res)
        resps.append(actors_block(m, 1, vote=vote))
    raise AssertionError("the round did not finish")


def accuse_all(verifier: bytes, seats: list[bytes]) -> tuple[bool, int]:
    return False, 0


def seat(t: jobs_pb2.Participant, panel: int, addr: bytes) -> jobs_pb2.VerifierAssignment:
    return next(v for v in t.verifiers if v.panel == panel and v.address == addr)


def verifier_paid(r: jobs_pb2.Round, addr: bytes) -> int:
    return sum(x.amount for x in r.payouts if x.kind == "verifier" and x.address == addr)


@pytest.mark.parametrize("mode", ["exact", "tolerance"])
@pytest.mark.parametrize("panel", [1, 2], ids=["appeal", "final"])
def test_copier_of_an_invalid_verdict_earns_less_than_a_reexecuting_seat(mode: str, panel: int):
    """(a) The first panel finds the work faked (both seats invalid); the appeal and final panels
    re-execute and agree, except one seat new to the copier's panel that copies the invalid
    verdict in every later panel it sits on. Its evidence on the fresh segments (honest ends,
    never public) is a guess: the panel's re-executing stake settles them honest, the copier's
    vote is unevidenced (reason ``settled_honest``), unpaid and slashed for liveness, while a
    re-executing seat new to the same panel is paid. The verdict is fraud either way."""
    m = market(mode)
    before = {k.address: wealth(m, k.address) for k in m.providers}
    roles: dict[str, bytes] = {}

    def plan(p: int, seats: list[bytes], earlier: set[bytes]) -> dict[bytes, HandVote]:
        if p == panel:
            new = [a for a in seats if a not in earlier]
            roles["copier"], roles["diligent"] = new[0], new[-1]
        return {roles["copier"]: copier} if roles.get("copier") in seats else {}

    resps = drive(m, accuse_all, (False, 0), plan)
    r = m.round(1, 0)
    (t,) = r.participants
    assert t.outcome == P.OUTCOME_FRAUD and t.final_tier
    cp, good = roles["copier"], roles["diligent"]
    s = seat(t, panel, cp)
    assert s.voted and not s.valid and s.unevidenced and s.slashed > 0
    assert verifier_paid(r, cp) == 0
    flagged = events_of(resps, "vote.unevidenced")
    assert {e["reason"] for e in flagged} == {"settled_honest"}
    assert all(e["panel"] in ("1", "2") for e in flagged)
    g = seat(t, panel, good)
    assert g.voted and not g.valid and not g.unevidenced and g.slashed == 0
    assert verifier_paid(r, good) > 0
    # nobody but the copier was marked
    assert {v.address for v in t.verifiers if v.unevidenced} == {cp}
    gain = {a: wealth(m, a) - before[a] for a in (cp, good)}
    assert gain[cp] < 0 < gain[good]


@pytest.mark.parametrize("mode", ["exact", "tolerance"])
@pytest.mark.parametrize("colluder", ["other_end", "valid"])
def test_cheater_and_a_colluder_cannot_withhold_the_honest_invalid_voters_pay(
    mode: str, colluder: str
):
    """(b) The provider faked the appeal panel's fresh ends too, so the two honest appeal seats
    reach other ends there, the same ones (exact: byte for byte; tolerance: probes within the
    bound of each other, 100 and 300 ppm apart from the truth) and vote invalid; the third seat
    colludes with the cheater, naming yet other ends (or the provider's own, voting valid). No
    strict majority of the stake matches the provider's end, the honest hold a strict majority
    of the invalid stake: they pass and are paid; the colluder naming another end is
    unevidenced (``settled_divergent``)."""
    m = market(mode)
    roles: dict[str, bytes] = {}

    def plan(p: int, seats: list[bytes], earlier: set[bytes]) -> dict[bytes, HandVote]:
        if p != 1:
            return {}
        roles["colluder"] = seats[0]
        bad = divergent(b"colluder", scale=3) if colluder == "other_end" else valid_colluder
        return {
            seats[0]: bad,
            seats[1]: divergent(b"recomputed", noise_ppm=100),
            seats[2]: divergent(b"recomputed", noise_ppm=300),
        }

    resps = drive(m, accuse_all, (False, 0), plan)
    r = m.round(1, 0)
    (t,) = r.participants
    assert t.outcome == P.OUTCOME_FRAUD
    honest = [v for v in t.verifiers if v.panel == 1 and v.address != roles["colluder"]]
    assert len(honest) == 2
    for v in honest:
        assert v.voted and not v.valid and not v.unevidenced and v.slashed == 0
        assert verifier_paid(r, v.address) > 0
    bad = seat(t, 1, roles["colluder"])
    if colluder == "other_end":
        assert bad.unevidenced and bad.slashed > 0
        reasons = {e["reason"] for e in events_of(resps, "vote.unevidenced") if e["panel"] == "1"}
        assert reasons == {"settled_divergent"}
    else:  # a valid vote on a fraud verdict: a wrong vote, not an evidence question
        assert bad.valid and not bad.unevidenced and bad.slashed > 0


@pytest.mark.parametrize("mode", ["exact", "tolerance"])
def test_copier_fails_where_the_provider_faked_the_fresh_ends_too(mode: str):
    """(a) against a provider that fakes everything, the fresh ends included: the re-executing
    seats of the final panel agree on the ends they reached, the copier's guess agrees with
    nobody, and it is unevidenced (``settled_divergent``)."""
    m = market(mode)
    cp: list[bytes] = []

    def plan(p: int, seats: list[bytes], earlier: set[bytes]) -> dict[bytes, HandVote]:
        if p != 2:
            return {}
        cp.append(seats[0])
        honest = {a: divergent(b"recomputed", noise_ppm=100 * i) for i, a in enumerate(seats)}
        return honest | {seats[0]: copier}

    resps = drive(m, accuse_all, (False, 0), plan)
    r = m.round(1, 0)
    (t,) = r.participants
    assert t.outcome == P.OUTCOME_FRAUD
    assert {v.address for v in t.verifiers if v.unevidenced} == set(cp)
    assert {e["reason"] for e in events_of(resps, "vote.unevidenced")} == {"settled_divergent"}
    assert seat(t, 2, cp[0]).slashed > 0
    for v in t.verifiers:
        if v.panel == 2 and v.address != cp[0]:
            assert v.slashed == 0


@pytest.mark.parametrize("mode", ["exact", "tolerance"])
def test_a_minority_of_divergent_voters_checks_nobody(mode: str):
    """(b) The limit of the divergent rule: with no strict majority of the invalid stake on one
    end (one honest seat, two seats naming two other ends), nobody is checked on that segment,
    so no pair can mark a lone honest voter."""
    m = market(mode)

    def plan(p: int, seats: list[bytes], earlier: set[bytes]) -> dict[bytes, HandVote]:
        if p != 1:
            return {}
        return {
            seats[0]: divergent(b"recomputed"),
            seats[1]: divergent(b"one", scale=3),
            seats[2]: divergent(b"two", scale=4),
        }

    drive(m, accuse_all, (False, 0), plan)
    (t,) = m.round(1, 0).participants
    assert not any(v.unevidenced for v in t.verifiers if v.panel == 1)


@pytest.mark.parametrize("mode", ["exact", "tolerance"])
def test_honest_valid_voters_are_never_marked(mode: str):
    """(c) Honest work, falsely accused by one first-panel seat and by one appeal seat (so the
    final panel sits): every re-executing seat votes valid with its evidence, nobody is
    unevidenced, no valid voter is slashed, each is paid, and the provider is accepted."""
    m = market(mode)

    def first(verifier: bytes, seats: list[bytes]) -> tuple[bool, int]:
        return (False, 0) if verifier == seats[0] else (True, 8_000)

    def plan(p: int, seats: list[bytes], earlier: set[bytes]) -> dict[bytes, HandVote]:
        if p != 1:
            return {}

        def accuser(mm: Market, r: Any, t: Any, v: bytes, pn: int) -> Votes:
            return vote_msgs(r, t.address, v, False, 0, tolerance=not is_exact(mm, r), panel=pn)

        return {seats[0]: accuser}

    resps = drive(m, first, (True, 8_000), plan)
    r = m.round(1, 0)
    (t,) = r.participants
    assert t.outcome == P.OUTCOME_ACCEPTED and t.final_tier and t.reward > 0
    assert not events_of(resps, "vote.unevidenced")
    assert not any(v.unevidenced for v in t.verifiers)
    for v in t.verifiers:
        if v.valid:
            assert v.slashed == 0 and verifier_paid(r, v.address) > 0


def test_copiers_cannot_pass_by_claiming_every_fresh_segment_divergent():
    """(d) Exact mode, the first panel's segments faked, the fresh ones honest: two copiers of the
    final panel agree on the same made-up divergent states for every fresh segment (so that
    they would form an agreement among invalid votes), five seats re-execute and reach the
    provider's fresh ends. The fresh segments are settled honest by the stake majority, and
    both copiers are unevidenced; nobody else is."""
    m = market("exact")
    copiers: list[bytes] = []  # exact mode: their made-up states agree byte for byte

    def plan(p: int, seats: list[bytes], earlier: set[bytes]) -> dict[bytes, HandVote]:
        if p != 2:
            return {}
        copiers.extend(seats[:2])
        return {a: divergent(b"made-up") for a in copiers}

    drive(m, accuse_all, (False, 0), plan)
    r = m.round(1, 0)
    (t,) = r.participants
    assert t.outcome == P.OUTCOME_FRAUD
    marked = {v.address for v in t.verifiers if v.unevidenced}
    assert marked == set(copiers)
    for a in copiers:
        assert seat(t, 2, a).slashed > 0
