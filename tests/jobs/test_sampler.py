"""The participant sampler (abci_app/jobs/sampler.py): exact first-pick law, inclusion
frequencies for k > 1 against the exact successive-sampling probabilities, no repeats, zero
weights never drawn, uniform below() and shuffle(). Seeds are fixed, so each check is
deterministic; tolerances are 4.5 standard deviations of the binomial frequency."""

import hashlib
import itertools
import math

import pytest

from abci_app.jobs.sampler import Sampler, shuffle, weighted_sample

N = 20_000


def seeds(n: int, tag: bytes = b""):
    for i in range(n):
        yield hashlib.sha256(tag + i.to_bytes(8, "big")).digest()


def within(freq: float, p: float, n: int, z: float = 4.5) -> bool:
    return abs(freq - p) <= z * math.sqrt(p * (1 - p) / n) + 1e-12


def exact_inclusion(weights: list[int], k: int) -> list[float]:
    """P(i drawn) for successive sampling without replacement, by enumerating ordered draws."""
    n = len(weights)
    out = [0.0] * n
    for order in itertools.permutations(range(n), k):
        p, left = 1.0, sum(weights)
        for i in order:
            p *= weights[i] / left
            left -= weights[i]
        for i in order:
            out[i] += p
    return out


def test_first_pick_tracks_stake_times_reputation():
    # (bond, reputation) -> weight bond * reputation
    cands = [
        (b"a", 1_000 * 5_000),
        (b"b", 2_000 * 5_000),
        (b"c", 1_000 * 10_000),
        (b"d", 4_000 * 2_500),
    ]
    total = sum(w for _, w in cands)
    counts = {a: 0 for a, _ in cands}
    for s in seeds(N):
        (x,) = weighted_sample(s, cands, 1)
        counts[x] += 1
    for a, w in cands:
        assert within(counts[a] / N, w / total, N), (a, counts[a] / N, w / total)


@pytest.mark.parametrize("k", [2, 3])
def test_inclusion_frequency_matches_successive_sampling(k):
    weights = [1, 2, 3, 6, 8]
    cands = [(bytes([i]), w) for i, w in enumerate(weights)]
    exact = exact_inclusion(weights, k)
    counts = [0] * len(weights)
    for s in seeds(N, b"k%d" % k):
        got = weighted_sample(s, cands, k)
        assert len(got) == k and len(set(got)) == k  # no provider twice in a round
        for x in got:
            counts[x[0]] += 1
    for i, p in enumerate(exact):
        assert within(counts[i] / N, p, N), (i, counts[i] / N, p)


def test_zero_weight_never_drawn_and_k_larger_than_pool():
    cands = [(b"a", 0), (b"b", 5), (b"c", 0), (b"d", 1)]
    for s in seeds(500):
        got = weighted_sample(s, cands, 10)
        assert sorted(got) == [b"b", b"d"]
    assert weighted_sample(b"x", [], 3) == []
    with pytest.raises(ValueError):
        weighted_sample(b"x", [(b"a", -1)], 1)


def test_deterministic_and_seed_sensitive():
    cands = [(bytes([i]), i + 1) for i in range(10)]
    assert weighted_sample(b"seed", cands, 4) == weighted_sample(b"seed", cands, 4)
    draws = {tuple(weighted_sample(s, cands, 4)) for s in seeds(50)}
    assert len(draws) > 40


def test_big_weights_are_exact():
    # weights far above 2^64 (bond up to 2^64 x reputation 10^4) still follow w / W
    big = 2**70
    cands = [(b"a", big), (b"b", 3 * big)]
    hits = sum(weighted_sample(s, cands, 1) == [b"a"] for s in seeds(N, b"big"))
    assert within(hits / N, 0.25, N)


def test_below_is_uniform():
    s = Sampler(b"uniform")
    n, draws = 7, 70_000
    counts = [0] * n
    for _ in range(draws):
        counts[s.below(n)] += 1
    chi2 = sum((c - draws / n) ** 2 / (draws / n) for c in counts)
    assert chi2 < 22.5  # df = 6, p ~ 0.001
    with pytest.raises(ValueError):
        s.below(0)


def test_shuffle_is_a_uniform_permutation():
    counts: dict[tuple[int, ...], int] = {}
    for sd in seeds(12_000, b"perm"):
        p = tuple(shuffle(sd, 3))
        counts[p] = counts.get(p, 0) + 1
    assert len(counts) == 6
    for c in counts.values():
        assert within(c / 12_000, 1 / 6, 12_000)
    assert sorted(shuffle(b"x", 100)) == list(range(100))


def test_chain_draw_weights_by_bond_times_reputation():
    """On chain: a provider with twice the bond is drawn about twice as often (1 of 3 slots)."""
    from abci_app.jobs.rounds import compute_draw_seed

    bonds = {b"p1": 2_000, b"p2": 4_000, b"p3": 2_000}
    reps = {b"p1": 5_000, b"p2": 5_000, b"p3": 10_000}
    cands = [(a, bonds[a] * reps[a]) for a in sorted(bonds)]
    counts = dict.fromkeys(bonds, 0)
    n = 6_000
    for i in range(n):
        seed = compute_draw_seed(hashlib.sha256(b"block%d" % i).digest(), 1, i)
        counts[weighted_sample(seed, cands, 1)[0]] += 1
    assert (
        within(counts[b"p1"] / n, 0.2, n)
        and within(counts[b"p2"] / n, 0.4, n)
        and within(counts[b"p3"] / n, 0.4, n)
    )
