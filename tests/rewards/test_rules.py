"""The pure integer reward rules (abci_app/rewards/rules.py): known answers, and for any budget,
weights and order: nobody is paid more than the budget allows, truncation never creates money,
weight 0 is never paid, and the result does not depend on the order of the inputs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from abci_app.rewards.rules import compute_bounty, compute_participant_payouts, compute_shares

U64 = 2**64 - 1
addrs = st.binary(min_size=20, max_size=20)
weights = st.integers(min_value=0, max_value=U64)


def test_known_answers():
    # budget 10, 4 drawn, 2 accepted with weights 1 and 3: pool 10*2/4 = 5 split 1:3 (truncating)
    assert compute_participant_payouts(10, 4, [(b"b", 3), (b"a", 1)]) == [(b"a", 1), (b"b", 3)]
    assert compute_shares(100, [(b"x", 1), (b"y", 2), (b"x", 1)]) == [(b"x", 50), (b"y", 50)]
    assert compute_shares(10, [(b"x", 1), (b"y", 2)]) == [(b"x", 3), (b"y", 6)]  # 1 stays
    assert compute_bounty(4_000_000_000, 2_000) == 800_000_000
    assert compute_bounty(9, 2_000) == 1  # truncates


def test_invalid_more_accepted_than_drawn():
    with pytest.raises(ValueError, match="more accepted"):
        compute_participant_payouts(10, 1, [(b"a", 1), (b"b", 1)])


def test_nothing_to_split_pays_nobody():
    assert compute_participant_payouts(10, 0, [(b"a", 1)]) == []
    assert compute_participant_payouts(10, 3, []) == []
    assert compute_participant_payouts(10, 3, [(b"a", 0), (b"b", 0)]) == []
    assert compute_shares(0, [(b"a", 1)]) == []
    assert compute_shares(10, [(b"a", 0)]) == []


@given(
    budget=st.integers(min_value=0, max_value=U64),
    extra=st.integers(min_value=0, max_value=8),
    accepted=st.dictionaries(addrs, weights, min_size=1, max_size=8),
    data=st.data(),
)
def test_participant_payouts_never_exceed_the_accepted_slots(budget, extra, accepted, data):
    items = list(accepted.items())
    n = len(items) + extra
    out = compute_participant_payouts(budget, n, items)
    assert sum(p for _, p in out) <= budget * len(items) // n <= budget
    assert all(p > 0 for _, p in out)
    assert [a for a, _ in out] == sorted(a for a, _ in out)
    paid = dict(out)
    assert all(accepted[a] > 0 for a in paid)  # weight 0 (quality 0) is never paid
    # a larger weight never earns less
    for a, wa in items:
        for b, wb in items:
            if wa >= wb:
                assert paid.get(a, 0) >= paid.get(b, 0)
    shuffled = data.draw(st.permutations(items))
    assert compute_participant_payouts(budget, n, shuffled) == out


@given(
    budget=st.integers(min_value=0, max_value=U64),
    ws=st.lists(st.tuples(addrs, weights), max_size=10),
    data=st.data(),
)
def test_shares_never_exceed_the_budget_and_lose_less_than_one_per_recipient(budget, ws, data):
    out = compute_shares(budget, ws)
    total = sum(p for _, p in out)
    assert total <= budget
    recipients = {a for a, w in ws}
    if budget > 0 and sum(w for _, w in ws) > 0:
        assert budget - total < max(1, len(recipients))
    assert [a for a, _ in out] == sorted({a for a, _ in out})
    assert compute_shares(budget, data.draw(st.permutations(ws))) == out


@given(st.integers(min_value=0, max_value=U64), st.integers(min_value=0, max_value=10_000))
def test_bounty_is_at_most_the_slash(slashed, bps):
    b = compute_bounty(slashed, bps)
    assert 0 <= b <= slashed
    assert b == slashed * bps // 10_000
