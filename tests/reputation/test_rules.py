"""The pure integer reputation rules (abci_app/reputation/rules.py): known answers, the range
0..MAX kept for every input, gains truncate and losses round up (a positive reputation with a
positive loss rate always drops), and out-of-range input is refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from abci_app.reputation.rules import (
    MAX_REPUTATION,
    compute_fraud,
    compute_gain,
    compute_loss,
)

reps = st.integers(min_value=0, max_value=MAX_REPUTATION)
bps = st.integers(min_value=0, max_value=10_000)


def test_known_answers():
    assert compute_gain(5_000, 1_000) == 5_500
    assert compute_gain(9_999, 1_000) == 9_999  # 1 * 1000 // 10000 = 0: a gain truncates
    assert compute_loss(5_000, 500) == 4_750
    assert compute_loss(1, 1) == 0  # a loss rounds up: ceil(1 * 1 / 10000) = 1
    assert compute_loss(10_000, 10_000) == 0
    assert compute_fraud(9_000) == 0


@pytest.mark.parametrize("rep", [-1, MAX_REPUTATION + 1, 2**64])
def test_invalid_reputation_out_of_range(rep):
    with pytest.raises(ValueError, match="out of range"):
        compute_gain(rep, 100)
    with pytest.raises(ValueError, match="out of range"):
        compute_loss(rep, 100)


@given(reps, bps)
def test_gain_moves_toward_the_maximum_and_stays_in_range(rep, g):
    new = compute_gain(rep, g)
    assert rep <= new <= MAX_REPUTATION
    assert new - rep == (MAX_REPUTATION - rep) * g // 10_000


@given(reps, bps)
def test_loss_stays_in_range_and_always_bites(rep, loss):
    new = compute_loss(rep, loss)
    assert 0 <= new <= rep
    if rep > 0 and loss > 0:
        assert new < rep


@given(reps, bps, bps)
def test_a_gain_then_a_loss_never_leaves_the_range(rep, g, loss):
    assert 0 <= compute_loss(compute_gain(rep, g), loss) <= MAX_REPUTATION
