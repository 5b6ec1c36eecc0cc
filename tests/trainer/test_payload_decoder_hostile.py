"""Red-team: trainer.commit.decode promises "a malformed payload raises PayloadError (a
ValueError) with the cause, never another exception". Provider-controlled bytes (a committed
update payload, a trace state) break that promise, and the worker's callers only catch
ValueError/PayloadError, so the exception escapes them."""

import struct

import pytest

from trainer.commit import MAGIC, PayloadError, decode, decode_meta


def header(kind: int, meta: bytes = b"{}", codec: bytes = b"raw") -> bytes:
    return (
        MAGIC
        + struct.pack(">HBB", 1, kind, 0)
        + bytes([len(codec)])
        + codec
        + struct.pack(">I", len(meta))
        + meta
    )


def one_entry(shape_of_part: tuple[int, ...]) -> bytes:
    name, part = b"w", b"val"
    b = struct.pack(">H", len(name)) + name + bytes([1]) + bytes([1]) + struct.pack(">Q", 4)
    b += bytes([1]) + bytes([len(part)]) + part + bytes([1]) + bytes([len(shape_of_part)])
    return b + b"".join(struct.pack(">Q", d) for d in shape_of_part)


DEEP_META = b"[" * 20000 + b"]" * 20000  # 40 KB < MAX_META (64 KiB)


@pytest.mark.parametrize(
    "buf",
    [
        header(1, DEEP_META) + struct.pack(">I", 0),  # RecursionError (a RuntimeError)
        header(1) + struct.pack(">I", 1) + one_entry((0, 2**64 - 1)),  # TypeError (overflow)
        header(1) + struct.pack(">I", 1) + one_entry((0, 2**62, 4)),  # RuntimeError (stride)
    ],
    ids=["deep-json-meta", "zero-dim-u64-max", "zero-dim-stride-overflow"],
)
def test_decode_raises_only_payload_error(buf: bytes) -> None:
    with pytest.raises(PayloadError):
        decode(buf)


def test_decode_meta_raises_only_payload_error() -> None:
    # judge() calls decode_meta(states[n]) on the provider's trace entry H/k and catches
    # (BlobError, ValueError, PayloadError) only
    with pytest.raises(PayloadError):
        decode_meta(header(2, DEEP_META) + struct.pack(">I", 0), expected_kind=2)


@pytest.mark.parametrize(
    "meta",
    [
        b'{"a":' + b"[" * 900 + b"]" * 900 + b"}",  # under Python's recursion limit: depended
        # on the caller's stack depth, so nodes could disagree on whether it decodes
        b'{"a":NaN}',
        b'{"a":' + b"9" * 5000 + b"}",  # past int's 4,300-digit limit: a plain ValueError
        b'{"a":"[[[[' + b"[" * 100 + b'"}',  # brackets inside a string do not nest: valid
    ],
    ids=["nested-900", "nan", "5000-digit-int", "brackets-in-a-string"],
)
def test_a_meta_is_accepted_or_refused_by_its_bytes_alone(meta: bytes) -> None:
    buf = header(1, meta) + struct.pack(">I", 0)
    if b'"[[[[' in meta:
        assert decode(buf).meta == {"a": "[[[[" + "[" * 100}
        return
    with pytest.raises(PayloadError):
        decode(buf)


def test_a_meta_nested_a_few_levels_still_round_trips() -> None:
    from trainer.commit import Payload, encode

    p = Payload(kind=1, codec="raw", meta={"a": [[{"b": [1, 2]}]]}, entries={})
    assert decode(encode(p)).meta == p.meta
