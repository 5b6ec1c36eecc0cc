"""Which trace segments a challenge re-executes, and what that buys (integers only).

``draw_segments(sampler, n, s)``: min(s, n) distinct segments of the n = H/k, uniformly (a
partial Fisher-Yates over 0..n-1 driven by the challenge sampler, so the first draw is exactly
the single-segment draw of before), returned ascending.

``compute_catch_bps(n, s, challenge_bps, fake_bps, rounds)``: a provider that fakes a fraction
f = fake_bps / 10000 of its steps touches at least m = ceil(f·n) segments (fewest when the faked
steps are packed into whole segments: the cheater's best case). One round catches it when the
commitment is challenged (c = challenge_bps / 10000) and a drawn segment is faked:

    P_round = c · (1 − C(n − m, s') / C(n, s')),   s' = min(s, n)
    P_catch(rounds) = 1 − (1 − P_round)^rounds

computed exactly on integers and rounded down to basis points. ``compute_verifier_compute_bps``:
re-executed steps per provider step for one verifier, c · s' / n, in basis points (the start and
payload checks re-execute nothing).
"""

from __future__ import annotations

from math import comb

from abci_app.jobs.sampler import Sampler

BPS = 10_000


def draw_segments(s: Sampler, n: int, count: int) -> list[int]:
    """min(count, n) distinct segments of range(n), uniformly, ascending."""
    if n <= 0:
        raise ValueError("draw_segments: n must be positive")
    swapped: dict[int, int] = {}
    out: list[int] = []
    for i in range(min(count, n)):
        j = i + s.below(n - i)
        out.append(swapped.get(j, j))
        swapped[j] = swapped.get(i, i)
    return sorted(out)


def compute_faked_segments(n: int, fake_bps: int) -> int:
    """Fewest segments a provider faking fake_bps/10000 of its steps must touch: ceil(f·n)."""
    return min(n, -(-n * fake_bps // BPS))


def compute_catch_bps(n: int, s: int, challenge_bps: int, fake_bps: int, rounds: int = 1) -> int:
    """floor(10000 · P(caught within ``rounds`` rounds)) (see the module docstring)."""
    m = compute_faked_segments(n, fake_bps)
    if m == 0 or rounds <= 0:
        return 0
    k = min(s, n)
    a, b = comb(n - m, k), comb(n, k)
    miss_num = BPS * b - challenge_bps * (b - a)  # P(miss one round) = miss_num / (BPS · b)
    den = (BPS * b) ** rounds
    miss = miss_num**rounds
    return BPS - (-(-BPS * miss // den))


def compute_verifier_compute_bps(n: int, s: int, challenge_bps: int) -> int:
    """Steps one verifier re-executes per provider step, c · min(s, n) / n, in basis points."""
    return challenge_bps * min(s, n) // n
