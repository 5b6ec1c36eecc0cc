"""abci_app/jobs/probe.py: the integer rules of tolerance-mode probes (known answers)."""

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from abci_app.jobs.probe import (
    PROBE_DIM,
    PROBE_FLOOR,
    PROBE_LIMIT,
    check_probe,
    compute_probe_evidence,
    compute_probe_ppm,
    encode_probe,
    is_probe_within,
)


def test_encode_probe_known_answer():
    p = [1, -1] + [0] * (PROBE_DIM - 2)
    b = encode_probe(p)
    assert len(b) == 8 * PROBE_DIM
    assert b[:16] == bytes.fromhex("0000000000000001ffffffffffffffff")
    assert compute_probe_evidence(p) == hashlib.sha256(b"loconet/probe-evidence/v1" + b).digest()


def test_check_probe_refuses_size_and_range():
    assert check_probe([0] * PROBE_DIM) == ""
    assert check_probe([0] * (PROBE_DIM - 1))
    assert check_probe([PROBE_LIMIT] + [0] * (PROBE_DIM - 1))
    with pytest.raises(ValueError):
        encode_probe([-PROBE_LIMIT] + [0] * (PROBE_DIM - 1))


def test_probe_bound_is_ten_times_the_tolerance_capped_at_ten_percent():
    assert compute_probe_ppm(1_000) == 10_000
    assert compute_probe_ppm(50_000) == compute_probe_ppm(10**6) == 100_000


def test_is_probe_within_at_the_boundary():
    claimed = [10**9] * PROBE_DIM  # |claimed|_1 = 32e9; 1 % of it = 3.2e8, + floor 4096 x 32
    slack = 10**9 * PROBE_DIM // 100 + PROBE_FLOOR * PROBE_DIM
    at = [claimed[0] + slack] + claimed[1:]
    over = [claimed[0] + slack + 1] + claimed[1:]
    assert is_probe_within(claimed, at, 1_000)
    assert not is_probe_within(claimed, over, 1_000)
    assert not is_probe_within(claimed, [0] * PROBE_DIM, 1_000)  # a guess of no movement
    assert not is_probe_within(claimed, claimed[:-1], 1_000)
    # a segment that does not move: within the floor
    assert is_probe_within([0] * PROBE_DIM, [PROBE_FLOOR] * PROBE_DIM, 1)


@given(st.lists(st.integers(-(2**50), 2**50), min_size=PROBE_DIM, max_size=PROBE_DIM))
def test_the_own_probe_is_always_within(p):
    assert is_probe_within(p, p, 1)
