"""Compression of pseudo-gradients, with error feedback, behind one interface (in the style of
hivemind's ``compression`` package).

    codec = make_codec("topk:0.01+int4")
    payload = codec.compress(tensors, state)   # -> commit.Payload (kind 1, canonical bytes)
    tensors2 = codec.decompress(payload)       # dict name -> float32 tensor, original shapes
    codec.ratio(payload)                       # fp32 bytes / encoded bytes (measured)
    codec.estimate_bytes(shapes)               # exact encoded size, without compressing

Modules: ``base`` (the ``Codec`` protocol, ``CompressionState``, the per-tensor and flat
bases), one module per family (``quantization``: ``dense[+q]``; ``topk``: per-tensor top-k;
``chunked``: chunked top-k; ``stride``: strided fragments; ``lowrank``: PowerSGD), ``bits``
(bit packing), ``registry`` (policy string -> codec or per-round policy, through the grammar in
``abci_app/jobs/policy.py`` that the chain's job-spec check also uses) and ``adaptive`` (the
adaptive policy).
"""

from trainer.compression.adaptive import AdaptivePolicy, FixedPolicy
from trainer.compression.base import (
    Codec,
    CodecBase,
    CompressionState,
    FlatCodec,
    PerTensorCodec,
    layout_id,
)
from trainer.compression.bits import index_width, pack_bits, unpack_bits
from trainer.compression.chunked import CHUNK, ChunkedTopK
from trainer.compression.lowrank import LowRank
from trainer.compression.quantization import QBLOCK, Quantization, dequant, quant_parts
from trainer.compression.registry import (
    CODECS,
    codec_from_payload,
    codec_from_policy,
    load_policy,
    make_codec,
)
from trainer.compression.stride import STRIDE_GROUP, Stride
from trainer.compression.topk import TopK

__all__ = [
    "CHUNK",
    "CODECS",
    "QBLOCK",
    "STRIDE_GROUP",
    "AdaptivePolicy",
    "ChunkedTopK",
    "Codec",
    "CodecBase",
    "CompressionState",
    "FixedPolicy",
    "FlatCodec",
    "LowRank",
    "PerTensorCodec",
    "Quantization",
    "Stride",
    "TopK",
    "codec_from_payload",
    "codec_from_policy",
    "dequant",
    "index_width",
    "layout_id",
    "load_policy",
    "make_codec",
    "pack_bits",
    "quant_parts",
    "unpack_bits",
]
