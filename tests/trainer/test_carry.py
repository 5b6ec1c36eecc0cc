"""carry_after: the carry a verifier rebuilds from a committed payload (tolerance mode) is the
one the provider's own compression left, for every codec family."""

import pytest
import torch

from trainer.carry import carry_after
from trainer.commit import encode
from trainer.compression import CompressionState, make_codec


@pytest.mark.parametrize("spec", ["dense+int8", "topk:0.1", "lowrank:2", "chunk:4/32", "stride:4"])
def test_carry_after_equals_the_providers_compression_state(spec: str) -> None:
    g = torch.Generator().manual_seed(0)
    delta = {"a.weight": torch.randn(16, 8, generator=g), "b.bias": torch.randn(8, generator=g)}
    shapes = {n: tuple(t.shape) for n, t in delta.items()}
    provider = CompressionState()
    payload = encode(make_codec(spec).compress(delta, provider))
    out = carry_after(delta, CompressionState(), payload, shapes)
    assert out.sent == 1
    assert sorted(out.residual) == sorted(provider.residual) == sorted(delta)
    assert all(torch.equal(out.residual[n], provider.residual[n]) for n in delta)
    # low rank also carries its warm-start Q; the other families carry none
    assert sorted(out.q_warm) == sorted(provider.q_warm)
    assert all(torch.equal(out.q_warm[n], provider.q_warm[n]) for n in provider.q_warm)
    assert bool(provider.q_warm) == spec.startswith("lowrank")
