"""A job's initial model from a seed, byte-identical on every machine.

``trainer.model.init_model`` draws with ``torch.nn.init.normal_``, whose CPU kernel depends on
the CPU: the AVX2/AVX-512 kernels and the default one compute Box-Muller with different
log/sin/cos code, so the same seed gives different bytes on different machines (measured:
``ATEN_CPU_CAPABILITY=default`` vs ``avx2`` give two model hashes for the same seed). A job's
``initial_model_hash`` must be reproducible by anyone from ``--init-seed N``, so this init uses
only integer arithmetic and IEEE-exact float operations:

- the random bytes of parameter ``name`` are ``SHAKE-256("loconet-init-v1" | seed | name)``;
- each weight is an Irwin-Hall normal: the sum S of 12 little-endian uint16 draws, centred
  and scaled: ``w = float32(((S - 393210) / 65536) * std)`` (the division by 2^16 is exact; one
  correctly rounded multiply in float64, one correctly rounded cast to float32). The sum of 12
  uniforms has mean 0 and variance ~1 after the scaling, with tails cut at +-6 std: fine for an
  initialisation (nanoGPT's N(0, 0.02)).
- 2-D ``*.weight`` (embeddings, linear layers) get std 0.02; biases 0; LayerNorm weights 1.
  Any other kind of parameter is refused, so a model change cannot silently fall back to torch.

The bytes are the trainer's canonical model encoding (``trainer.state.model_payload``, kind
``model``): ``sha256(initial_model_bytes(cfg, seed)) == model_hash(portable_init_model(cfg,
seed))``.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import torch

from trainer.commit import KIND_MODEL, PayloadError, decode, encode
from trainer.model import GPT, GPTConfig
from trainer.state import model_payload

DOMAIN = b"loconet-init-v1"
INIT_STD = 0.02
_DRAWS = 12  # uniforms summed per weight
_MEAN = _DRAWS * 65535 // 2  # 393210: the mean of the sum, an exact integer


def _normal(seed: int, name: str, n: int, std: float) -> np.ndarray:
    key = DOMAIN + seed.to_bytes(8, "little") + name.encode()
    raw = hashlib.shake_256(key).digest(2 * _DRAWS * n)
    u = np.frombuffer(raw, dtype="<u2").astype(np.int64).reshape(n, _DRAWS)
    s = u.sum(axis=1) - _MEAN  # exact integers
    return ((s.astype(np.float64) / 65536.0) * std).astype(np.float32)


def portable_init_model(cfg: GPTConfig, seed: int) -> GPT:
    """A GPT whose parameters depend only on (cfg, seed), never on the machine."""
    if not 0 <= seed < 2**64:
        raise ValueError(f"seed must be 0..2^64-1, got {seed}")
    with torch.random.fork_rng(
        devices=[]
    ):  # GPT() draws torch defaults; keep the caller's RNG as it was
        model = GPT(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("weight") and p.dim() == 2:
                w = _normal(seed, name, p.numel(), INIT_STD).reshape(tuple(p.shape))
                p.copy_(torch.from_numpy(w))
            elif name.endswith("bias"):
                p.zero_()
            elif name.endswith("weight") and p.dim() == 1 and ".ln" in f".{name}":
                p.fill_(1.0)
            else:
                raise ValueError(
                    f"portable_init_model does not know how to initialise {name} {tuple(p.shape)}"
                )
    return model


def initial_model_bytes(cfg: GPTConfig, seed: int) -> bytes:
    """The canonical model bytes of ``portable_init_model(cfg, seed)`` (a job's initial model)."""
    return encode(model_payload(portable_init_model(cfg, seed)))


def config_from_job(model: Any) -> GPTConfig:
    """The trainer's GPTConfig for a job's ModelConfig (a ``jobs_pb2.ModelConfig`` or the dict
    ``query job -o json`` prints: n_layers, n_heads, d_model, context_len, vocab_size)."""

    def get(k: str) -> Any:
        return model[k] if isinstance(model, dict) else getattr(model, k)

    return GPTConfig(
        block_size=int(get("context_len")),
        vocab_size=int(get("vocab_size")),
        n_layer=int(get("n_layers")),
        n_head=int(get("n_heads")),
        n_embd=int(get("d_model")),
    )


def check_model_bytes(buf: bytes, cfg: GPTConfig) -> None:
    """Refuse (ValueError naming why) bytes that are not a canonical model of shape ``cfg``."""
    try:
        p = decode(buf, expected_kind=KIND_MODEL)
    except PayloadError as e:
        raise ValueError(
            f"not a loconet model file (trainer canonical encoding, kind model): {e}"
        ) from None
    if encode(p) != buf:
        raise ValueError(
            "the model file is not in canonical form: re-encode it with trainer.state.model_payload"
        )
    want = cfg.to_dict()
    got = p.meta.get("model")
    if got != want:
        raise ValueError(f"the model file's config {got} is not the job's model {want}")
