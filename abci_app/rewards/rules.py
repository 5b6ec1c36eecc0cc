"""Reward splitting (docs/design.md §7). All integer; payouts truncate; what truncation
leaves over stays in the job's escrow (it is *not* handed out as dust), so a round never pays
more than its budget.

Participants. A round with ``n`` drawn participants and budget ``R``: each participant slot is
worth ``R / n``; the slots of the ``a`` accepted participants form the paid pool
``R * a / n`` and are split by weight ``w_i = tokens_i * quality_i * reputation_i``::

    pay_i = floor(R * a * w_i / (n * W))          W = sum of the accepted weights

Slots of missed, undecided, rejected or fraudulent updates return to the escrow, so nobody profits
from another participant failing (or from getting it failed). Every factor is an unsigned integer,
so a bad score can never multiply into a positive payout (Templar #108): quality 0 pays 0.

Verifiers. Budget ``V``; each verifier that voted with a decided majority earns one unit per
such vote::

    pay_v = floor(V * c_v / C)                     C = sum of the majority votes of the round

Bounties. A fraud slash ``S`` pays ``floor(S * bounty_bps / 10000)`` to the verifiers that
proved it, split by their stake (truncating); the rest of ``S`` (including the truncation
remainder) is burned.
"""

from __future__ import annotations

from collections.abc import Sequence


def compute_participant_payouts(
    budget: int, n_participants: int, accepted: Sequence[tuple[bytes, int]]
) -> list[tuple[bytes, int]]:
    """``accepted``: (address, weight) of accepted participants. Returns (address, pay > 0)
    sorted by address. Sum <= budget * len(accepted) // n_participants <= budget."""
    if n_participants <= 0 or not accepted:
        return []
    a = len(accepted)
    if a > n_participants:
        raise ValueError("more accepted participants than participants")
    total_w = sum(w for _, w in accepted)
    if total_w == 0:
        return []
    out = []
    for addr, w in sorted(accepted):
        pay = budget * a * w // (n_participants * total_w)
        if pay:
            out.append((addr, pay))
    return out


def compute_shares(budget: int, weights: Sequence[tuple[bytes, int]]) -> list[tuple[bytes, int]]:
    """floor(budget * w / W) for each (address, w), sorted by address; zero shares dropped.
    The truncation remainder is not distributed."""
    total_w = sum(w for _, w in weights)
    if budget <= 0 or total_w == 0:
        return []
    merged: dict[bytes, int] = {}
    for addr, w in weights:
        merged[addr] = merged.get(addr, 0) + w
    out = []
    for addr in sorted(merged):
        pay = budget * merged[addr] // total_w
        if pay:
            out.append((addr, pay))
    return out


def compute_bounty(slashed: int, bounty_bps: int) -> int:
    """Part of a fraud slash paid to the proving verifiers (payout: truncates)."""
    return slashed * bounty_bps // 10_000
