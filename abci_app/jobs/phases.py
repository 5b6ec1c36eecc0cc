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
