"""trainer.portable_init: a job's initial model from a seed is the same bytes on every machine
(unlike torch's normal_, whose CPU kernel depends on the CPU's vector extensions)."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import pytest
import torch

from node.paths import PROJECT_ROOT
from trainer.commit import KIND_MODEL, decode
from trainer.model import Block, GPTConfig
from trainer.portable_init import (
    check_model_bytes,
    config_from_job,
    initial_model_bytes,
    portable_init_model,
)
from trainer.state import model_hash

TINY = GPTConfig.preset("tiny")
# pinned: if this changes, every job created with --init-seed N names another initial model
KNOWN_TINY_SEED0 = "6705f7a5a39dcadbb1a2e16fc7b382ba7cacb52027ec3ab62c29f41a3eb4d017"


def test_known_answer_tiny_seed0() -> None:
    assert hashlib.sha256(initial_model_bytes(TINY, 0)).hexdigest() == KNOWN_TINY_SEED0


CHILD = """
import hashlib, torch
from trainer.model import GPTConfig
from trainer.portable_init import initial_model_bytes
model = initial_model_bytes(GPTConfig.preset("small"), 7)
print(torch.backends.cpu.get_cpu_capability(), hashlib.sha256(model).hexdigest())
"""


def test_same_bytes_whatever_cpu_kernels_torch_uses() -> None:
    """A child forced onto torch's portable kernels (ATEN_CPU_CAPABILITY=default) makes the same
    bytes as this process (AVX2/AVX-512 kernels where the CPU has them), where init_model
    differs."""
    r = subprocess.run(
        [sys.executable, "-c", CHILD],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"ATEN_CPU_CAPABILITY": "default", "PATH": "/usr/bin:/bin"},
        check=True,
    )
    kernel, digest = r.stdout.split()
    assert kernel == "DEFAULT"
    here = torch.backends.cpu.get_cpu_capability()
    assert (
        digest == hashlib.sha256(initial_model_bytes(GPTConfig.preset("small"), 7)).hexdigest()
    ), here


def test_bytes_are_the_canonical_model_and_hash_like_the_trainer() -> None:
    buf = initial_model_bytes(TINY, 3)
    p = decode(buf, expected_kind=KIND_MODEL)
    assert p.meta["model"] == TINY.to_dict()
    assert hashlib.sha256(buf).digest() == model_hash(portable_init_model(TINY, 3))
    check_model_bytes(buf, TINY)


def test_seeds_differ_and_weights_look_like_the_usual_init() -> None:
    a, b = portable_init_model(TINY, 0), portable_init_model(TINY, 1)
    assert not torch.equal(a.wte.weight, b.wte.weight)
    w = portable_init_model(GPTConfig.preset("small"), 0).wte.weight.detach()
    assert abs(float(w.mean())) < 1e-3 and 0.019 < float(w.std()) < 0.021
    assert float(w.abs().max()) <= 6 * 0.02
    m = portable_init_model(TINY, 0)
    block = m.h[0]
    assert isinstance(block, Block)
    assert (
        torch.all(m.ln_f.weight == 1)
        and torch.all(m.ln_f.bias == 0)
        and torch.all(block.attn.c_attn.bias == 0)
    )


def test_leaves_the_callers_torch_rng_alone() -> None:
    torch.manual_seed(123)
    expected = torch.rand(4)
    torch.manual_seed(123)
    portable_init_model(TINY, 0)
    assert torch.equal(torch.rand(4), expected)


def test_config_from_job_and_refusals() -> None:
    job_model = {"n_layers": 2, "n_heads": 2, "d_model": 32, "context_len": 32, "vocab_size": 256}
    assert config_from_job(job_model) == TINY
    buf = initial_model_bytes(TINY, 0)
    with pytest.raises(ValueError, match="not the job's model"):
        check_model_bytes(buf, GPTConfig.preset("small"))
    with pytest.raises(ValueError, match="not a loconet model"):
        check_model_bytes(b"not a model", TINY)
    with pytest.raises(ValueError):
        portable_init_model(TINY, -1)
