"""The codec registry: policy string -> codec (or per-round policy), through the ONE grammar
that the chain's job-spec check also uses (``abci_app.jobs.policy``).

* ``load_policy(text)``: what a job's ``compression_policy`` runs: a ``FixedPolicy`` (one codec)
  or an ``AdaptivePolicy``; strict (canonical spellings, exactly what the chain accepts).
* ``make_codec(text)``: one codec from a CLI spelling (``none``, ``int8``, ``topk:.01+int4``,
  ``chunk:64+int2`` ...; see ``canonical_policy``); refuses ``adaptive``.
* ``codec_from_payload(payload)``: the codec a payload names (strict: the canonical name).
"""

from __future__ import annotations

from abci_app.jobs.policy import (
    FORMS,
    AdaptiveSpec,
    CodecPolicy,
    Policy,
    PolicyError,
    canonical_policy,
    parse_policy,
)
from trainer.commit import Payload, PayloadError
from trainer.compression.adaptive import AdaptivePolicy, FixedPolicy
from trainer.compression.base import Codec, CodecBase
from trainer.compression.chunked import ChunkedTopK
from trainer.compression.lowrank import LowRank
from trainer.compression.quantization import Quantization
from trainer.compression.stride import Stride
from trainer.compression.tensor_chunked import TensorChunkedTopK
from trainer.compression.topk import TopK

CODECS: dict[str, type[CodecBase]] = {
    c.family: c for c in (Quantization, TopK, LowRank, ChunkedTopK, TensorChunkedTopK, Stride)
}


def codec_from_policy(p: CodecPolicy) -> Codec:
    """The family's class, built from the parsed policy (one class per family)."""
    return CODECS[p.family].from_policy(p)


def _parse(text: str, strict: bool) -> Policy:
    try:
        return parse_policy(text if strict else canonical_policy(text))
    except PolicyError as err:
        msg = str(err) if FORMS in str(err) else f"{err} (accepted: {FORMS})"
        raise PolicyError(err.reason, msg) from None


def canonical_spelling(text: str) -> str:
    """The canonical policy of a CLI spelling (``int8`` -> ``dense+int8``); ``PolicyError``
    names the accepted forms."""
    return _parse(text, strict=False).canonical


def make_codec(spec: str) -> Codec:
    """One codec from any spelling ``canonical_policy`` takes; ``PolicyError`` (a ValueError)
    names the accepted forms."""
    p = _parse(spec, strict=False)
    if isinstance(p, AdaptiveSpec):
        raise PolicyError(
            "unknown",
            f"{spec!r} is a policy that picks a codec per round, not one codec: use load_policy",
        )
    return codec_from_policy(p)


def load_policy(
    text: str, *, default_budget_bytes: int, strict: bool = True, min_tighten: float = 0.125
) -> FixedPolicy | AdaptivePolicy:
    """What a job's compression policy runs, round by round (``choose`` / ``observe``).
    ``default_budget_bytes`` is the budget of ``adaptive`` without BYTES (the trainer's
    default: 1/500 of the model's float32 bytes). ``strict=False`` also takes CLI spellings."""
    p = _parse(text, strict)
    if isinstance(p, CodecPolicy):
        return FixedPolicy(codec=codec_from_policy(p))
    return AdaptivePolicy(
        budget_bytes=p.budget_bytes or default_budget_bytes,
        quant=p.quant,
        family=p.ladder,
        min_tighten=min_tighten,
    )


def codec_from_payload(payload: Payload) -> Codec:
    """The codec a payload declares (its canonical name; anything else is a PayloadError)."""
    try:
        p = parse_policy(payload.codec)
    except PolicyError as err:
        raise PayloadError(f"payload codec: {err}") from None
    if not isinstance(p, CodecPolicy):
        raise PayloadError(f"payload codec {payload.codec!r} is a policy, not a codec")
    return codec_from_policy(p)
