"""Chunked top-k codec (SparseLoCo-style): round trip, EF decay, ratio, bad payloads."""

import math

import pytest
import torch

from trainer.commit import PayloadError, decode, encode
from trainer.compression import (
    AdaptivePolicy,
    CompressionState,
    index_width,
    layout_id,
    make_codec,
)


def tensors(seed=0):
    g = torch.Generator().manual_seed(seed)
    return {
        "w": torch.randn(64, 96, generator=g),  # 6144 values
        "b": torch.randn(96, generator=g),
        "c": torch.randn(3, 5, 7, generator=g),
        "odd": torch.randn(65, generator=g),
    }


def shapes_of(t):
    return {n: tuple(v.shape) for n, v in t.items()}


CHUNK_SPECS = [
    "chunk:64/4096+int2",
    "chunk:16/512+int4",
    "chunk:8/256+int8",
    "chunk:32/1024+fp16",
    "chunk:5/100",
    "chunk:64+int2",
]


@pytest.mark.parametrize("spec", CHUNK_SPECS)
def test_chunk_round_trip_and_residual(spec):
    c = make_codec(spec)
    t = tensors()
    st = CompressionState()
    payload = c.compress(t, st)
    raw = encode(payload)
    assert len(raw) == c.estimate_bytes(shapes_of(t))
    out = c.decompress(decode(raw), shapes_of(t))
    assert set(out) == set(t)
    n_total = sum(v.numel() for v in t.values())
    kept = 0
    for n in t:
        assert out[n].shape == t[n].shape and out[n].dtype == torch.float32
        assert torch.allclose(out[n] + st.residual[n], t[n], atol=1e-6)
        kept += int((out[n] != 0).sum())
    lens = [c.chunk_size] * (n_total // c.chunk_size) + (
        [n_total % c.chunk_size] if n_total % c.chunk_size else []
    )
    assert kept <= sum(min(c.chunk_k, ln) for ln in lens)
    assert encode(c.compress(t, CompressionState())) == raw  # canonical, deterministic


def test_chunk_keeps_the_largest_per_chunk():
    c = make_codec("chunk:2/4")
    t = {"a": torch.tensor([1.0, -5.0, 0.5, 3.0, 0.1, 0.2, -0.25, 9.0, 7.0])}
    out = c.decompress(c.compress(t, CompressionState(error_feedback=False)), {"a": (9,)})["a"]
    assert out.tolist() == [0.0, -5.0, 0.0, 3.0, 0.0, 0.0, -0.25, 9.0, 7.0]


def test_chunk_ratio_and_index_width():
    shapes = {"w": (4096 * 8,)}
    c = make_codec("chunk:64/4096+int2")
    b = c.estimate_bytes(shapes)
    # 8 chunks x 64 x (12-bit offset + 2-bit value) + 8 bf16 scales + header
    body = math.ceil(8 * 64 * index_width(4096) / 8) + math.ceil(8 * 64 * 2 / 8) + 8 * 2
    assert body <= b <= body + 300
    assert 4 * 4096 * 8 / b > 30  # ~1.6 % density at 14 bits per kept value


def test_int2_levels_and_ef_decay():
    c = make_codec("chunk:4/4+int2")
    t = {"a": torch.tensor([3.0, 1.0, -1.0, -3.0])}
    out = c.decompress(c.compress(t, CompressionState()), {"a": (4,)})["a"]
    # scale = absmax / 1.5 = 2 (exact in bfloat16): levels -3, -1, 1, 3
    assert out.tolist() == [3.0, 1.0, -1.0, -3.0]
    st = CompressionState(ef_decay=0.5)
    c1 = make_codec("chunk:1/4")
    c1.compress({"a": torch.tensor([4.0, 2.0, 0.0, 0.0])}, st)  # sends 4, keeps residual 2
    assert st.residual["a"].tolist() == [0.0, 2.0, 0.0, 0.0]
    out = c1.decompress(c1.compress({"a": torch.zeros(4)}, st), {"a": (4,)})["a"]
    assert out.tolist() == [0.0, 1.0, 0.0, 0.0]  # 0.5 * residual


def test_chunk_needs_shapes_and_the_same_layout():
    c = make_codec("chunk:16/512+int2")
    t = tensors()
    raw = encode(c.compress(t, CompressionState()))
    with pytest.raises(PayloadError, match="shapes"):
        c.decompress(decode(raw))
    other = dict(shapes_of(t))
    other["w"] = (96, 64)  # same size, other layout
    assert layout_id(other) != layout_id(shapes_of(t))
    with pytest.raises(PayloadError, match="layout"):
        c.decompress(decode(raw), other)
    with pytest.raises(PayloadError, match="codec"):
        make_codec("chunk:8/512+int2").decompress(decode(raw), shapes_of(t))


def _tamper(raw, part, fn):
    p = decode(raw)
    p.entries["flat"].parts[part] = fn(p.entries["flat"].parts[part].clone())
    return encode(p)


def test_chunk_bad_payloads_rejected():
    c = make_codec("chunk:16/512+int2")
    t = tensors()
    sh = shapes_of(t)
    raw = encode(c.compress(t, CompressionState()))

    for bad in (
        _tamper(raw, "idx", lambda x: x.flip(0)),
        _tamper(raw, "idx", lambda x: torch.full_like(x, 255)),
        _tamper(raw, "q", lambda x: x[:-1]),
        _tamper(raw, "s", lambda x: -x.abs() - 1),
    ):
        with pytest.raises(PayloadError):
            c.decompress(decode(bad), sh)
    # non-zero padding bits in the last idx byte (canonical encoding)
    kt = sum(min(16, ln) for ln in [512] * (6617 // 512) + [6617 % 512])
    if (kt * index_width(512)) % 8:
        bad = _tamper(raw, "idx", lambda x: torch.cat([x[:-1], (x[-1:] | 0x80)]))
        with pytest.raises(PayloadError):
            c.decompress(decode(bad), sh)
    for cut in (1, 7, len(raw) // 2):
        with pytest.raises(PayloadError):
            decode(raw[:-cut])


def test_chunk_spec_errors():
    for bad in (
        "chunk:0/4096",
        "chunk:5000/4096",
        "chunk:x",
        "topk:0.1+int3",
        "int3",
    ):  # int2 is a codec now
        with pytest.raises(ValueError):
            make_codec(bad)
    assert make_codec("chunk:64+int2").chunk_size == 4096


def test_adaptive_chunk_family_fits_budget_and_adapts():
    shapes = {"w": (256, 512), "b": (512,)}
    pol = AdaptivePolicy(budget_bytes=20000, family="chunk")
    c = pol.choose(0, shapes)
    assert c.family == "chunk" and c.estimate_bytes(shapes) <= 20000
    pol.observe(0, 4.0, 3.999, 1)  # stable: tighten
    c2 = pol.choose(1, shapes)
    assert c2.estimate_bytes(shapes) <= 10000 and c2.chunk_k < c.chunk_k
    pol.observe(1, 3.999, 4.2, 1)  # loss got worse: loosen
    assert pol.tighten == 1.0


# ---------------------------------------------------------------- stride fragments

STRIDE_SPECS = [
    "stride:9+int2",
    "stride:5+int1",
    "stride:4+int4",
    "stride:3+int8",
    "stride:2+fp16",
    "stride:7",
]


@pytest.mark.parametrize("spec", STRIDE_SPECS)
def test_stride_round_trip_fragments_and_residual(spec):
    c = make_codec(spec)
    t = tensors()
    sh = shapes_of(t)
    st = CompressionState()
    F = c.stride
    n_total = sum(v.numel() for v in t.values())
    sent_total = {n: torch.zeros_like(v) for n, v in t.items()}
    for r in range(F):
        inp = t if r == 0 else {n: torch.zeros_like(v) for n, v in t.items()}
        before = {n: st.residual.get(n, torch.zeros_like(v)) for n, v in t.items()}
        raw = encode(c.compress(inp, st))
        assert len(raw) <= c.estimate_bytes(sh)
        p = decode(raw)
        assert p.meta["offset"] == r
        out = c.decompress(p, sh)
        for n in t:
            assert torch.allclose(out[n] + st.residual[n], inp[n] + before[n], atol=1e-5)
            sent_total[n] += out[n]
        flat = torch.cat([out[n].reshape(-1) for n in sorted(out)])
        nz = torch.nonzero(flat).reshape(-1)
        assert bool((nz % F == r).all())  # only fragment r is sent
    if c.quant in ("fp32", "fp16"):  # after F rounds every position was sent once
        for n in t:
            assert torch.allclose(sent_total[n], t[n], atol=2e-3 * float(t[n].abs().max()))
    assert st.sent == F and n_total > F


def test_stride_int1_and_int2_levels():
    st = CompressionState()
    c = make_codec("stride:1+int1")
    out = c.decompress(c.compress({"a": torch.tensor([1.0, -3.0, 2.0, -2.0])}, st), {"a": (4,)})[
        "a"
    ]
    assert out.tolist() == [2.0, -2.0, 2.0, -2.0]  # sign x mean|x|
    c2 = make_codec("stride:1+int2")
    v = torch.tensor([2.0, -2.0, 0.5, -0.5, 2.0, -2.0, 0.5, -0.5])  # rms = sqrt(2.125)
    out = c2.decompress(c2.compress({"a": v}, CompressionState()), {"a": (8,)})["a"]
    s = float(torch.tensor(2.125).sqrt().to(torch.bfloat16))
    assert torch.allclose(out, torch.tensor([1.5, -1.5, 0.5, -0.5] * 2) * s)


def test_stride_bad_payloads_rejected():
    c = make_codec("stride:9+int2")
    t = tensors()
    sh = shapes_of(t)
    raw = encode(c.compress(t, CompressionState()))
    p = decode(raw)
    p.meta["offset"] = 9
    with pytest.raises(PayloadError, match="offset"):
        c.decompress(p, sh)
    p = decode(raw)
    p.meta["offset"] = 3  # declares another fragment: its size differs or is accepted as such
    try:
        c.decompress(p, sh)
    except PayloadError:
        pass
    for bad in (_tamper(raw, "q", lambda x: x[:-1]), _tamper(raw, "s", lambda x: -x.abs() - 1)):
        with pytest.raises(PayloadError):
            c.decompress(decode(bad), sh)
    with pytest.raises(PayloadError, match="shapes"):
        c.decompress(decode(raw))
    with pytest.raises(PayloadError, match="codec"):
        make_codec("stride:8+int2").decompress(decode(raw), sh)
    for bad in ("stride:0", "stride:x", "stride:4+int3", "chunk:4+int1"):
        with pytest.raises(ValueError):
            make_codec(bad)
