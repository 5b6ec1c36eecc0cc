"""Reputation update rules (docs/design.md §7). Integers 0..MAX_REPUTATION; rates in basis points.

Rounding: a gain is a benefit, so it truncates; a loss is a penalty, so it rounds up. A gain
never reaches MAX_REPUTATION from below in one step unless the distance is tiny, and a loss
never leaves a positive reputation unchanged (ceil of a positive product is >= 1).

    accepted work (participant)        rep += floor((MAX - rep) * g / 10000), once a round
    verifier voted with the majority   rep += floor((MAX - rep) * g / 10000), once a round
                                       g = gain_bps * min(paid, unit) / unit: its reward, or its
                                       verifier pay (jobs.incentives.compute_value_gain_bps)
    missed commit                      rep -= ceil(rep * loss_missed_commit_bps / 10000)
    missed reveal (withholding)        rep  = 0   (and jailed: punished as fraud)
    verifier silent or in the minority rep -= ceil(rep * loss_verifier_bps / 10000)
    proven fraud                       rep  = 0   (needs >= min_fraud_verifiers invalid voters)
    rejected (2/3 invalid, fewer)      unchanged
    exit then register again           rep  = min(last rep, initial_reputation)
"""

from __future__ import annotations

MAX_REPUTATION = 10_000
BPS = 10_000


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def compute_gain(rep: int, gain_bps: int) -> int:
    """New reputation after a reward: moves a fraction of the distance to MAX (truncated)."""
    if not 0 <= rep <= MAX_REPUTATION:
        raise ValueError(f"reputation {rep} out of range")
    return rep + (MAX_REPUTATION - rep) * gain_bps // BPS


def compute_loss(rep: int, loss_bps: int) -> int:
    """New reputation after a penalty: loses a fraction of itself (rounded up), never below 0."""
    if not 0 <= rep <= MAX_REPUTATION:
        raise ValueError(f"reputation {rep} out of range")
    return max(0, rep - ceil_div(rep * loss_bps, BPS))


def compute_fraud(rep: int) -> int:
    return 0
