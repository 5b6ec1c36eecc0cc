"""The round's phase table: for each live phase, the round field holding the height it ends.

One home for it: the keeper's liveness invariant, the end-block transitions
(``rounds.TRANSITIONS``), the worker's duty deadlines (``node/worker``) and the test kits all
read this table (a phase added in one copy and not another was a round that never ended)."""

from __future__ import annotations

from abci_app.pb import enum_name, jobs_pb2

PHASE_END_FIELD: dict[int, str] = {
    jobs_pb2.PHASE_COMMIT: "commit_deadline",
    jobs_pb2.PHASE_REVEAL: "reveal_end",
    jobs_pb2.PHASE_VERDICT: "verdict_end",
    jobs_pb2.PHASE_VOTE_REVEAL: "vote_reveal_end",
    jobs_pb2.PHASE_APPEAL: "appeal_end",
    jobs_pb2.PHASE_APPEAL_REVEAL: "appeal_reveal_end",
    jobs_pb2.PHASE_FINAL: "final_end",
    jobs_pb2.PHASE_FINAL_REVEAL: "final_reveal_end",
    jobs_pb2.PHASE_ATTEST: "attest_end",
}

# the same by the phase's name as queries show it ("commit", "vote_reveal", ...)
PHASE_END_FIELD_BY_NAME: dict[str, str] = {
    enum_name(jobs_pb2.Phase, p): f for p, f in sorted(PHASE_END_FIELD.items())
}

# the phase a round enters when a phase ends without an escalation, in the order the round's
# windows are laid out when it opens (``rounds.process_round_open``) and moved by an early close
# (``rounds._window_chain``); an escalation lays out the later panels' windows itself
# (``rounds.compute_panel_windows``), so the first panel's opening is followed by the attest phase
NEXT_PHASE: dict[int, int] = {
    jobs_pb2.PHASE_COMMIT: jobs_pb2.PHASE_REVEAL,
    jobs_pb2.PHASE_REVEAL: jobs_pb2.PHASE_VERDICT,
    jobs_pb2.PHASE_VERDICT: jobs_pb2.PHASE_VOTE_REVEAL,
    jobs_pb2.PHASE_VOTE_REVEAL: jobs_pb2.PHASE_ATTEST,
    jobs_pb2.PHASE_APPEAL: jobs_pb2.PHASE_APPEAL_REVEAL,
    jobs_pb2.PHASE_APPEAL_REVEAL: jobs_pb2.PHASE_ATTEST,
    jobs_pb2.PHASE_FINAL: jobs_pb2.PHASE_FINAL_REVEAL,
    jobs_pb2.PHASE_FINAL_REVEAL: jobs_pb2.PHASE_ATTEST,
}

# the JobSpec fields whose sum is each phase's window, in blocks: a later panel's voting window
# holds the provider's opening of its fresh segments and the panel's re-execution (R + V)
PHASE_WINDOW_FIELDS: dict[int, tuple[str, ...]] = {
    jobs_pb2.PHASE_COMMIT: ("commit_blocks",),
    jobs_pb2.PHASE_REVEAL: ("reveal_blocks",),
    jobs_pb2.PHASE_VERDICT: ("verdict_blocks",),
    jobs_pb2.PHASE_VOTE_REVEAL: ("verdict_blocks",),
    jobs_pb2.PHASE_APPEAL: ("reveal_blocks", "verdict_blocks"),
    jobs_pb2.PHASE_APPEAL_REVEAL: ("verdict_blocks",),
    jobs_pb2.PHASE_FINAL: ("reveal_blocks", "verdict_blocks"),
    jobs_pb2.PHASE_FINAL_REVEAL: ("verdict_blocks",),
    jobs_pb2.PHASE_ATTEST: ("attest_blocks",),
}


def compute_window_blocks(spec: jobs_pb2.JobSpec, phase: int) -> int:
    """The length in blocks of ``phase``'s window under ``spec``."""
    return sum(getattr(spec, f) for f in PHASE_WINDOW_FIELDS[phase])


def compute_later_phases(phase: int) -> list[int]:
    """The phases after ``phase`` in ``NEXT_PHASE`` order, up to the attest phase."""
    out: list[int] = []
    while phase in NEXT_PHASE:
        phase = NEXT_PHASE[phase]
        out.append(phase)
    return out
