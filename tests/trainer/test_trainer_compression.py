"""Compression: round trips, error feedback, ratios, canonical bytes, bad payloads."""

import math
import struct

import pytest
import torch

from trainer.commit import PayloadError, decode, encode
from trainer.compression import (
    AdaptivePolicy,
    CompressionState,
    make_codec,
    pack_bits,
    unpack_bits,
)

SPECS = [
    "none",
    "fp16",
    "int8",
    "int4",
    "topk:0.01",
    "topk:0.05+int8",
    "topk:0.01+int4",
    "lowrank:4",
    "lowrank:2+int8",
]


def tensors(seed=0):
    g = torch.Generator().manual_seed(seed)
    return {
        "w": torch.randn(64, 96, generator=g),
        "b": torch.randn(96, generator=g),
        "c": torch.randn(3, 5, 7, generator=g),
        "odd": torch.randn(65, generator=g),  # not a multiple of the block or 2
    }


@pytest.mark.parametrize("spec", SPECS)
def test_round_trip_shapes_dtypes_and_residual(spec):
    codec = make_codec(spec)
    t = tensors()
    st = CompressionState()
    payload = codec.compress(t, st)
    out = codec.decompress(decode(encode(payload)), {n: tuple(v.shape) for n, v in t.items()})
    assert set(out) == set(t)
    for n in t:
        assert out[n].shape == t[n].shape and out[n].dtype == torch.float32
        # error feedback: residual is exactly what was dropped
        assert torch.allclose(out[n] + st.residual[n], t[n], atol=1e-6)


def test_lossless_and_quantized_errors_are_bounded():
    t = tensors()
    out = make_codec("none").decompress(make_codec("none").compress(t, CompressionState()))
    assert all(torch.equal(out[n], t[n]) for n in t)
    for spec, bound in (("int8", 1 / 127), ("int4", 1 / 7)):
        c = make_codec(spec)
        out = c.decompress(c.compress(t, CompressionState()))
        for n in t:  # blockwise absmax: error <= half a step of the largest block
            assert (
                float((out[n] - t[n]).abs().max()) <= 0.5 * bound * float(t[n].abs().max()) + 1e-6
            )


def test_topk_keeps_largest_and_residual_is_sent_later():
    c = make_codec("topk:0.01")
    t = {"w": torch.arange(1000, dtype=torch.float32) - 500.0}
    st = CompressionState()
    out = c.decompress(c.compress(t, st))["w"]
    kept = out.nonzero().flatten().tolist()
    assert len(kept) == 10 and set(kept) <= set(range(6)) | set(range(990, 1000))
    # sending zeros next round flushes the residual's largest entries
    out2 = c.decompress(c.compress({"w": torch.zeros(1000)}, st))["w"]
    assert out2.count_nonzero() == 10
    assert not set(out2.nonzero().flatten().tolist()) & set(kept)
    # everything sent over many rounds adds up to the input
    total = out + out2
    for _ in range(200):
        total += c.decompress(c.compress({"w": torch.zeros(1000)}, st))["w"]
    assert torch.allclose(total, t["w"], atol=1e-4)


@pytest.mark.parametrize(
    "spec,lo,hi",
    [
        ("none", 0.99, 1.0),
        ("fp16", 1.9, 2.0),
        ("int8", 3.6, 4.0),
        ("int4", 6.5, 8.0),
        ("topk:0.01+int4", 60, 400),
        ("lowrank:2+int8", 100, 300),
    ],
)
def test_ratio_as_claimed(spec, lo, hi):
    codec = make_codec(spec)
    t = {"w": torch.randn(256, 512), "b": torch.randn(512)}
    p = codec.compress(t, CompressionState())
    shapes = {n: tuple(v.shape) for n, v in t.items()}
    assert codec.ratio(p) == pytest.approx(codec.nominal_ratio(shapes))
    assert len(encode(p)) == codec.estimate_bytes(shapes)
    assert lo <= codec.ratio(p) <= hi


@pytest.mark.parametrize("spec", SPECS)
def test_payload_bytes_identical_across_runs(spec):
    a = encode(make_codec(spec).compress(tensors(1), CompressionState()))
    b = encode(make_codec(spec).compress(tensors(1), CompressionState()))
    assert a == b


def test_bit_packing_round_trip():
    v = torch.tensor([0, 1, 5, 1023, 512, 7], dtype=torch.int64)
    assert torch.equal(unpack_bits(pack_bits(v, 10), 10, 6), v)
    assert pack_bits(v, 10).numel() == math.ceil(6 * 10 / 8)


def good_payload():
    return encode(make_codec("topk:0.05+int8").compress(tensors(), CompressionState()))


def test_invalid_truncated_payload():
    b = good_payload()
    for cut in (0, 3, 10, len(b) // 2, len(b) - 1):
        with pytest.raises(PayloadError, match="truncated|magic"):
            decode(b[:cut])


def test_invalid_trailing_bytes():
    with pytest.raises(PayloadError, match="trailing"):
        decode(good_payload() + b"\x00")


def test_invalid_wrong_version_and_magic():
    b = bytearray(good_payload())
    b[4:6] = struct.pack(">H", 99)
    with pytest.raises(PayloadError, match="version 99"):
        decode(bytes(b))
    with pytest.raises(PayloadError, match="magic"):
        decode(b"XXXX" + good_payload()[4:])


def test_invalid_shape_mismatch():
    codec = make_codec("topk:0.05+int8")
    p = codec.compress(tensors(), CompressionState())
    shapes = {n: tuple(e.shape) for n, e in p.entries.items()}
    shapes["w"] = (96, 64)
    with pytest.raises(PayloadError, match="shape"):
        codec.decompress(decode(encode(p)), shapes)
    # a part whose shape disagrees with the declared tensor shape
    p.entries["b"].parts["q"] = p.entries["b"].parts["q"][:-1]
    with pytest.raises(PayloadError, match="shape mismatch"):
        codec.decompress(decode(encode(p)))


def test_invalid_nan_and_inf():
    codec = make_codec("none")
    for bad in (float("nan"), float("inf"), float("-inf")):
        t = tensors()
        t["b"][3] = bad
        raw = encode(codec.compress(t, CompressionState()))
        with pytest.raises(PayloadError, match="NaN or inf"):
            decode(raw)


def test_invalid_absurd_sizes():
    b = bytearray(good_payload())
    # the first u64 dim of the first entry: find it after the header
    hdr = 4 + 4
    hdr += 1 + b[8]  # codec
    (meta_len,) = struct.unpack(">I", b[hdr : hdr + 4])
    hdr += 4 + meta_len + 4
    (name_len,) = struct.unpack(">H", b[hdr : hdr + 2])
    dims_at = hdr + 2 + name_len + 1 + 1
    b[dims_at : dims_at + 8] = struct.pack(">Q", 1 << 60)
    with pytest.raises(PayloadError, match="absurd"):
        decode(bytes(b))
    # absurd entry count
    c = bytearray(good_payload())
    c[hdr - 4 : hdr] = struct.pack(">I", 1 << 31)
    with pytest.raises(PayloadError, match="absurd"):
        decode(bytes(c))


def test_invalid_garbage_never_crashes():
    g = torch.Generator().manual_seed(3)
    good = good_payload()
    for i in range(300):
        b = bytearray(good)
        for _ in range(1 + i % 4):
            pos = int(torch.randint(len(b), (1,), generator=g))
            b[pos] = int(torch.randint(256, (1,), generator=g))
        try:
            p = decode(bytes(b))
            make_codec(p.codec).decompress(p)
        except (PayloadError, ValueError):
            pass  # ValueError: a corrupted codec name is rejected by make_codec


def test_invalid_codec_spec_names_accepted_forms():
    with pytest.raises(ValueError, match="topk:D"):
        make_codec("topk:2")
    with pytest.raises(ValueError, match="unknown quantizer"):
        make_codec("topk:0.1+int3")


def test_adaptive_policy_meets_budget_and_tightens():
    shapes = {"w": (256, 512), "b": (512,)}
    pol = AdaptivePolicy(budget_bytes=3000, quant="int4")
    c = pol.choose(0, shapes)
    assert c.estimate_bytes(shapes) <= 3000
    pol.observe(0, 5.0, 4.0, 3000)  # big improvement: no tightening
    assert pol.tighten == 1.0
    pol.observe(1, 4.0, 3.999, 3000)  # stable: tighten
    assert pol.tighten == 0.5
    c2 = pol.choose(2, shapes)
    assert c2.density < c.density and c2.estimate_bytes(shapes) <= 1500
    assert [e["event"] for e in pol.log] == ["choose", "observe", "observe", "choose"]
