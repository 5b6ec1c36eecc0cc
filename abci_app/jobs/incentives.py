"""The rules that make cheating unprofitable (README "Why cheating does not pay"), as pure
functions over integers and records; ``rounds.py`` and ``msgs.py`` apply them.

    compute_vote_hash          secret votes: MsgVerdict commits to this, MsgRevealVote opens it
    compute_evidence           what a vote's evidence must be for a valid vote
    compute_required_bond      collateral: a cheater loses more on average than a slot pays
    compute_model_params       the model size a provider's policy compares with
    is_job_acceptable          opt-in: a provider's policy, never the job's owner
    is_escalated               a first-panel verdict that is not unanimous goes to the appeal panel
    compute_value_gain_bps     reputation grows with the value of verified, paid work
"""

from __future__ import annotations

import hashlib

from abci_app.encoding import u64_key
from abci_app.pb import jobs_pb2, providers_pb2

BPS = 10_000
VOTE_DOMAIN = b"loconet/vote/v1"
EVIDENCE_DOMAIN = b"loconet/evidence/v1"


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def compute_vote_hash(job_id: int, round_: int, target: bytes, verifier: bytes, valid: bool, quality: int,
                      evidence: bytes, salt: bytes) -> bytes:
    """sha256(DOMAIN | u64 job | u64 round | target (20) | verifier (20) | valid (1 byte) |
    u32 quality | evidence (32) | salt (32)). The verifier's address is inside: a copied hash
    cannot be opened by anyone else, and the salt keeps the two-valued vote unguessable."""
    return hashlib.sha256(
        VOTE_DOMAIN + u64_key(job_id) + u64_key(round_) + target + verifier + (b"\x01" if valid else b"\x00")
        + quality.to_bytes(4, "big") + evidence + salt
    ).digest()


def compute_evidence(end_state_hashes: list[bytes]) -> bytes:
    """sha256(EVIDENCE_DOMAIN | end state of each challenged segment, in segment order): what a
    verifier's re-execution of every challenged segment yields when the work is right. A valid
    vote must carry exactly this for the target's opened segments; an invalid vote anything else
    (the states its re-execution reached)."""
    return hashlib.sha256(EVIDENCE_DOMAIN + b"".join(end_state_hashes)).digest()


def compute_expected_evidence(p: jobs_pb2.Participant) -> bytes:
    """compute_evidence over ``p``'s opened segments (``Participant.reveals``), by segment."""
    return compute_evidence([o.end_state_hash for o in sorted(p.reveals, key=lambda o: o.segment)])


def compute_required_bond(reward_per_round: int, participants: int, challenge_bps: int, fraud_bps: int,
                          margin_bps: int) -> int:
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
    if pol.min_slot_reward and job.reward_per_round // job.spec.participants_per_round < pol.min_slot_reward:
        return False
    if pol.max_model_params and compute_model_params(job.spec.model) > pol.max_model_params:
        return False
    return True


def is_escalated(verifiers: list[jobs_pb2.VerifierAssignment]) -> bool:
    """A first-panel verdict stands only when every assigned verifier revealed a valid vote
    (unanimous acceptance). An invalid vote, a split or a silent verifier sends the challenge to
    the appeal panel, whose verdict is final: one verifier (or an owner's Sybil) can no longer
    reject honest work, and a fraud claim is always checked by a larger, fresh panel."""
    return bool(verifiers) and not all(v.voted and v.valid for v in verifiers)


def compute_value_gain_bps(gain_bps: int, paid: int, unit: int) -> int:
    """Reputation gain rate for a round that paid ``paid``: full ``gain_bps`` at ``unit`` or
    more, proportionally less below (truncating), 0 for unpaid work."""
    if unit == 0:
        return gain_bps
    return gain_bps * min(paid, unit) // unit
