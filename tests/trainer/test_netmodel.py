"""Byte accounting per worker and the sync wall-clock model (known answers)."""

import pytest

from trainer.netmodel import (
    HTTP_BYTES_PER_FETCH,
    MODEL_BYTES_PER_PARAM,
    TX_BYTES_PER_ROUND,
    allreduce_step_bytes,
    is_ring_reducible,
    reveal_bytes_per_round,
    round_overhead_bytes,
    round_traffic_per_worker,
    speedup,
    step_time_for,
    sync_bytes,
    sync_mode,
    verification_bytes_per_challenge,
)


def test_sync_bytes_counts_receivers():
    # 4 workers: an all-gather through blobs serves the payload to 3 peers; a ring moves 1.5x
    assert sync_bytes(1000, 4, "upload") == 1000
    assert sync_bytes(1000, 4, "allgather") == 3000
    assert sync_bytes(1000, 4, "ring") == 1500
    with pytest.raises(ValueError):
        sync_bytes(1000, 4, "broadcast")


def test_reveal_bytes():
    # 5 % challenged, 1 segment, one verifier: the last trace entry and the run's start
    # (2 x 12 B/param); a fresh start and an empty carry move nothing more
    assert reveal_bytes_per_round(1000) == pytest.approx(0.05 * 2 * 12_000)
    # every commitment, 2 runs, 3 verifiers + an audit seat in 40 % of challenges; payload and
    # a 5-entry trace list fetched too
    assert reveal_bytes_per_round(
        1000,
        challenge_bps=10_000,
        segments=2,
        verifiers=3,
        audit_bps=4_000,
        audit_verifiers=1,
        payload_bytes=1_100,
        trace_entries=5,
    ) == pytest.approx(3.4 * (3 * 12_000 + 1_100 + 5 * 32))
    # a carried start adds entry 0 and the carry (4 B/param)
    assert verification_bytes_per_challenge(1000, fresh=False, carry=True) == 3 * 12_000 + 4_000


def test_round_traffic_counts_both_directions_of_everything():
    # 4 participants, H = 100, 1 MB payload all-gathered: 3 MB out, 3 MB in
    r = round_traffic_per_worker(
        1e6,
        workers=4,
        H=100,
        payload_bytes=1e6,
        reveal_bytes=2e5,
        model_bytes=8e6,
        model_download_share=0.25,
        tx_bytes=5_000,
    )
    assert r["payloads"] == 6e6
    assert r["verification"] == 4e5  # served as a provider, fetched as a verifier
    assert r["models"] == 2e6
    assert r["total"] == 6e6 + 4e5 + 2e6 + 5_000
    # fp32 ring AllReduce: 2(W-1)/W x 4 B/param sent and as much received, every step
    assert r["allreduce"] == pytest.approx(2 * 100 * 1.5 * 4e6)
    assert r["reduction"] == pytest.approx(r["allreduce"] / r["total"])


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


def test_verification_bytes_share_the_link_with_the_sync():
    """extra_bytes (served + fetched, half of them per direction on a full-duplex link) join the
    sync; once they outlast H steps of compute they set the round's length."""
    P, W, bw = 1e9, 4, 1e9
    base = speedup(
        n_params=P, workers=W, t_step=1.0, H=10, bits_per_param=1, bandwidth_bps=bw, mode="ring"
    )
    assert base["diloco_s_per_step"] == pytest.approx(1.0)  # the sync hides behind compute
    slow = speedup(
        n_params=P,
        workers=W,
        t_step=1.0,
        H=10,
        bits_per_param=1,
        bandwidth_bps=bw,
        mode="ring",
        extra_bytes=2 * 10e9,  # 10 GB each way: 80 s at 1 Gbps
    )
    t_sync = (1.5 * P / 8 + 10e9) * 8 / bw
    assert slow["diloco_s_per_step"] == pytest.approx(t_sync / 10)
    assert slow["speedup"] < base["speedup"]


@pytest.mark.parametrize("codec", ["none", "dense", "dense+fp16"])
def test_dense_floats_are_the_only_ring_reducible_payloads(codec):
    assert is_ring_reducible(codec)
    assert sync_mode(codec) == "ring"


@pytest.mark.parametrize(
    "codec",
    [
        "int8",
        "int4",
        "int2",
        "dense+int8",
        "dense+int4",
        "dense+int2",
        "stride:1+int2",
        "stride:1",  # fragments follow each worker's own counter: conservatively gathered
        "lowrank:4+int8",
        "lowrank:64",  # fp32 factors: a sum of products is not the product of sums
        "topk:0.01+int4",
        "chunk:64/4096+int2",
        "tchunk:64/4096+int2",
    ],
)
def test_invalid_ring_for_quantized_lowrank_and_sparse_codecs(codec):
    # per-block scales, per-worker factors or per-worker positions: all-gathered
    assert not is_ring_reducible(codec)
    assert sync_mode(codec) == "allgather"


def test_int4_rows_are_all_gather_bytes():
    # the correction: a 4-worker int4 row is (W-1) x its payload, not 2(W-1)/W x, so
    # its reduction halves; at W = 20 (the 107B configuration) it is 10x smaller
    up = 25_899.0
    assert sync_bytes(up, 4, sync_mode("int4")) == 3 * up
    assert sync_bytes(up, 4, sync_mode("int4")) / sync_bytes(up, 4, "ring") == 2
    assert sync_bytes(up, 20, sync_mode("int4")) / sync_bytes(up, 20, "ring") == pytest.approx(10)


def test_round_overhead_bytes():
    # measured constants (benchmarks/traffic_runs/h500_k50_10rounds.json)
    assert (TX_BYTES_PER_ROUND, HTTP_BYTES_PER_FETCH, MODEL_BYTES_PER_PARAM) == (930, 528, 8)
    o = round_overhead_bytes(42_880, 4, 0.5)
    assert o.txs == 930
    assert o.blob_heads == 3 * 528  # the heads of the W-1 fetches, per worker on average
    assert o.models == 0.5 * 8 * 42_880  # half the participants fetch the base
    assert o.total == 930 + 3 * 528 + 171_520
    # the same W train every round: nobody downloads a base
    assert round_overhead_bytes(42_880, 4, 0.0).models == 0


@pytest.mark.parametrize("share", [-0.1, 1.5])
def test_invalid_sitout_share(share):
    with pytest.raises(ValueError):
        round_overhead_bytes(1000, 4, share)
