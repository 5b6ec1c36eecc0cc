"""Known answers for the payload bytes of every codec family (quantisation, per-tensor top-k,
chunked top-k, stride, low rank): sha256 of the canonical encoding of two rounds (the second
one carries the first one's error-feedback residual; stride's second round is fragment 1).

Inputs are exact float32 values built from integers (no RNG), so the bytes depend only on the
codec. Low rank multiplies matrices (the bits of a matmul depend on the BLAS kernel), so its
answer pins the layout (codec name, meta, part names, dtypes and shapes) and the dense fallback
of 1-D tensors, not the P and Q values.
"""

import hashlib

import pytest
import torch

from trainer.commit import decode, encode
from trainer.compression import CompressionState, make_codec

SHAPES = {"b": (96,), "c": (3, 5, 7), "odd": (65,), "one": (1,), "w": (64, 96)}


def tensors(mult: int, start: int) -> dict[str, torch.Tensor]:
    """Distinct |values| (p + 0.25) / 256 with p = i * mult mod 10007, alternating signs."""
    out, off = {}, start
    for name in sorted(SHAPES):
        n = 1
        for d in SHAPES[name]:
            n *= d
        p = (torch.arange(off, off + n, dtype=torch.int64) * mult) % 10007
        sign = torch.where(p % 2 == 0, 1.0, -1.0).double()
        out[name] = ((p.double() + 0.25) / 256 * sign).float().reshape(SHAPES[name])
        off += n
    return out


def two_rounds(spec: str, ef_decay: float = 1.0) -> list[bytes]:
    c = make_codec(spec)
    st = CompressionState(ef_decay=ef_decay)
    return [encode(c.compress(tensors(7919, 0), st)), encode(c.compress(tensors(104729, 1), st))]


KNOWN = {
    # quantisation (dense)
    "none": [
        "db7a9c4fce0ab86f6e59526d098de42c7240715e60dc598326fb6bd0f2a2d6d2",
        "3d6e9fd5ebfa0dc15415645cf9e4ad1e3cd18228fe006d2d8d71531b2f2abab4",
    ],
    "fp16": [
        "d2c4fbdd330a8e7f111d08959464bb0706bf1ea98dd39bc195912f6ecb526606",
        "7fd675c01f465db485d4f0de103bb437d654cd9bed3aa5988f3162adb8481403",
    ],
    "int8": [
        "dbece6ec922a4d7726ea2dba3d5e3a34ad6953cb5b1a4be92fc7d77f005c9981",
        "dd67cc14b4796fbd10b273bcbf2896b611bce8fad4021f69e4c08e6722996c31",
    ],
    "int4": [
        "f7b9dcb69d7886ddd5e1e03af7ba6807b788bc2983b9f50cbb51afdfaaac540f",
        "1a193cbdf53aece9d2181023d1875ebe6aa2f8f4f042296d08b0f12a958a5593",
    ],
    # per-tensor top-k
    "topk:0.01": [
        "f4bb4c2fd15d38b0d0a436ae9f83c27088f1f457a01a02c0377d89c0348468c4",
        "8d69dbde76699cf60b90fe020972980de3e8444aa6dd4c95076a0bcd5293c484",
    ],
    "topk:0.05+int8": [
        "fb66348c8e7ee7835a26b28da8d197db83d32ad5b8fa4dccaea5c6eaada43310",
        "c2dec9be17babadb7f0a24ed379106f597c6db1351232c53e737259fa2d6a246",
    ],
    "topk:0.01+int4": [
        "90997256bded443240007074c683e90d22fb778e22169ba0bb034cfb586ee9a2",
        "472b7405116b1853e46f025a9f5f2a8f8aeead1c7e74d406d0f54f39fd622562",
    ],
    "topk:0.3+fp16": [
        "1461c6c6ca22454d62c1c41e57c29276a189821ce8c2d50335b2f39dda9ca513",
        "ad39f9a1b44a0bfb4b502d37db21028b8fab87801d3c3dacea3ff4473651e70f",
    ],
    # chunked top-k
    "chunk:64/4096+int2": [
        "419c7f4f78e2729248336a7cdab7f198952e8bfdbfa993eea4443313221f338d",
        "f8123ff94685f8ab011c24bc984606ee6b8d2b003ac0073486361b19df30aaba",
    ],
    "chunk:16/512+int4": [
        "2f94508760686cf13f48084bf68b1e777a5858f040b1aaa740a629b9e7a94301",
        "6ae99cca46e4910237a23bd494b42393a932f91feb925fb3a91397a3d0c4724e",
    ],
    "chunk:8/256+int8": [
        "ab69d096af1f933445dc5739ba655831521dcb065dfbc76981d1648a2d9b00ae",
        "81273d692644b3ebcd65b2ec76763db309565159d04d56f7e75283b243d7c228",
    ],
    "chunk:32/1024+fp16": [
        "c1569eb9bfc085de131c16ef593f63e0c48dd2712e8ba282e78a7dcc24c03c18",
        "2121439f504d09236cd92dedfa0836efc3ce52698a1d9993b9f4c700b78a3c12",
    ],
    "chunk:5/100": [
        "cfb2657c69d6e57ad042580ebbf6ddd8c3bc0fa71af9fde8a23536fd2be76a68",
        "03ee9bbccc7a706d764ce1646c054509decb5f0f84a4688905a700545acaa8de",
    ],
    # stride
    "stride:9+int2": [
        "31f3b063aba469b0d2c9773eac8dfec9bcf0af9423c3ce9762403d6d1544ad84",
        "3d2949525848f9452e3ead989c32ca80dab90eaac44882157d40f805b043ef6b",
    ],
    "stride:5+int1": [
        "ed37f596f156dd2d51ed7a65a2579de92252ba6d49a78391552542a257f0efc3",
        "8e3b3caa3da17215711a758615a96cdecd32e435bce9cf19803ba08d040a2f81",
    ],
    "stride:4+int4": [
        "b08d419c2614b3e4c4979bf54e63cc6a8486dccac8ae3c6f9dce306e5768d468",
        "6ff13553e9e28f7437f38e5351818dd6270cfbb55678a4f38274945033c9df08",
    ],
    "stride:3+int8": [
        "77a5b930a7ad4e17624d327e2cd11b757853a325eff330e1614a89cbd6d405fe",
        "86894bbc2bf491f37b63b9c3e5ed4422937d6115d4e0b6ddf018bb523042a122",
    ],
    "stride:2+fp16": [
        "3346bc14d6e4dd4c9996fac796d5ca71f539e6c0dbf1a430c2aa12aa00de9487",
        "ecb1638d2591c539150d92148bf209486b5b95554cd403baf2d21808056433a9",
    ],
    "stride:7": [
        "419e883354dc99fab6a3bf444413693222c582ef75344e03c96179be13acbeeb",
        "ffd0835ab771f528c4a880e47be6369ce89cb72c9f8a9868d4e8d3dcaa8c999c",
    ],
}


@pytest.mark.parametrize("spec", sorted(KNOWN))
def test_payload_bytes_known_answer(spec):
    got = [hashlib.sha256(b).hexdigest() for b in two_rounds(spec)]
    assert got == KNOWN[spec]


def test_ef_decay_known_answer():
    got = [hashlib.sha256(b).hexdigest() for b in two_rounds("chunk:16/512+int2", 0.95)]
    assert got == KNOWN_DECAY


KNOWN_DECAY = [
    "e69c76b2b8e1529f13b1f60c55717bd7e5618be2ab34d83b33dc6d6434e59534",
    "f8384af15feeda37b27d4d9cc17aa9b2db371ae4d6834cc39d0e9d45e5ec7b20",
]


def layout(raw: bytes) -> list:
    p = decode(raw)
    rows: list = [p.codec, sorted(p.meta.items())]
    for name in sorted(p.entries):
        e = p.entries[name]
        parts = sorted((pn, str(t.dtype), tuple(t.shape)) for pn, t in e.parts.items())
        rows.append((name, str(e.dtype), tuple(e.shape), parts))
        if name in ("b", "odd", "one"):  # 1-D: sent dense by the low-rank codec
            rows.append(
                hashlib.sha256(
                    b"".join(
                        t.contiguous().view(torch.uint8).numpy().tobytes()
                        for _, t in sorted(e.parts.items())
                    )
                ).hexdigest()
            )
    return rows


LOWRANK = {
    "lowrank:4": "99564e189e84743f9abdcd5520d89e36c0d23a043913bdc33c43ac174c78883d",
    "lowrank:2+int8": "f29d966c37db2941582231b96234979879a4c3a02e5214bafbd6324b10f47de6",
}


@pytest.mark.parametrize("spec", sorted(LOWRANK))
def test_lowrank_layout_known_answer(spec):
    rows = [layout(b) for b in two_rounds(spec)]
    assert rows[0][0] == spec and rows[0][-1][0] == "w" and rows[0][-1][3][0][0].startswith("P.")
    assert hashlib.sha256(repr(rows).encode()).hexdigest() == LOWRANK[spec]
