"""jobs and rounds events (constant keys; emitted after the change). Every attribute is indexed,
so e.g. ``tx_search "update.submitted.job_id='1'"`` or ``block_search
"round.finalized.job_id='1'"``."""

from abci_app.codec.address import to_bech32
from abci_app.context import event
from abci_app.pb import abci


def job_created(job_id: int, owner: bytes, rounds: int, escrow: int, burned: int) -> abci.Event:
    return event(
        "job.created",
        job_id=job_id,
        owner=to_bech32(owner),
        rounds=rounds,
        escrow=escrow,
        burned=burned,
    )


def job_cancel_requested(job_id: int, owner: bytes) -> abci.Event:
    return event("job.cancel_requested", job_id=job_id, owner=to_bech32(owner))


def job_closed(job_id: int, status: str, refund: int, paid_total: int) -> abci.Event:
    return event("job.closed", job_id=job_id, status=status, refund=refund, paid_total=paid_total)


def round_opened(
    job_id: int, round_: int, participants: int, base_model: bytes, commit_deadline: int
) -> abci.Event:
    return event(
        "round.opened",
        job_id=job_id,
        round=round_,
        participants=participants,
        base_model=base_model,
        commit_deadline=commit_deadline,
    )


def round_closed_early(
    job_id: int, round_: int, phase: str, close_height: int, window_end: int
) -> abci.Event:
    """A phase got every message it waits for: it ends at ``close_height`` instead of its
    window's end ``window_end`` (rounds.close_if_done)."""
    return event(
        "round.closed_early",
        job_id=job_id,
        round=round_,
        phase=phase,
        close_height=close_height,
        window_end=window_end,
    )


def round_waiting(
    job_id: int,
    round_: int,
    reason: str = "no eligible providers",
    memory_mib: int = 0,
    tokens_per_sec: int = 0,
) -> abci.Event:
    """``reason``: capacity.WAIT_* (none eligible; eligible, but no island holds the model; or
    none reaches the job's speed); ``memory_mib`` / ``tokens_per_sec``: what a round needs."""
    return event(
        "round.waiting",
        job_id=job_id,
        round=round_,
        reason=reason,
        memory_mib=memory_mib,
        tokens_per_sec=tokens_per_sec,
    )


def update_submitted(
    job_id: int, round_: int, provider: bytes, update_root: bytes, trace_root: bytes
) -> abci.Event:
    return event(
        "update.submitted",
        job_id=job_id,
        round=round_,
        provider=to_bech32(provider),
        update_root=update_root,
        trace_root=trace_root,
    )


def challenge_issued(
    job_id: int, round_: int, provider: bytes, segments: list[int], verifiers: list[bytes]
) -> abci.Event:
    return event(
        "challenge.issued",
        job_id=job_id,
        round=round_,
        provider=to_bech32(provider),
        segment=segments[0],
        segments=",".join(str(i) for i in segments),
        verifiers=",".join(to_bech32(v) for v in verifiers),
    )


def segment_revealed(job_id: int, round_: int, provider: bytes, segment: int) -> abci.Event:
    return event(
        "segment.revealed",
        job_id=job_id,
        round=round_,
        provider=to_bech32(provider),
        segment=segment,
    )


def end_opened(job_id: int, round_: int, provider: bytes, segment: int) -> abci.Event:
    return event(
        "end.opened",
        job_id=job_id,
        round=round_,
        provider=to_bech32(provider),
        segment=segment,
    )


def verdict_posted(
    job_id: int,
    round_: int,
    verifier: bytes,
    target: bytes,
    valid: bool,
    quality: int,
    *,
    unavailable: bool = False,
) -> abci.Event:
    """A vote opened; ``unavailable``: the verifier could not fetch the revealed states."""
    return event(
        "verdict.posted",
        job_id=job_id,
        round=round_,
        verifier=to_bech32(verifier),
        provider=to_bech32(target),
        valid=valid,
        quality=quality,
        unavailable=unavailable,
    )


def round_declined(job_id: int, round_: int, provider: bytes) -> abci.Event:
    return event("round.declined", job_id=job_id, round=round_, provider=to_bech32(provider))


def vote_committed(
    job_id: int, round_: int, verifier: bytes, target: bytes, panel: int
) -> abci.Event:
    return event(
        "vote.committed",
        job_id=job_id,
        round=round_,
        verifier=to_bech32(verifier),
        provider=to_bech32(target),
        panel=panel,
    )


def verdict_escalated(
    job_id: int,
    round_: int,
    target: bytes,
    appeal: list[bytes],
    panel: str = "appeal",
    reason: str = "dispute",
    segments: list[int] | tuple[int, ...] = (),
) -> abci.Event:
    """``segments``: the fresh segments drawn for a later panel (comma-separated; empty for a
    carried first panel, or when no candidate was left: docs/threat-model.md *Fresh segments for the
    later panels*). ``reason``: ``dispute`` (the earlier panel was not unanimous valid, or did
    not accept), or ``carried`` (panel ``first``: a challenge that found no verifier at its
    commit deadline gets its first panel at the reveal end, ``rounds.process_carried_seats``).
    (``audit`` until 2026-12-03, when an audit escalated a unanimous first panel; an audit's
    seats now sit in the first panel, drawn at the challenge.)"""
    return event(
        "verdict.escalated",
        job_id=job_id,
        round=round_,
        provider=to_bech32(target),
        verifiers=",".join(to_bech32(a) for a in appeal),
        panel=panel,
        reason=reason,
        segments=",".join(str(x) for x in segments),
    )


def verdict_decided(
    job_id: int, round_: int, target: bytes, outcome: str, quality: int
) -> abci.Event:
    return event(
        "verdict.decided",
        job_id=job_id,
        round=round_,
        provider=to_bech32(target),
        outcome=outcome,
        quality=quality,
    )


def model_attested(
    job_id: int, round_: int, model_hash: bytes, stake: int, total: int
) -> abci.Event:
    return event(
        "model.attested",
        job_id=job_id,
        round=round_,
        model_hash=model_hash,
        stake=stake,
        total_stake=total,
    )


def attestation_posted(job_id: int, round_: int, provider: bytes, model_hash: bytes) -> abci.Event:
    return event(
        "attestation.posted",
        job_id=job_id,
        round=round_,
        provider=to_bech32(provider),
        model_hash=model_hash,
    )


def reward_paid(job_id: int, round_: int, recipient: bytes, amount: int, kind: str) -> abci.Event:
    return event(
        "reward.paid",
        job_id=job_id,
        round=round_,
        recipient=to_bech32(recipient),
        amount=amount,
        payout=kind,
    )


def round_finalized(
    job_id: int,
    round_: int,
    accepted: int,
    reward_paid: int,
    verifier_paid: int,
    returned: int,
    attested: bytes,
) -> abci.Event:
    return event(
        "round.finalized",
        job_id=job_id,
        round=round_,
        accepted=accepted,
        reward_paid=reward_paid,
        verifier_paid=verifier_paid,
        returned=returned,
        attested_model=attested,
    )


def reputation_changed(provider: bytes, old: int, new: int, reason: str) -> abci.Event:
    return event(
        "reputation.changed", provider=to_bech32(provider), old=old, new=new, reason=reason
    )


def speed_measured(
    job_id: int, round_: int, provider: bytes, sample: int, verified: bool, figure: int
) -> abci.Event:
    """An accepted commitment's speed (tokens/s) and the provider's measured figure after it."""
    return event(
        "speed.measured",
        job_id=job_id,
        round=round_,
        provider=to_bech32(provider),
        tokens_per_sec=sample,
        verified=int(verified),
        measured_tokens_per_sec=figure,
    )


def vote_unevidenced(
    job_id: int, round_: int, verifier: bytes, target: bytes, panel: int, segment: int, reason: str
) -> abci.Event:
    """A later panel's opened vote whose evidence on fresh ``segment`` is not what re-executing
    it yields (``reason``: ``settled_honest`` or ``settled_divergent``, jobs/evidence.py): judged
    as silence at the finalize."""
    return event(
        "vote.unevidenced",
        job_id=job_id,
        round=round_,
        verifier=to_bech32(verifier),
        provider=to_bech32(target),
        panel=panel,
        segment=segment,
        reason=reason,
    )
