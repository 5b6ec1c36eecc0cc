"""The tiny job the worker tests train and check: a one-layer GPT (d_model 16, 256-token
vocabulary) on a 60,000-byte synthetic corpus, a few inner steps, dense payloads. Each test
overrides the spec fields it is about (``tiny_job(inner_steps=4, ...)``)."""

from __future__ import annotations

from typing import Any

from trainer.data import Corpus, synthetic_text

TINY_MODEL = {"n_layers": 1, "n_heads": 2, "d_model": 16, "context_len": 16, "vocab_size": 256}
CORPUS = Corpus(synthetic_text(60_000))


def tiny_job(job_id: int = 7, **spec: Any) -> dict[str, Any]:
    s: dict[str, Any] = {
        "model": dict(TINY_MODEL),
        "inner_steps": 6,
        "trace_interval": 3,
        "tokens_per_step": 64,
        "num_shards": 4,
        "dataset_id": CORPUS.id,
        "compression_policy": "dense",
        "compression_params": {},
    }
    s.update(spec)
    return {"id": job_id, "spec": s}
