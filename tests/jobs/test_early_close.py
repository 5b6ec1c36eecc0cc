"""Early close and next-round gating (jobs README *Early close*), on the real app through the
market kit (every block commits and checks every invariant).

- A round phase whose expected messages are all in ends early: at h + 1 for COMMIT and
  VOTE_REVEAL (their end-blocks draw from their own block's seed), at h otherwise, where h is the
  block of the last message; a phase entered already done ends at the next height. Later windows
  move with it, each keeping its length; a close never extends a window. Event
  ``round.closed_early``.
- With one message missing the phase runs its whole window and the missing party's fate is what
  it is under fixed windows (``fixed_windows``: the same run with ``rounds.close_if_done``
  disabled).
- Messages after a close meet the existing wrong-phase and seed-block errors.
- Foreseeability (hypothesis): the challenges and the appeal panel are drawn from the seed of a
  block strictly after every message they judge.
- Gating: round n opens once round n - 1 has left its commit phase and round n - 2 is finalized.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from abci_app.jobs import rounds
from abci_app.jobs.audit import draw_segments
from abci_app.jobs.errors import ErrWrongPhase
from abci_app.jobs.params import get_params
from abci_app.jobs.rounds import (
    BPS,
    compute_appeal_seed,
    compute_challenge_seed,
    compute_draw_seed,
    compute_n_segments,
)
from abci_app.jobs.sampler import Sampler, weighted_sample
from abci_app.pb import abci, jobs_pb2, tx_pb2
from abci_app.providers.keeper import get_eligible
from tests.kits.chainkit import assert_rejected
from tests.kits.marketkit import (
    EXACT,
    MODEL0,
    PHASE_ORDER,
    VOTE_PANEL,
    Market,
    actors_block,
    agg_hash,
    attest_msg,
    events_of,
    new_market,
    open_end_msg,
    reveal_msg,
    run_job,
    submit_msg,
    vote_msgs,
)

P = jobs_pb2
W = 20  # every window of the jobs below (job_in_commit's too)
WINDOWS = {"commit_blocks": W, "reveal_blocks": W, "verdict_blocks": W, "attest_blocks": W}
# the field holding each phase's window end
END_FIELD = {
    P.PHASE_COMMIT: "commit_deadline",
    P.PHASE_REVEAL: "reveal_end",
    P.PHASE_VERDICT: "verdict_end",
    P.PHASE_VOTE_REVEAL: "vote_reveal_end",
    P.PHASE_APPEAL: "appeal_end",
    P.PHASE_APPEAL_REVEAL: "appeal_reveal_end",
    P.PHASE_FINAL: "final_end",
    P.PHASE_FINAL_REVEAL: "final_reveal_end",
    P.PHASE_ATTEST: "attest_end",
}


# -- helpers --------------------------------------------------------------------------------------


def market_with_job(
    n_providers: int = 3, jobs_params: dict[str, int] | None = None, **job_kw: Any
) -> Market:
    """A market with job 1 (one round unless told, every window W blocks) whose round 0 is in
    its commit window, nothing sent to it yet."""
    m = new_market(n_providers=n_providers, jobs_params=jobs_params)
    m.create_job(**({"rounds": 1} | WINDOWS | job_kw))
    m.until(m.height + 1)
    assert m.round(1, 0).phase == P.PHASE_COMMIT
    return m


def to_phase(phase: int, n_providers: int = 3, **job_kw: Any) -> tuple[Market, jobs_pb2.Round]:
    """``market_with_job`` driven by honest actors, acting in every block, until round 0 is in
    ``phase`` (they act for the phases before it only). (The kit's ``job_in_phase`` waits for a
    phase's window end after acting; with early close that skips, silent, the phase entered in
    the block the actors acted in: a reveal closes in its own block, so its verdict window
    passes with no vote.)"""
    m = market_with_job(n_providers, **job_kw)
    drive(m, in_phase(phase))
    r = m.round(1, 0)
    assert r.phase == phase
    return m, r


def block_seed(height: int) -> bytes:
    """The seed of a kit block: its hash (the kit's blocks carry no beacon, BlockContext.seed)."""
    return hashlib.sha256(b"block%d" % height).digest()


def closed(resps: list[abci.ResponseFinalizeBlock], phase: str | None = None) -> list[dict]:
    evs = events_of(resps, "round.closed_early")
    return [e for e in evs if phase is None or e["phase"] == phase]


def closed_event(r: int, phase: str, close_height: int, window_end: int) -> dict[str, str]:
    return {
        "job_id": "1",
        "round": str(r),
        "phase": phase,
        "close_height": str(close_height),
        "window_end": str(window_end),
    }


def drive(
    m: Market,
    until: Callable[[Market], bool] | None = None,
    max_blocks: int = 400,
    after: Callable[[Market], None] | None = None,
    **kw: Any,
) -> list[tuple[int, int, abci.ResponseFinalizeBlock]]:
    """actors_block every block until ``until(m)`` (default: job 1 closed); returns (height,
    round 0's phase after the block, response) per block. ``after(m)`` runs after each block."""
    out: list[tuple[int, int, abci.ResponseFinalizeBlock]] = []
    done = until or (lambda mm: mm.job(1).status != P.JOB_STATUS_ACTIVE)
    for _ in range(max_blocks):
        if done(m):
            return out
        resp = actors_block(m, 1, **kw)
        if after is not None:
            after(m)
        out.append((m.height, m.round(1, 0).phase, resp))
    raise AssertionError("did not get there")


def left_at(trace: list[tuple[int, int, Any]], phase: int) -> int:
    """The height whose end-block left ``phase`` (the first block after which round 0 was past
    it, having been in it)."""
    seen = False
    for height, ph, _ in trace:
        if ph == phase:
            seen = True
        elif seen or PHASE_ORDER.index(ph) > PHASE_ORDER.index(phase):
            return height
    raise AssertionError(f"never left {phase}")


def in_phase(phase: int) -> Callable[[Market], bool]:
    return lambda m: PHASE_ORDER.index(m.round(1, 0).phase) >= PHASE_ORDER.index(phase)


@contextmanager
def fixed_windows() -> Iterator[None]:
    """The chain without early close: every phase runs its whole window (the rules before it)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rounds, "close_if_done", lambda *a, **k: False)
        yield


def fate(m: Market, addr: bytes, rn: int = 0) -> dict[str, Any]:
    """What round ``rn`` did to ``addr``: its outcome as a participant, its payouts and slashes,
    and its provider record after (bond, reputation, jailed)."""
    r = m.round(1, rn)
    p = next((p for p in r.participants if p.address == addr), None)
    prov = m.provider(addr)
    assert prov is not None
    return {
        "outcome": p.outcome if p else None,
        "quality": p.quality if p else None,
        "reputation_delta": p.reputation_delta if p else None,
        "payouts": sorted((x.kind, x.amount) for x in r.payouts if x.address == addr),
        "slashes": sorted((s.reason, s.amount, s.burned) for s in r.slashes if s.address == addr),
        "bond": prov.bond,
        "reputation": prov.reputation,
        "jailed": bool(prov.jailed_height),
    }


class PanelVoter:
    """A ``vote`` for actors_block in a one-round job: the first (verifier, target) asked in
    panel k answers ``odd[k]`` (every time it is asked), every other seat votes valid 8000. The
    panel is read from the round's phase when asked. ``first[k]`` records that first seat."""

    def __init__(self, m: Market, odd: dict[int, Any]) -> None:
        self.m, self.odd = m, odd
        self.first: dict[int, tuple[bytes, bytes]] = {}

    def __call__(self, verifier: bytes, target: bytes) -> Any:
        panel = VOTE_PANEL[self.m.round(1, 0).phase]
        if panel in self.odd:
            self.first.setdefault(panel, (verifier, target))
            if self.first[panel] == (verifier, target):
                return self.odd[panel]
        return True, 8_000


def decline_msg(job_id: int, round_: int) -> tx_pb2.Msg:
    return tx_pb2.Msg(decline_round=P.MsgDeclineRound(job_id=job_id, round=round_))


def heights_of(trace_resps: list[tuple[int, abci.ResponseFinalizeBlock]], kind: str) -> list[int]:
    """Heights of the blocks whose accepted txs emitted ``kind``."""
    return [
        height
        for height, resp in trace_resps
        for t in resp.tx_results
        if t.code == 0
        for e in t.events
        if e.type == kind
    ]


# -- COMMIT ---------------------------------------------------------------------------------------


def test_commit_closes_the_block_after_the_last_commitment():
    m = market_with_job()
    r0 = m.round(1, 0)
    m.until(m.height + 2)  # the commitments land a few blocks into the window
    resp = actors_block(m, 1)
    h = m.height
    r = m.round(1, 0)
    assert r.phase == P.PHASE_COMMIT  # block h + 1's seed draws the challenges
    assert r.commit_deadline == h + 1 < r0.commit_deadline
    # each later window keeps its length
    assert (r.reveal_end, r.verdict_end, r.vote_reveal_end, r.attest_end) == (
        h + 1 + W,
        h + 1 + 2 * W,
        h + 1 + 3 * W,
        h + 1 + 4 * W,
    )
    assert closed([resp]) == [closed_event(0, "commit", h + 1, r0.commit_deadline)]
    assert block_seed(h + 1) == m.chain.request([]).hash  # the kit's seed of the next block
    resp = m.block()
    r = m.round(1, 0)
    assert r.phase == P.PHASE_REVEAL and m.height == h + 1
    assert r.challenge_seed == compute_challenge_seed(block_seed(h + 1), 1, 0)
    assert len(events_of([resp], "challenge.issued")) == 2


def test_commit_closes_after_a_decline_that_is_the_last_message():
    m = market_with_job()
    a, b = (p.address for p in m.round(1, 0).participants)
    w0 = m.round(1, 0).commit_deadline
    m.block([(m.key(a), submit_msg(a, 1, 0))])
    assert m.round(1, 0).commit_deadline == w0  # b has not acted
    resp = m.block([(m.key(b), decline_msg(1, 0))])
    h = m.height
    assert closed([resp]) == [closed_event(0, "commit", h + 1, w0)]
    m.block()
    parts = {p.address: p for p in m.round(1, 0).participants}
    assert parts[b].outcome == P.OUTCOME_DECLINED and parts[a].challenged


def test_missing_commitment_runs_the_whole_commit_window_and_is_slashed_as_under_fixed_windows():
    def scenario() -> tuple[Market, bytes, list]:
        m = market_with_job()
        b = m.round(1, 0).participants[1].address
        return m, b, drive(m, skip_commit=frozenset({b}))

    m, b, trace = scenario()
    w0 = m.round(1, 0).open_height + W
    assert left_at(trace, P.PHASE_COMMIT) == w0  # the whole window
    assert not closed([x[2] for x in trace], "commit")
    # the later phases were all in: they closed early
    assert {e["phase"] for e in closed([x[2] for x in trace])} == {
        "reveal",
        "verdict",
        "vote_reveal",
        "attest",
    }
    early = fate(m, b)
    assert early["outcome"] == P.OUTCOME_MISSED_COMMIT
    assert [s[0] for s in early["slashes"]] == ["missed_commit"] and early["slashes"][0][1] > 0
    with fixed_windows():
        fm, fb, _ = scenario()
    assert fb == b and fate(fm, fb) == early
    a = m.round(1, 0).participants[0].address
    assert fate(fm, a) == fate(m, a)  # the committed one is paid the same too


def test_messages_in_the_commit_close_block_meet_the_seed_block_rule():
    """All three acted in block h: the phase ends at h + 1, whose seed draws the challenges. A
    commitment or a decline in h + 1 could be chosen knowing that seed: refused as in block D
    under fixed windows (503, 'accepted up to height h'); in h + 2 the round is in reveal."""
    m = market_with_job(n_providers=4, participants_per_round=3)
    a, b, c = (p.address for p in m.round(1, 0).participants)
    resp = m.block(
        [
            (m.key(a), submit_msg(a, 1, 0)),
            (m.key(b), submit_msg(b, 1, 0)),
            (m.key(c), decline_msg(1, 0)),
        ]
    )
    assert [t.code for t in resp.tx_results] == [0, 0, 0]
    h = m.height
    assert m.round(1, 0).commit_deadline == h + 1
    res = assert_rejected(m.chain, m.tx(m.key(a), submit_msg(a, 1, 0)), ErrWrongPhase)
    assert m.height == h + 1
    assert f"accepted up to height {h}," in res.log and f"seed of block {h + 1}" in res.log
    res = assert_rejected(m.chain, m.tx(m.key(c), decline_msg(1, 0)), ErrWrongPhase)
    assert "is in phase reveal" in res.log


def test_a_phase_entered_done_closes_at_the_next_height():
    """Both participants decline in block h: commit closes at h + 1; reveal is entered with
    nobody challenged, verdict and vote-reveal with no seat, attest with nobody accepted: each
    is done when entered and ends at the next height (one transition per round per block)."""
    m = market_with_job(rounds=1)
    r0 = m.round(1, 0)
    resp = m.block([(m.key(p.address), decline_msg(1, 0)) for p in r0.participants])
    h = m.height
    resps = [resp] + [m.block() for _ in range(5)]
    r = m.round(1, 0)
    assert r.phase == P.PHASE_FINALIZED and r.finalized_height == h + 5
    assert closed(resps) == [
        closed_event(0, "commit", h + 1, r0.commit_deadline),
        closed_event(0, "reveal", h + 2, h + 1 + W),
        closed_event(0, "verdict", h + 3, h + 2 + W),
        closed_event(0, "vote_reveal", h + 4, h + 3 + W),
        closed_event(0, "attest", h + 5, h + 4 + W),
    ]
    # each entering close is emitted by the end-block that entered the phase
    for i, phase in enumerate(["reveal", "verdict", "vote_reveal", "attest"], start=1):
        assert closed([resps[i]], phase), phase
    assert m.job(1).status == P.JOB_STATUS_COMPLETED
    assert r.returned_to_escrow == m.job(1).reward_per_round + m.job(1).verifier_reward_per_round


# -- REVEAL ---------------------------------------------------------------------------------------


def test_reveal_closes_in_the_block_of_the_last_opening():
    m, r0 = to_phase(P.PHASE_REVEAL)
    resp = actors_block(m, 1)
    h = m.height
    r = m.round(1, 0)
    assert r.phase == P.PHASE_VERDICT and r.reveal_end == h < r0.reveal_end
    assert (r.verdict_end, r.vote_reveal_end, r.attest_end) == (h + W, h + 2 * W, h + 3 * W)
    assert r.commit_deadline == r0.commit_deadline
    assert closed([resp]) == [closed_event(0, "reveal", h, r0.reveal_end)]
    # a reveal after the close: the round is in verdict
    p = r.participants[0]
    late = reveal_msg(p.address, 1, 0, p.segments[0], segments=list(p.segments))
    res = assert_rejected(m.chain, m.tx(m.key(p.address), late), ErrWrongPhase)
    assert "is in phase verdict" in res.log


def test_missing_reveal_runs_the_whole_reveal_window_and_costs_like_fraud_as_under_fixed_windows():
    def scenario() -> tuple[Market, bytes, list]:
        m = market_with_job()
        a = m.round(1, 0).participants[0].address
        return m, a, drive(m, skip_reveal=frozenset({a}))

    m, a, trace = scenario()
    resps = [x[2] for x in trace]
    assert left_at(trace, P.PHASE_REVEAL) == left_at(trace, P.PHASE_COMMIT) + W
    assert closed(resps, "commit") and not closed(resps, "reveal")
    early = fate(m, a)
    assert early["outcome"] == P.OUTCOME_MISSED_REVEAL and early["jailed"]
    assert [s[0] for s in early["slashes"]] == ["missed_reveal"]
    with fixed_windows():
        fm, fa, _ = scenario()
    assert fa == a and fate(fm, fa) == early
    b = m.round(1, 0).participants[1].address
    assert fate(fm, b) == fate(m, b)


# -- VERDICT --------------------------------------------------------------------------------------


def test_verdict_closes_in_the_block_of_the_last_vote():
    m, r0 = to_phase(P.PHASE_VERDICT)
    resp = actors_block(m, 1)
    h = m.height
    r = m.round(1, 0)
    assert r.phase == P.PHASE_VOTE_REVEAL and r.verdict_end == h < r0.verdict_end
    assert (r.vote_reveal_end, r.attest_end) == (h + W, h + 2 * W)
    assert closed([resp]) == [closed_event(0, "verdict", h, r0.verdict_end)]
    # a vote committed after the close: the round opens votes now
    p = r.participants[0]
    v = p.verifiers[0].address
    commit, _ = vote_msgs(r, p.address, v)
    res = assert_rejected(m.chain, m.tx(m.key(v), commit), ErrWrongPhase)
    assert "is in phase vote_reveal" in res.log


def test_silent_first_panel_seat_runs_the_whole_verdict_window_and_is_slashed_as_under_fixed():
    def scenario() -> tuple[Market, PanelVoter, list]:
        m = market_with_job()
        voter = PanelVoter(m, {0: None})
        return m, voter, drive(m, vote=voter)

    m, voter, trace = scenario()
    resps = [x[2] for x in trace]
    assert left_at(trace, P.PHASE_VERDICT) == left_at(trace, P.PHASE_REVEAL) + W
    assert not closed(resps, "verdict") and closed(resps, "reveal")
    silent, target = voter.first[0]
    early = fate(m, silent)
    assert "verifier_silent" in [s[0] for s in early["slashes"]]
    with fixed_windows():
        fm, fvoter, _ = scenario()
    assert fvoter.first[0][1] == target
    assert fate(fm, fvoter.first[0][0]) == early
    assert fate(fm, target) == fate(m, target)


# -- VOTE_REVEAL ----------------------------------------------------------------------------------


def test_vote_reveal_closes_the_block_after_the_last_opening():
    m, r0 = to_phase(P.PHASE_VOTE_REVEAL)
    resp = actors_block(m, 1)  # the votes and the ends (tolerance mode) are opened in block h
    h = m.height
    r = m.round(1, 0)
    assert r.phase == P.PHASE_VOTE_REVEAL  # block h + 1's seed would draw the appeal panel
    assert r.vote_reveal_end == h + 1 < r0.vote_reveal_end
    assert r.attest_end == h + 1 + W
    assert closed([resp]) == [closed_event(0, "vote_reveal", h + 1, r0.vote_reveal_end)]
    for p in r.participants:  # every vote and every end was opened in block h
        assert p.verifiers and all(v.voted and v.height == h for v in p.verifiers)
        assert all(o.end_opened_height == h for o in p.reveals)
    # openings in block h + 1 could be chosen knowing who would judge a dispute: refused
    p = r.participants[0]
    v = p.verifiers[0].address
    _, opening = vote_msgs(r, p.address, v)
    res = assert_rejected(m.chain, m.tx(m.key(v), opening), ErrWrongPhase)
    assert m.height == h + 1
    assert f"accepted up to height {h}," in res.log and f"seed of block {h + 1}" in res.log
    assert m.round(1, 0).phase == P.PHASE_ATTEST
    seg = p.reveals[0].segment
    res = assert_rejected(
        m.chain, m.tx(m.key(p.address), open_end_msg(p.address, 1, 0, seg)), ErrWrongPhase
    )
    assert "is in phase attest" in res.log


def test_exact_mode_vote_reveal_closes_the_block_after_the_last_vote_opening():
    """Exact mode opens no end: the vote openings alone close the phase, at h + 1."""
    m, r0 = to_phase(P.PHASE_VOTE_REVEAL, **EXACT)
    resp = actors_block(m, 1)
    h = m.height
    r = m.round(1, 0)
    assert r.vote_reveal_end == h + 1 and r.attest_end == h + 1 + W
    assert closed([resp]) == [closed_event(0, "vote_reveal", h + 1, r0.vote_reveal_end)]
    m.block()
    r = m.round(1, 0)
    assert r.phase == P.PHASE_ATTEST
    assert all(p.outcome == P.OUTCOME_ACCEPTED for p in r.participants)


def test_unopened_end_runs_the_whole_vote_reveal_window_and_is_a_missed_reveal_as_under_fixed():
    def scenario() -> tuple[Market, bytes, list]:
        m = market_with_job()
        a = m.round(1, 0).participants[0].address
        return m, a, drive(m, skip_open_end=frozenset({a}))

    m, a, trace = scenario()
    assert left_at(trace, P.PHASE_VOTE_REVEAL) == left_at(trace, P.PHASE_VERDICT) + W
    assert not closed([x[2] for x in trace], "vote_reveal")
    early = fate(m, a)
    assert early["outcome"] == P.OUTCOME_MISSED_REVEAL and early["jailed"]
    with fixed_windows():
        fm, fa, _ = scenario()
    assert fate(fm, fa) == early
    b = m.round(1, 0).participants[1].address
    assert fate(fm, b)["outcome"] == fate(m, b)["outcome"] == P.OUTCOME_ACCEPTED


def test_unopened_vote_runs_the_whole_vote_reveal_window_and_is_silent_as_under_fixed():
    def scenario() -> tuple[Market, list[bytes], list]:
        m = market_with_job()
        dropped: list[bytes] = []

        def drop_first_vote(mm: Market) -> None:  # the first verifier never opens its vote
            if not dropped and mm.pending_votes:
                key = min(mm.pending_votes)
                del mm.pending_votes[key]
                dropped.extend([key[3], key[2]])  # verifier, target

        return m, dropped, drive(m, after=drop_first_vote)

    m, dropped, trace = scenario()
    assert left_at(trace, P.PHASE_VOTE_REVEAL) == left_at(trace, P.PHASE_VERDICT) + W
    assert not closed([x[2] for x in trace], "vote_reveal")
    silent, target = dropped
    v = next(v for p in m.round(1, 0).participants for v in p.verifiers if p.address == target)
    assert v.address == silent and v.vote_hash and not v.voted
    early = fate(m, silent)
    assert "verifier_silent" in [s[0] for s in early["slashes"]]
    with fixed_windows():
        fm, fdropped, _ = scenario()
    assert fdropped[1] == target and fate(fm, fdropped[0]) == early
    assert fate(fm, target) == fate(m, target)


# -- a close never extends a window ---------------------------------------------------------------


@pytest.mark.parametrize(
    "phase",
    [P.PHASE_COMMIT, P.PHASE_REVEAL, P.PHASE_VERDICT, P.PHASE_VOTE_REVEAL, P.PHASE_ATTEST],
    ids=["commit", "reveal", "verdict", "vote_reveal", "attest"],
)
def test_last_message_in_the_last_usable_block_does_not_move_the_window(phase):
    """The last message lands in the window's last usable block (D - 1 and Vr - 1 for the seeded
    phases, the window's end for the others): the close would fall on the window's end or after,
    so nothing moves and no event is emitted; the transition runs at the window's end."""
    m, r0 = to_phase(phase)
    end = getattr(r0, END_FIELD[phase])
    last = end - 1 if phase in rounds.SEEDED_PHASES else end
    m.until(last - 1)
    resp = actors_block(m, 1)
    assert m.height == last
    assert not closed([resp])
    r = m.round(1, 0)
    for f in ("commit_deadline", "reveal_end", "verdict_end", "vote_reveal_end", "attest_end"):
        assert getattr(r, f) == getattr(r0, f), f
    m.until(end)
    r = m.round(1, 0)
    assert PHASE_ORDER.index(r.phase) > PHASE_ORDER.index(phase)
    assert getattr(r, END_FIELD[phase]) == end


# -- APPEAL, APPEAL_REVEAL, FINAL, FINAL_REVEAL ---------------------------------------------------


def escalated_market(odd: dict[int, Any]) -> tuple[Market, PanelVoter]:
    """Six providers, two participants, one first-panel seat each (no audits): four outside the
    round, so an appeal panel of three and a final panel of four. ``odd``: PanelVoter's."""
    m = market_with_job(n_providers=6, jobs_params={"audit_bps": 0})
    return m, PanelVoter(m, odd)


@pytest.mark.parametrize(
    "phase, next_phase, chain",
    [
        (P.PHASE_APPEAL, P.PHASE_APPEAL_REVEAL, ["appeal_reveal_end", "attest_end"]),
        (
            P.PHASE_APPEAL_REVEAL,
            P.PHASE_FINAL,
            ["final_end", "final_reveal_end", "attest_end"],
        ),
        (P.PHASE_FINAL, P.PHASE_FINAL_REVEAL, ["final_reveal_end", "attest_end"]),
        (P.PHASE_FINAL_REVEAL, P.PHASE_ATTEST, ["attest_end"]),
    ],
    ids=["appeal", "appeal_reveal", "final", "final_reveal"],
)
def test_later_panel_phase_closes_in_the_block_of_its_last_message(phase, next_phase, chain):
    """First panel: one invalid vote (escalated); appeal panel: one dissent (sent on to the final
    panel); every seat acts as soon as it can in each phase (a later panel's voting phase: the
    provider opens the panel's fresh segments in its first block, the seats vote in the next).
    Each later panel's phase ends in the block of its last message (they seed nothing); the
    later windows move with it (a later panel's voting window is R + V: compute_panel_windows)."""
    m, voter = escalated_market({0: (False, 0), 1: (False, 0)})
    drive(m, in_phase(phase), vote=voter)
    r0 = m.round(1, 0)
    assert r0.phase == phase
    if phase in (P.PHASE_APPEAL, P.PHASE_FINAL):  # the fresh segments are opened first
        actors_block(m, 1, vote=voter)
        assert m.round(1, 0).phase == phase
    resp = actors_block(m, 1, vote=voter)
    h = m.height
    r = m.round(1, 0)
    assert r.phase == next_phase and getattr(r, END_FIELD[phase]) == h
    name = jobs_pb2.Phase.Name(phase).removeprefix("PHASE_").lower()
    assert closed([resp]) == [closed_event(0, name, h, getattr(r0, END_FIELD[phase]))]
    # each later window W blocks (the appeal reveal's close sends the round to the final panel,
    # whose windows are set from that block: compute_panel_windows)
    lengths = [2 * W if f == "final_end" else W for f in chain]  # the final panel's: R + V
    assert [getattr(r, f) for f in chain] == [h + sum(lengths[: i + 1]) for i in range(len(chain))]
    # the round goes on to an accepted verdict by the final panel, every dissenter slashed
    drive(m, vote=voter)
    r = m.round(1, 0)
    t = next(p for p in r.participants if p.address == voter.first[0][1])
    assert t.final_tier and t.outcome == P.OUTCOME_ACCEPTED
    wrong = {s.address for s in r.slashes if s.reason == "wrong_vote"}
    assert wrong == {voter.first[0][0], voter.first[1][0]}


@pytest.mark.parametrize(
    "panel, phase, before",
    [
        (1, P.PHASE_APPEAL, P.PHASE_VOTE_REVEAL),
        (2, P.PHASE_FINAL, P.PHASE_APPEAL_REVEAL),
    ],
    ids=["appeal", "final"],
)
def test_silent_later_panel_seat_runs_the_whole_window_and_is_slashed_as_under_fixed(
    panel, phase, before
):
    odd = {0: (False, 0), 1: (False, 0), panel: None}
    m, voter = escalated_market(odd)
    trace = drive(m, vote=voter)
    assert left_at(trace, phase) == left_at(trace, before) + 2 * W  # R + V: fresh segments first
    name = jobs_pb2.Phase.Name(phase).removeprefix("PHASE_").lower()
    assert not closed([x[2] for x in trace], name)
    silent, target = voter.first[panel]
    reasons = sorted(s.reason for s in m.round(1, 0).slashes if s.address == silent)
    assert "verifier_silent" in reasons
    with fixed_windows():
        fm, fvoter = escalated_market(odd)
        drive(fm, vote=fvoter)
    fsilent, ftarget = fvoter.first[panel]
    fr = fm.round(1, 0)
    assert "verifier_silent" in [s.reason for s in fr.slashes if s.address == fsilent]
    early_t = next(p for p in m.round(1, 0).participants if p.address == target)
    fixed_t = next(p for p in fr.participants if p.address == ftarget)
    assert (early_t.outcome, early_t.final_tier) == (fixed_t.outcome, fixed_t.final_tier)


# -- ATTEST ---------------------------------------------------------------------------------------


def test_attest_closes_the_block_after_the_last_attestation():
    """Attest is a seeded phase: its finalize can open the next round, drawn from the seed of
    its block, which must come after the last attestation (see the draw-seed test below)."""
    m, r0 = to_phase(P.PHASE_ATTEST)
    resp = actors_block(m, 1)
    h = m.height
    assert m.round(1, 0).phase == P.PHASE_ATTEST and m.round(1, 0).attest_end == h + 1
    assert closed([resp]) == [closed_event(0, "attest", h + 1, r0.attest_end)]
    m.block()
    r = m.round(1, 0)
    assert r.phase == P.PHASE_FINALIZED and r.finalized_height == h + 1 < r0.attest_end
    assert r.attested_model_hash == agg_hash(1, 0)
    assert sorted(x.address for x in r.payouts if x.kind == "participant") == sorted(
        p.address for p in r.participants
    )
    a = r.participants[0].address
    res = assert_rejected(m.chain, m.tx(m.key(a), attest_msg(1, 0, agg_hash(1, 0))), ErrWrongPhase)
    assert "is in phase finalized" in res.log


def test_slower_honest_attester_is_not_cut_off_by_the_quorum():
    """Three accepted participants of equal stake: two attestations are a ⅔ quorum, yet the phase
    waits for the third (a close at the quorum would cost it its pay and reputation); it lands
    one block later, is paid its slot, and that closes the phase."""
    m, r0 = to_phase(P.PHASE_ATTEST, n_providers=4, participants_per_round=3)
    a, b, c = (p.address for p in r0.participants)
    resp = m.block([(m.key(x), attest_msg(1, 0, agg_hash(1, 0))) for x in (a, b)])
    assert [t.code for t in resp.tx_results] == [0, 0]
    assert not closed([resp])
    assert m.round(1, 0).phase == P.PHASE_ATTEST
    assert m.round(1, 0).attest_end == r0.attest_end
    resp = m.block([(m.key(c), attest_msg(1, 0, agg_hash(1, 0)))])
    assert resp.tx_results[0].code == 0
    h = m.height
    assert closed([resp]) == [closed_event(0, "attest", h + 1, r0.attest_end)]
    m.block()
    r = m.round(1, 0)
    assert r.phase == P.PHASE_FINALIZED and r.finalized_height == h + 1
    pay = {x.address: x.amount for x in r.payouts if x.kind == "participant"}
    assert set(pay) == {a, b, c} and pay[c] == pay[a] > 0


def test_missing_attester_runs_the_whole_attest_window_and_loses_as_under_fixed_windows():
    def scenario() -> tuple[Market, bytes, list]:
        m = market_with_job(n_providers=4, participants_per_round=3)
        a = m.round(1, 0).participants[0].address
        attest = lambda x, j, rn: None if x == a else agg_hash(j, rn)  # noqa: E731
        return m, a, drive(m, attest=attest)

    m, a, trace = scenario()
    assert left_at(trace, P.PHASE_ATTEST) == left_at(trace, P.PHASE_VOTE_REVEAL) + W
    assert not closed([x[2] for x in trace], "attest")
    r = m.round(1, 0)
    assert r.attested_model_hash == agg_hash(1, 0)  # the other two make the quorum
    early = fate(m, a)
    assert early["outcome"] == P.OUTCOME_ACCEPTED and early["payouts"] == []
    assert early["reputation_delta"] < 0
    with fixed_windows():
        fm, fa, _ = scenario()
    assert fa == a and fate(fm, fa) == early


# -- foreseeability -------------------------------------------------------------------------------


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pre=st.integers(0, 6),
    n=st.integers(2, 3),
    last=st.integers(0, 2),
    gap=st.integers(0, 5),
    declines=st.booleans(),
    bps=st.sampled_from([5_000, 10_000]),
)
def test_challenges_are_drawn_from_a_seed_after_every_commitment_and_decline(
    pre, n, last, gap, declines, bps
):
    """Over start heights (hence seeds), round sizes, which participant acts last, how late (up
    to D - 1 of an 8-block window) and how (commit or decline): the block whose seed draws the
    challenges is strictly after every commitment and decline of the round, it is the close
    height (the last message's block + 1, or the window's end), and the challenges are exactly
    what that block's seed yields."""
    m = new_market(n_providers=n + 1)
    m.until(m.height + pre)
    m.create_job(
        rounds=1, participants_per_round=n, commit_blocks=8, challenge_bps=bps, num_shards=4
    )
    m.until(m.height + 1)
    r0 = m.round(1, 0)
    parts = [p.address for p in r0.participants]
    late = parts[last % n]
    blocks = []
    msgs = [(m.key(x), submit_msg(x, 1, 0)) for x in parts if x != late]
    blocks.append((m.height + 1, m.block(msgs)))
    for _ in range(gap):
        blocks.append((m.height + 1, m.block()))
    final = decline_msg(1, 0) if declines else submit_msg(late, 1, 0)
    blocks.append((m.height + 1, m.block([(m.key(late), final)])))
    while m.round(1, 0).phase == P.PHASE_COMMIT:
        blocks.append((m.height + 1, m.block()))
    acted = heights_of(blocks, "update.submitted") + heights_of(blocks, "round.declined")
    assert len(acted) == n
    r = m.round(1, 0)
    d = r.commit_deadline
    assert max(acted) < d  # strictly after every commitment and decline
    assert d == min(max(acted) + 1, r0.commit_deadline)
    assert bool(closed([x[1] for x in blocks], "commit")) == (max(acted) + 1 < r0.commit_deadline)
    for p in r.participants:
        if p.HasField("commitment"):
            assert p.commitment.height < d
    assert r.challenge_seed == compute_challenge_seed(block_seed(d), 1, 0)
    s = Sampler(compute_challenge_seed(block_seed(d), 1, 0))
    spec = m.job(1).spec
    for p in r.participants:  # address order, as process_challenge
        if p.outcome == P.OUTCOME_DECLINED:
            assert p.address == late and declines and not p.challenged
            continue
        if s.below(BPS) >= bps:
            assert not p.challenged and p.outcome == P.OUTCOME_ACCEPTED
            continue
        segs = draw_segments(s, compute_n_segments(spec), max(1, spec.segments_per_challenge))
        assert p.challenged and list(p.segments) == segs


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pre=st.integers(0, 5),
    escalate=st.booleans(),
    held=st.integers(0, 7),
    gap=st.integers(0, 5),
)
def test_appeal_panel_is_drawn_from_a_seed_after_every_first_panel_opening(
    pre, escalate, held, gap
):
    """The first panel's openings (MsgRevealVote, MsgOpenEnd) land in one block but for one, held
    back ``gap`` blocks (up to Vr - 1 of an 8-block window): the block whose seed draws the
    appeal panel is strictly after every one of them, it is the close height (the last opening's
    block + 1, or the window's end), and the appeal panels are exactly what that seed draws from
    the providers as they were at that block's start."""
    m = new_market(n_providers=6, jobs_params={"audit_bps": 0})
    m.until(m.height + pre)
    m.create_job(rounds=1, verdict_blocks=8)
    m.until(m.height + 1)
    voter = PanelVoter(m, {0: (False, 0)} if escalate else {})
    drive(m, in_phase(P.PHASE_VOTE_REVEAL), vote=voter)
    r0 = m.round(1, 0)
    msgs = []
    for p in r0.participants:
        msgs += [
            (m.key(p.address), open_end_msg(p.address, 1, 0, o.segment, base=r0.base_model_hash))
            for o in p.reveals
        ]
        for v in p.verifiers:
            msgs.append((m.key(v.address), m.pending_votes.pop((1, 0, p.address, v.address))))
    held_msg = msgs.pop(held % len(msgs))
    pools: dict[int, list] = {}
    blocks = []

    def block(txs: list) -> None:
        pools[m.height + 1] = get_eligible(m.store, 0, 0)  # the pool at the block's start
        blocks.append((m.height + 1, m.block(txs)))
        assert all(t.code == 0 for t in blocks[-1][1].tx_results), blocks[-1][1].tx_results

    block(msgs)
    for _ in range(gap):
        block([])
    block([held_msg])
    while m.round(1, 0).phase == P.PHASE_VOTE_REVEAL:
        block([])
    opened = heights_of(blocks, "verdict.posted") + heights_of(blocks, "end.opened")
    assert len(opened) == len(msgs) + 1
    r = m.round(1, 0)
    vr = r.vote_reveal_end
    assert max(opened) < vr
    assert vr == min(max(opened) + 1, r0.vote_reveal_end)
    for p in r.participants:
        assert all(o.end_opened_height < vr for o in p.reveals)
        assert all(v.height < vr for v in p.verifiers if v.panel == 0)
    assert (r.phase == P.PHASE_APPEAL) == escalate
    seed = compute_appeal_seed(block_seed(vr), 1, 0)
    conflicted = {p.address for p in r.participants} | {m.owner.address}
    k = get_params(m.store).appeal_verifiers
    for p in r.participants:
        first = {v.address for v in p.verifiers if v.panel == 0}
        cands = [
            (v, v.bond * v.reputation)
            for v in pools[vr]
            if v.address not in conflicted and v.address not in first
        ]
        drawn = sorted(
            v.address for v in weighted_sample(hashlib.sha256(seed + p.address).digest(), cands, k)
        )
        panel1 = [v.address for v in p.verifiers if v.panel == 1]
        assert panel1 == (drawn if p.escalated else [])
        assert p.escalated == (escalate and p.address == voter.first[0][1])


# -- next-round gating ----------------------------------------------------------------------------


def rounds_of(m: Market) -> list[jobs_pb2.Round]:
    return [m.round(1, n) for n in range(m.job(1).rounds_opened)]


def test_next_round_waits_for_the_round_before_the_previous_one_to_finalize():
    """Round 0's attest runs its whole window (one of three attesters is silent: the other two
    make the quorum), long after round 1 has left its commit phase: round 2 does not open before
    round 0 is finalized; it opens in that very end-block, on the newest attested model (round
    1's when round 1, closing every phase early, was finalized first: a base never rolls back)."""
    m = market_with_job(n_providers=5, rounds=3, participants_per_round=3)
    slow = m.round(1, 0).participants[0].address
    attest = lambda x, j, rn: None if (rn, x) == (0, slow) else agg_hash(j, rn)  # noqa: E731
    seen_waiting = []

    def watch(mm: Market) -> None:
        job = mm.job(1)
        r0 = mm.round(1, 0)
        if job.rounds_opened == 2 and mm.round(1, 1).phase != P.PHASE_COMMIT:
            # round 1 has left commit, round 0 is not finalized: nothing opens, nothing scheduled
            assert r0.phase != P.PHASE_FINALIZED
            assert job.next_open_height == 0
            seen_waiting.append(mm.height)
        if job.rounds_opened == 3:
            assert r0.phase == P.PHASE_FINALIZED

    drive(m, attest=attest, after=watch)
    r0, r1, r2 = rounds_of(m)
    assert all(r.phase == P.PHASE_FINALIZED for r in (r0, r1, r2))
    assert r1.open_height == r0.commit_deadline  # round 0 left commit, no round -1 to wait for
    assert r1.commit_deadline < r0.finalized_height  # round 0's verification outlasted it
    assert len(seen_waiting) >= W // 2
    assert r2.open_height == r0.finalized_height  # the finalize scheduled it
    assert r0.attested_model_hash == agg_hash(1, 0)
    newest = agg_hash(1, 1) if r1.finalized_height < r0.finalized_height else agg_hash(1, 0)
    assert r2.base_model_hash == newest
    assert r1.base_model_hash == MODEL0
    assert m.job(1).status == P.JOB_STATUS_COMPLETED


def test_round_n_waits_for_round_n_minus_1_to_leave_commit_when_n_minus_2_finalizes_first():
    """Round 1's participants hold their commitments back until round 0 is finalized: the
    finalize schedules nothing (round 1 is still in commit); round 2 opens when round 1's commit
    phase ends, on round 0's model."""
    m = market_with_job(n_providers=5, rounds=3)

    def hold(mm: Market) -> frozenset[bytes]:
        if mm.job(1).rounds_opened >= 2 and mm.round(1, 0).phase != P.PHASE_FINALIZED:
            return frozenset(p.address for p in mm.round(1, 1).participants)
        return frozenset()

    for _ in range(200):
        if m.round(1, 0).phase == P.PHASE_FINALIZED:
            break
        actors_block(m, 1, skip_commit=hold(m))
    assert m.round(1, 1).phase == P.PHASE_COMMIT and m.job(1).rounds_opened == 2
    assert m.job(1).next_open_height == 0
    drive(m)
    r0, r1, r2 = rounds_of(m)
    assert r1.commit_deadline > r0.finalized_height
    assert r2.open_height == r1.commit_deadline
    assert r2.base_model_hash == agg_hash(1, 0)


def latest_finalized_before(rs: list[jobs_pb2.Round], n: int) -> int:
    """The highest round index below n finalized by the end-block that opened round n (in an
    end-block the transitions run before the opens), -1 if none."""
    done = [
        k
        for k in range(n)
        if rs[k].finalized_height and rs[k].finalized_height <= rs[n].open_height
    ]
    return max(done, default=-1)


def test_honest_multi_round_job_finalizes_every_round_one_step_behind():
    m = new_market(n_providers=4)
    m.create_job(rounds=6, commit_blocks=3, reveal_blocks=5, verdict_blocks=5, attest_blocks=5)
    resps = run_job(m, 1)
    rs = rounds_of(m)
    assert len(rs) == 6 and m.job(1).status == P.JOB_STATUS_COMPLETED
    assert all(r.phase == P.PHASE_FINALIZED and r.attested_model_hash for r in rs)
    assert m.job(1).rounds_finalized == 6
    for n, r in enumerate(rs):
        if n == 1:
            assert r.open_height == rs[0].commit_deadline
        if n >= 2:  # round n - 1 had left commit and round n - 2 was finalized
            assert r.open_height == max(rs[n - 1].commit_deadline, rs[n - 2].finalized_height)
        k = latest_finalized_before(rs, n)
        assert k >= n - 2  # a base never more than one round behind
        assert r.base_model_hash == (rs[k].attested_model_hash if k >= 0 else MODEL0)
        assert n < 2 or r.base_model_hash in (
            rs[n - 1].attested_model_hash,
            rs[n - 2].attested_model_hash,
        )
    assert closed(resps, "commit") and closed(resps, "attest")


def test_a_base_is_never_more_than_one_round_behind_when_rounds_finalize_out_of_order():
    """Round 0's attest runs its whole window (a silent third attester), round 1 closes every
    phase early and is finalized first; round 0's finalize then opens round 2 on round 1's
    model (the newer: round 0's finalize does not roll it back), and round 2's commit close
    opens round 3, whose base is round 1's model or newer, never round 0's."""
    m = market_with_job(n_providers=5, rounds=4, participants_per_round=3)
    slow = m.round(1, 0).participants[0].address
    attest = lambda x, j, rn: None if (rn, x) == (0, slow) else agg_hash(j, rn)  # noqa: E731
    drive(m, attest=attest)
    rs = rounds_of(m)
    assert rs[1].finalized_height < rs[0].finalized_height  # out of order
    # round 2 opened at round 0's finalize, after round 1's: on round 1's model, the newer one
    assert rs[2].base_model_hash == agg_hash(1, 1)
    assert rs[3].open_height > rs[1].finalized_height
    assert rs[3].base_model_hash in (agg_hash(1, 1), agg_hash(1, 2))


def test_next_round_draw_seed_comes_after_the_message_that_let_it_open():
    """In an honest overlapping job round 2 opens at round 0's finalize (round 1 has left
    commit); with early close that finalize is in the block of round 0's last attestation, so
    round 2's participants are drawn from the seed of that block: a seed its attesters knew
    (beacon over the previous block) when they chose to attest in it. Like the challenges, the
    draw must come from a block strictly after the last message that triggered it."""
    m = new_market(n_providers=4)
    m.create_job(rounds=3, commit_blocks=3, reveal_blocks=5, verdict_blocks=5, attest_blocks=5)
    trace = []
    for _ in range(200):
        if m.job(1).status != P.JOB_STATUS_ACTIVE:
            break
        trace.append((m.height + 1, actors_block(m, 1)))
    rs = rounds_of(m)
    attested0 = [
        h
        for h, resp in trace
        for t in resp.tx_results
        for e in t.events
        if e.type == "attestation.posted" and {a.key: a.value for a in e.attributes}["round"] == "0"
    ]
    assert rs[2].draw_seed == compute_draw_seed(block_seed(rs[2].open_height), 1, 2)
    assert rs[2].open_height > max(attested0)
