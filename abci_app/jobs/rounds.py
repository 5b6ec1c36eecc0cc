"""The round phase machine (docs/design.md §4), advanced only by block height in end_block.

One function per transition; each runs in the end_block of the height stored in the round
(``0x54 | height | job | round`` indexes what is due)::

    end_block(O)     OPEN -> COMMIT       process_round_open   draw participants + shards
    heights O+1..D-1 COMMIT               MsgSubmitUpdate,     (D = commit_deadline = O +
                                          MsgDeclineRound      commit_blocks; not in block D,
                                                               whose seed draws the challenges)
    end_block(D)     COMMIT -> REVEAL     process_challenge    seeded by block D's seed (the
                                                               audits too); next round opens
    heights D+1..Rv  REVEAL               MsgRevealSegment     (Rv = D + reveal_blocks)
    end_block(Rv)    REVEAL -> VERDICT    process_reveal_end   unrevealed challenges: missed reveal
    heights Rv+1..Vd VERDICT              MsgVerdict (hash)    (Vd = Rv + verdict_blocks)
    end_block(Vd)    VERDICT -> VOTE_REVEAL process_verdict_end
    heights Vd+1..Vr VOTE_REVEAL          MsgRevealVote,       (Vr = Vd + verdict_blocks; with
                                          MsgOpenEnd           verdict_blocks >= 3 not in block
                                                               Vr, whose seed draws the appeal:
                                                               msgs.check_before_audit_seed)
    end_block(Vr)    VOTE_REVEAL -> APPEAL | ATTEST  process_vote_reveal_end: a unanimous valid
                                                     first panel accepts; anything else escalates
    heights Vr+1..Ap APPEAL               MsgVerdict (hash)    (Ap = Vr + verdict_blocks; only if
                                                               escalated)
    end_block(Ap)    APPEAL -> APPEAL_REVEAL process_appeal_end
    heights Ap+1..Ar APPEAL_REVEAL        MsgRevealVote        (Ar = Ap + verdict_blocks)
    end_block(Ar)    APPEAL_REVEAL -> ATTEST | FINAL  process_appeal_reveal_end: an appeal panel
                                              that does not accept sends the challenge on
    heights Ar+1..Fn FINAL                MsgVerdict (hash)    (Fn = Ar + verdict_blocks; only if
                                                               sent on)
    end_block(Fn)    FINAL -> FINAL_REVEAL process_final_end
    heights Fn+1..Fr FINAL_REVEAL         MsgRevealVote        (Fr = Fn + verdict_blocks)
    end_block(Fr)    FINAL_REVEAL -> ATTEST  process_final_reveal_end: the final panel's verdict
                                              is final
    heights ..At     ATTEST               MsgAttestModel       (At = Vr, Ar or Fr, +
                                                               attest_blocks)
    end_block(At)    ATTEST -> FINALIZED  process_finalize     attest quorum, rewards, reputation,
                                                               slashes

OPEN and CHALLENGE are instants (they happen inside one end_block); a stored round is always in
COMMIT, REVEAL, VERDICT, VOTE_REVEAL, APPEAL, APPEAL_REVEAL, FINAL, FINAL_REVEAL, ATTEST or
FINALIZED.

Providers are reached only through ``providers: ProviderKeeper`` (jobs/expected.py), which
``abci_app/modules.py`` wires in; jobs imports nothing from abci_app.providers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import NamedTuple

from abci_app.context import Ctx
from abci_app.encoding import MAX_U64, u64_key
from abci_app.errors import InvariantBroken
from abci_app.jobs import events, keeper, sla
from abci_app.jobs.audit import draw_segments
from abci_app.jobs.capacity import (
    WAIT_MEMORY,
    WAIT_NONE,
    WAIT_SPEED,
    can_hold,
    compute_island_need_mib,
    compute_speed_need,
    compute_speed_sample,
    is_chain_live,
)
from abci_app.jobs.evidence import compute_unevidenced
from abci_app.jobs.expected import ProviderKeeper
from abci_app.jobs.incentives import (
    ceil_div,
    compute_audit_seed,
    compute_fresh_seed,
    compute_fresh_segments,
    compute_panel_reveals,
    compute_required_bond,
    compute_value_gain_bps,
    draw_fresh_segments,
    is_audited,
    is_escalated,
    is_job_acceptable,
)
from abci_app.jobs.keys import (
    OPEN_DUE_PREFIX,
    ROUND_DUE_PREFIX,
    open_due_key,
    parse_open_due_key,
    parse_round_due_key,
    round_due_key,
)
from abci_app.jobs.params import get_params
from abci_app.jobs.phases import PHASE_END_FIELD, compute_later_phases, compute_window_blocks
from abci_app.jobs.probe import PROBE_DIM, is_probe_within
from abci_app.jobs.sampler import Sampler, shuffle, weighted_sample
from abci_app.pb import enum_name, jobs_pb2, providers_pb2
from abci_app.reputation.rules import compute_gain, compute_loss
from abci_app.rewards.rules import compute_participant_payouts, compute_shares
from abci_app.store import KVReader

BPS = 10_000
# the final panel (README *Verdict*): every eligible provider outside the round and its owner, at
# most this many (the largest bonds): bounds the record and the end-block work of a final verdict
FINAL_PANEL_MAX = 64
# outcomes a verifier majority decided (its side earns the verifier share and reputation)
DECIDED = (jobs_pb2.OUTCOME_ACCEPTED, jobs_pb2.OUTCOME_FRAUD, jobs_pb2.OUTCOME_REJECTED)


# -- seeds ----------------------------------------------------------------------------------------


def compute_draw_seed(block_seed: bytes, job_id: int, round_: int) -> bytes:
    return hashlib.sha256(
        b"loconet/draw/v1" + block_seed + u64_key(job_id) + u64_key(round_)
    ).digest()


def compute_challenge_seed(block_seed: bytes, job_id: int, round_: int) -> bytes:
    return hashlib.sha256(
        b"loconet/challenge/v1" + block_seed + u64_key(job_id) + u64_key(round_)
    ).digest()


def compute_n_segments(spec: jobs_pb2.JobSpec) -> int:
    return spec.inner_steps // spec.trace_interval


def _move_due(ctx: Ctx, r: jobs_pb2.Round, old: int, new: int | None) -> None:
    ctx.store.delete(round_due_key(old, r.job_id, r.round))
    if new is not None:
        ctx.store.set(round_due_key(new, r.job_id, r.round), b"")


def _find(r: jobs_pb2.Round, address: bytes) -> jobs_pb2.Participant | None:
    for p in r.participants:
        if p.address == address:
            return p
    return None


# -- OPEN -> COMMIT -------------------------------------------------------------------------------


def process_round_open(ctx: Ctx, providers: ProviderKeeper, job: jobs_pb2.Job) -> None:
    """Open round ``job.rounds_opened``: draw min(P, #eligible) distinct participants with
    probability proportional to bond x reputation (seed = hash(this block's hash, job, round)),
    give each a distinct data shard from a seeded permutation, fix the base model (the last
    attested one). With no eligible provider the round waits and the draw is retried next block.
    Eligible (every draw's pool is ``providers.get_draw_pool``: the providers as they were at the
    start of this block, less those this block punished, so no tx of the seeded block moves it):
    active providers passing the job's filters, never its owner, whose bond covers the
    job's collateral (``incentives.compute_required_bond``) and whose opt-in policy takes the job
    (``incentives.is_job_acceptable``). With none the draw is retried after ``wait_retry_blocks``,
    then at doubling intervals (``compute_next_retry``), and the job is cancelled after
    ``max_wait_blocks`` of waiting (``process_job_expiry``).
    Precondition: job active, rounds_opened < rounds."""
    h = ctx.block.height
    n = job.rounds_opened
    job.next_open_height = 0
    params = get_params(ctx.store)
    acceptable, holding, eligible = compute_eligible(ctx, providers, job, params)
    if not eligible:
        process_round_wait(
            ctx, job, params, WAIT_SPEED if holding else WAIT_MEMORY if acceptable else WAIT_NONE
        )
        return
    job.waiting_since = 0
    seed = compute_draw_seed(ctx.block.seed, job.id, n)
    parts = draw_participants(seed, job.spec, eligible, compute_judges(ctx, providers, job, params))
    r = jobs_pb2.Round(
        job_id=job.id,
        round=n,
        phase=jobs_pb2.PHASE_COMMIT,
        open_height=h,
        draw_seed=seed,
        open_time_ns=ctx.block.time_ns,
        base_model_hash=job.current_model_hash,
        participants=parts,
    )
    end = h
    for ph in [jobs_pb2.PHASE_COMMIT, *compute_later_phases(jobs_pb2.PHASE_COMMIT)]:
        end += compute_window_blocks(job.spec, ph)
        setattr(r, PHASE_END_FIELD[ph], end)
    ctx.store.set(round_due_key(r.commit_deadline, job.id, n), b"")
    keeper.set_round(ctx.store, r)
    sla.record_drawn(ctx.store, r, h)
    job.rounds_opened += 1
    keeper.set_job(ctx.store, job)
    ctx.emit(events.round_opened(job.id, n, len(parts), r.base_model_hash, r.commit_deadline))


def compute_eligible(
    ctx: Ctx, providers: ProviderKeeper, job: jobs_pb2.Job, params: jobs_pb2.JobsParams
) -> tuple[
    list[providers_pb2.Provider], list[providers_pb2.Provider], list[providers_pb2.Provider]
]:
    """(acceptable, holding, eligible): the draw pool's providers whose bond covers the job's
    collateral and whose policy takes it; of those, the ones whose islands hold the model; of
    those, the ones fast enough (measured speed). Three lists so that a waiting round says which
    filter emptied it."""
    spec = job.spec
    bond = compute_required_bond(
        job.reward_per_round,
        spec.participants_per_round,
        spec.challenge_bps,
        params.slash_fraction_fraud_bps,
        params.collateral_margin_bps,
    )
    acceptable = [
        p
        for p in providers.get_draw_pool(ctx.store, spec.min_reputation, spec.min_stake)
        if is_job_acceptable(p, job, bond)
    ]
    need_speed = compute_speed_need(spec)
    holding = [p for p in acceptable if can_hold(p, spec)]
    eligible = [p for p in holding if providers.meets_throughput(ctx.store, p, need_speed)]
    return acceptable, holding, eligible


def process_round_wait(
    ctx: Ctx, job: jobs_pb2.Job, params: jobs_pb2.JobsParams, reason: str
) -> None:
    """No eligible provider: the job waits (``reason``: which filter left nobody) and the draw is
    retried (``compute_next_retry``), or the job expires after ``max_wait_blocks``."""
    h = ctx.block.height
    if not job.waiting_since:
        job.waiting_since = h
    if h - job.waiting_since >= params.max_wait_blocks:
        process_job_expiry(ctx, job)
        return
    keeper.schedule_open(ctx.store, job, compute_next_retry(job, h, params))
    keeper.set_job(ctx.store, job)
    spec = job.spec
    ctx.emit(
        events.round_waiting(
            job.id,
            job.rounds_opened,
            reason,
            compute_island_need_mib(spec),
            compute_speed_need(spec),
        )
    )


def draw_participants(
    seed: bytes,
    spec: jobs_pb2.JobSpec,
    eligible: list[providers_pb2.Provider],
    n_judges: int | None,
) -> list[jobs_pb2.Participant]:
    """The round's participants, by address: drawn by bond x reputation from ``seed``, each a
    distinct shard of a seeded permutation, ``contested`` when it did not hold most of the
    draw's weight."""
    by_addr = {p.address: p for p in eligible}
    drawn = weighted_sample(
        seed,
        [(p.address, p.bond * p.reputation) for p in eligible],
        compute_draw_size(spec, len(eligible), n_judges),
    )
    shards = shuffle(hashlib.sha256(seed + b"shards").digest(), spec.num_shards)
    weight = sum(p.bond * p.reputation for p in eligible)
    parts = [
        jobs_pb2.Participant(
            address=a,
            stake=by_addr[a].bond,
            reputation=by_addr[a].reputation,
            shard=shards[i],
            contested=is_contested(by_addr[a].bond * by_addr[a].reputation, weight),
        )
        for i, a in enumerate(drawn)
    ]
    parts.sort(key=lambda p: p.address)
    return parts


def compute_judge_pool(
    ctx: Ctx, providers: ProviderKeeper, job: jobs_pb2.Job, conflicted: set[bytes]
) -> list[providers_pb2.Provider]:
    """Who may judge the job's challenges (every verifier panel, and the counts of judges): the
    draw pool with every provider eligible (the job's own filters do not apply, so its owner
    cannot choose its judges), less ``conflicted``, less those whose island cannot hold the
    model or whose speed standing does not reach the job's stated need: a verifier re-executes
    segments of the same training in a verdict window sized from that speed, and a correct
    machine too slow for it would be silent and pay the liveness slash (an honest slow machine
    never loses money to a seat it could not fill). The standing is the participants' draw's
    (``providers.meets_throughput``: measured, else the provider's own claim, believed only
    downwards once work measured it). What this lets an owner do (narrow its judges by stating a
    speed) is in the README's limits."""
    need = compute_speed_need(job.spec)
    return [
        v
        for v in providers.get_draw_pool(ctx.store, 0, 0)
        if v.address not in conflicted
        and can_hold(v, job.spec)
        and providers.meets_throughput(ctx.store, v, need)
    ]


def is_contested(weight: int, total: int) -> bool:
    """A participant drawn against competition: its weight is at most half the eligible weight.
    Reputation is earned only in such rounds (``process_participant_penalties``): a job whose
    filters (min_stake, min_reputation, policy) leave one provider, or one dominating the pool,
    pays that provider its own money back, and a self-paid job then bought reputation for its fee
    (issue 31, 3: 5,000 -> 9,388 in 20 rounds for 1 LOCO). Contested, an owner paying to lift a
    chosen key pays the other eligible providers at least as much as that key in expectation."""
    return 2 * weight <= total


def compute_judges(
    ctx: Ctx, providers: ProviderKeeper, job: jobs_pb2.Job, params: jobs_pb2.JobsParams
) -> int | None:
    """Providers that could judge a round of ``job`` (the draw pool without its owner), or None
    when ``reserve_verifiers`` is off."""
    if not params.reserve_verifiers:
        return None
    return len(compute_judge_pool(ctx, providers, job, {job.owner}))


def compute_draw_size(spec: jobs_pb2.JobSpec, n_eligible: int, n_judges: int | None) -> int:
    """How many participants a round draws: ``participants_per_round``, at most the eligible, and
    at most as many as leave ``verifiers_per_challenge`` providers outside the round to judge a
    challenge (``n_judges``: every provider that could judge a round of the job, i.e. the draw
    pool without the owner; None when ``jobs.params.reserve_verifiers`` is off; nothing is kept
    for a job with ``challenge_bps`` 0, possible only where ``min_challenge_bps`` is 0), but at
    least one. Before, a market whose every provider was drawn had nobody to verify a challenged
    commitment, which was then accepted unverified (issue 31, 10: silence is never acceptance)."""
    if n_judges is None or spec.challenge_bps == 0:  # a job that is never challenged needs none
        return min(spec.participants_per_round, n_eligible)
    cap = max(1, n_judges - max(1, spec.verifiers_per_challenge))
    return min(spec.participants_per_round, n_eligible, cap)


def compute_next_retry(job: jobs_pb2.Job, height: int, params: jobs_pb2.JobsParams) -> int:
    """When a waiting job retries its draw: after ``wait_retry_blocks``, or after as long as it
    has waited so far when that is longer (the interval doubles: a job waiting W blocks costs the
    chain about log2(W / wait_retry_blocks) scans of the providers and events, not W /
    wait_retry_blocks: 8 instead of 100 over the default 1,000 blocks, which its creation fee
    pays for; issue 31, 7), never past the end of its ``max_wait_blocks``, where it expires."""
    waited = height - job.waiting_since
    return min(
        height + max(params.wait_retry_blocks, waited),
        job.waiting_since + params.max_wait_blocks,
    )


def process_job_expiry(ctx: Ctx, job: jobs_pb2.Job) -> None:
    """A job nobody could take for ``max_wait_blocks``: no new round opens; rounds in flight
    finish; the unspent escrow goes back to the owner (the creation fee does not)."""
    job.cancel_height = ctx.block.height
    ctx.emit(events.job_cancel_requested(job.id, job.owner))
    if job.rounds_finalized == job.rounds_opened:
        keeper.close_job(ctx, job, jobs_pb2.JOB_STATUS_CANCELLED)
    else:
        job.status = jobs_pb2.JOB_STATUS_CANCELLING
        keeper.set_job(ctx.store, job)


# -- COMMIT -> (CHALLENGE) -> REVEAL --------------------------------------------------------------


def process_challenge(
    ctx: Ctx, providers: ProviderKeeper, job: jobs_pb2.Job, r: jobs_pb2.Round
) -> None:
    """At the commit deadline D: participants without a commitment have missed it; each
    commitment is challenged with probability challenge_bps / 10000 at min(segments_per_challenge,
    H/k) distinct uniform trace segments (``audit.draw_segments``),
    and each challenge gets up to verifiers_per_challenge verifiers drawn (bond x reputation),
    ``audit_verifiers`` more when it is **audited** (``incentives.is_audited``, probability
    ``audit_bps``, from this block's seed in its own domain), from
    every active provider (bond >= min_provider_stake, reputation >= 1; the job's own filters do
    not apply: an owner cannot pick who judges its providers) that is neither a participant of
    this round (a rival never judges a rival: its score would move pay between them) nor the job's
    owner. Seed = hash(seed of block D (its beacon, see BlockContext.seed), job, round):
    randomness that did not exist when the provider committed (commitments and declines land at
    height <= D - 1: msgs.check_before_challenge_seed). Unchallenged commitments are
    accepted at ``unverified_quality``. Then the job's next round opens in this same block."""
    params = get_params(ctx.store)
    spec = job.spec
    seed = compute_challenge_seed(ctx.block.seed, job.id, r.round)
    audit_seed = compute_audit_seed(ctx.block.seed, job.id, r.round)
    r.challenge_seed = seed
    s = Sampler(seed)
    n_seg = compute_n_segments(spec)
    conflicted = {q.address for q in r.participants} | {job.owner}
    pool = compute_judge_pool(ctx, providers, job, conflicted)
    for p in r.participants:  # address order
        if p.outcome == jobs_pb2.OUTCOME_DECLINED:
            continue
        if not p.HasField("commitment"):
            p.outcome = jobs_pb2.OUTCOME_MISSED_COMMIT
            continue
        if s.below(BPS) >= spec.challenge_bps:
            p.outcome = jobs_pb2.OUTCOME_ACCEPTED
            p.quality = params.unverified_quality
            continue
        p.challenged = True
        p.segments.extend(draw_segments(s, n_seg, max(1, spec.segments_per_challenge)))
        p.segment = p.segments[0]
        cands = [(v, v.bond * v.reputation) for v in pool]
        audited = is_audited(audit_seed, p.address, params.audit_bps)
        seats = spec.verifiers_per_challenge + (compute_audit_seats(params) if audited else 0)
        vs = weighted_sample(hashlib.sha256(seed + b"verifiers" + p.address).digest(), cands, seats)
        vs.sort(key=lambda v: v.address)
        # audited: the audit's seats sit in the first panel, drawn with it and voting with it
        # (secret votes, secret-end evidence, paid per unit like any first-panel vote)
        p.audited = audited and len(vs) > spec.verifiers_per_challenge
        p.verifiers.extend(jobs_pb2.VerifierAssignment(address=v.address, stake=v.bond) for v in vs)
        ctx.emit(
            events.challenge_issued(
                job.id, r.round, p.address, list(p.segments), [v.address for v in vs]
            )
        )
    sla.record_commit_deadline(ctx.store, r, ctx.block.height)
    r.phase = jobs_pb2.PHASE_REVEAL
    _move_due(ctx, r, r.commit_deadline, r.reveal_end)
    keeper.set_round(ctx.store, r)
    if schedule_next_open(ctx, job):
        keeper.set_job(ctx.store, job)


def is_next_round_ready(store: KVReader, job: jobs_pb2.Job) -> bool:
    """Round n = ``job.rounds_opened`` can open: the job is active with rounds left, no open
    is scheduled, round n - 1 is past its commit phase (its providers are free to train) and round
    n - 2 is finalized, so its attested model, round n's base, exists. Round n trains while round
    n - 1 is verified (the one-step-delay overlap); a base never falls more than one round
    behind, however early the phases close."""
    n = job.rounds_opened
    if job.status != jobs_pb2.JOB_STATUS_ACTIVE or n >= job.rounds or job.next_open_height:
        return False
    prev = keeper.get_round(store, job.id, n - 1) if n >= 1 else None
    if prev is not None and prev.phase == jobs_pb2.PHASE_COMMIT:
        return False
    older = keeper.get_round(store, job.id, n - 2) if n >= 2 else None
    return older is None or older.phase == jobs_pb2.PHASE_FINALIZED


def schedule_next_open(ctx: Ctx, job: jobs_pb2.Job) -> bool:
    """Schedule the next round's open at this height (after this block's transitions) when its
    inputs exist (``is_next_round_ready``); called when a round leaves its commit phase and when
    a round is finalized. True when it scheduled (the caller stores ``job``)."""
    if not is_next_round_ready(ctx.store, job):
        return False
    keeper.schedule_open(ctx.store, job, ctx.block.height)
    return True


# -- REVEAL -> VERDICT ----------------------------------------------------------------------------


def process_reveal_end(
    ctx: Ctx, providers: ProviderKeeper, job: jobs_pb2.Job, r: jobs_pb2.Round
) -> None:
    """Challenged participants that did not reveal have missed the reveal. (Tolerance mode: a
    reveal is complete only once its ends are opened, so its SLA duty waits for the vote-reveal
    window's close, ``compute_ends_due``.)"""
    for p in r.participants:
        if p.challenged and not p.HasField("reveal"):
            p.outcome = jobs_pb2.OUTCOME_MISSED_REVEAL
    process_carried_seats(ctx, providers, job, r)
    sla.record_reveal_deadline(ctx.store, r, ctx.block.height, compute_ends_due(job, r))
    r.phase = jobs_pb2.PHASE_VERDICT
    _move_due(ctx, r, r.reveal_end, r.verdict_end)
    keeper.set_round(ctx.store, r)


def compute_carry_seed(block_seed: bytes, job_id: int, round_: int) -> bytes:
    return hashlib.sha256(
        b"loconet/carried-seats/v1" + block_seed + u64_key(job_id) + u64_key(round_)
    ).digest()


def process_carried_seats(
    ctx: Ctx, providers: ProviderKeeper, job: jobs_pb2.Job, r: jobs_pb2.Round
) -> None:
    """A revealed challenge that got no verifier at its commit deadline (every judge was drawn
    into the round, or jailed or gone in that block, e.g. by the previous round's finalize) is
    carried: its first panel is drawn here, at the reveal end, from the same pool as at the
    challenge (active, outside the round and its owner; bond x reputation; this block's seed in
    its own domain: unknown when the provider revealed). It votes in the verdict windows that
    follow, like any first panel. With nobody to seat even now it stays without verifiers and its
    verdict is ``undecided`` (``compute_outcome``): a challenged commitment is never accepted
    unverified (issue 31, 10)."""
    todo = [p for p in r.participants if p.challenged and p.HasField("reveal") and not p.verifiers]
    if not todo:
        return
    conflicted = {q.address for q in r.participants} | {job.owner}
    pool = compute_judge_pool(ctx, providers, job, conflicted)
    seed = compute_carry_seed(ctx.block.seed, job.id, r.round)
    for p in todo:
        cands = [(v, v.bond * v.reputation) for v in pool]
        vs = weighted_sample(
            hashlib.sha256(seed + p.address).digest(), cands, job.spec.verifiers_per_challenge
        )
        if not vs:
            continue
        vs.sort(key=lambda v: v.address)
        p.verifiers.extend(jobs_pb2.VerifierAssignment(address=v.address, stake=v.bond) for v in vs)
        ctx.emit(
            events.verdict_escalated(
                job.id, r.round, p.address, [v.address for v in vs], "first", "carried"
            )
        )


# -- VERDICT -> ATTEST ----------------------------------------------------------------------------


def compute_weighted_median(votes: list[tuple[int, bytes, int]]) -> int:
    """Lower stake-weighted median of (quality, address, stake) votes."""
    votes = sorted(votes)
    total = sum(st for _, _, st in votes)
    acc = 0
    for q, _, st in votes:
        acc += st
        if 2 * acc >= total:
            return q
    return 0


def compute_outcome(
    verifiers: list[jobs_pb2.VerifierAssignment],
    unverified_quality: int,
    min_fraud_verifiers: int,
    supporting_invalid: int = 0,
) -> tuple[int, int]:
    """(outcome, quality) of a revealed challenge by one panel. S = stake of the panel:
    valid stake >= 2/3 S -> accepted at the weighted median quality of the valid votes;
    invalid stake >= 2/3 S -> fraud when at least ``min_fraud_verifiers`` verifiers voted
    invalid (plus ``supporting_invalid``: the first panel's invalid voters, when the appeal panel
    decides), else rejected (not paid, nobody slashed: too few verifiers cannot prove fraud);
    anything else (ties, silence) -> undecided.
    No verifier could be seated, even carried (S = 0) -> undecided: silence is never acceptance
    (issue 31, 10; before, such a challenge was accepted at ``unverified_quality``)."""
    total = sum(v.stake for v in verifiers)
    if total == 0:
        return jobs_pb2.OUTCOME_UNDECIDED, 0
    valid = sum(v.stake for v in verifiers if v.voted and v.valid)
    invalid = sum(v.stake for v in verifiers if v.voted and not v.valid)
    if 3 * valid >= 2 * total:
        q = compute_weighted_median(
            [(v.quality, v.address, v.stake) for v in verifiers if v.voted and v.valid]
        )
        return jobs_pb2.OUTCOME_ACCEPTED, q
    if 3 * invalid >= 2 * total:
        n_invalid = sum(1 for v in verifiers if v.voted and not v.valid) + supporting_invalid
        if n_invalid >= max(min_fraud_verifiers, 1):
            return jobs_pb2.OUTCOME_FRAUD, 0
        return jobs_pb2.OUTCOME_REJECTED, 0
    return jobs_pb2.OUTCOME_UNDECIDED, 0


def is_probe_vote_valid(p: jobs_pb2.Participant, v: jobs_pb2.VerifierAssignment, tol: int) -> bool:
    """A tolerance-mode vote's probes agree with the provider's opened ones: for every opened
    segment (segment order), ``probe.is_probe_within(provider's probe, vote's probe,
    tolerance_ppm)``."""
    ends = compute_panel_reveals(p, v.panel)  # the segments its panel judges
    if len(v.probes) != PROBE_DIM * len(ends):
        return False
    return all(
        is_probe_within(list(o.end_probe), list(v.probes[i * PROBE_DIM : (i + 1) * PROBE_DIM]), tol)
        for i, o in enumerate(ends)
    )


def apply_probe_checks(job: jobs_pb2.Job, p: jobs_pb2.Participant, panel: int) -> None:
    """Tolerance mode, when ``panel``'s opening window closes: a vote opened valid whose probes
    are not within tolerance of the provider's opened probes (``is_probe_vote_valid``) counts as
    invalid (``probe_mismatch``; quality 0): a verifier that did not re-execute committed its
    probes before the provider's were open, so it can only guess. The invalid vote escalates and
    is slashed as a wrong vote when the final verdict accepts. No-op in exact mode."""
    if job.spec.determinism_mode != jobs_pb2.DETERMINISM_MODE_TOLERANCE:
        return
    tol = job.spec.tolerance_ppm
    for v in p.verifiers:
        if v.panel == panel and v.voted and v.valid and not is_probe_vote_valid(p, v, tol):
            v.valid, v.quality, v.probe_mismatch = False, 0, True


def apply_evidence_checks(
    ctx: Ctx, job: jobs_pb2.Job, r: jobs_pb2.Round, p: jobs_pb2.Participant, panel: int
) -> None:
    """A later panel (``panel`` >= 1), when its opening window closes: each opened vote whose
    evidence on one of the panel's fresh segments is not what the panel's opened stake settled
    for it (``evidence.compute_unevidenced``) is marked ``unevidenced`` (event
    ``vote.unevidenced``): the seat did not re-execute, whatever verdict it copied, and the
    finalize judges it as silence (``compute_seat_judgement``). The tally is left as it is: the
    check follows a strict majority of the opened stake, and that majority must not gain a lever
    on the verdict that only ⅔ of the panel's stake has."""
    if panel == 0:
        return
    exact = job.spec.determinism_mode != jobs_pb2.DETERMINISM_MODE_TOLERANCE
    failed = compute_unevidenced(p, panel, exact, job.spec.tolerance_ppm)
    by_addr = {v.address: v for v in p.verifiers if v.panel == panel}
    for addr, segment, reason in failed:
        by_addr[addr].unevidenced = True
        ctx.emit(events.vote_unevidenced(job.id, r.round, addr, p.address, panel, segment, reason))


def is_end_due(job: jobs_pb2.Job, p: jobs_pb2.Participant) -> bool:
    """Tolerance mode: a revealed challenge with verifiers, whose ends must be opened
    (MsgOpenEnd) in the vote-reveal window."""
    return (
        job.spec.determinism_mode == jobs_pb2.DETERMINISM_MODE_TOLERANCE
        and p.challenged
        and p.HasField("reveal")
        and bool(p.verifiers)
    )


def compute_ends_due(job: jobs_pb2.Job, r: jobs_pb2.Round) -> frozenset[bytes]:
    return frozenset(p.address for p in r.participants if is_end_due(job, p))


def is_end_withheld(job: jobs_pb2.Job, p: jobs_pb2.Participant, panel: int = 0) -> bool:
    """Tolerance mode: a revealed challenge with verifiers whose provider did not open every
    end of ``panel``'s segments (MsgOpenEnd) by the close of that panel's opening window (the
    vote-reveal window for the first panel's, the appeal-reveal / final-reveal window for the
    fresh ones): a missed reveal."""
    return is_end_due(job, p) and not all(
        o.end_opened_height for o in p.reveals if o.panel == panel
    )


def is_fresh_withheld(p: jobs_pb2.Participant, panel: int) -> bool:
    """The fresh segments drawn for ``panel`` (1 appeal, 2 final) are not all opened
    (MsgRevealSegment with that panel) when its voting window closes: a missed reveal."""
    opened = {o.segment for o in p.reveals if o.panel == panel}
    return not set(compute_fresh_segments(p, panel)) <= opened


def process_missed_fresh(ctx: Ctx, job: jobs_pb2.Job, r: jobs_pb2.Round, panel: int) -> None:
    """At the close of a later panel's voting window: a challenge whose fresh segments were not
    all opened is a missed reveal (punished as fraud, like withholding the first opening: the
    provider alone can open them). Its panel could not vote, so nobody's seat is judged."""
    for p in r.participants:
        live = p.final_tier if panel == 2 else p.escalated and not p.final_tier
        if live and p.outcome != jobs_pb2.OUTCOME_MISSED_REVEAL and is_fresh_withheld(p, panel):
            p.outcome, p.quality = jobs_pb2.OUTCOME_MISSED_REVEAL, 0
            ctx.emit(
                events.verdict_decided(
                    job.id, r.round, p.address, enum_name(jobs_pb2.Outcome, p.outcome), 0
                )
            )


def process_ends_withheld(ctx: Ctx, job: jobs_pb2.Job, r: jobs_pb2.Round, panel: int) -> None:
    """Tolerance mode, at the close of a later panel's opening window: a challenge whose fresh
    ends were not opened (MsgOpenEnd) is a missed reveal, as for the first panel's."""
    for p in r.participants:
        live = p.final_tier if panel == 2 else p.escalated and not p.final_tier
        if live and p.outcome != jobs_pb2.OUTCOME_MISSED_REVEAL and is_end_withheld(job, p, panel):
            p.outcome, p.quality = jobs_pb2.OUTCOME_MISSED_REVEAL, 0
            ctx.emit(
                events.verdict_decided(
                    job.id, r.round, p.address, enum_name(jobs_pb2.Outcome, p.outcome), 0
                )
            )


def compute_min_fraud_voters(min_fraud_verifiers: int, judiciary: int) -> int:
    """Invalid voters a fraud verdict needs: ``min_fraud_verifiers``, but never more than ⌈⅔⌉ of
    the ``judiciary`` (every provider eligible to judge the round: active, outside it and its
    owner): a network too small to seat min_fraud_verifiers independent verifiers (4 providers,
    2 drawn: 2 can judge) still proves fraud, by ⅔ of everyone who could have been asked, where
    before a copier voted invalid by every panel ended ``rejected``, unslashed (issue 31, 12),
    and garbage with one colluder among the only 3 possible verifiers cost nothing (31, 2)."""
    return max(1, min(min_fraud_verifiers, -(-2 * judiciary // 3)))


def compute_judiciary(
    ctx: Ctx, providers: ProviderKeeper, job: jobs_pb2.Job, r: jobs_pb2.Round
) -> int:
    """How many providers could judge the round (``compute_min_fraud_voters``)."""
    conflicted = {q.address for q in r.participants} | {job.owner}
    return len(compute_judge_pool(ctx, providers, job, conflicted))


def _decide(
    ctx: Ctx, job: jobs_pb2.Job, r: jobs_pb2.Round, p: jobs_pb2.Participant, judiciary: int
) -> None:
    """Outcome of a revealed challenge: by the first panel, or, once escalated, by the appeal
    panel, or, when the appeal panel did not accept, by the final panel (each: ⅔ of its own
    stake decides; the earlier panels' invalid voters count towards the invalid voters a fraud
    verdict needs, ``compute_min_fraud_voters`` of the round's ``judiciary``)."""
    params = get_params(ctx.store)
    panel = 2 if p.final_tier else 1 if p.escalated else 0
    apply_probe_checks(job, p, panel)
    apply_evidence_checks(ctx, job, r, p, panel)
    vs = [v for v in p.verifiers if v.panel == panel]
    # the earlier panels' invalid voters count towards min_fraud_verifiers (each address once)
    support = len(
        {v.address for v in p.verifiers if v.panel < panel and v.voted and not v.valid}
        - {v.address for v in vs}
    )
    p.outcome, p.quality = compute_outcome(
        vs,
        params.unverified_quality,
        compute_min_fraud_voters(params.min_fraud_verifiers, judiciary),
        support,
    )
    ctx.emit(
        events.verdict_decided(
            job.id, r.round, p.address, enum_name(jobs_pb2.Outcome, p.outcome), p.quality
        )
    )


def process_verdict_end(
    ctx: Ctx, providers: ProviderKeeper, job: jobs_pb2.Job, r: jobs_pb2.Round
) -> None:
    """The first panel's secret votes are in; they are opened in the next window."""
    r.phase = jobs_pb2.PHASE_VOTE_REVEAL
    _move_due(ctx, r, r.verdict_end, r.vote_reveal_end)
    keeper.set_round(ctx.store, r)


def compute_panel_windows(height: int, spec: jobs_pb2.JobSpec) -> tuple[int, int, int]:
    """(commit end, reveal end, attest end) of a later panel (appeal or final) entered in the
    end-block of ``height``: the provider opens the panel's fresh segments and the panel commits
    its secret votes in R + V blocks (what the first panel's reveal and verdict windows give:
    the opening, then the re-execution), it opens them for V more, and the attest window
    follows."""
    commit_end = height + spec.reveal_blocks + spec.verdict_blocks
    reveal_end = commit_end + spec.verdict_blocks
    return commit_end, reveal_end, reveal_end + spec.attest_blocks


def compute_appeal_seed(block_seed: bytes, job_id: int, round_: int) -> bytes:
    return hashlib.sha256(
        b"loconet/appeal/v1" + block_seed + u64_key(job_id) + u64_key(round_)
    ).digest()


def compute_audit_seats(params: jobs_pb2.JobsParams) -> int:
    """An audited challenge's extra first-panel seats: ``audit_verifiers`` (params stored before
    the field existed read 0: such a chain audits with ``appeal_verifiers`` seats, as many as its
    audits drew before)."""
    return params.audit_verifiers or params.appeal_verifiers


def process_vote_reveal_end(
    ctx: Ctx, providers: ProviderKeeper, job: jobs_pb2.Job, r: jobs_pb2.Round
) -> None:
    """Per revealed challenge, in address order: tolerance mode, an end not opened
    (MsgOpenEnd) -> missed reveal (punished as fraud), and the first panel's valid votes whose
    probes disagree with the provider's count as invalid (``apply_probe_checks``); no verifier
    assigned, even carried (``process_carried_seats``) -> undecided; every first-panel verifier
    revealed *valid* -> accepted (``incentives.is_escalated``; an audited challenge's first panel
    holds its audit seats too, ``process_challenge``); otherwise escalated: an appeal panel of
    ``appeal_verifiers`` is drawn (bond x reputation, seed = this block's seed: unknown while the
    first panel voted)
    from active providers that are not in the first panel, not participants of the round and not
    the owner. With nobody to draw, the first panel decides by ``compute_outcome``. Escalated
    rounds get an appeal window and an appeal-reveal window before attesting."""
    params = get_params(ctx.store)
    h = ctx.block.height
    seed = compute_appeal_seed(ctx.block.seed, job.id, r.round)
    conflicted = {q.address for q in r.participants} | {job.owner}
    pool: list[providers_pb2.Provider] | None = None
    judiciary = -1  # read once, when a challenge is first decided
    escalated = False
    for p in r.participants:
        if not (p.challenged and p.HasField("reveal")):
            continue
        if judiciary < 0:
            judiciary = compute_judiciary(ctx, providers, job, r)
        if is_end_withheld(job, p):  # tolerance mode: an end left unopened
            p.outcome = jobs_pb2.OUTCOME_MISSED_REVEAL
            ctx.emit(
                events.verdict_decided(
                    job.id, r.round, p.address, enum_name(jobs_pb2.Outcome, p.outcome), 0
                )
            )
            continue
        apply_probe_checks(job, p, 0)
        if not is_escalated(list(p.verifiers)):
            _decide(ctx, job, r, p, judiciary)
            continue
        if pool is None:
            pool = compute_judge_pool(ctx, providers, job, conflicted)
        first = {v.address for v in p.verifiers}
        cands = [(v, v.bond * v.reputation) for v in pool if v.address not in first]
        vs = weighted_sample(
            hashlib.sha256(seed + p.address).digest(), cands, params.appeal_verifiers
        )
        if not vs:
            _decide(ctx, job, r, p, judiciary)
            continue
        vs.sort(key=lambda v: v.address)
        p.escalated = True
        escalated = True
        seat_later_panel(ctx, job, r, p, vs, 1)
    sla.record_ends_deadline(ctx.store, r, h, compute_ends_due(job, r))
    if escalated:
        r.phase = jobs_pb2.PHASE_APPEAL
        r.appeal_end, r.appeal_reveal_end, r.attest_end = compute_panel_windows(h, job.spec)
        _move_due(ctx, r, r.vote_reveal_end, r.appeal_end)
    else:
        r.phase = jobs_pb2.PHASE_ATTEST
        _move_due(ctx, r, r.vote_reveal_end, r.attest_end)
    keeper.set_round(ctx.store, r)


# the later panels by index: the phase of its secret votes and the round field it ends at, the
# phase its votes are opened in and that one's end field, and the participant's fresh segments
LATER_PANELS: dict[int, tuple[int, str, int, str, str]] = {
    1: (
        jobs_pb2.PHASE_APPEAL,
        "appeal_end",
        jobs_pb2.PHASE_APPEAL_REVEAL,
        "appeal_reveal_end",
        "appeal_segments",
    ),
    2: (
        jobs_pb2.PHASE_FINAL,
        "final_end",
        jobs_pb2.PHASE_FINAL_REVEAL,
        "final_reveal_end",
        "final_segments",
    ),
}


def seat_later_panel(
    ctx: Ctx,
    job: jobs_pb2.Job,
    r: jobs_pb2.Round,
    p: jobs_pb2.Participant,
    seats: list[providers_pb2.Provider],
    panel: int,
) -> None:
    """Seat ``panel`` (1 appeal, 2 final) on ``p``'s challenge and draw its fresh segments, which
    no earlier panel's opened votes say anything about (docs/threat-model.md *Fresh segments for
    the later panels*); event ``verdict.escalated``."""
    p.verifiers.extend(
        jobs_pb2.VerifierAssignment(address=v.address, stake=v.bond, panel=panel) for v in seats
    )
    fresh = getattr(p, LATER_PANELS[panel][4])
    fresh.extend(
        draw_fresh_segments(
            compute_fresh_seed(ctx.block.seed, job.id, r.round, panel),
            p.address,
            [o.segment for o in p.reveals],
            compute_n_segments(job.spec),
            len(p.segments) or 1,
        )
    )
    ctx.emit(
        events.verdict_escalated(
            job.id,
            r.round,
            p.address,
            [v.address for v in seats],
            panel="appeal" if panel == 1 else "final",
            segments=list(fresh),
        )
    )


def process_later_panel_vote_end(
    ctx: Ctx, job: jobs_pb2.Job, r: jobs_pb2.Round, panel: int
) -> None:
    """``panel``'s secret votes are in; they are opened in the next window. A challenge whose
    fresh segments were not opened is a missed reveal (``process_missed_fresh``)."""
    _vote, vote_end, reveal, reveal_end, _fresh = LATER_PANELS[panel]
    process_missed_fresh(ctx, job, r, panel)
    r.phase = reveal
    _move_due(ctx, r, getattr(r, vote_end), getattr(r, reveal_end))
    keeper.set_round(ctx.store, r)


def process_appeal_end(
    ctx: Ctx, providers: ProviderKeeper, job: jobs_pb2.Job, r: jobs_pb2.Round
) -> None:
    process_later_panel_vote_end(ctx, job, r, 1)


def compute_final_panel(
    pool: list[providers_pb2.Provider],
) -> list[providers_pb2.Provider]:
    """The final panel: the whole pool (every eligible provider outside the round and its owner,
    the earlier panels included) when it has at most FINAL_PANEL_MAX providers, else the
    FINAL_PANEL_MAX largest bonds (ties by address). Not drawn: no luck of the draw can give a
    coalition more of it than its stake, and splitting a stake into Sybils only moves it out."""
    ranked = sorted(pool, key=lambda v: (-v.bond, v.address))
    return sorted(ranked[:FINAL_PANEL_MAX], key=lambda v: v.address)


def process_appeal_reveal_end(
    ctx: Ctx, providers: ProviderKeeper, job: jobs_pb2.Job, r: jobs_pb2.Round
) -> None:
    """Every escalated challenge is decided by its appeal panel (``compute_outcome``: ⅔ of the
    appeal panel's stake; fraud also needs ``min_fraud_verifiers`` invalid voters, counting the
    first panel's). A **unanimous** accepting appeal panel (every appeal verifier revealed valid,
    ``incentives.is_escalated`` false) is final. Any other verdict (fraud, rejected, undecided,
    or an acceptance with a dissenting or silent appeal verifier: what a coalition holding ⅔ of a
    drawn 7-member panel could force, on an honest provider or for a cheater, slashing the honest
    minority of the panel) goes to the **final panel** (``compute_final_panel``), which votes in
    two more windows of V blocks; ⅔ of its stake is needed either way. Every revealed vote of
    every panel is judged against the final verdict at the finalize."""
    final = False
    # one panel for the round (the same pool for every challenge): read and sorted once
    panel: list[providers_pb2.Provider] | None = None
    judiciary = -1
    process_ends_withheld(ctx, job, r, 1)
    for p in r.participants:
        if not p.escalated or p.outcome == jobs_pb2.OUTCOME_MISSED_REVEAL:
            continue
        if judiciary < 0:
            judiciary = compute_judiciary(ctx, providers, job, r)
        _decide(ctx, job, r, p, judiciary)
        if p.outcome == jobs_pb2.OUTCOME_ACCEPTED and not is_escalated(
            [v for v in p.verifiers if v.panel == 1]
        ):
            continue  # a unanimous appeal panel accepted: final
        if panel is None:
            conflicted = {q.address for q in r.participants} | {job.owner}
            panel = compute_final_panel(compute_judge_pool(ctx, providers, job, conflicted))
        if not panel:
            continue
        p.final_tier = True
        p.outcome, p.quality = jobs_pb2.OUTCOME_PENDING, 0
        final = True
        seat_later_panel(ctx, job, r, p, panel, 2)
    if final:
        r.phase = jobs_pb2.PHASE_FINAL
        r.final_end, r.final_reveal_end, r.attest_end = compute_panel_windows(
            ctx.block.height, job.spec
        )
        _move_due(ctx, r, r.appeal_reveal_end, r.final_end)
    else:
        r.phase = jobs_pb2.PHASE_ATTEST
        _move_due(ctx, r, r.appeal_reveal_end, r.attest_end)
    keeper.set_round(ctx.store, r)


def process_final_end(
    ctx: Ctx, providers: ProviderKeeper, job: jobs_pb2.Job, r: jobs_pb2.Round
) -> None:
    process_later_panel_vote_end(ctx, job, r, 2)


def process_final_reveal_end(
    ctx: Ctx, providers: ProviderKeeper, job: jobs_pb2.Job, r: jobs_pb2.Round
) -> None:
    """Every challenge sent to the final panel is decided by it (``compute_outcome`` over the
    final panel's stake: a fraud verdict needs ⅔ of it, so a coalition below ⅔ of the final
    panel's stake can never slash an honest provider). That verdict is final."""
    judiciary = -1
    process_ends_withheld(ctx, job, r, 2)
    for p in r.participants:
        if p.final_tier and p.outcome != jobs_pb2.OUTCOME_MISSED_REVEAL:
            if judiciary < 0:
                judiciary = compute_judiciary(ctx, providers, job, r)
            _decide(ctx, job, r, p, judiciary)
    r.phase = jobs_pb2.PHASE_ATTEST
    _move_due(ctx, r, r.final_reveal_end, r.attest_end)
    keeper.set_round(ctx.store, r)


# -- ATTEST -> FINALIZED --------------------------------------------------------------------------


def compute_attested(r: jobs_pb2.Round) -> tuple[bytes, int, int]:
    """(model hash, its stake, total stake): the hash holding >= 2/3 of the stake of the accepted
    participants (the ones whose updates make the aggregate); b"" without quorum."""
    h, _, stake, total = compute_attested_with_excluded(r)
    return h, stake, total


def compute_attested_with_excluded(
    r: jobs_pb2.Round,
) -> tuple[bytes, tuple[bytes, ...], int, int]:
    """(model hash, excluded, its stake, total stake): the (hash, screened-out set) attested by
    >= 2/3 of the stake of the accepted participants; (b"", (), 0, total) without quorum. The
    screened-out set is part of what is attested: the aggregate is a function of the round's
    record, so honest attesters agree on both."""
    attesters = [p for p in r.participants if p.outcome == jobs_pb2.OUTCOME_ACCEPTED]
    total = sum(p.stake for p in attesters)
    tally: dict[tuple[bytes, tuple[bytes, ...]], int] = {}
    for p in attesters:
        if p.attested_hash:
            key = (p.attested_hash, tuple(p.attested_excluded))
            tally[key] = tally.get(key, 0) + p.stake
    for h, ex in sorted(tally):
        if total and 3 * tally[(h, ex)] >= 2 * total:
            return h, ex, tally[(h, ex)], total
    return b"", (), 0, total


def _set_rep(ctx: Ctx, providers: ProviderKeeper, addr: bytes, new: int, reason: str) -> int:
    """Set a reputation (event + delta). A jailed provider's reputation stays 0: duties it
    finishes after its fraud was proven never raise it again. A loss stops at the providers'
    probation floor (``providers.params.reputation_floor``) unless it is fraud's 0."""
    prov = providers.get_provider(ctx.store, addr)
    if prov is None:
        return 0
    old = prov.reputation
    if new == old or (prov.jailed_height and new > old):
        return 0
    new = providers.set_reputation(ctx.store, addr, new)
    if new == old:
        return 0
    ctx.emit(events.reputation_changed(addr, old, new, reason))
    return new - old


def process_attestation(ctx: Ctx, job: jobs_pb2.Job, r: jobs_pb2.Round) -> None:
    """The hash with >= 2/3 of the accepted participants' stake becomes the job's next base
    model; without a quorum the base stays."""
    model, excluded, stake, total = compute_attested_with_excluded(r)
    if model:
        r.attested_model_hash = model
        r.screened_out.extend(excluded)
        # a sum of u64 bonds: saturates (an overflow here halted the chain)
        r.attest_stake = min(stake, MAX_U64)
        if not is_newer_model_attested(ctx.store, job, r.round):
            job.current_model_hash = model
        ctx.emit(events.model_attested(job.id, r.round, model, stake, total))


def is_newer_model_attested(store: KVReader, job: jobs_pb2.Job, round_: int) -> bool:
    """A round after ``round_`` is finalized with an attested model already: rounds can finalize
    out of order (one runs its whole attest window while the next closes early), and the base
    never rolls back to an older round's model. At most the rounds in flight are read."""
    for n in range(round_ + 1, job.rounds_opened):
        later = keeper.get_round(store, job.id, n)
        if later is not None and later.phase == jobs_pb2.PHASE_FINALIZED:
            if later.attested_model_hash:
                return True
    return False


def is_paid_attester(r: jobs_pb2.Round, p: jobs_pb2.Participant) -> bool:
    """Accepted and attested. With a quorum: attested the round's quorum hash and screened-out
    set, and not screened out itself; an accepted participant that attested another hash, or
    nothing, is not paid for the round (its slot stays in the escrow), and one whose update the
    aggregate screened out is not paid as if it were in (issue 31, 13). Without a quorum: every
    accepted participant that attested a hash is paid its slot (``is_quorumless_attester``): the
    ones who kept the quorum away by staying silent are not, so stalling never pays, and the
    honest attester is not punished for the others' stalling (issue 31, 6)."""
    if p.outcome != jobs_pb2.OUTCOME_ACCEPTED:
        return False
    if not r.attested_model_hash:
        return is_quorumless_attester(r, p)
    return (
        p.attested_hash == r.attested_model_hash
        and list(p.attested_excluded) == list(r.screened_out)
        and p.address not in r.screened_out  # pay follows the aggregate (issue 31, 13)
    )


# what an accepted update the aggregate screened out is paid, of its slot as if it were in
SCREENED_PAY_BPS = 5_000


def is_screened_attester(r: jobs_pb2.Round, p: jobs_pb2.Participant) -> bool:
    """Accepted, attested the quorum's hash and screened-out set, and screened out itself."""
    return (
        p.outcome == jobs_pb2.OUTCOME_ACCEPTED
        and bool(r.attested_model_hash)
        and p.attested_hash == r.attested_model_hash
        and list(p.attested_excluded) == list(r.screened_out)
        and p.address in r.screened_out
    )


def is_quorumless_attester(r: jobs_pb2.Round, p: jobs_pb2.Participant) -> bool:
    """An accepted participant that attested some hash in a round that reached no quorum: paid
    its slot, its reputation unchanged (nobody can tell which hash was right). The base model
    stays; what keeps a quorum away is either silence (> ⅓ of the attesting stake not attesting:
    unpaid and a missed-attest reputation loss, so it never pays) or > ⅓ of it attesting another
    hash, a liveness attack at the BFT bound that earns exactly what honest attesting does."""
    return (
        not r.attested_model_hash
        and p.outcome == jobs_pb2.OUTCOME_ACCEPTED
        and bool(p.attested_hash)
    )


def compute_pay_weight(p: jobs_pb2.Participant) -> int:
    """A paid participant's weight in the round's reward: tokens processed x its reputation when
    drawn. Not the verifiers' quality score: that is one panel member's opinion of a rival's
    update, and a participant with a Sybil seated on a rival's panel doubled its own share by
    scoring the rival low (issue 31, 4). Quality is recorded (``Participant.quality``, the
    dashboards' figure); what pays is that the work was accepted, which the panels decide by
    re-execution, and how much of it there was."""
    return p.commitment.tokens_processed * p.reputation


def process_participant_rewards(
    ctx: Ctx, providers: ProviderKeeper, job: jobs_pb2.Job, r: jobs_pb2.Round
) -> None:
    """Pay the participants' reward from the escrow to the accepted participants that attested the
    quorum hash (``is_paid_attester``), each its slot weighted as abci_app.rewards says. A
    tombstoned provider (fraud proven in an earlier round, or in an earlier job's round finalized
    before this one; the tombstone outlives an exit) is paid nothing: its share stays in the
    escrow and the others' shares are unchanged. An update the aggregate screened out
    (``is_screened_attester``) is paid ``SCREENED_PAY_BPS`` of what it would have been paid in
    the model, the rest stays in the escrow: pay follows the aggregate (issue 31, 13), yet an
    honest update that happened not to help on the public held-out batches (the screen is an
    evaluation, not a verdict on the work, which the panels accepted) does not cost its provider
    the whole round; the others' shares are exactly what they would be with it in."""
    accepted = [
        (p.address, compute_pay_weight(p))
        for p in r.participants
        if is_paid_attester(r, p) or is_screened_attester(r, p)
    ]
    screened = set(r.screened_out)
    for addr, amount in compute_participant_payouts(
        job.reward_per_round, len(r.participants), accepted
    ):
        if providers.is_tombstoned(ctx.store, addr):
            continue
        if addr in screened:
            amount = amount * SCREENED_PAY_BPS // BPS
            if not amount:
                continue
        keeper.pay(ctx.store, job, addr, amount)
        _find(r, addr).reward = amount  # type: ignore[union-attr]
        r.reward_paid += amount
        r.payouts.add(address=addr, amount=amount, kind="participant")
        ctx.emit(events.reward_paid(job.id, r.round, addr, amount, "participant"))


def process_verifier_rewards(
    ctx: Ctx, providers: ProviderKeeper, job: jobs_pb2.Job, r: jobs_pb2.Round
) -> None:
    """Pay the verifier share: one unit per revealed vote (any panel) on the side of the final,
    decided outcome (a tombstoned verifier is not paid; its units stay in the escrow). An audit's
    seats are first-panel verifiers and paid as such: V is the owner's budget for verification,
    split over the units of the votes that did the work, so an unavailable vote (nothing
    re-executed) is paid nothing, whatever the outcome, and neither is an unevidenced one (a
    later panel's vote that did not re-execute its fresh segments, ``apply_evidence_checks``)."""
    majority_votes: list[tuple[bytes, int]] = []
    for p in r.participants:
        if p.challenged and p.outcome in DECIDED and p.verifiers:
            want_valid = p.outcome == jobs_pb2.OUTCOME_ACCEPTED
            majority_votes.extend(
                (v.address, 1)
                for v in p.verifiers
                if v.voted and not v.unavailable and not v.unevidenced and v.valid == want_valid
            )
    for addr, amount in compute_shares(job.verifier_reward_per_round, majority_votes):
        if providers.is_tombstoned(ctx.store, addr):
            continue
        keeper.pay(ctx.store, job, addr, amount)
        r.verifier_paid += amount
        r.payouts.add(address=addr, amount=amount, kind="verifier")
        ctx.emit(events.reward_paid(job.id, r.round, addr, amount, "verifier"))


def process_participant_penalties(ctx: Ctx, providers: ProviderKeeper, r: jobs_pb2.Round) -> None:
    """In address order: a missed commit is slashed (liveness fraction) and loses reputation; a
    missed reveal is punished exactly as fraud (fraud fraction, all of it burned: nobody proved
    anything, reputation 0, jailed): withholding a challenged segment is never cheaper than
    revealing a fake one. Fraud is slashed (fraud fraction, bounty to the verifiers who proved
    it), reputation 0, jailed. Accepted work that attested the quorum gains reputation only if a
    verifier panel checked it, scaled by its pay (incentives.compute_value_gain_bps); accepted
    work that did not attest the quorum loses as a missed commit; declined slots move nothing."""
    params = get_params(ctx.store)
    for p in r.participants:
        rep = providers.get_reputation(ctx.store, p.address)
        if p.outcome == jobs_pb2.OUTCOME_MISSED_COMMIT:
            _punish_missed_commit(ctx, providers, params, r, p, rep)
        elif p.outcome == jobs_pb2.OUTCOME_MISSED_REVEAL:
            _punish_missed_reveal(ctx, providers, params, r, p)
        elif p.outcome == jobs_pb2.OUTCOME_FRAUD:
            _punish_fraud(ctx, providers, params, r, p)
        else:
            _move_accepted_reputation(ctx, providers, params, r, p, rep)


def _punish_missed_commit(
    ctx: Ctx,
    providers: ProviderKeeper,
    params: jobs_pb2.JobsParams,
    r: jobs_pb2.Round,
    p: jobs_pb2.Participant,
    rep: int,
) -> None:
    """A drawn provider that did not commit: the liveness slash and the missed-commit loss."""
    reason = enum_name(jobs_pb2.Outcome, p.outcome)
    res = providers.slash(
        ctx,
        p.address,
        params.slash_fraction_liveness_bps,
        reason=reason,
        job_id=r.job_id,
        round_=r.round,
    )
    p.slashed = res.amount
    if res.amount:
        r.slashes.add(address=p.address, amount=res.amount, reason=reason, burned=res.burned)
    p.reputation_delta = _set_rep(
        ctx,
        providers,
        p.address,
        compute_loss(rep, params.reputation_loss_missed_commit_bps),
        reason,
    )


def _punish_missed_reveal(
    ctx: Ctx,
    providers: ProviderKeeper,
    params: jobs_pb2.JobsParams,
    r: jobs_pb2.Round,
    p: jobs_pb2.Participant,
) -> None:
    """A challenge left unopened: the fraud fraction, all burned (nobody proved anything),
    reputation 0, jailed."""
    _slash_to_zero_and_jail(ctx, providers, params, r, p, "missed_reveal")


def _punish_fraud(
    ctx: Ctx,
    providers: ProviderKeeper,
    params: jobs_pb2.JobsParams,
    r: jobs_pb2.Round,
    p: jobs_pb2.Participant,
) -> None:
    """Proven fraud: the fraud fraction, its bounty to the invalid voters that proved it (by
    stake; an unavailable vote proved nothing, an unevidenced one did not re-execute), reputation
    0, jailed."""
    provers = [
        (v.address, v.stake)
        for v in p.verifiers
        if v.voted
        and not v.valid
        and not v.unavailable
        and not v.unevidenced
        and not providers.is_tombstoned(ctx.store, v.address)
    ]
    _slash_to_zero_and_jail(ctx, providers, params, r, p, "fraud", params.fraud_bounty_bps, provers)


def _slash_to_zero_and_jail(
    ctx: Ctx,
    providers: ProviderKeeper,
    params: jobs_pb2.JobsParams,
    r: jobs_pb2.Round,
    p: jobs_pb2.Participant,
    reason: str,
    bounty_bps: int = 0,
    provers: Sequence[tuple[bytes, int]] = (),
) -> None:
    """The fraud fraction of ``p``'s bond (``bounty_bps`` of it split among ``provers`` by stake,
    the rest burned), recorded on the round, reputation 0, jailed: what fraud and a missed reveal
    cost alike."""
    res = providers.slash(
        ctx,
        p.address,
        params.slash_fraction_fraud_bps,
        reason=reason,
        job_id=r.job_id,
        round_=r.round,
        bounty_bps=bounty_bps,
        bounty_weights=provers,
    )
    p.slashed = res.amount
    r.slashes.add(address=p.address, amount=res.amount, reason=reason, burned=res.burned)
    for addr, amount in res.bounties:
        r.payouts.add(address=addr, amount=amount, kind="bounty")
        ctx.emit(events.reward_paid(r.job_id, r.round, addr, amount, "bounty"))
    p.reputation_delta = _set_rep(ctx, providers, p.address, 0, reason)
    providers.jail(ctx, p.address, reason)


def _move_accepted_reputation(
    ctx: Ctx,
    providers: ProviderKeeper,
    params: jobs_pb2.JobsParams,
    r: jobs_pb2.Round,
    p: jobs_pb2.Participant,
    rep: int,
) -> None:
    """The other outcomes: a paid attester verified by a panel (drawn against competition)
    gains, scaled by its pay; a quorumless or screened-out attester and a declined slot move
    nothing; accepted work that did not attest the quorum loses as a missed commit."""
    if is_quorumless_attester(r, p):
        return  # attested, no quorum: paid its slot, reputation unchanged
    if is_paid_attester(r, p):
        # verified by a panel, drawn against competition: the only work reputation grows from
        if p.challenged and p.verifiers and p.contested:
            gain = compute_value_gain_bps(
                params.reputation_gain_bps, p.reward, params.reputation_value_unit
            )
            p.reputation_delta = _set_rep(
                ctx, providers, p.address, compute_gain(rep, gain), "accepted"
            )
        return
    if p.outcome != jobs_pb2.OUTCOME_ACCEPTED or p.address in r.screened_out:
        return  # declined, undecided, rejected; or screened out of the aggregate: unchanged
    p.reputation_delta = _set_rep(
        ctx,
        providers,
        p.address,
        compute_loss(rep, params.reputation_loss_missed_commit_bps),
        "missed_attest",
    )


def compute_claimed_bounty(
    providers: ProviderKeeper, ctx: Ctx, p: jobs_pb2.Participant
) -> dict[bytes, int]:
    """What each invalid voter on ``p`` would have been paid as fraud bounty had its claim won:
    floor(fraud slash x bounty_bps) split by stake (rewards.compute_shares). An unavailable vote
    claims nothing (it is never a bounty winner: ``process_verifier_accountability``)."""
    params = get_params(ctx.store)
    prov = providers.get_provider(ctx.store, p.address)
    total = prov.bond + prov.unbonding if prov else 0
    fraud = min(total, ceil_div(total * params.slash_fraction_fraud_bps, BPS))
    bounty = fraud * params.fraud_bounty_bps // BPS
    return dict(
        compute_shares(
            bounty,
            [
                (v.address, v.stake)
                for v in p.verifiers
                if v.voted and not v.valid and not v.unavailable
            ],
        )
    )


def compute_silence_floor(
    p: jobs_pb2.Participant, reward_per_round: int, n_participants: int
) -> int:
    """Least a silent seat is slashed on a challenge its silence left ``undecided``: the target's
    slot (``reward_per_round / n_participants``, what the honest provider loses when its work is
    left undecided) split over the challenge's silent seats, + 1 uloco each, so that griefing by
    silence costs the griefers together more than it costs the honest provider (issue 31, 11:
    one silent verifier in a market with nobody left for an appeal cost itself the 1 % liveness
    slash for two honest providers' pay). ``compute_capped_floor`` caps it at the wrong-vote
    fraction of the verifier's bond: silence is never punished above a wrong vote. 0 for any
    other outcome (the liveness fraction alone)."""
    if p.outcome != jobs_pb2.OUTCOME_UNDECIDED or n_participants <= 0:
        return 0
    silent = sum(1 for v in p.verifiers if (not v.voted or v.unevidenced) and not v.unavailable)
    if silent == 0:
        return 0
    return ceil_div(reward_per_round // n_participants, silent) + 1


def compute_capped_floor(
    providers: ProviderKeeper, ctx: Ctx, address: bytes, floor: int, cap_bps: int
) -> int:
    """``floor`` at most ``cap_bps`` of the provider's bond + unbonding (rounded up)."""
    if not floor:
        return 0
    prov = providers.get_provider(ctx.store, address)
    total = prov.bond + prov.unbonding if prov else 0
    return min(floor, ceil_div(total * cap_bps, BPS))


def compute_verifier_paid(r: jobs_pb2.Round) -> dict[bytes, int]:
    """Verifier share paid to each address in the round (``process_verifier_rewards``)."""
    out: dict[bytes, int] = {}
    for x in r.payouts:
        if x.kind == "verifier":
            out[x.address] = out.get(x.address, 0) + x.amount
    return out


class SlashTerms(NamedTuple):
    """What a challenge's slashed seats are slashed against (``process_verifier_accountability``):
    the bounty's winners, each invalid voter's claimed bounty (accepted work), the silence
    floor."""

    winners: list[tuple[bytes, int]]
    claimed: dict[bytes, int]
    silence_floor: int


# how the finalize judges one seat (``compute_seat_judgement``)
SEAT_SKIP, SEAT_SILENT, SEAT_MAJORITY, SEAT_WRONG, SEAT_MINORITY = range(5)


def compute_seat_judgement(p: jobs_pb2.Participant, v: jobs_pb2.VerifierAssignment) -> int:
    """How seat ``v`` is judged against ``p``'s final outcome (``process_verifier_accountability``
    says what each costs or earns). An unavailable vote the verdict did not refute, and any seat
    of an undecided challenge but the silent, is skipped; silence is an unopened vote, an
    unavailable one the verdict accepted over, or an unevidenced one (a later panel's vote that
    did not re-execute a fresh segment, ``apply_evidence_checks``) on a verdict that does not
    slash it as a wrong vote; then the majority, the wrong side of a slashing verdict, and the
    minority of a rejection."""
    accepted = p.outcome == jobs_pb2.OUTCOME_ACCEPTED
    if v.unavailable and not accepted:
        return SEAT_SKIP  # not refuted (invalid prevailed, or nothing did): nothing either way
    if not v.voted or v.unavailable or (v.unevidenced and not accepted):
        return SEAT_SILENT
    if p.outcome not in DECIDED:
        return SEAT_SKIP
    if v.valid == accepted:
        return SEAT_MAJORITY
    if p.outcome in (jobs_pb2.OUTCOME_ACCEPTED, jobs_pb2.OUTCOME_FRAUD):
        return SEAT_WRONG
    return SEAT_MINORITY


def compute_winners(
    ctx: Ctx, providers: ProviderKeeper, p: jobs_pb2.Participant
) -> list[tuple[bytes, int]]:
    """(address, stake) of the seats on the side of ``p``'s outcome that share a wrong voter's
    slash bounty: opened, available, evidenced, not tombstoned."""
    want_valid = p.outcome == jobs_pb2.OUTCOME_ACCEPTED
    return [
        (v.address, v.stake)
        for v in p.verifiers
        if v.voted
        and not v.unavailable
        and not v.unevidenced
        and v.valid == want_valid
        and not providers.is_tombstoned(ctx.store, v.address)
    ]


def process_verifier_accountability(ctx: Ctx, providers: ProviderKeeper, r: jobs_pb2.Round) -> None:
    """In (target, panel, verifier) order, for every challenge that was revealed, each assigned
    verifier of either panel is judged against the final outcome (``compute_seat_judgement``):

    - silent (no commit, or a commit never opened): slashed ``slash_fraction_liveness_bps``
      (burned) and loses reputation; silence is never free;
    - unevidenced (a later panel's opened vote that did not re-execute one of the panel's fresh
      segments, ``apply_evidence_checks``): as silence (``verifier_unevidenced``), unless the
      final verdict accepts, which slashes its invalid vote as a wrong vote (more);
    - on the side of a decided outcome (accepted, fraud, rejected): gains reputation once a round
      (at its first such seat), scaled by its verifier pay of the round as a participant's gain is
      by its reward (``incentives.compute_value_gain_bps``: a job paying no verifier share, or a
      seat not paid, earns none);
    - against a final accepted or fraud verdict: slashed ``slash_fraction_wrong_vote_bps``, and an
      invalid voter on accepted work at least the bounty it claimed + 1 uloco (a false fraud claim
      always costs more than it could have won); ``fraud_bounty_bps`` of the slash goes to the
      winning voters by stake, the rest is burned; loses reputation;
    - against a rejected verdict (too few voters to prove anything): loses reputation only;
    - an undecided outcome moves only the silent;
    - an unavailable vote ("I could not fetch the revealed states", docs/threat-model.md
      *Unavailable votes*)
      counted as invalid in the tally: it gains nothing (no bounty, no pay: it proved nothing);
      when the final verdict accepts it is judged as silence (the liveness slash and
      reputation), never as a wrong vote; otherwise (fraud, rejected, undecided) it loses
      nothing, as an invalid vote there. A provider that serves every verifier but one can then
      cost that one the liveness slash, not 10 %."""
    job = keeper.get_job(ctx.store, r.job_id)
    job_reward = job.reward_per_round if job is not None else 0
    paid = compute_verifier_paid(r)
    gained: set[bytes] = set()
    for p in r.participants:
        if not p.challenged or p.outcome == jobs_pb2.OUTCOME_MISSED_REVEAL or not p.verifiers:
            continue  # nothing to verify
        terms = SlashTerms(
            compute_winners(ctx, providers, p),
            compute_claimed_bounty(providers, ctx, p)
            if p.outcome == jobs_pb2.OUTCOME_ACCEPTED
            else {},
            compute_silence_floor(p, job_reward, len(r.participants)),
        )
        for v in p.verifiers:
            kind = compute_seat_judgement(p, v)
            if kind == SEAT_MAJORITY and v.address not in gained:
                gained.add(v.address)
                _gain_verifier_reputation(ctx, providers, v.address, paid.get(v.address, 0))
            elif kind == SEAT_MINORITY:
                _lose_verifier_reputation(ctx, providers, v.address, "verifier_minority")
            elif kind in (SEAT_SILENT, SEAT_WRONG):
                _slash_seat(ctx, providers, r, v, kind, terms)


def _gain_verifier_reputation(ctx: Ctx, providers: ProviderKeeper, addr: bytes, paid: int) -> None:
    """A majority seat's reputation gain, scaled by its verifier pay of the round."""
    params = get_params(ctx.store)
    rep = providers.get_reputation(ctx.store, addr)
    gain = compute_value_gain_bps(params.reputation_gain_bps, paid, params.reputation_value_unit)
    _set_rep(ctx, providers, addr, compute_gain(rep, gain), "verifier_majority")


def _lose_verifier_reputation(
    ctx: Ctx, providers: ProviderKeeper, addr: bytes, reason: str, rep: int | None = None
) -> None:
    """A seat's reputation loss (``reputation_loss_verifier_bps`` of ``rep``, read now if not
    given: a slashed seat loses from what it had before the slash)."""
    params = get_params(ctx.store)
    rep = providers.get_reputation(ctx.store, addr) if rep is None else rep
    _set_rep(ctx, providers, addr, compute_loss(rep, params.reputation_loss_verifier_bps), reason)


def _slash_seat(
    ctx: Ctx,
    providers: ProviderKeeper,
    r: jobs_pb2.Round,
    v: jobs_pb2.VerifierAssignment,
    kind: int,
    terms: SlashTerms,
) -> None:
    """Slash a silent seat (liveness fraction; at least the silence floor, capped at the
    wrong-vote fraction, except an unavailable vote) or a wrong vote (wrong-vote fraction, an
    invalid vote on accepted work at least the bounty it claimed + 1, its bounty to the
    winners), record it, and take the seat's reputation loss."""
    params = get_params(ctx.store)
    rep = providers.get_reputation(ctx.store, v.address)
    if kind == SEAT_SILENT:
        reason = (
            "verifier_unavailable"
            if v.unavailable
            else "verifier_unevidenced"
            if v.voted
            else "verifier_silent"
        )
        floor = 0
        if not v.unavailable:
            floor = compute_capped_floor(
                providers, ctx, v.address, terms.silence_floor, params.slash_fraction_wrong_vote_bps
            )
        res = providers.slash(
            ctx,
            v.address,
            params.slash_fraction_liveness_bps,
            reason=reason,
            job_id=r.job_id,
            round_=r.round,
            min_amount=floor,
        )
    else:
        reason = "wrong_vote"
        res = providers.slash(
            ctx,
            v.address,
            params.slash_fraction_wrong_vote_bps,
            reason=reason,
            job_id=r.job_id,
            round_=r.round,
            bounty_bps=params.fraud_bounty_bps,
            bounty_weights=terms.winners,
            min_amount=terms.claimed[v.address] + 1 if v.address in terms.claimed else 0,
        )
    v.slashed = res.amount
    if res.amount:
        r.slashes.add(address=v.address, amount=res.amount, reason=reason, burned=res.burned)
    for addr, amount in res.bounties:
        r.payouts.add(address=addr, amount=amount, kind="bounty")
        ctx.emit(events.reward_paid(r.job_id, r.round, addr, amount, "bounty"))
    _lose_verifier_reputation(ctx, providers, v.address, reason, rep)


def process_measured_speed(ctx: Ctx, providers: ProviderKeeper, r: jobs_pb2.Round) -> None:
    """Each accepted commitment, in address order, is a speed sample of its provider
    (``capacity.compute_speed_sample``: its tokens over the time from the round's open block to
    the block that took it, header times) folded into the provider's measured figure
    (``providers.record_throughput``; README *Islands and measured speed*). Verified means a
    panel re-executed it and accepted it; an unverified sample (unchallenged, or no verifier
    existed) can only lower the figure. A commitment taken after a chain stall gives no sample.
    The SLA record keeps the round's sample."""
    if not r.open_time_ns:
        return
    samples: list[tuple[bytes, int]] = []
    max_gap_ns = get_params(ctx.store).max_block_gap_ns
    for p in r.participants:
        if p.outcome != jobs_pb2.OUTCOME_ACCEPTED or not p.commitment.time_ns:
            continue
        c = p.commitment
        if not is_chain_live(r.open_height, r.open_time_ns, c.height, c.time_ns, max_gap_ns):
            continue  # a chain stall is not the provider's time (capacity.is_chain_live)
        sample = compute_speed_sample(
            p.commitment.tokens_processed, r.open_time_ns, p.commitment.time_ns
        )
        verified = p.challenged and bool(p.verifiers)
        figure = providers.record_throughput(ctx.store, p.address, sample, verified)
        samples.append((p.address, sample))
        ctx.emit(events.speed_measured(r.job_id, r.round, p.address, sample, verified, figure))
    sla.record_speeds(ctx.store, samples, ctx.block.height)


def process_round_close(ctx: Ctx, job: jobs_pb2.Job, r: jobs_pb2.Round) -> None:
    """What was not paid returns to the job's escrow; the round is final and leaves the schedule.
    The job closes (refund) when its last round is final: completed when all its rounds ran,
    cancelled when it was cancelling and its in-flight rounds are done."""
    budget = job.reward_per_round + job.verifier_reward_per_round
    r.returned_to_escrow = budget - r.reward_paid - r.verifier_paid
    r.phase = jobs_pb2.PHASE_FINALIZED
    r.finalized_height = ctx.block.height
    _move_due(ctx, r, r.attest_end, None)
    keeper.set_round(ctx.store, r)
    job.rounds_finalized += 1
    n_acc = sum(1 for p in r.participants if p.outcome == jobs_pb2.OUTCOME_ACCEPTED)
    ctx.emit(
        events.round_finalized(
            job.id,
            r.round,
            n_acc,
            r.reward_paid,
            r.verifier_paid,
            r.returned_to_escrow,
            r.attested_model_hash,
        )
    )
    if job.status == jobs_pb2.JOB_STATUS_ACTIVE and job.rounds_finalized == job.rounds:
        keeper.close_job(ctx, job, jobs_pb2.JOB_STATUS_COMPLETED)
    elif job.status == jobs_pb2.JOB_STATUS_CANCELLING and job.rounds_finalized == job.rounds_opened:
        keeper.close_job(ctx, job, jobs_pb2.JOB_STATUS_CANCELLED)
    else:
        schedule_next_open(ctx, job)  # this round's model was the next round's missing input
        keeper.set_job(ctx.store, job)


def process_finalize(
    ctx: Ctx, providers: ProviderKeeper, job: jobs_pb2.Job, r: jobs_pb2.Round
) -> None:
    """ATTEST -> FINALIZED at ``attest_end``, in these steps (each a function below, in order;
    the order is consensus: it fixes the event order and who is tombstoned when paid)."""
    process_attestation(ctx, job, r)
    process_participant_rewards(ctx, providers, job, r)
    process_verifier_rewards(ctx, providers, job, r)
    process_participant_penalties(ctx, providers, r)
    process_verifier_accountability(ctx, providers, r)
    process_measured_speed(ctx, providers, r)
    sla.record_finalized(ctx.store, r, ctx.block.height)
    process_round_close(ctx, job, r)


# -- early close ----------------------------------------------------------------------------------

# The phases whose closing end-block draws from its own block's seed: the commit phase's
# (challenges, audits, the next round's draw), the first panel's vote-reveal (the appeal panel)
# and the attest phase's (its finalize can open the next round: ``schedule_next_open``, whose
# participants are drawn in that end-block).
SEEDED_PHASES = frozenset(
    {jobs_pb2.PHASE_COMMIT, jobs_pb2.PHASE_VOTE_REVEAL, jobs_pb2.PHASE_ATTEST}
)
# a panel's phases: (panel, True when it opens its votes)
PANEL_PHASES = {
    jobs_pb2.PHASE_VERDICT: (0, False),
    jobs_pb2.PHASE_VOTE_REVEAL: (0, True),
    jobs_pb2.PHASE_APPEAL: (1, False),
    jobs_pb2.PHASE_APPEAL_REVEAL: (1, True),
    jobs_pb2.PHASE_FINAL: (2, False),
    jobs_pb2.PHASE_FINAL_REVEAL: (2, True),
}


def is_phase_done(job: jobs_pb2.Job, r: jobs_pb2.Round) -> bool:
    """Every message the round's current phase waits for is in (README *Early close*):

    - commit: every participant committed or declined;
    - reveal: every challenged participant opened every challenged segment;
    - a panel's voting phase (verdict, appeal, final): every seat of that panel on a revealed
      challenge committed its vote;
    - a panel's opening phase: every committed vote of that panel is opened, and (vote-reveal,
      tolerance mode) every end due is opened;
    - attest: every accepted participant attested (not the ⅔ quorum: a slower honest attester
      would lose its pay and reputation to a close it could not see coming)."""
    ph = r.phase
    if ph == jobs_pb2.PHASE_COMMIT:
        return all(
            p.HasField("commitment") or p.outcome == jobs_pb2.OUTCOME_DECLINED
            for p in r.participants
        )
    if ph == jobs_pb2.PHASE_REVEAL:
        return all(p.HasField("reveal") for p in r.participants if p.challenged)
    if ph == jobs_pb2.PHASE_ATTEST:
        return all(
            p.attested_hash for p in r.participants if p.outcome == jobs_pb2.OUTCOME_ACCEPTED
        )
    if ph not in PANEL_PHASES:
        return False
    panel, opening = PANEL_PHASES[ph]
    for p in r.participants:
        if not (p.challenged and p.HasField("reveal")):
            continue
        for v in p.verifiers:
            if v.panel != panel:
                continue
            waiting = (v.vote_hash and not v.voted) if opening else not v.vote_hash
            if waiting:
                return False
        if opening and is_end_due(job, p) and is_end_withheld(job, p, panel):
            return False
    return True


def _window_chain(r: jobs_pb2.Round, spec: jobs_pb2.JobSpec) -> list[tuple[str, int]]:
    """The current phase's end field, then each later end field with its window's length: what
    an early close moves (each later window keeps its full length). Read off the phase table
    (``phases.NEXT_PHASE``, ``PHASE_WINDOW_FIELDS``): the order the round's windows were laid
    out in."""
    return [(PHASE_END_FIELD[r.phase], 0)] + [
        (PHASE_END_FIELD[ph], compute_window_blocks(spec, ph))
        for ph in compute_later_phases(r.phase)
    ]


def compute_close_height(r: jobs_pb2.Round, height: int, entering: bool) -> int:
    """The height whose end-block ends a phase found done at ``height``: the next height when
    the phase's transition draws from its block's seed (``SEEDED_PHASES``): the messages it judges
    are all in by ``height`` and the seed of ``height + 1`` is its beacon over the votes on
    ``height``, unknown when they were chosen, exactly as a window's last block and its deadline
    block under fixed windows. The next height too when the phase was entered done in an
    end-block (one transition per round per block). Otherwise this height's own end-block. The
    reveal phase draws too when a challenge waits for carried seats (``process_carried_seats``):
    the provider whose reveal is the last one would otherwise choose, by timing it, the block
    whose seed draws its own panel."""
    seeded = r.phase in SEEDED_PHASES or (
        r.phase == jobs_pb2.PHASE_REVEAL
        and any(p.challenged and not p.verifiers for p in r.participants)
    )
    return height + 1 if entering or seeded else height


def close_if_done(ctx: Ctx, job: jobs_pb2.Job, r: jobs_pb2.Round, *, entering: bool) -> bool:
    """End the round's current phase early when ``is_phase_done``: at ``compute_close_height``
    if that is before its window's end (windows stay upper bounds); the later windows move with
    it, each keeping its length. ``entering``: called from the end-block that entered the phase
    (else after a message of this block). True when it moved the schedule (``r`` is stored)."""
    if r.phase not in TRANSITIONS or not is_phase_done(job, r):
        return False
    chain = _window_chain(r, job.spec)
    field = chain[0][0]
    end = getattr(r, field)
    at = compute_close_height(r, ctx.block.height, entering)
    if at >= end:
        return False
    h = at
    for name, blocks in chain:
        h += blocks
        setattr(r, name, h)
    _move_due(ctx, r, end, at)
    keeper.set_round(ctx.store, r)
    ctx.emit(
        events.round_closed_early(job.id, r.round, enum_name(jobs_pb2.Phase, r.phase), at, end)
    )
    return True


def close_after_message(ctx: Ctx, job_id: int, round_: int) -> None:
    """After a round message was executed (jobs/module.py routes every round message through
    here): close its round's phase if that message was the last one it waited for."""
    r = keeper.get_round(ctx.store, job_id, round_)
    job = keeper.get_job(ctx.store, job_id)
    if r is not None and job is not None:
        close_if_done(ctx, job, r, entering=False)


# -- end block ------------------------------------------------------------------------------------

TRANSITIONS: dict[int, Callable[[Ctx, ProviderKeeper, jobs_pb2.Job, jobs_pb2.Round], None]] = {
    jobs_pb2.PHASE_COMMIT: process_challenge,
    jobs_pb2.PHASE_REVEAL: process_reveal_end,
    jobs_pb2.PHASE_VERDICT: process_verdict_end,
    jobs_pb2.PHASE_VOTE_REVEAL: process_vote_reveal_end,
    jobs_pb2.PHASE_APPEAL: process_appeal_end,
    jobs_pb2.PHASE_APPEAL_REVEAL: process_appeal_reveal_end,
    jobs_pb2.PHASE_FINAL: process_final_end,
    jobs_pb2.PHASE_FINAL_REVEAL: process_final_reveal_end,
    jobs_pb2.PHASE_ATTEST: process_finalize,
}


def process_rounds(ctx: Ctx, providers: ProviderKeeper) -> None:
    """end_block: run every round transition due at this height (in (job, round) order), then
    open the rounds due at this height (in job order)."""
    h = ctx.block.height
    due = [k for k, _ in ctx.store.iterate(ROUND_DUE_PREFIX, ROUND_DUE_PREFIX + u64_key(h + 1))]
    for key in due:
        at, job_id, rn = parse_round_due_key(key)
        r = keeper.get_round(ctx.store, job_id, rn)
        job = keeper.get_job(ctx.store, job_id)
        if r is None or job is None or r.phase not in TRANSITIONS:
            raise InvariantBroken(
                f"round schedule points at a missing or finalized round {job_id}/{rn}"
            )
        field, fn = PHASE_END_FIELD[r.phase], TRANSITIONS[r.phase]
        if at != h or getattr(r, field) != h:
            raise InvariantBroken(f"round {job_id}/{rn} transition due at {at} ran at {h}")
        fn(ctx, providers, job, r)
        if r.phase != jobs_pb2.PHASE_FINALIZED:
            close_if_done(ctx, job, r, entering=True)
    opens = [k for k, _ in ctx.store.iterate(OPEN_DUE_PREFIX, OPEN_DUE_PREFIX + u64_key(h + 1))]
    for key in opens:
        at, job_id = parse_open_due_key(key)
        ctx.store.delete(key)
        job = keeper.get_job(ctx.store, job_id)
        if (
            job is None
            or job.status != jobs_pb2.JOB_STATUS_ACTIVE
            or job.rounds_opened >= job.rounds
        ):
            raise InvariantBroken(f"open schedule points at job {job_id} that cannot open a round")
        if at != h:
            raise InvariantBroken(f"job {job_id} open due at an earlier height ran at {h}")
        process_round_open(ctx, providers, job)


__all__ = ["open_due_key", "process_rounds"]
