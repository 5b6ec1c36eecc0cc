"""tchunk:K/C[+q]: chunked top-k whose chunks stay inside each tensor (SparseLoCo / DeMo)."""

import hashlib

import pytest
import torch

from abci_app.jobs.policy import PolicyError, canonical_policy, parse_policy
from trainer.commit import PayloadError, decode, encode
from trainer.compression import CompressionState, codec_from_payload, make_codec


def _tensors():
    g = torch.Generator().manual_seed(7)
    # a bias with small ones
    return {
        "big": torch.randn(40, 16, generator=g) * 100.0,  # a matrix with large values
        "bias": torch.randn(16, generator=g) * 0.01,
    }


def test_grammar_and_registry():
    assert parse_policy("tchunk:8/64+int2").canonical == "tchunk:8/64+int2"
    assert canonical_policy("tchunk:8+int2") == "tchunk:8/4096+int2"
    with pytest.raises(PolicyError) as e:
        parse_policy("tchunk:8/64+int1")
    assert e.value.reason == "quantizer"
    with pytest.raises(PolicyError):
        parse_policy("tchunk:65/64")
    assert make_codec("tchunk:8/64+int2").name == "tchunk:8/64+int2"


def test_chunks_stay_within_each_tensor():
    t = _tensors()
    shapes = {n: tuple(v.shape) for n, v in t.items()}
    per = make_codec("tchunk:4/64+int2")
    flat = make_codec("chunk:4/64+int2")
    dp = per.decompress(decode(encode(per.compress(t, CompressionState()))), shapes)
    df = flat.decompress(decode(encode(flat.compress(t, CompressionState()))), shapes)
    # per tensor: the bias keeps 4 of its 16 values; concatenated, the bias shares its chunk
    # with the matrix, whose 100x larger values take every slot
    assert int((dp["bias"] != 0).sum()) == 4
    assert int((df["bias"] != 0).sum()) == 0
    assert int((dp["big"] != 0).sum()) == 4 * 10  # 640 values = 10 chunks of 64


def test_round_trip_error_feedback_and_known_answer():
    t = _tensors()
    shapes = {n: tuple(v.shape) for n, v in t.items()}
    c = make_codec("tchunk:8/64+int2")
    st = CompressionState()
    b = encode(c.compress(t, st))
    assert len(b) == c.estimate_bytes(shapes)
    d = codec_from_payload(decode(b)).decompress(decode(b), shapes)
    for n in t:  # error feedback: input = decoded + residual
        assert torch.allclose(d[n] + st.residual[n], t[n], atol=1e-5)
    assert hashlib.sha256(b).hexdigest() == KNOWN
    with pytest.raises(PayloadError):
        c.decompress(decode(b), {"big": (40, 16), "bias": (17,)})


KNOWN = "4e8682ca1346ac6a25155e61bb4aed5ca750cff3d44eebcbad18207e07affc04"  # pinned on first run
