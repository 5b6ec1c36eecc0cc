"""dense+int2: every value, 2-bit codes per block of 64 with a float32 scale (2.5 bits/value)."""

import hashlib

import pytest
import torch

from abci_app.jobs.policy import PolicyError, parse_policy
from trainer.commit import PayloadError, decode, encode
from trainer.compression import CompressionState, codec_from_payload, make_codec


def test_dense_int2_round_trip_size_and_known_answer():
    g = torch.Generator().manual_seed(5)
    t = {"w": torch.randn(33, 7, generator=g), "b": torch.randn(5, generator=g)}
    shapes = {n: tuple(v.shape) for n, v in t.items()}
    c = make_codec("int2")
    assert c.name == "dense+int2" and parse_policy("dense+int2").quant == "int2"
    st = CompressionState()
    b = encode(c.compress(t, st))
    assert len(b) == c.estimate_bytes(shapes)
    d = codec_from_payload(decode(b)).decompress(decode(b), shapes)
    for n in t:
        # error feedback keeps what was not sent
        assert torch.allclose(d[n] + st.residual[n], t[n], atol=1e-6)
    # "b" is one block: four levels +-0.5 s, +-1.5 s with s = absmax / 1.5
    assert set(torch.unique(d["b"] / (t["b"].abs().max() / 1.5)).tolist()) <= {-1.5, -0.5, 0.5, 1.5}
    assert hashlib.sha256(b).hexdigest() == KNOWN
    # a 4096 x 4096 matrix: 2 bits + 32/64 bits of scale per value
    assert make_codec("dense+int2").estimate_bytes(
        {"w": (4096, 4096)}
    ) * 8 / 4096**2 == pytest.approx(2.5, abs=1e-3)


def test_dense_int2_rejects_bad_padding_and_is_dense_only():
    t = {"b": torch.ones(5)}
    c = make_codec("dense+int2")
    p = c.compress(t, CompressionState())
    q = bytearray(p.entries["b"].parts["q"].numpy().tobytes())
    q[-1] |= 0x80  # 5 codes = 10 bits: the top bits of the second byte are padding
    p.entries["b"].parts["q"] = torch.tensor(list(q), dtype=torch.uint8)
    with pytest.raises(PayloadError):
        c.decompress(p, {"b": (5,)})
    with pytest.raises(PolicyError):
        parse_policy("topk:0.1+int2")


KNOWN = "f5314e5c0743b7b7d6a60c6d3d54a0f0988a6164c23286a21de0b775f055b439"  # pinned on first run
