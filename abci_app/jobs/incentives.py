"""The rules that make cheating unprofitable (README "Why cheating does not pay"), as pure
functions over integers and records; ``rounds.py`` and ``msgs.py`` apply them.

    compute_vote_hash          secret votes: MsgVerdict commits to this, MsgRevealVote opens it
    compute_blind_vote_hash    tolerance mode: the vote commits to its probe evidence only
    UNAVAILABLE_EVIDENCE       an unavailable vote's evidence (compute_evidence of nothing)
    compute_evidence           the digest of the end states a verifier's re-execution reached
    compute_end_leaves         the committed trace leaf hash of each opened segment's end
    is_reached_valid           a vote is valid <=> every reached end state is its committed leaf
    compute_hidden_entries     the trace entries a reveal keeps secret (every end but H/k)
    is_run_start               only the start of a run of adjacent opened segments is public
    compute_runs               the opened segments as runs (what a verifier re-executes through)
    mask_trace                 the trace list a provider serves then (secret entries as leaf hashes)
    compute_masked_entries     what that list masks: every entry but 0, H/k and the runs' starts
    compute_fresh_candidates   the segments a later panel may get: never opened, ends never public
    draw_fresh_segments        a later panel's fresh segments, drawn at escalation
    compute_panel_segments     the segments a panel judges (its own and every earlier panel's)
    compute_required_bond      collateral: a cheater loses more on average than a slot pays
    compute_model_params       the model size a provider's policy compares with
    is_job_acceptable          opt-in: a provider's policy, never the job's owner
    is_escalated               a first-panel verdict that is not unanimous goes to the appeal panel
    compute_audit_seed         the panel audits' seed, from the commit-deadline block D
    is_audited                 a challenge's first panel gets audit_verifiers more seats (audit_bps)
    compute_value_gain_bps     reputation grows with the value of verified, paid work
"""

from __future__ import annotations

import hashlib

from abci_app.encoding import u64_key
from abci_app.jobs.sampler import Sampler
from abci_app.merkle import hash_leaf
from abci_app.pb import jobs_pb2, providers_pb2

BPS = 10_000
VOTE_DOMAIN = b"loconet/vote/v1"
EVIDENCE_DOMAIN = b"loconet/evidence/v1"


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def compute_vote_hash(
    job_id: int,
    round_: int,
    target: bytes,
    verifier: bytes,
    valid: bool,
    quality: int,
    evidence: bytes,
    salt: bytes,
    unavailable: bool = False,
) -> bytes:
    """sha256(DOMAIN | u64 job | u64 round | target (20) | verifier (20) | vote (1 byte: 0
    invalid, 1 valid, 2 unavailable) | u32 quality | evidence (32) | salt (32)). The verifier's
    address is inside: a copied hash cannot be opened by anyone else, and the salt keeps the vote
    unguessable. ``unavailable`` (docs/threat-model.md *Unavailable votes*) is committed with
    the vote, so an invalid vote cannot be reopened as "unavailable" once the others' votes are
    seen."""
    if unavailable and valid:
        raise ValueError("an unavailable vote is not valid")
    return hashlib.sha256(
        VOTE_DOMAIN
        + u64_key(job_id)
        + u64_key(round_)
        + target
        + verifier
        + (b"\x02" if unavailable else b"\x01" if valid else b"\x00")
        + quality.to_bytes(4, "big")
        + evidence
        + salt
    ).digest()


def compute_blind_vote_hash(
    job_id: int, round_: int, target: bytes, verifier: bytes, evidence: bytes, salt: bytes
) -> bytes:
    """The secret vote of a tolerance-mode job: ``compute_vote_hash`` with valid false and
    quality 0, i.e. a commitment to the evidence (the probes of the states the verifier's
    re-execution reached) and the salt only. The verifier cannot judge the claimed end state
    before MsgOpenEnd opens it (after this commitment), so the vote's valid and quality are given
    when it is opened; its evidence, bound here, is what only re-execution yields."""
    return compute_vote_hash(job_id, round_, target, verifier, False, 0, evidence, salt)


def compute_evidence(end_state_hashes: list[bytes]) -> bytes:
    """sha256(EVIDENCE_DOMAIN | end state of each challenged segment, in segment order): what a
    verifier's re-execution of every challenged segment yields when the work is right. A valid
    vote must carry exactly this for the target's opened segments; an invalid vote anything else
    (the states its re-execution reached)."""
    return hashlib.sha256(EVIDENCE_DOMAIN + b"".join(end_state_hashes)).digest()


# the evidence of an unavailable vote: nothing was reached (MsgRevealVote.unavailable)
UNAVAILABLE_EVIDENCE = hashlib.sha256(EVIDENCE_DOMAIN).digest()


def compute_expected_evidence(p: jobs_pb2.Participant) -> bytes:
    """compute_evidence over ``p``'s opened end states, by segment (tolerance mode, where the end
    states are public; in exact mode they are secret and only re-execution yields them)."""
    return compute_evidence([o.end_state_hash for o in sorted(p.reveals, key=lambda o: o.segment)])


def compute_panel_reveals(p: jobs_pb2.Participant, panel: int = 2) -> list[jobs_pb2.Reveal]:
    """The openings ``panel`` judges, in segment order: its own fresh segments and every earlier
    panel's (``Reveal.panel <= panel``). A later panel re-judges the disputed segments too (a
    cheat the first panel found must not escape by being judged elsewhere), and the fresh ones
    carry the evidence nobody could copy (docs/threat-model.md *Fresh segments for the later
    panels*)."""
    return sorted((o for o in p.reveals if o.panel <= panel), key=lambda o: o.segment)


def compute_end_leaves(p: jobs_pb2.Participant, panel: int = 2) -> list[bytes]:
    """The committed Merkle leaf hash of each segment ``panel`` judges, end state, in segment
    order: ``Reveal.end_leaf_hash`` (exact mode: the state hash itself is secret until the votes
    are open) or ``hash_leaf(end_state_hash)`` (tolerance mode)."""
    return [o.end_leaf_hash or hash_leaf(o.end_state_hash) for o in compute_panel_reveals(p, panel)]


def is_reached_valid(p: jobs_pb2.Participant, reached: list[bytes], panel: int = 2) -> bool:
    """A vote's ``reached`` states (one per opened segment, segment order) are all the committed
    ends: ``hash_leaf(reached[i])`` is the trace leaf the provider committed for that end. In
    exact mode nobody but the provider knows those states before the votes are open (every end
    but entry H/k is secret, and so is every start but a run's: compute_hidden_entries), so a
    valid vote proves the verifier re-executed every opened segment, except at most one whose
    end is entry H/k (docs/threat-model.md *Evidence only re-execution yields*)."""
    leaves = compute_end_leaves(p, panel)
    return len(reached) == len(leaves) and all(
        hash_leaf(x) == leaf for x, leaf in zip(reached, leaves, strict=True)
    )


def compute_required_bond(
    reward_per_round: int, participants: int, challenge_bps: int, fraud_bps: int, margin_bps: int
) -> int:
    """Bond a provider needs to be drawn for a job:
    ``ceil(margin x slot / (challenge rate x fraud slash))`` with ``slot = R / P``. A cheater
    caught with probability >= challenge rate loses fraud_bps of its bond (withholding costs the
    same), so its expected loss per round >= challenge rate x fraud slash x bond >= margin x slot:
    at margin >= 1 no round's pay can make cheating profitable on average. 0 when nothing can be
    slashed (fraud_bps or challenge_bps 0)."""
    if challenge_bps == 0 or fraud_bps == 0 or participants == 0:
        return 0
    return ceil_div(reward_per_round * margin_bps * BPS, participants * challenge_bps * fraud_bps)


def compute_model_params(model: jobs_pb2.ModelConfig) -> int:
    """GPT parameter count, as a provider's policy compares it: 12 L d^2 + vocab d."""
    return 12 * model.n_layers * model.d_model * model.d_model + model.vocab_size * model.d_model


def is_job_acceptable(p: providers_pb2.Provider, job: jobs_pb2.Job, required_bond: int) -> bool:
    """May ``p`` be drawn as a participant of ``job``: not its owner (nobody works for, or
    earns reputation from, its own job), bond covers the job's collateral, and the provider's
    opt-in policy takes the job's slot reward and model size."""
    if p.address == job.owner or p.bond < required_bond:
        return False
    pol = p.policy
    if (
        pol.min_slot_reward
        and job.reward_per_round // job.spec.participants_per_round < pol.min_slot_reward
    ):
        return False
    return not (
        pol.max_model_params and compute_model_params(job.spec.model) > pol.max_model_params
    )


def is_escalated(verifiers: list[jobs_pb2.VerifierAssignment]) -> bool:
    """A first-panel verdict stands only when every assigned verifier revealed a valid vote
    (unanimous acceptance). An invalid vote, a split or a silent verifier sends the challenge to
    the appeal panel, whose verdict is final: one verifier (or an owner's Sybil) can no longer
    reject honest work, and a fraud claim is always checked by a larger, fresh panel."""
    return bool(verifiers) and not all(v.voted and v.valid for v in verifiers)


def compute_audit_seed(block_seed: bytes, job_id: int, round_: int) -> bytes:
    """sha256("loconet/panel-audit/v1" | seed of the commit-deadline block D | u64 job | u64
    round): randomness that did not exist when the provider committed (commitments land by
    D - 1), so no provider knew whether its challenge would be audited. Its own domain:
    independent of the challenge and first-panel draws (``rounds.compute_challenge_seed``) from
    the same block."""
    return hashlib.sha256(
        b"loconet/panel-audit/v1" + block_seed + u64_key(job_id) + u64_key(round_)
    ).digest()


def is_audited(audit_seed: bytes, target: bytes, audit_bps: int) -> bool:
    """Is the challenge of ``target`` audited: ``below(10000) < audit_bps`` of a sha256
    counter-mode sampler seeded by ``sha256(audit_seed | target)`` (rejection sampling: exactly
    audit_bps / 10000, no modulo bias). An audited challenge's first panel gets
    ``audit_verifiers`` more seats, drawn with it: a coalition that holds the other seats and
    waves a cheater through meets an honest audit seat's invalid vote, a dispute."""
    if audit_bps <= 0:
        return False
    return Sampler(hashlib.sha256(audit_seed + target).digest()).below(BPS) < audit_bps


def compute_value_gain_bps(gain_bps: int, paid: int, unit: int) -> int:
    """Reputation gain rate for a round that paid ``paid`` (a participant's reward, or a
    verifier's share of V over its seats of the round): full ``gain_bps`` at ``unit`` or more,
    proportionally less below (truncating), 0 for unpaid work."""
    if unit == 0:
        return gain_bps
    return gain_bps * min(paid, unit) // unit


def compute_hidden_entries(segments: list[int], n: int) -> set[int]:
    """Trace entries a reveal keeps secret (both modes): the end s + 1 of every opened segment
    s except entry H/k (``n``: served for the payload check). An opened segment whose
    predecessor is opened too is not the start of a run of adjacent opened segments: its start
    is the previous segment's (secret) end, opened as a leaf hash like it
    (``MsgRevealSegment.start_leaf_hash``), so only the start of each run is public and every
    end in a run is evidence. What the provider masks in its served trace list, and what the
    verifier re-executes each run through to learn (docs/threat-model.md *Evidence only re-execution
    yields*)."""
    return {s + 1 for s in set(segments)} - {0, n}


def is_run_start(segment: int, segments: list[int]) -> bool:
    """Is opened ``segment`` the start of a run of adjacent opened segments (its predecessor
    ``segment - 1`` is not opened)? Only a run's start opens its start state (hash and
    location); the others open it as a leaf hash (``compute_hidden_entries``)."""
    return segment - 1 not in set(segments)


def compute_runs(segments: list[int]) -> list[list[int]]:
    """The opened segments as runs of adjacent segments, each in order, runs in order:
    ``[1, 2, 5, 3]`` -> ``[[1, 2, 3], [5]]``. A verifier re-executes each run through from the
    run's (public) start, the state its re-execution reached being the next segment's start."""
    runs: list[list[int]] = []
    for s in sorted(set(segments)):
        if runs and runs[-1][-1] == s - 1:
            runs[-1].append(s)
        else:
            runs.append([s])
    return runs


def mask_trace(trace: list[bytes], hidden: set[int]) -> list[bytes]:
    """The trace list a provider serves (both modes): each secret entry replaced by its Merkle
    leaf hash (``hash_leaf``), which proves nothing about the state it commits to."""
    return [hash_leaf(h) if i in hidden else bytes(h) for i, h in enumerate(trace)]


def compute_masked_entries(segments: list[int], n: int) -> set[int]:
    """The entries the first opening's trace list holds as leaf hashes (both modes): every entry
    but 0 (the pinned start), H/k (``n``: the payload check's θ_H) and the start of each run of
    the first panel's opened ``segments`` (opened in the clear anyway). Not only the opened
    ends (``compute_hidden_entries``): a segment drawn fresh for a later panel must have an end
    that was never public, or its evidence could be read off the list."""
    public = {0, n} | {s for s in set(segments) if is_run_start(s, segments)}
    return set(range(n + 1)) - public


def compute_fresh_candidates(opened: list[int], n: int) -> list[int]:
    """The segments a later panel may be given, ascending: not opened, not right before an
    opened segment (its end is that segment's start: public at a run's start, and a verifier's
    reached state otherwise) and not the last (its end is entry H/k, public for the payload
    check). Their ends were never public: the first opening's list masks them
    (``compute_masked_entries``), and no opening, vote or MsgOpenEnd named them."""
    done = set(opened)
    return [s for s in range(n - 1) if s not in done and s + 1 not in done]


def compute_fresh_seed(block_seed: bytes, job_id: int, round_: int, panel: int) -> bytes:
    """sha256("loconet/fresh-segments/v1" | seed of the escalating block | job | round | panel):
    the later panel's segments, drawn in the end-block that seats it (its own domain)."""
    return hashlib.sha256(
        b"loconet/fresh-segments/v1"
        + block_seed
        + u64_key(job_id)
        + u64_key(round_)
        + bytes((panel,))
    ).digest()


def draw_fresh_segments(
    seed: bytes, target: bytes, opened: list[int], n: int, count: int
) -> list[int]:
    """``min(count, #candidates)`` fresh segments for a later panel (``compute_fresh_candidates``),
    uniformly without replacement (a partial Fisher-Yates over the candidates, sampler seeded by
    ``sha256(seed | target)``), ascending. Empty when no candidate is left (a short trace): the
    panel then judges the opened segments only (the bound in docs/threat-model.md *Fresh
    segments*)."""
    cands = compute_fresh_candidates(opened, n)
    if not cands or count <= 0:
        return []
    s = Sampler(hashlib.sha256(seed + target).digest())
    swapped: dict[int, int] = {}
    out: list[int] = []
    for i in range(min(count, len(cands))):
        j = i + s.below(len(cands) - i)
        out.append(cands[swapped.get(j, j)])
        swapped[j] = swapped.get(i, i)
    return sorted(out)


def compute_panel_segments(p: jobs_pb2.Participant, panel: int) -> list[int]:
    """The segments ``panel`` judges, ascending: the first panel's (``segments``), plus the
    appeal panel's fresh ones from panel 1, plus the final panel's from panel 2."""
    segs = list(p.segments) or [p.segment]
    if panel >= 1:
        segs += list(p.appeal_segments)
    if panel >= 2:
        segs += list(p.final_segments)
    return sorted(set(segs))


def compute_fresh_segments(p: jobs_pb2.Participant, panel: int) -> list[int]:
    """The segments drawn for ``panel`` itself (the first panel's for 0)."""
    if panel == 1:
        return list(p.appeal_segments)
    if panel == 2:
        return list(p.final_segments)
    return list(p.segments) or [p.segment]
