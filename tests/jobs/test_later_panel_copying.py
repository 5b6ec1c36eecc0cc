"""Issue 31, item 5: a verifier that did not re-execute earns less than one that did, in every
panel. At escalation the chain draws fresh segments for the appeal (and again the final) panel,
among segments never opened whose ends were never public; the provider opens them in that
panel's voting window, and the panel's evidence covers them (docs/threat-model.md *Fresh segments
for the later panels*). A verifier seated on a later panel that copies the earlier panels' opened
votes has nothing to copy for those: in exact mode its valid vote cannot be opened (silent,
slashed), in tolerance mode its guessed probes make its valid vote count as invalid (slashed as a
wrong vote), while a re-executing seat of the same panel is paid. On the real app, with balances
before and after."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from abci_app.bank import keeper as bank
from abci_app.jobs.incentives import (
    compute_blind_vote_hash,
    compute_evidence,
    compute_fresh_candidates,
    compute_masked_entries,
    compute_panel_reveals,
    compute_vote_hash,
    draw_fresh_segments,
    is_run_start,
)
from abci_app.jobs.probe import PROBE_DIM, compute_probe_evidence
from abci_app.pb import jobs_pb2, providers_pb2
from tests.kits.marketkit import (
    BOND,
    Market,
    actors_block,
    events_of,
    h,
    honest_probe,
    honest_state,
    new_market,
    reveal_vote_msg,
    trace_states,
    verdict_msg,
    vote_salt,
)

P = jobs_pb2
EXACT = {"determinism_mode": P.DETERMINISM_MODE_EXACT, "tolerance_ppm": 0, "stack": "cpu-test"}
TOLERANCE: dict[str, Any] = {}  # the kits' default job
MODES = {"exact": EXACT, "tolerance": TOLERANCE}
N_SEG = 8  # H/k: room for fresh segments for both later panels


def wealth(m: Market, addr: bytes) -> int:
    p = m.provider(addr)
    return bank.get_balance(m.store, addr) + (p.bond + p.unbonding if p else 0)


def market(mode: str, **job_kw: Any) -> Market:
    """Seven providers, one participant, two first-panel seats, two appeal seats, no audits: the
    final panel is the six providers outside the round."""
    m = new_market(n_providers=7, jobs_params={"audit_bps": 0, "appeal_verifiers": 2})
    m.create_job(
        rounds=1,
        participants_per_round=1,
        num_shards=1,
        verifiers_per_challenge=2,
        inner_steps=2 * N_SEG,
        trace_interval=2,
        **(MODES[mode] | job_kw),
    )
    m.until(m.height + 1)
    return m


def copied_vote(
    m: Market, r: jobs_pb2.Round, t: jobs_pb2.Participant, copier: bytes, panel: int
) -> tuple[Any, Any]:
    """(MsgVerdict, MsgRevealVote) of a valid vote that copies what the earlier panels opened:
    the reached states (exact mode: in their MsgRevealVote txs) or probes (tolerance mode: on
    chain) of the segments they judged, and for the panel's fresh segments the best that public
    data gives (a public state after them, else the probe of the segment before: a guess)."""
    earlier = next(v for v in t.verifiers if v.panel == panel - 1 and v.voted and v.valid)
    judged = compute_panel_reveals(t, panel)
    seen = {o.segment for o in compute_panel_reveals(t, panel - 1)}
    salt = vote_salt(copier, r.job_id, r.round, t.address)
    starts = {o.segment: o.start_state_hash for o in t.reveals if o.start_state_hash}
    if m.job(r.job_id).spec.determinism_mode == P.DETERMINISM_MODE_EXACT:
        reached = [
            honest_state(t.address, r.job_id, r.round, o.segment + 1)  # copied from the txs
            if o.segment in seen
            else starts.get(o.segment + 1) or h(f"guess/{o.segment}")
            for o in judged
        ]
        ev = compute_evidence(reached)
        hsh = compute_vote_hash(r.job_id, r.round, t.address, copier, True, 8_000, ev, salt)
        opening = reveal_vote_msg(r.job_id, r.round, t.address, True, 8_000, ev, salt, reached)
        return verdict_msg(r.job_id, r.round, t.address, hsh), opening
    order = [o.segment for o in compute_panel_reveals(t, panel - 1)]
    probes: list[int] = []
    for o in judged:
        if o.segment in seen:  # copied from the earlier seat's opened probes
            i = order.index(o.segment)
            probes.extend(earlier.probes[i * PROBE_DIM : (i + 1) * PROBE_DIM])
        else:
            probes.extend(honest_probe(t.address, r.job_id, r.round, o.segment))
    ev = compute_probe_evidence(probes)
    hsh = compute_blind_vote_hash(r.job_id, r.round, t.address, copier, ev, salt)
    opening = reveal_vote_msg(r.job_id, r.round, t.address, True, 8_000, ev, salt)
    opening.reveal_vote.probes.extend(probes)
    return verdict_msg(r.job_id, r.round, t.address, hsh), opening


def drive_with_copier(m: Market, copy_panel: int, dissent_in_appeal: bool) -> dict[str, bytes]:
    """Run the round: one first-panel seat accuses the honest provider falsely (invalid), every
    other seat re-executes and votes valid, except one seat of ``copy_panel`` (1 appeal, 2
    final) that copies the earlier panel's opened votes; ``dissent_in_appeal``: one appeal seat
    votes invalid too (so the final panel sits even when the copier is on it). Returns the
    roles by name: accuser, copier, and ``diligent``, a re-executing seat of the copier's panel
    that, like the copier, sat on no earlier panel."""
    roles: dict[str, bytes] = {}
    phase_panel = {P.PHASE_VERDICT: 0, P.PHASE_APPEAL: 1, P.PHASE_FINAL: 2}

    def vote(verifier: bytes, target: bytes) -> tuple[bool, int] | None:
        r = m.round(1, 0)
        panel = phase_panel[r.phase]
        (t,) = r.participants
        seats = sorted(v.address for v in t.verifiers if v.panel == panel)
        earlier = {v.address for v in t.verifiers if v.panel < panel}
        if panel == 0 and verifier == seats[0]:
            roles["accuser"] = verifier
            return False, 0
        if panel == copy_panel and verifier == roles.get("copier"):
            return None  # committed by hand in the loop below
        if panel == 1 and dissent_in_appeal and verifier == seats[-1]:
            return False, 0
        if panel == copy_panel and verifier not in earlier:
            roles.setdefault("diligent", verifier)
        return True, 8_000

    for _ in range(300):
        r = m.round(1, 0)
        if r.phase == P.PHASE_FINALIZED:
            return roles
        (t,) = r.participants
        if r.phase == {1: P.PHASE_APPEAL, 2: P.PHASE_FINAL}[copy_panel]:
            panel = copy_panel
            if "copier" not in roles:  # a seat that sat on no earlier panel of this challenge
                earlier = {v.address for v in t.verifiers if v.panel < panel}
                seats = sorted(v.address for v in t.verifiers if v.panel == panel)
                roles["copier"] = next(a for a in seats if a not in earlier)
            seat = next(v for v in t.verifiers if v.panel == panel and v.address == roles["copier"])
            fresh = set(t.appeal_segments if panel == 1 else t.final_segments)
            opened = {o.segment for o in t.reveals if o.panel == panel}
            if fresh <= opened and not seat.vote_hash:  # the provider opened them: copy now
                commit, opening = copied_vote(m, r, t, seat.address, panel)
                assert m.send(m.key(seat.address), commit).code == 0
                key = (1, 0, t.address, seat.address)
                m.pending_votes[key] = opening
                m.lazy_votes.add(key)  # its opening may be refused (exact mode)
        actors_block(m, 1, vote=vote)
    raise AssertionError("the round did not finish")


@pytest.mark.parametrize("mode", ["exact", "tolerance"])
@pytest.mark.parametrize("panel", [1, 2], ids=["appeal", "final"])
def test_copier_on_a_later_panel_earns_less_than_a_reexecuting_seat(mode: str, panel: int):
    """An honest provider falsely accused in the first panel is escalated; a seat of the appeal
    (or final) panel copies the earlier panel's opened votes, another re-executes. The copier
    cannot name the fresh segments' ends: exact mode, its valid vote is refused and it is silent
    (liveness slash, at least the silence floor); tolerance mode, its guessed probes count its
    valid vote invalid, and the final verdict (accepted) slashes it as a wrong vote. The
    re-executing seat is paid; the honest provider is accepted and paid its slot."""
    m = market(mode)
    (part,) = m.round(1, 0).participants
    before = {k.address: wealth(m, k.address) for k in m.providers}
    roles = drive_with_copier(m, panel, dissent_in_appeal=panel == 2)
    r = m.round(1, 0)
    (t,) = r.participants
    assert t.escalated and t.final_tier
    assert t.outcome == P.OUTCOME_ACCEPTED and t.reward > 0 and t.slashed == 0
    assert wealth(m, part.address) > before[part.address]
    # the panel's fresh segments were drawn among the never-opened ones, and opened by the provider
    fresh = list(t.appeal_segments if panel == 1 else t.final_segments)
    assert fresh and not set(fresh) & {o.segment for o in t.reveals if o.panel < panel}
    assert {o.segment for o in t.reveals if o.panel == panel} == set(fresh)
    copier, diligent = roles["copier"], roles["diligent"]
    seat = next(v for v in t.verifiers if v.panel == panel and v.address == copier)
    if mode == "exact":
        assert seat.vote_hash and not seat.voted  # its valid vote could not be opened
    else:
        assert seat.voted and not seat.valid and seat.probe_mismatch
    assert seat.slashed > 0
    good = next(v for v in t.verifiers if v.panel == panel and v.address == diligent)
    assert good.voted and good.valid and good.slashed == 0
    gain = {a: wealth(m, a) - before[a] for a in (copier, diligent)}
    assert gain[copier] < 0 < gain[diligent]


@pytest.mark.parametrize("mode", ["exact", "tolerance"])
def test_provider_that_does_not_open_its_fresh_segments_is_punished_like_withholding(mode: str):
    """Escalated by a false accusation, the provider leaves the appeal panel's fresh segments
    unopened: a missed reveal when the appeal window closes, punished exactly as fraud (half the
    bond burned, reputation 0, jailed, unpaid); nobody's seat is judged."""
    m = market(mode)
    (part,) = m.round(1, 0).participants
    before = wealth(m, part.address)
    first: list[bytes] = []

    def vote(verifier: bytes, target: bytes) -> tuple[bool, int]:
        first.append(verifier)
        return (False, 0) if verifier == first[0] else (True, 8_000)

    for _ in range(300):
        if m.round(1, 0).phase == P.PHASE_FINALIZED:
            break
        actors_block(m, 1, vote=vote, skip_fresh=frozenset({part.address}))
    (t,) = m.round(1, 0).participants
    assert t.escalated and t.appeal_segments and not any(o.panel for o in t.reveals)
    assert t.outcome == P.OUTCOME_MISSED_REVEAL and t.reward == 0
    assert t.slashed == BOND // 2 and wealth(m, part.address) - before == -BOND // 2
    prov = m.provider(part.address)
    assert prov is not None and prov.reputation == 0
    assert prov.status == providers_pb2.PROVIDER_STATUS_JAILED
    assert all(v.slashed == 0 for v in t.verifiers)


def test_honest_provider_escalated_by_a_false_accusation_is_accepted_and_paid():
    """Every later-panel seat re-executes its panel's segments (the first panel's and the fresh
    ones): the honest provider is accepted by a unanimous appeal panel and paid its slot; only
    the false accuser is slashed."""
    m = market("exact")
    (part,) = m.round(1, 0).participants
    before = wealth(m, part.address)
    first: list[bytes] = []

    def vote(verifier: bytes, target: bytes) -> tuple[bool, int]:
        first.append(verifier)
        return (False, 0) if verifier == first[0] else (True, 8_000)

    resps = []
    for _ in range(300):
        if m.round(1, 0).phase == P.PHASE_FINALIZED:
            break
        resps.append(actors_block(m, 1, vote=vote))
    r = m.round(1, 0)
    (t,) = r.participants
    assert t.escalated and not t.final_tier and t.appeal_segments
    (ev,) = events_of(resps, "verdict.escalated")  # names the fresh segments it drew
    assert ev["panel"] == "appeal" and ev["segments"] == ",".join(map(str, t.appeal_segments))
    assert t.outcome == P.OUTCOME_ACCEPTED and t.reward > 0
    assert wealth(m, part.address) - before == t.reward
    assert {s.address for s in r.slashes} == {first[0]}


def test_masked_trace_list_exposes_no_entry_but_0_h_over_k_and_the_run_starts():
    """The first opening's trace list holds every entry but 0, H/k and the opened runs' starts as
    its leaf hash, so no end a later panel may be given is public; a fresh candidate is never an
    opened segment, nor right before one, nor the last (its end is H/k)."""
    from itertools import combinations

    n = 6
    for size in range(1, n + 1):
        for segs in combinations(range(n), size):
            masked = compute_masked_entries(list(segs), n)
            public = set(range(n + 1)) - masked
            assert public == {0, n} | {s for s in segs if is_run_start(s, list(segs))}
            for c in compute_fresh_candidates(list(segs), n):
                assert c not in segs and c + 1 in masked  # its end was never public
    # on chain: the list the first opening carried
    m = market("exact")
    for _ in range(40):
        r = m.round(1, 0)
        if r.phase == P.PHASE_VERDICT:
            break
        actors_block(m, 1)
    (t,) = m.round(1, 0).participants
    st = trace_states(t.address, 1, 0, N_SEG + 1)
    (o,) = t.reveals
    listed_public = {0, N_SEG, o.segment}
    from abci_app.jobs.incentives import mask_trace

    listed = mask_trace(st, compute_masked_entries(list(t.segments), N_SEG))
    assert o.trace_list_hash == hashlib.sha256(b"".join(listed)).digest()
    assert {i for i, e in enumerate(listed) if e == st[i]} == listed_public


def test_fresh_segments_are_drawn_among_the_candidates_and_left_empty_when_none():
    """``draw_fresh_segments``: distinct candidates, ascending, as many as asked while there are
    candidates; none left (every segment opened or next to an opened one) gives none."""
    seed = h("seed")
    got = draw_fresh_segments(seed, b"a" * 20, [2], 8, 3)
    assert len(got) == 3 and got == sorted(set(got))
    assert set(got) <= set(compute_fresh_candidates([2], 8)) == {0, 3, 4, 5, 6}
    assert draw_fresh_segments(seed, b"a" * 20, [0, 2], 4, 1) == []
    assert compute_fresh_candidates([1, 2], 4) == []


def test_invalid_fresh_openings_and_early_votes_are_refused():
    """In the appeal window: a fresh opening of a segment not drawn for the panel (511), for a
    panel that does not exist (511), for the final panel or the first (503: not their window),
    carrying a trace list (533), and an appeal seat's vote before the fresh segments are open
    (513) are refused and change nothing; then the right opening is taken, a second one is a
    duplicate (505), and the seat's vote is taken."""
    from abci_app.jobs.errors import (
        ErrBadTraceList,
        ErrDuplicate,
        ErrNotRevealed,
        ErrWrongPhase,
        ErrWrongSegment,
    )
    from abci_app.jobs.incentives import compute_panel_segments
    from tests.kits.chainkit import assert_rejected
    from tests.kits.marketkit import reveal_msg

    m = market("exact", reveal_blocks=12)  # an appeal window of R + V = 15 blocks
    (part,) = m.round(1, 0).participants
    first: list[bytes] = []

    def vote(verifier: bytes, target: bytes) -> tuple[bool, int]:
        first.append(verifier)
        return (False, 0) if verifier == first[0] else (True, 8_000)

    for _ in range(100):
        if m.round(1, 0).phase == P.PHASE_APPEAL:
            break
        actors_block(m, 1, vote=vote, skip_fresh=frozenset({part.address}))
    r = m.round(1, 0)
    (t,) = r.participants
    assert r.phase == P.PHASE_APPEAL and t.appeal_segments
    a, k = t.address, m.key(t.address)
    (fresh,) = t.appeal_segments
    judged = compute_panel_segments(t, 1)

    def rv(seg: int, panel: int = 1, **kw: Any) -> Any:
        return reveal_msg(
            a,
            1,
            0,
            seg,
            n_entries=N_SEG + 1,
            segments=list(t.segments),
            judged=judged,
            panel=panel,
            **kw,
        )

    other = next(s for s in range(N_SEG) if s not in judged)
    assert_rejected(m.chain, m.tx(k, rv(other)), ErrWrongSegment)
    assert_rejected(m.chain, m.tx(k, rv(fresh, panel=3)), ErrWrongSegment)
    assert_rejected(m.chain, m.tx(k, rv(fresh, panel=2)), ErrWrongPhase)
    assert_rejected(m.chain, m.tx(k, rv(fresh, panel=0)), ErrWrongPhase)
    listed = reveal_msg(a, 1, 0, t.segment, n_entries=N_SEG + 1, segments=list(t.segments))
    with_list = rv(fresh, trace_list=listed.reveal_segment.trace_list)
    assert_rejected(m.chain, m.tx(k, with_list), ErrBadTraceList)
    seat = next(v for v in t.verifiers if v.panel == 1)
    early = verdict_msg(1, 0, a, h("a vote"))
    assert_rejected(m.chain, m.tx(m.key(seat.address), early), ErrNotRevealed)
    assert m.send(k, rv(fresh)).code == 0
    assert_rejected(m.chain, m.tx(k, rv(fresh)), ErrDuplicate)
    (t,) = m.round(1, 0).participants
    assert [(o.segment, o.panel) for o in t.reveals] == [(t.segment, 0), (fresh, 1)]
    assert m.send(m.key(seat.address), verdict_msg(1, 0, a, h("a vote"))).code == 0
