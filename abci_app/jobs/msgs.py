"""Job and round messages: validation and execution. Each raises a jobs error (500..599), a
providers/bank error or a tx error; a raise changes nothing (the tx's cache is discarded)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from abci_app.codec.address import check_address
from abci_app.context import Ctx
from abci_app.encoding import MAX_U64
from abci_app.jobs import events, keeper
from abci_app.jobs.errors import (
    ErrBadEvidence,
    ErrBadProbe,
    ErrBadProof,
    ErrBadTraceList,
    ErrCannotDecline,
    ErrCopiedCommitment,
    ErrDuplicate,
    ErrInvalidCommitment,
    ErrInvalidHash,
    ErrInvalidJobSpec,
    ErrInvalidLocation,
    ErrInvalidQuality,
    ErrInvalidReward,
    ErrInvalidRounds,
    ErrJobNotActive,
    ErrJobNotFound,
    ErrNotAttester,
    ErrNotChallenged,
    ErrNotRevealed,
    ErrNotSelected,
    ErrNotVerifier,
    ErrRoundNotFound,
    ErrUnauthorized,
    ErrUnboundCommitment,
    ErrVoteMismatch,
    ErrWrongBaseModel,
    ErrWrongPhase,
    ErrWrongSegment,
)
from abci_app.jobs.incentives import (
    UNAVAILABLE_EVIDENCE,
    compute_blind_vote_hash,
    compute_evidence,
    compute_fresh_segments,
    compute_masked_entries,
    compute_panel_reveals,
    compute_panel_segments,
    compute_vote_hash,
    is_reached_valid,
    is_run_start,
)
from abci_app.jobs.params import get_params
from abci_app.jobs.policy import PolicyError, parse_policy
from abci_app.jobs.probe import (
    PROBE_DIM,
    check_probe,
    compute_probe_evidence,
    encode_probe,
)
from abci_app.jobs.rounds import compute_n_segments
from abci_app.merkle import (
    BINDING_INDEX,
    binding_leaf,
    bound_trace_leaves,
    entry_leaf,
    hash_leaf,
    merkle_root_of_leaf_hashes,
    n_trace_leaves,
    n_update_leaves,
    verify_leaf_hash_proof,
    verify_merkle_proof,
)
from abci_app.pb import enum_name, jobs_pb2
from abci_app.reputation.rules import MAX_REPUTATION
from abci_app.validation import is_http_url

_STACK = re.compile(r"^[ -~]*\Z")  # \Z, not $: no trailing newline
MAX_STACK_LEN = 128
MAX_TOLERANCE_PPM = 1_000_000
MAX_MODEL_DIM = 1 << 20
MAX_LOSS_MNATS = 10**9
MAX_QUALITY = 10_000
MAX_BLOB_SOURCES = 8


# The first opening of a challenge carries the whole trace list (32 bytes an entry, H/k + 1
# entries) in one tx of at most MAX_TX_BYTES (64 KiB), and a vote's opening one reached state
# per opened segment (<= H/k, 34 bytes each as a repeated field): 1,800 entries (57.6 KB of
# list; 61.2 KB of reached states) leave room for the proofs, the locations, a memo and the
# signed envelope (both largest txs are built in tests/jobs/test_msg_create_job.py). A job with
# more could never be revealed: every challenged provider would miss its reveal and be slashed
# as for fraud, or every verifier's vote stay unopened and be slashed as silent.
MAX_TRACE_LIST_ENTRIES = 1_800
# Tolerance mode: a vote's opening carries PROBE_DIM (32) integers per opened segment, up to 9
# bytes each as packed sint64 (|x| < 2^62: 288 bytes a segment): min(segments_per_challenge, H/k)
# is capped so that the largest opening fits in one tx with room to spare (52.4 KB at the cap,
# built in tests/jobs/test_msg_create_job.py).
MAX_PROBE_SEGMENTS = 180


# Every window of a job spans at least this many blocks: with 1, the proposer of that one block
# alone could leave an honest provider's reveal (or commit, vote, end opening, attestation) out
# and have it slashed (a missed reveal costs what fraud costs) at no cost to itself; with 2 it
# needs the proposers of two consecutive heights (docs/threat-model.md *Why cheating does not
# pay*, 11).
MIN_WINDOW_BLOCKS = 2
# JobSpec.compute_s_per_round: a week of training per round at most (a round's windows cannot be
# longer than params.max_window_blocks anyway)
MAX_COMPUTE_S_PER_ROUND = 7 * 24 * 3600
# A commitment or a decline lands in block D - 1 at the latest (D = commit_deadline; see
# check_before_challenge_seed), so commit_blocks - 1 blocks take them: at least MIN_WINDOW_BLOCKS.
MIN_COMMIT_BLOCKS = MIN_WINDOW_BLOCKS + 1
# The first panel's openings (MsgRevealVote, MsgOpenEnd) land by vote_reveal_end - 1 (block Vr's
# seed draws the panel audits and the appeal panel: check_before_audit_seed), so the vote windows
# take verdict_blocks - 1 blocks of openings: at least MIN_WINDOW_BLOCKS. Jobs created before this
# floor (verdict_blocks 2) keep openings up to Vr (compute_last_opening_height).
MIN_SEALED_VOTE_REVEAL_BLOCKS = MIN_WINDOW_BLOCKS + 1
MIN_VERDICT_BLOCKS = MIN_SEALED_VOTE_REVEAL_BLOCKS
_MIN_BLOCKS = {
    "commit_blocks": MIN_COMMIT_BLOCKS,
    "reveal_blocks": MIN_WINDOW_BLOCKS,
    "verdict_blocks": MIN_VERDICT_BLOCKS,
    "attest_blocks": MIN_WINDOW_BLOCKS,
}
_WHY_LONGER = {
    "commit_blocks": "; commitments land up to the block before the commit deadline",
    "verdict_blocks": "; the first panel's openings land up to the block before the vote-reveal"
    " end, whose seed draws the audits",
}


def _hash32(b: bytes, what: str) -> bytes:
    if len(b) != 32:
        raise ErrInvalidHash(f"{what} must be 32 bytes (sha256), got {len(b)}")
    return b


def validate_spec(spec: jobs_pb2.JobSpec, params: jobs_pb2.JobsParams) -> None:
    """A job spec the chain can run: its model and trace, the shape of its rounds, its challenge
    settings and determinism mode, its blob sources (517 naming the first rule broken)."""
    _check_model_and_trace(spec, params)
    _check_round_shape(spec, params)
    _check_challenge_settings(spec, params)
    validate_blob_sources(spec.blob_sources)


def _bad(why: str) -> ErrInvalidJobSpec:
    return ErrInvalidJobSpec(f"invalid job spec: {why}")


def _check_model_and_trace(spec: jobs_pb2.JobSpec, params: jobs_pb2.JobsParams) -> None:
    """The model config, the pinned inputs, H and k with a trace a reveal can carry, and the
    compression policy in the one grammar the trainer runs."""
    m = spec.model
    for f in ("n_layers", "n_heads", "d_model", "context_len", "vocab_size"):
        if not 1 <= getattr(m, f) <= MAX_MODEL_DIM:
            raise _bad(f"model.{f} must be 1..{MAX_MODEL_DIM}")
    if m.d_model % m.n_heads:
        raise _bad("model.d_model must be a multiple of model.n_heads")
    if len(spec.initial_model_hash) != 32:
        raise _bad("initial_model_hash must be 32 bytes")
    if len(spec.dataset_id) != 32:
        raise _bad("dataset_id must be the 32-byte sha256 of the data")
    if spec.inner_steps == 0 or spec.trace_interval == 0 or spec.inner_steps % spec.trace_interval:
        raise _bad("inner_steps H and trace_interval k must be > 0 with H % k == 0")
    if compute_n_segments(spec) + 1 > params.max_trace_entries:
        raise _bad(f"H/k + 1 trace entries exceed max_trace_entries {params.max_trace_entries}")
    if compute_n_segments(spec) + 1 > MAX_TRACE_LIST_ENTRIES:
        raise _bad(
            f"H/k + 1 = {compute_n_segments(spec) + 1} trace entries: a reveal carries the trace "
            f"list in one tx, which holds at most {MAX_TRACE_LIST_ENTRIES} (raise trace_interval)"
        )
    try:  # the one grammar the trainer runs (abci_app/jobs/policy.py): canonical spellings only
        parse_policy(spec.compression_policy)
    except PolicyError as err:
        raise _bad(f"compression_policy: {err}") from None
    if spec.compression_params:
        raise _bad(
            "compression_params must be empty: every parameter of a policy is written in "
            "compression_policy (e.g. topk:0.016+int4)"
        )


def _check_round_shape(spec: jobs_pb2.JobSpec, params: jobs_pb2.JobsParams) -> None:
    """Participants, shards, tokens per step, the four windows, the reputation floor and the
    stated compute per round."""
    if not 1 <= spec.participants_per_round <= params.max_participants:
        raise _bad(f"participants_per_round must be 1..{params.max_participants}")
    if not spec.participants_per_round <= spec.num_shards <= params.max_shards:
        raise _bad(
            f"num_shards must be participants_per_round..{params.max_shards} (max_shards: the "
            "open shuffles them)"
        )
    if spec.tokens_per_step == 0 or spec.tokens_per_step * spec.inner_steps > MAX_U64:
        raise _bad("tokens_per_step must be > 0 and H * tokens_per_step < 2^64")
    for f, lo in _MIN_BLOCKS.items():
        if not lo <= getattr(spec, f) <= params.max_window_blocks:
            raise _bad(
                f"{f} must be {lo}..{params.max_window_blocks} (a 1-block window lets its one "
                f"proposer censor a duty into a slash{_WHY_LONGER.get(f, '')})"
            )
    if spec.min_reputation > MAX_REPUTATION:
        raise _bad("min_reputation must be 0..10000")
    if spec.compute_s_per_round > MAX_COMPUTE_S_PER_ROUND:
        raise _bad(
            f"compute_s_per_round must be 0..{MAX_COMPUTE_S_PER_ROUND} (seconds of training per"
            " round; 0: not stated)"
        )


def _check_challenge_settings(spec: jobs_pb2.JobSpec, params: jobs_pb2.JobsParams) -> None:
    """Challenge rate, verifiers and segments per challenge, the determinism mode with its
    tolerance or stack."""
    if not params.min_challenge_bps <= spec.challenge_bps <= 10_000:
        raise _bad(f"challenge_bps must be {params.min_challenge_bps}..10000")
    if not 1 <= spec.verifiers_per_challenge <= params.max_verifiers:
        raise _bad(f"verifiers_per_challenge must be 1..{params.max_verifiers}")
    if (
        not max(params.min_segments_per_challenge, 1)
        <= spec.segments_per_challenge
        <= params.max_trace_entries
    ):
        raise _bad(
            f"segments_per_challenge must be {max(params.min_segments_per_challenge, 1)}.."
            f"{params.max_trace_entries} (min(s, H/k) segments are re-executed per challenge)"
        )
    if spec.determinism_mode == jobs_pb2.DETERMINISM_MODE_EXACT:
        if spec.tolerance_ppm != 0:
            raise _bad("tolerance_ppm must be 0 in exact mode")
        if not spec.stack:
            raise _bad(
                "exact mode needs the stack it holds on (stack = trainer.determinism.stack_id())"
            )
    elif spec.determinism_mode == jobs_pb2.DETERMINISM_MODE_TOLERANCE:
        if not 1 <= spec.tolerance_ppm <= MAX_TOLERANCE_PPM:
            raise _bad(f"tolerance mode needs tolerance_ppm 1..{MAX_TOLERANCE_PPM}")
        if min(spec.segments_per_challenge, compute_n_segments(spec)) > MAX_PROBE_SEGMENTS:
            raise _bad(
                f"tolerance mode opens at most {MAX_PROBE_SEGMENTS} segments per challenge: a"
                f" vote's opening carries {PROBE_DIM} integers per opened segment in one tx"
                " (lower segments_per_challenge)"
            )
    else:
        raise _bad("determinism_mode must be exact or tolerance")
    if len(spec.stack) > MAX_STACK_LEN or not _STACK.match(spec.stack):
        raise _bad(f"stack must be at most {MAX_STACK_LEN} printable ASCII characters")


def validate_blob_sources(sources: Sequence[str]) -> None:
    """At most MAX_BLOB_SOURCES unique http(s) URLs (where the initial model and data are
    served)."""
    if len(sources) > MAX_BLOB_SOURCES:
        raise ErrInvalidLocation(
            f"blob_sources: at most {MAX_BLOB_SOURCES} URLs, got {len(sources)}"
        )
    if len(set(sources)) != len(sources):
        raise ErrInvalidLocation("blob_sources: each URL at most once")
    for url in sources:
        if not is_http_url(url):
            raise ErrInvalidLocation(
                f"blob_sources: {url[:80]!r} is not an http(s) URL of at most 256 bytes"
            )


def process_msg_create_job(ctx: Ctx, signer: bytes, msg: jobs_pb2.MsgCreateJob) -> None:
    params = get_params(ctx.store)
    if not msg.HasField("spec") or not msg.spec.HasField("model"):
        raise ErrInvalidJobSpec("invalid job spec: spec and spec.model are required")
    validate_spec(msg.spec, params)
    if not 1 <= msg.rounds <= params.max_rounds:
        raise ErrInvalidRounds(f"rounds must be 1..{params.max_rounds}, got {msg.rounds}")
    slot_floor = msg.spec.participants_per_round * params.min_slot_reward
    if msg.reward_per_round == 0 or msg.reward_per_round < slot_floor:
        raise ErrInvalidReward(
            "reward_per_round must be > 0 and >= participants_per_round x min_slot_reward = "
            f"{slot_floor} uloco (a round slot pays at least min_slot_reward)"
        )
    total = msg.rounds * (msg.reward_per_round + msg.verifier_reward_per_round)
    if total > MAX_U64:
        raise ErrInvalidReward(
            f"escrow rounds x (reward + verifier reward) = {total} exceeds 2^64-1 uloco"
        )
    job = jobs_pb2.Job(
        id=keeper.next_job_id(ctx.store),
        owner=signer,
        spec=msg.spec,
        rounds=msg.rounds,
        reward_per_round=msg.reward_per_round,
        verifier_reward_per_round=msg.verifier_reward_per_round,
        status=jobs_pb2.JOB_STATUS_ACTIVE,
        current_model_hash=msg.spec.initial_model_hash,
        created_height=ctx.block.height,
        creation_fee=params.job_creation_fee,
    )
    keeper.burn_creation_fee(ctx.store, job)  # bank: ErrInsufficientFunds (101)
    keeper.fund(ctx.store, job, signer, total)
    keeper.schedule_open(ctx.store, job, ctx.block.height + 1)
    keeper.set_job(ctx.store, job)
    ctx.emit(events.job_created(job.id, signer, msg.rounds, total, job.creation_fee))


def process_msg_cancel_job(ctx: Ctx, signer: bytes, msg: jobs_pb2.MsgCancelJob) -> None:
    """No new round opens; the rounds in flight finish and pay; when the last one is final the
    unspent escrow goes back to the owner (at once if none is in flight)."""
    job = keeper.get_job(ctx.store, msg.job_id)
    if job is None:
        raise ErrJobNotFound(f"job {msg.job_id} does not exist")
    if job.owner != signer:
        raise ErrUnauthorized("only the job's owner can cancel it")
    if job.status != jobs_pb2.JOB_STATUS_ACTIVE:
        raise ErrJobNotActive(f"job {msg.job_id} is not active")
    job.cancel_height = ctx.block.height
    keeper.unschedule_open(ctx.store, job)
    ctx.emit(events.job_cancel_requested(job.id, signer))
    if job.rounds_finalized == job.rounds_opened:
        keeper.close_job(ctx, job, jobs_pb2.JOB_STATUS_CANCELLED)
    else:
        job.status = jobs_pb2.JOB_STATUS_CANCELLING
        keeper.set_job(ctx.store, job)


def _load(
    ctx: Ctx, job_id: int, round_: int, phase: int, signer: bytes
) -> tuple[jobs_pb2.Job, jobs_pb2.Round, jobs_pb2.Participant | None]:
    job = keeper.get_job(ctx.store, job_id)
    if job is None:
        raise ErrJobNotFound(f"job {job_id} does not exist")
    r = keeper.get_round(ctx.store, job_id, round_)
    if r is None:
        raise ErrRoundNotFound(f"job {job_id} has no round {round_} (yet)")
    if r.phase != phase:
        raise ErrWrongPhase(
            f"round {job_id}/{round_} is in phase {enum_name(jobs_pb2.Phase, r.phase)}, this "
            f"message needs {enum_name(jobs_pb2.Phase, phase)} (commit until {r.commit_deadline}, "
            f"reveal until {r.reveal_end}, verdicts until {r.verdict_end}, attest until "
            f"{r.attest_end})"
        )
    me = next((p for p in r.participants if p.address == signer), None)
    return job, r, me


def check_before_challenge_seed(ctx: Ctx, r: jobs_pb2.Round, what: str) -> None:
    """A commitment or a decline must land before the block whose seed draws the round's
    challenges: at height D - 1 at the latest (D = ``commit_deadline``). Block D's seed is its
    beacon, built from the vote extensions over D - 1 (abci_app/beacon.py): public once D - 1 is
    precommitted, before D's txs are fixed. A message landing in D could be chosen knowing the
    draw: commit garbage when unchallenged, decline for free when challenged."""
    if ctx.block.height >= r.commit_deadline:
        raise ErrWrongPhase(
            f"round {r.job_id}/{r.round}: {what} is accepted up to height "
            f"{r.commit_deadline - 1}, the block before the commit deadline {r.commit_deadline}:"
            f" the seed of block {r.commit_deadline} (its beacon, known once block "
            f"{r.commit_deadline - 1} is precommitted) draws the round's challenges"
        )


def compute_last_opening_height(job: jobs_pb2.Job, r: jobs_pb2.Round) -> int:
    """The last height that takes the first panel's openings (MsgRevealVote of panel 0,
    MsgOpenEnd): Vr - 1 (Vr = ``vote_reveal_end``) when ``verdict_blocks`` >=
    MIN_SEALED_VOTE_REVEAL_BLOCKS (every job created since MIN_VERDICT_BLOCKS), else Vr (a job
    with 2-block windows, created before that floor: closing at Vr - 1 would
    leave its openings one block, which that block's proposer alone could censor into a missed
    reveal, and leave a tolerance-mode verifier no block after the ends' opening)."""
    if job.spec.verdict_blocks >= MIN_SEALED_VOTE_REVEAL_BLOCKS:
        return r.vote_reveal_end - 1
    return r.vote_reveal_end


def check_before_audit_seed(ctx: Ctx, job: jobs_pb2.Job, r: jobs_pb2.Round, what: str) -> None:
    """The first panel's openings must land before the block whose seed draws the appeal panel
    (block Vr = ``vote_reveal_end``, ``rounds.process_vote_reveal_end``): Vr's seed is its
    beacon over Vr - 1's vote extensions, public before Vr's txs are fixed, so an opening (or an
    end left unopened) chosen in Vr could be chosen knowing who would judge a dispute. Up to
    ``compute_last_opening_height``."""
    last = compute_last_opening_height(job, r)
    if ctx.block.height > last:
        raise ErrWrongPhase(
            f"round {r.job_id}/{r.round}: {what} is accepted up to height {last}, the block "
            f"before the vote-reveal window's last block {r.vote_reveal_end}: the seed of block "
            f"{r.vote_reveal_end} (known once block {last} is precommitted) draws the appeal "
            "panel"
        )


def process_msg_submit_update(ctx: Ctx, signer: bytes, msg: jobs_pb2.MsgSubmitUpdate) -> None:
    params = get_params(ctx.store)
    job, r, me = _load(ctx, msg.job_id, msg.round, jobs_pb2.PHASE_COMMIT, signer)
    check_before_challenge_seed(ctx, r, "MsgSubmitUpdate")
    if me is None:
        raise ErrNotSelected(f"signer was not drawn for round {msg.job_id}/{msg.round}")
    if me.HasField("commitment"):
        raise ErrDuplicate("this participant already submitted its update for the round")
    if msg.base_model_hash != r.base_model_hash:
        raise ErrWrongBaseModel(
            f"base_model_hash must be the round's base model {r.base_model_hash.hex()}"
        )
    _hash32(msg.update_root, "update_root")
    _hash32(msg.trace_root, "trace_root")
    if not 1 <= msg.payload_size <= params.max_payload_bytes:
        raise ErrInvalidCommitment(f"payload_size must be 1..{params.max_payload_bytes}")
    cap = job.spec.inner_steps * job.spec.tokens_per_step
    if not 1 <= msg.tokens_processed <= cap:
        raise ErrInvalidCommitment(f"tokens_processed must be 1..H x tokens_per_step = {cap}")
    if msg.loss_before_mnats > MAX_LOSS_MNATS or msg.loss_after_mnats > MAX_LOSS_MNATS:
        raise ErrInvalidCommitment(f"losses must be <= {MAX_LOSS_MNATS} milli-nats")
    if not is_http_url(msg.blob_location):
        raise ErrInvalidLocation("blob_location must be an http(s) URL of <= 256 bytes")
    check_probe_root(job, msg)
    check_bound(job, r, signer, msg)
    check_not_copied(r, signer, msg.update_root, msg.trace_root)
    me.commitment.CopyFrom(
        jobs_pb2.Commitment(
            base_model_hash=msg.base_model_hash,
            update_root=msg.update_root,
            payload_size=msg.payload_size,
            trace_root=msg.trace_root,
            tokens_processed=msg.tokens_processed,
            loss_before_mnats=msg.loss_before_mnats,
            loss_after_mnats=msg.loss_after_mnats,
            blob_location=msg.blob_location,
            height=ctx.block.height,
            probe_root=msg.probe_root,
            time_ns=ctx.block.time_ns,
        )
    )
    keeper.set_round(ctx.store, r)
    ctx.emit(events.update_submitted(job.id, r.round, signer, msg.update_root, msg.trace_root))


def compute_trace_leaves(spec: jobs_pb2.JobSpec) -> int:
    """Leaves of a job's bound trace root: abci_app.merkle.n_trace_leaves of the H/k + 1 states."""
    return n_trace_leaves(compute_n_segments(spec) + 1)


def is_tolerance(job: jobs_pb2.Job) -> bool:
    return job.spec.determinism_mode == jobs_pb2.DETERMINISM_MODE_TOLERANCE


def check_probe_root(job: jobs_pb2.Job, msg: jobs_pb2.MsgSubmitUpdate) -> None:
    """Tolerance mode: ``probe_root`` (32 bytes) commits to every trace entry's probe before any
    challenge exists (abci_app/jobs/probe.py); exact mode: it and its proof are empty."""
    if is_tolerance(job):
        if len(msg.probe_root) != 32:
            raise ErrBadProbe(
                "tolerance mode: probe_root (32 bytes) must commit to the probe of every trace"
                " entry (trainer.probe / trainer.commit.probe_root; docs/threat-model.md *Evidence"
                " only re-execution yields*)"
            )
    elif msg.probe_root or msg.probe_binding_proof:
        raise ErrBadProbe("probe_root is for tolerance-mode jobs; leave it empty in exact mode")


def check_bound(
    job: jobs_pb2.Job, r: jobs_pb2.Round, signer: bytes, msg: jobs_pb2.MsgSubmitUpdate
) -> None:
    """Every root must have the signer's binding leaf as leaf 0 (abci_app.merkle.binding_leaf):
    a root copied from another provider's commitment cannot pass, whoever lands first. The probe
    root (tolerance mode) has the trace's layout: H/k + 2 leaves."""
    n_trace = compute_trace_leaves(job.spec)
    roots = [
        (b"update", msg.update_root, n_update_leaves(msg.payload_size), msg.update_binding_proof),
        (b"trace", msg.trace_root, n_trace, msg.trace_binding_proof),
    ]
    if is_tolerance(job):
        roots.append((b"probe", msg.probe_root, n_trace, msg.probe_binding_proof))
    for kind, root, n, proof in roots:
        leaf = binding_leaf(kind, signer, job.id, r.round, msg.base_model_hash)
        if not verify_merkle_proof(root, leaf, BINDING_INDEX, n, list(proof)):
            name = kind.decode()
            raise ErrUnboundCommitment(
                f"{name}_root is not bound to the signer: {name}_binding_proof must prove leaf 0 ="
                f' binding_leaf(b"{name}", signer, job {job.id}, round {r.round}, base_model_hash)'
                f" of {n} leaves; build the root over your own binding leaf (trainer.commit /"
                " loconet tx round submit-update)"
            )


def check_not_copied(
    r: jobs_pb2.Round, signer: bytes, update_root: bytes, trace_root: bytes
) -> None:
    """Copied work is refused: neither root may equal a root (update or trace, either way round)
    already committed by another participant of the round. Honest participants train distinct
    shards, so their roots never collide; the first commitment in block order keeps a root."""
    for q in r.participants:  # address order
        if q.address == signer or not q.HasField("commitment"):
            continue
        taken = (q.commitment.update_root, q.commitment.trace_root)
        if update_root in taken or trace_root in taken:
            raise ErrCopiedCommitment(
                "update_root or trace_root is already committed by another participant of this "
                "round: commit to your own work (roots must be provider-specific)"
            )


def process_msg_reveal_segment(ctx: Ctx, signer: bytes, msg: jobs_pb2.MsgRevealSegment) -> None:
    """Opens one of the participant's challenged segments (``Participant.segments``; one message
    per segment, any order, several may share a tx); the reveal is complete (``reveal`` set) when
    all are open. The start and end states of the segment must be trace entries ``segment`` and
    ``segment + 1`` of the committed trace root, i.e. leaves ``entry_leaf(segment)`` and
    ``entry_leaf(segment + 1)`` of the bound layout (abci_app.merkle): two Merkle proofs checked
    here with abci_app.merkle.verify_merkle_proof (leaf data = the 32-byte state hash). The end
    is opened by its leaf hash only (``end_leaf_hash``, checked with verify_leaf_hash_proof), in
    both modes: its state hash (and, in tolerance mode, its probe) stays secret until the first
    panel has committed its votes, so only re-execution yields a valid vote's evidence
    (docs/threat-model.md *Evidence only re-execution yields*; tolerance mode opens it later with
    MsgOpenEnd). So is the start of a segment whose predecessor is challenged too (it is that
    segment's end: ``start_leaf_hash``, start_state_hash and start_location empty, 507 otherwise):
    only the start of each run of adjacent challenged segments is public
    (``incentives.is_run_start``), and a verifier re-executes each run through."""
    panel = msg.panel
    if panel not in REVEAL_PHASES:
        raise ErrWrongSegment(f"panel must be 0 (first), 1 (appeal) or 2 (final), not {panel}")
    job, r, found = _load(ctx, msg.job_id, msg.round, REVEAL_PHASES[panel], signer)
    me, own = _check_reveal_target(found, msg)
    # the segments the panel judges: a fresh segment right after an opened one continues its run;
    # only the start of a run of adjacent challenged segments is public, any other start is the
    # previous segment's secret end, opened as its leaf hash like that end (docs/threat-model.md
    # *Evidence only re-execution yields*)
    run_start = is_run_start(msg.segment, compute_panel_segments(me, panel))
    _check_opening_forms(msg, run_start)
    _check_opening_proofs(job.spec, me.commitment.trace_root, msg, run_start)
    if run_start and not is_http_url(msg.start_location):
        raise ErrInvalidLocation("start_location must be an http(s) URL of <= 256 bytes")
    _hash32(msg.trace_list_hash, "trace_list_hash")
    if panel == 0:
        check_trace_list(job, r, signer, me, msg)
    elif msg.trace_list or msg.trace_list_hash != me.reveals[0].trace_list_hash:
        raise ErrBadTraceList(
            "a fresh segment names the trace list the first opening proved"
            f" ({me.reveals[0].trace_list_hash.hex()}) and carries no list"
        )
    opening = jobs_pb2.Reveal(
        start_state_hash=msg.start_state_hash,
        end_state_hash=msg.end_state_hash,
        start_location=msg.start_location,
        end_location=msg.end_location,
        height=ctx.block.height,
        segment=msg.segment,
        trace_list_hash=msg.trace_list_hash,
        end_leaf_hash=msg.end_leaf_hash,
        start_leaf_hash=msg.start_leaf_hash,
        panel=panel,
    )
    me.reveals.append(opening)
    if panel == 0 and len(me.reveals) == len(own):  # every challenged segment is open: complete
        me.reveal.CopyFrom(opening)
    keeper.set_round(ctx.store, r)
    ctx.emit(events.segment_revealed(job.id, r.round, signer, msg.segment))


def _check_reveal_target(
    me: jobs_pb2.Participant | None, msg: jobs_pb2.MsgRevealSegment
) -> tuple[jobs_pb2.Participant, list[int]]:
    """The signer is a challenged participant and ``msg.segment`` one of the segments it owes
    this panel, not yet open: the participant and those segments."""
    if me is None:
        raise ErrNotSelected(f"signer is not a participant of round {msg.job_id}/{msg.round}")
    if not me.challenged:
        raise ErrNotChallenged("this participant's update was not challenged")
    panel = msg.panel
    own = compute_fresh_segments(me, panel)
    if msg.segment not in own:
        what = ("challenged", "appeal panel's fresh", "final panel's fresh")[panel]
        raise ErrWrongSegment(f"the {what} segments are {own}, not {msg.segment}")
    if msg.segment in [o.segment for o in me.reveals] or (panel == 0 and me.HasField("reveal")):
        raise ErrDuplicate(f"segment {msg.segment} already revealed")
    return me, own


def _check_opening_forms(msg: jobs_pb2.MsgRevealSegment, run_start: bool) -> None:
    """The start is opened in the clear at a run's start, by its leaf hash otherwise; the end
    always by its leaf hash only (it stays secret until the first panel has voted, both modes:
    docs/threat-model.md *Evidence only re-execution yields*): 507 for any other form."""
    if run_start:
        _hash32(msg.start_state_hash, "start_state_hash")
        if msg.start_leaf_hash:
            raise ErrInvalidHash(
                f"segment {msg.segment} starts a run of challenged segments: open its start"
                " state (start_state_hash, start_location); start_leaf_hash must be empty"
            )
    else:
        _hash32(msg.start_leaf_hash, "start_leaf_hash")
        if msg.start_state_hash or msg.start_location:
            raise ErrInvalidHash(
                f"segment {msg.segment - 1} is challenged too: the start of segment"
                f" {msg.segment} is its secret end, open it by its leaf hash only"
                " (start_leaf_hash = abci_app.merkle.hash_leaf(state hash)); start_state_hash"
                " and start_location must be empty"
            )
    _hash32(msg.end_leaf_hash, "end_leaf_hash")
    if msg.end_state_hash or msg.end_location:
        raise ErrInvalidHash(
            "open the end state by its leaf hash only (end_leaf_hash ="
            " abci_app.merkle.hash_leaf(state hash)); end_state_hash and end_location must be"
            " empty: the end state stays secret until the first panel has voted (tolerance"
            " mode: MsgOpenEnd opens it then)"
        )


def _check_opening_proofs(
    spec: jobs_pb2.JobSpec, root: bytes, msg: jobs_pb2.MsgRevealSegment, run_start: bool
) -> None:
    """The start is trace entry ``segment`` and the end entry ``segment + 1`` under the committed
    trace root (leaf data at a run's start, leaf hashes otherwise): 512 if either is not."""
    n = compute_trace_leaves(spec)
    start_leaf = entry_leaf(msg.segment)
    start_proof = list(msg.start_proof)
    start_ok = (
        verify_merkle_proof(root, msg.start_state_hash, start_leaf, n, start_proof)
        if run_start
        else verify_leaf_hash_proof(root, msg.start_leaf_hash, start_leaf, n, start_proof)
    )
    end_leaf = entry_leaf(msg.segment + 1)
    end_ok = verify_leaf_hash_proof(root, msg.end_leaf_hash, end_leaf, n, list(msg.end_proof))
    for what, entry, ok in (("start", msg.segment, start_ok), ("end", msg.segment + 1, end_ok)):
        if not ok:
            raise ErrBadProof(
                f"{what} state is not trace entry {entry} (leaf {entry_leaf(entry)} of {n})"
                " under the committed trace root"
            )


def check_trace_list(
    job: jobs_pb2.Job,
    r: jobs_pb2.Round,
    signer: bytes,
    me: jobs_pb2.Participant,
    msg: jobs_pb2.MsgRevealSegment,
) -> None:
    """``trace_list_hash`` names the committed trace: the participant's first opening carries
    the list (H/k + 1 state hashes), whose sha256 must be ``trace_list_hash`` and whose bound
    root (binding leaf, then the entries: abci_app.merkle.bound_trace_leaves) must be the
    committed trace root, and whose entries ``segment``, ``segment + 1`` are the revealed
    states; a later opening names the same hash (its list, if given, is checked the same way).
    So a verifier fetches the list by a hash the chain has bound to the commitment."""
    first = [o.trace_list_hash for o in me.reveals]
    if first and msg.trace_list_hash != first[0]:
        raise ErrBadTraceList(
            f"trace_list_hash must be {first[0].hex()}, the one this participant's first opening"
            " proved against its trace root"
        )
    if not msg.trace_list:
        if not first:
            raise ErrBadTraceList(
                "the first opening must carry trace_list (the H/k + 1 state hashes) to prove"
                " trace_list_hash against the committed trace root"
            )
        return
    n = compute_n_segments(job.spec) + 1
    if len(msg.trace_list) != 32 * n:
        raise ErrBadTraceList(
            f"trace_list must be H/k + 1 = {n} hashes of 32 bytes ({32 * n} bytes), "
            f"got {len(msg.trace_list)}"
        )
    if hashlib.sha256(msg.trace_list).digest() != msg.trace_list_hash:
        raise ErrBadTraceList("trace_list_hash must be sha256 of trace_list")
    entries = [msg.trace_list[i : i + 32] for i in range(0, len(msg.trace_list), 32)]
    # the secret ends are in the list as their leaf hashes (incentives.mask_trace), so the list
    # names every entry without publishing a state only re-execution should yield (both modes)
    # every entry but 0, H/k and the runs' starts: a later panel's fresh segment must have an
    # end that was never public (incentives.compute_masked_entries)
    hidden = compute_masked_entries(list(me.segments) or [me.segment], n - 1)
    leaves = bound_trace_leaves(
        signer,
        job.id,
        r.round,
        me.commitment.base_model_hash,
        [bytes(32) if i in hidden else e for i, e in enumerate(entries)],
    )
    hashes = [entries[j - 1] if j - 1 in hidden else hash_leaf(d) for j, d in enumerate(leaves)]
    if merkle_root_of_leaf_hashes(hashes) != me.commitment.trace_root:
        raise ErrBadTraceList(
            "trace_list's bound root (binding leaf, then the entries; the secret"
            " ends as their leaf hashes: incentives.mask_trace) is not the committed trace root"
        )
    # a secret entry is in the list as the opened leaf hash; a public end (entry H/k) must have it
    start = msg.start_leaf_hash if msg.segment in hidden else msg.start_state_hash
    end = msg.end_leaf_hash
    if msg.segment + 1 not in hidden:
        ok_end = hash_leaf(entries[msg.segment + 1]) == msg.end_leaf_hash
        end = entries[msg.segment + 1] if ok_end else b""
    if (entries[msg.segment], entries[msg.segment + 1]) != (start, end):
        raise ErrBadTraceList(
            f"trace_list entries {msg.segment} and {msg.segment + 1} must be the revealed states"
            " (a secret entry as its leaf hash)"
        )


def process_msg_open_end(ctx: Ctx, signer: bytes, msg: jobs_pb2.MsgOpenEnd) -> None:
    """Tolerance mode, vote-reveal window (the first panel's votes are committed): the challenged
    provider opens the end of one opened segment: its state hash (``hash_leaf`` of it must be the
    opened ``end_leaf_hash``), where it is served, and its probe, proven against the committed
    probe root at the end's leaf (``entry_leaf(segment + 1)``, leaf data
    ``probe.encode_probe``). An end left unopened when the window closes makes the challenge a
    missed reveal (``rounds.process_vote_reveal_end``): withholding costs what fraud costs."""
    r0 = keeper.get_round(ctx.store, msg.job_id, msg.round)
    phase = jobs_pb2.PHASE_VOTE_REVEAL
    if r0 is not None and r0.phase in OPEN_END_PANEL:
        phase = r0.phase
    job, r, me = _load(ctx, msg.job_id, msg.round, phase, signer)
    panel = OPEN_END_PANEL[phase]
    if panel == 0:
        check_before_audit_seed(ctx, job, r, "MsgOpenEnd")
    if not is_tolerance(job):
        raise ErrBadProbe("MsgOpenEnd is for tolerance-mode jobs (exact mode opens no end)")
    if me is None:
        raise ErrNotSelected(f"signer is not a participant of round {msg.job_id}/{msg.round}")
    if not me.challenged:
        raise ErrNotChallenged("this participant's update was not challenged")
    if not me.HasField("reveal"):
        raise ErrNotRevealed("the challenge was not revealed: there is no end to open")
    # each panel's ends open after that panel committed: the fresh ones in its opening window
    o = next((x for x in me.reveals if x.segment == msg.segment and x.panel == panel), None)
    if o is None:
        mine = sorted(x.segment for x in me.reveals if x.panel == panel)
        raise ErrWrongSegment(
            f"the segments opened for panel {panel} (whose ends open in this window) are"
            f" {mine}, not {msg.segment}"
        )
    if o.end_opened_height:
        raise ErrDuplicate(f"the end of segment {msg.segment} is already open")
    _hash32(msg.end_state_hash, "end_state_hash")
    if hash_leaf(msg.end_state_hash) != o.end_leaf_hash:
        raise ErrBadProof(
            f"end_state_hash is not the committed end of segment {msg.segment}: its"
            " hash_leaf must be the opened end_leaf_hash"
        )
    if not is_http_url(msg.end_location):
        raise ErrInvalidLocation("end_location must be an http(s) URL of <= 256 bytes")
    probe = list(msg.probe)
    why = check_probe(probe)
    if why:
        raise ErrBadProbe(why)
    n = compute_trace_leaves(job.spec)
    leaf = entry_leaf(msg.segment + 1)
    if not verify_merkle_proof(
        me.commitment.probe_root, encode_probe(probe), leaf, n, list(msg.probe_proof)
    ):
        raise ErrBadProof(
            f"probe is not leaf {leaf} of {n} under the committed probe_root: open the probe"
            " committed before the challenge"
        )
    o.end_state_hash = msg.end_state_hash
    o.end_location = msg.end_location
    o.end_probe.extend(probe)
    o.end_opened_height = ctx.block.height
    keeper.set_round(ctx.store, r)
    ctx.emit(events.end_opened(job.id, r.round, signer, msg.segment))


def is_ends_opened(p: jobs_pb2.Participant) -> bool:
    """Tolerance mode: every opened segment's end was opened with MsgOpenEnd."""
    return bool(p.reveals) and all(o.end_opened_height for o in p.reveals)


# the phase a panel's segments are opened in (MsgRevealSegment.panel), and MsgOpenEnd's phases
REVEAL_PHASES = {0: jobs_pb2.PHASE_REVEAL, 1: jobs_pb2.PHASE_APPEAL, 2: jobs_pb2.PHASE_FINAL}
OPEN_END_PANEL = {
    jobs_pb2.PHASE_VOTE_REVEAL: 0,
    jobs_pb2.PHASE_APPEAL_REVEAL: 1,
    jobs_pb2.PHASE_FINAL_REVEAL: 2,
}

# the phase each panel commits in, and opens its votes in
VOTE_PHASES = {0: jobs_pb2.PHASE_VERDICT, 1: jobs_pb2.PHASE_APPEAL, 2: jobs_pb2.PHASE_FINAL}
REVEAL_VOTE_PHASES = {
    0: jobs_pb2.PHASE_VOTE_REVEAL,
    1: jobs_pb2.PHASE_APPEAL_REVEAL,
    2: jobs_pb2.PHASE_FINAL_REVEAL,
}


def _load_assignment(
    ctx: Ctx, signer: bytes, job_id: int, round_: int, target_addr: bytes, phases: dict[int, int]
) -> tuple[jobs_pb2.Round, jobs_pb2.VerifierAssignment]:
    """The signer's assignment on ``target``'s challenge, in the phase its panel acts in."""
    job = keeper.get_job(ctx.store, job_id)
    if job is None:
        raise ErrJobNotFound(f"job {job_id} does not exist")
    r = keeper.get_round(ctx.store, job_id, round_)
    if r is None:
        raise ErrRoundNotFound(f"job {job_id} has no round {round_} (yet)")
    target = check_address(target_addr, "target")
    if r.phase not in phases.values():
        want = " or ".join(enum_name(jobs_pb2.Phase, ph) for ph in phases.values())
        raise ErrWrongPhase(
            f"round {job_id}/{round_} is in phase {enum_name(jobs_pb2.Phase, r.phase)}, this "
            f"message needs {want} (verdicts until {r.verdict_end}, votes opened until "
            f"{r.vote_reveal_end}"
            + (
                f", appeal until {r.appeal_end}, appeal votes opened until {r.appeal_reveal_end}"
                if r.appeal_end
                else ""
            )
            + (
                f", final panel until {r.final_end}, final votes opened until {r.final_reveal_end}"
                if r.final_end
                else ""
            )
            + ")"
        )
    t = next((p for p in r.participants if p.address == target), None)
    if t is None or not t.challenged:
        raise ErrNotChallenged("target has no challenge in this round")
    if not t.HasField("reveal"):
        raise ErrNotRevealed("target did not reveal its segment: there is nothing to judge")
    v = next((v for v in t.verifiers if v.address == signer and phases[v.panel] == r.phase), None)
    if v is None:
        raise ErrNotVerifier(
            "signer is not an assigned verifier of this challenge in this window"
            " (the first panel votes in the verdict window, the appeal panel in the appeal window,"
            " the final panel in the final window)"
        )
    if v.panel and not {o.segment for o in t.reveals if o.panel == v.panel} >= set(
        compute_fresh_segments(t, v.panel)
    ):
        raise ErrNotRevealed(
            f"the target has not opened the fresh segments {compute_fresh_segments(t, v.panel)}"
            " drawn for this panel: there is nothing to judge yet"
        )
    return r, v


def process_msg_verdict(ctx: Ctx, signer: bytes, msg: jobs_pb2.MsgVerdict) -> None:
    """A secret vote: only ``vote_hash`` (incentives.compute_vote_hash), in the window of the
    signer's panel. Nobody can copy a vote it cannot see, and the hash includes the signer."""
    r, v = _load_assignment(ctx, signer, msg.job_id, msg.round, msg.target, VOTE_PHASES)
    if v.vote_hash:
        raise ErrDuplicate("vote already committed")
    v.vote_hash = _hash32(msg.vote_hash, "vote_hash")
    keeper.set_round(ctx.store, r)
    ctx.emit(events.vote_committed(msg.job_id, r.round, signer, msg.target, v.panel))


def process_msg_reveal_vote(ctx: Ctx, signer: bytes, msg: jobs_pb2.MsgRevealVote) -> None:
    """Opens the signer's committed vote: the hash must match, ``evidence`` must be
    incentives.compute_evidence(``reached``), and the reached states must agree with the vote
    (valid <=> each one's leaf hash is the committed end of its opened segment:
    incentives.is_reached_valid). Tolerance mode: the committed hash is a *blind* vote
    (``compute_blind_vote_hash``: valid false, quality 0, the probes' evidence), because the
    verifier judges the full end state only once MsgOpenEnd has opened it; the opened valid and
    quality are free, the probes must be the committed evidence (``check_probe_vote``), and a
    valid vote whose probes disagree with the provider's counts as invalid when the window
    closes (rounds.apply_probe_checks)."""
    r, v = _load_assignment(ctx, signer, msg.job_id, msg.round, msg.target, REVEAL_VOTE_PHASES)
    job = keeper.get_job(ctx.store, msg.job_id)
    if job is not None and r.phase == jobs_pb2.PHASE_VOTE_REVEAL:
        check_before_audit_seed(ctx, job, r, "the first panel's MsgRevealVote")
    tolerance = job is not None and is_tolerance(job)
    if not v.vote_hash:
        raise ErrVoteMismatch("no vote was committed: MsgVerdict in the voting window comes first")
    if v.voted:
        raise ErrDuplicate("vote already revealed")
    if msg.quality > MAX_QUALITY:
        raise ErrInvalidQuality(f"quality must be 0..{MAX_QUALITY}")
    _hash32(msg.evidence, "evidence")
    _hash32(msg.salt, "salt")
    if msg.unavailable:
        _open_unavailable_vote(ctx, signer, msg, r, v)
        return
    _check_vote_opens_hash(signer, msg, v.vote_hash, tolerance)
    t = next(p for p in r.participants if p.address == msg.target)
    if tolerance:
        check_probe_vote(t, msg, v.panel)
        v.probes.extend(msg.probes)
        v.voted, v.valid, v.height, v.evidence = True, msg.valid, ctx.block.height, msg.evidence
        v.quality = msg.quality if msg.valid else 0
        keeper.set_round(ctx.store, r)
        ctx.emit(
            events.verdict_posted(msg.job_id, r.round, signer, msg.target, msg.valid, v.quality)
        )
        return
    if msg.probes:
        raise ErrBadProbe("probes are for tolerance-mode jobs; exact mode names reached states")
    reached = list(msg.reached)
    judged = compute_panel_reveals(t, v.panel)  # its own fresh segments and the earlier ones
    if len(reached) != len(judged) or any(len(x) != 32 for x in reached):
        raise ErrBadEvidence(
            f"reached must hold one 32-byte state hash per segment panel {v.panel} judges"
            f" ({len(judged)}), in segment order: the end state your re-execution of each"
            " segment reached"
        )
    if compute_evidence(reached) != msg.evidence:
        raise ErrBadEvidence("evidence must be incentives.compute_evidence(reached)")
    if msg.valid != is_reached_valid(t, reached, v.panel):
        raise ErrBadEvidence(
            "a valid vote's reached states must be the committed ends of the opened segments"
            " (hash_leaf(reached[i]) = the trace leaf), an invalid vote's must differ in one: in"
            " exact mode the ends are secret, only re-executing each segment yields them"
        )
    if v.panel and not msg.valid:  # kept for rounds.apply_evidence_checks: the fresh ones only
        v.reached.extend(x for x, o in zip(reached, judged, strict=True) if o.panel == v.panel)
    v.voted, v.valid, v.height, v.evidence = True, msg.valid, ctx.block.height, msg.evidence
    v.quality = msg.quality if msg.valid else 0
    keeper.set_round(ctx.store, r)
    ctx.emit(events.verdict_posted(msg.job_id, r.round, signer, msg.target, msg.valid, v.quality))


def _check_vote_opens_hash(
    signer: bytes, msg: jobs_pb2.MsgRevealVote, vote_hash: bytes, tolerance: bool
) -> None:
    """The opening hashes to the committed ``vote_hash`` (tolerance mode: the blind vote, over
    the evidence and salt only), else 530."""
    want = (
        compute_blind_vote_hash(msg.job_id, msg.round, msg.target, signer, msg.evidence, msg.salt)
        if tolerance
        else compute_vote_hash(
            msg.job_id,
            msg.round,
            msg.target,
            signer,
            msg.valid,
            msg.quality,
            msg.evidence,
            msg.salt,
        )
    )
    if want != vote_hash:
        raise ErrVoteMismatch(
            "this vote does not open the committed vote_hash: reveal exactly the valid, quality,"
            " evidence and salt that were hashed (tolerance mode: the blind vote,"
            " incentives.compute_blind_vote_hash of the evidence and salt)"
        )


def _open_unavailable_vote(
    ctx: Ctx,
    signer: bytes,
    msg: jobs_pb2.MsgRevealVote,
    r: jobs_pb2.Round,
    v: jobs_pb2.VerifierAssignment,
) -> None:
    """Opens a vote committed as "unavailable" (docs/threat-model.md *Unavailable votes*), in either
    determinism mode: valid false, quality 0, nothing reached, no probes, evidence
    incentives.UNAVAILABLE_EVIDENCE, and the committed hash is compute_vote_hash(...,
    unavailable=True) (so an invalid vote cannot be reopened as unavailable, nor the reverse)."""
    if msg.valid or msg.quality or msg.reached or msg.probes:
        raise ErrBadEvidence(
            "an unavailable vote is invalid, with quality 0 and no reached states or probes"
        )
    if msg.evidence != UNAVAILABLE_EVIDENCE:
        raise ErrBadEvidence(
            "an unavailable vote's evidence is incentives.compute_evidence([]) (nothing reached)"
        )
    want = compute_vote_hash(
        msg.job_id, msg.round, msg.target, signer, False, 0, msg.evidence, msg.salt, True
    )
    if want != v.vote_hash:
        raise ErrVoteMismatch(
            "this unavailable vote does not open the committed vote_hash: it must have been"
            " committed as unavailable (incentives.compute_vote_hash(..., unavailable=True))"
        )
    v.voted, v.valid, v.unavailable, v.quality = True, False, True, 0
    v.height, v.evidence = ctx.block.height, msg.evidence
    keeper.set_round(ctx.store, r)
    ctx.emit(
        events.verdict_posted(msg.job_id, r.round, signer, msg.target, False, 0, unavailable=True)
    )


def check_probe_vote(t: jobs_pb2.Participant, msg: jobs_pb2.MsgRevealVote, panel: int = 0) -> None:
    """A tolerance-mode vote's evidence: ``reached`` empty, ``probes`` = PROBE_DIM integers per
    opened segment (segment order) within range, and ``evidence`` =
    probe.compute_probe_evidence(probes). Whether a valid vote's probes agree with the provider's
    is decided when the panel's window closes (rounds.apply_probe_checks), whatever the order of
    the openings in the window."""
    if msg.reached:
        raise ErrBadProbe("tolerance mode: a vote carries probes, not reached state hashes")
    probes = list(msg.probes)
    want = PROBE_DIM * len(compute_panel_reveals(t, panel))
    if len(probes) != want:
        raise ErrBadProbe(
            f"probes must be {PROBE_DIM} integers per opened segment ({want}), in segment order:"
            " the probe of the end state your re-execution of each segment reached"
        )
    for i in range(0, want, PROBE_DIM):
        why = check_probe(probes[i : i + PROBE_DIM])
        if why:
            raise ErrBadProbe(why)
    if compute_probe_evidence(probes) != msg.evidence:
        raise ErrBadEvidence("evidence must be probe.compute_probe_evidence(probes)")


def process_msg_decline_round(ctx: Ctx, signer: bytes, msg: jobs_pb2.MsgDeclineRound) -> None:
    """A drawn provider refuses the round before committing: outcome ``declined``, no slash, no
    reputation change, its slot stays in the escrow (opt-in: nobody is forced to work). Up to
    height D - 1, as a commitment (``check_before_challenge_seed``)."""
    job, r, me = _load(ctx, msg.job_id, msg.round, jobs_pb2.PHASE_COMMIT, signer)
    check_before_challenge_seed(ctx, r, "MsgDeclineRound")
    if me is None:
        raise ErrNotSelected(f"signer was not drawn for round {msg.job_id}/{msg.round}")
    if me.HasField("commitment") or me.outcome == jobs_pb2.OUTCOME_DECLINED:
        raise ErrCannotDecline(
            "only a participant that has not committed (nor declined) can decline"
        )
    me.outcome = jobs_pb2.OUTCOME_DECLINED
    keeper.set_round(ctx.store, r)
    ctx.emit(events.round_declined(job.id, r.round, signer))


def process_msg_attest_model(ctx: Ctx, signer: bytes, msg: jobs_pb2.MsgAttestModel) -> None:
    job, r, me = _load(ctx, msg.job_id, msg.round, jobs_pb2.PHASE_ATTEST, signer)
    if me is None or me.outcome != jobs_pb2.OUTCOME_ACCEPTED:
        raise ErrNotAttester("only participants whose update was accepted attest the aggregate")
    if me.attested_hash:
        raise ErrDuplicate("already attested")
    excluded = list(msg.excluded)
    accepted = {p.address for p in r.participants if p.outcome == jobs_pb2.OUTCOME_ACCEPTED}
    if (
        any(b <= a for a, b in zip(excluded, excluded[1:], strict=False))
        or not set(excluded) <= accepted
    ):
        raise ErrNotAttester(
            "excluded must name accepted participants of the round, ascending and distinct: the"
            " updates the aggregate screened out"
        )
    me.attested_hash = _hash32(msg.model_hash, "model_hash")
    me.attested_excluded.extend(excluded)
    keeper.set_round(ctx.store, r)
    ctx.emit(events.attestation_posted(job.id, r.round, signer, msg.model_hash))
