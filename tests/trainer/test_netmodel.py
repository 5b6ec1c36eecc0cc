"""Byte accounting per worker and the sync wall-clock model (known answers)."""

import pytest

from trainer.netmodel import (
    allreduce_step_bytes,
    reveal_bytes_per_round,
    speedup,
    step_time_for,
    sync_bytes,
)


def test_sync_bytes_counts_receivers():
    # 4 workers: an all-gather through blobs serves the payload to 3 peers; a ring moves 1.5x
    assert sync_bytes(1000, 4, "upload") == 1000
    assert sync_bytes(1000, 4, "allgather") == 3000
    assert sync_bytes(1000, 4, "ring") == 1500
    with pytest.raises(ValueError):
        sync_bytes(1000, 4, "broadcast")


def test_reveal_bytes():
    # 5 % challenged, 1 segment: states 0, H/k, i, i+1 (4 x 12 B/param) + carry 4 B/param
    assert reveal_bytes_per_round(1000) == pytest.approx(0.05 * (4 * 12_000 + 4000))
    assert (
        reveal_bytes_per_round(1000, challenge_bps=10_000, segments=2, verifiers=3, carry=False)
        == 3 * 6 * 12_000
    )


def test_speedup_107b_known_answers():
    P, W, bw = 107e9, 20, 1e9
    assert allreduce_step_bytes(P, W, 2) == pytest.approx(1.9 * 2 * P)
    t = step_time_for(357, n_params=P, workers=W, bandwidth_bps=bw)
    assert t == pytest.approx(1.9 * 2 * P * 8 / bw / 356)
    # a codec small enough to hide: the speedup is the bound, exactly 357 at that step time
    s = speedup(
        n_params=P,
        workers=W,
        t_step=t,
        H=125,
        bits_per_param=0.1,
        bandwidth_bps=bw,
        mode="allgather",
    )
    assert s["speedup"] == pytest.approx(357)
    # fp16 through an all-gather cannot hide: 19 x 2P bytes per 125 steps
    s = speedup(
        n_params=P,
        workers=W,
        t_step=t,
        H=125,
        bits_per_param=16,
        bandwidth_bps=bw,
        mode="allgather",
    )
    assert s["speedup"] < 20
