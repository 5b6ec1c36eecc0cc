"""The trainer's payload decoder on hostile bytes: PayloadError (a ValueError) or a valid
payload, never another exception; then the declared codec against a model's shapes, likewise
(tests/kits/fuzzkit.py; the coverage-guided version is benchmarks/fuzz.py --target payload)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.kits import fuzzkit as fk
from tests.kits.fuzzkit import mutated

SEEDS = fk.payload_seeds()


def test_seed_payloads_decode_and_decompress() -> None:
    assert all(fk.target_payload(s).startswith("decompress:ok") for s in SEEDS)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.binary(max_size=300), mutated(SEEDS)))
def test_any_payload_bytes_are_decoded_or_refused_with_payload_error(buf: bytes) -> None:
    out = fk.target_payload(buf)
    assert fk.target_payload(buf) == out
