"""Jobs, escrow and round records.

Escrow: every job's unspent budget sits in the ``JOB_ESCROW`` module account; ``Job.escrow`` is
the job's share of it. Only three things move it: ``fund`` (MsgCreateJob), ``pay`` (a round's
finalize, to participants and verifiers) and ``refund`` (to the owner when the job closes).
``check_invariants`` checks, for every job, escrow == funded - paid - refunded and that each
round paid at most its budget, and that the module account covers the sum of the escrows.
"""

from __future__ import annotations

from collections.abc import Iterator

from abci_app.bank import keeper as bank
from abci_app.context import Ctx
from abci_app.encoding import decode_msg, encode_msg, prefix_end
from abci_app.errors import InvariantBroken
from abci_app.jobs import events
from abci_app.jobs.keys import (
    JOB_ESCROW,
    JOB_PREFIX,
    NEXT_JOB_ID_KEY,
    OPEN_DUE_PREFIX,
    ROUND_DUE_PREFIX,
    ROUND_PREFIX,
    job_key,
    open_due_key,
    parse_open_due_key,
    parse_round_due_key,
    round_key,
    round_prefix,
)
from abci_app.jobs.phases import PHASE_END_FIELD
from abci_app.pb import enum_name, jobs_pb2
from abci_app.store import CacheKV, KVReader

# -- jobs -----------------------------------------------------------------------------------------


def get_job(store: KVReader, job_id: int) -> jobs_pb2.Job | None:
    raw = store.get(job_key(job_id))
    return None if raw is None else decode_msg(jobs_pb2.Job, raw)


def set_job(store: CacheKV, job: jobs_pb2.Job) -> None:
    store.set(job_key(job.id), encode_msg(job))


def iterate_jobs(store: KVReader) -> Iterator[jobs_pb2.Job]:
    for _, v in store.iterate(JOB_PREFIX, prefix_end(JOB_PREFIX)):
        yield decode_msg(jobs_pb2.Job, v)


def next_job_id(store: CacheKV) -> int:
    raw = store.get(NEXT_JOB_ID_KEY)
    n = 1 if raw is None else int.from_bytes(raw, "big")
    store.set(NEXT_JOB_ID_KEY, (n + 1).to_bytes(8, "big"))
    return n


def fund(store: CacheKV, job: jobs_pb2.Job, owner: bytes, amount: int) -> None:
    bank.send(store, owner, JOB_ESCROW, amount)
    job.escrow += amount
    job.escrow_funded += amount


def burn_creation_fee(store: CacheKV, job: jobs_pb2.Job) -> None:
    """Burn ``job.creation_fee`` from the owner: it is never refunded, so a job nobody wants still
    costs its creator (junk jobs are not free)."""
    if job.creation_fee:
        bank.burn(store, job.owner, job.creation_fee)


def pay(store: CacheKV, job: jobs_pb2.Job, recipient: bytes, amount: int) -> None:
    if amount > job.escrow:
        raise InvariantBroken(f"job {job.id}: payout {amount} exceeds escrow {job.escrow}")
    bank.send(store, JOB_ESCROW, recipient, amount)
    job.escrow -= amount
    job.paid_total += amount


def schedule_open(store: CacheKV, job: jobs_pb2.Job, height: int) -> None:
    job.next_open_height = height
    store.set(open_due_key(height, job.id), b"")


def unschedule_open(store: CacheKV, job: jobs_pb2.Job) -> None:
    if job.next_open_height:
        store.delete(open_due_key(job.next_open_height, job.id))
        job.next_open_height = 0


def close_job(ctx: Ctx, job: jobs_pb2.Job, status: int) -> None:
    """Refund the whole unspent escrow to the owner; the job becomes history."""
    refund = job.escrow
    if refund:
        bank.send(ctx.store, JOB_ESCROW, job.owner, refund)
    job.escrow = 0
    job.refunded += refund
    job.status = status
    unschedule_open(ctx.store, job)
    set_job(ctx.store, job)
    ctx.emit(
        events.job_closed(job.id, enum_name(jobs_pb2.JobStatus, status), refund, job.paid_total)
    )


# -- rounds ---------------------------------------------------------------------------------------


def get_round(store: KVReader, job_id: int, round_: int) -> jobs_pb2.Round | None:
    raw = store.get(round_key(job_id, round_))
    return None if raw is None else decode_msg(jobs_pb2.Round, raw)


def set_round(store: CacheKV, r: jobs_pb2.Round) -> None:
    store.set(round_key(r.job_id, r.round), encode_msg(r))


def iterate_rounds(store: KVReader, job_id: int, start: int = 0) -> Iterator[jobs_pb2.Round]:
    for _, v in store.iterate(round_key(job_id, start), round_prefix(job_id + 1)):
        yield decode_msg(jobs_pb2.Round, v)


# -- invariants -----------------------------------------------------------------------------------


def check_invariants(store: KVReader) -> int:
    """Per job: escrow == funded - paid - refunded; closed jobs hold nothing; rounds_opened <=
    rounds; every round paid <= its budgets and only from its job. The JOB_ESCROW account holds
    exactly the sum of the escrows (bank refuses sends to module accounts). Liveness: every live
    round has exactly one schedule entry, at the end of its current phase, and an active job
    with rounds left has an open entry or a round in commit (whose challenge opens the next), so
    every job reaches its close and its escrow cannot stay locked. Returns 0 (module account)."""
    total = 0
    live: dict[tuple[int, int], int] = {}  # (job, round) -> height its next transition is due
    must_open: set[int] = set()
    for job in iterate_jobs(store):
        _check_job_books(job)
        in_commit, awaits_model = _check_rounds(store, job, live)
        _check_job_has_rounds_left(job)
        if (
            job.status == jobs_pb2.JOB_STATUS_ACTIVE
            and job.rounds_opened < job.rounds
            and not in_commit
            and not awaits_model
        ):
            must_open.add(job.id)
        total += job.escrow
    held = bank.get_balance(store, JOB_ESCROW)
    if held != total:
        raise InvariantBroken(f"job_escrow account holds {held} != sum of job escrows {total}")
    _check_schedules(store, live, must_open)
    _ = ROUND_PREFIX
    return 0


def _check_job_books(job: jobs_pb2.Job) -> None:
    """escrow == funded - paid - refunded, a closed job holds nothing, rounds opened and
    finalized in range, funded == rounds x (R + V)."""
    if job.escrow != job.escrow_funded - job.paid_total - job.refunded:
        raise InvariantBroken(f"job {job.id}: escrow {job.escrow} != funded - paid - refunded")
    if job.status in (jobs_pb2.JOB_STATUS_CANCELLED, jobs_pb2.JOB_STATUS_COMPLETED) and job.escrow:
        raise InvariantBroken(f"job {job.id} is closed but still holds {job.escrow}")
    if not job.rounds_finalized <= job.rounds_opened <= job.rounds:
        raise InvariantBroken(f"job {job.id}: rounds opened/finalized out of range")
    if job.escrow_funded != job.rounds * (job.reward_per_round + job.verifier_reward_per_round):
        raise InvariantBroken(f"job {job.id}: funded {job.escrow_funded} != rounds x budgets")


def _check_rounds(
    store: KVReader, job: jobs_pb2.Job, live: dict[tuple[int, int], int]
) -> tuple[bool, bool]:
    """Each round of ``job`` is stored in a phase with an end, paid within its budgets with
    payout records that sum to its totals, and the rounds sum to the job's ``paid_total``. Adds
    every live round to ``live`` (its due height); returns (a round is in commit, the next
    round awaits round n - 2's model)."""
    paid = 0
    in_commit = False
    # the next round waits for round n - 2's model (rounds.is_next_round_ready): its
    # finalize schedules the open
    awaits_model = False
    for r in iterate_rounds(store, job.id):
        if r.round + 2 == job.rounds_opened and r.phase != jobs_pb2.PHASE_FINALIZED:
            awaits_model = True
        if r.phase != jobs_pb2.PHASE_FINALIZED:
            if r.phase not in PHASE_END_FIELD:
                raise InvariantBroken(f"job {job.id} round {r.round} is stored in phase {r.phase}")
            live[(job.id, r.round)] = getattr(r, PHASE_END_FIELD[r.phase])
            in_commit = in_commit or r.phase == jobs_pb2.PHASE_COMMIT
        if r.reward_paid > job.reward_per_round or r.verifier_paid > job.verifier_reward_per_round:
            raise InvariantBroken(f"job {job.id} round {r.round} paid more than its budget")
        if r.reward_paid + r.verifier_paid != sum(
            p.amount for p in r.payouts if p.kind != "bounty"
        ):
            raise InvariantBroken(
                f"job {job.id} round {r.round}: payout records disagree with totals"
            )
        paid += r.reward_paid + r.verifier_paid
    if paid != job.paid_total:
        raise InvariantBroken(
            f"job {job.id}: rounds paid {paid} != job paid_total {job.paid_total}"
        )
    return in_commit, awaits_model


def _check_job_has_rounds_left(job: jobs_pb2.Job) -> None:
    """An open job (active or cancelling) always has a round left to run."""
    open_ = job.status in (jobs_pb2.JOB_STATUS_ACTIVE, jobs_pb2.JOB_STATUS_CANCELLING)
    if open_ and job.rounds_finalized == (
        job.rounds if job.status == jobs_pb2.JOB_STATUS_ACTIVE else job.rounds_opened
    ):
        raise InvariantBroken(
            f"job {job.id} has no round left to run but is still "
            f"{enum_name(jobs_pb2.JobStatus, job.status)}"
        )


def _check_schedules(
    store: KVReader, live: dict[tuple[int, int], int], must_open: set[int]
) -> None:
    """The scheduling indexes point at live records: each live round has exactly one round
    entry, at the end of its phase, and each job in ``must_open`` an open entry."""
    for key, _ in store.iterate(ROUND_DUE_PREFIX, prefix_end(ROUND_DUE_PREFIX)):
        at, job_id, round_ = parse_round_due_key(key)
        if live.pop((job_id, round_), None) != at:
            raise InvariantBroken(
                f"round schedule entry {key.hex()} for a missing, finalized or twice-scheduled"
                " round, or not at the end of its phase"
            )
    if live:
        raise InvariantBroken(
            f"live rounds without a schedule entry (they would never advance): {sorted(live)}"
        )
    for key, _ in store.iterate(OPEN_DUE_PREFIX, prefix_end(OPEN_DUE_PREFIX)):
        job2 = get_job(store, parse_open_due_key(key)[1])
        if job2 is None or job2.status != jobs_pb2.JOB_STATUS_ACTIVE:
            raise InvariantBroken(f"open schedule entry {key.hex()} for a missing or inactive job")
        must_open.discard(job2.id)
    if must_open:
        raise InvariantBroken(
            "active jobs with rounds left but no round in commit, none awaiting its base model and "
            "no open scheduled: "
            f"{sorted(must_open)}"
        )
