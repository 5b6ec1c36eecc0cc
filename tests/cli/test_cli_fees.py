"""node/client/fees.py, the client side of the minimum fee: hostile --fee-multiplier values and fees
that cannot fit in a tx are refused with a UsageError naming the fix (never a hang or a
protobuf error from inside the signer)."""

from __future__ import annotations

import time
from fractions import Fraction

import pytest

from abci_app.auth.params import compute_min_fee, params_from_json
from abci_app.codec.tx import build_tx
from node.client import fees
from node.errors import UsageError
from tests.kits.chainkit import send_msg, signer


@pytest.mark.parametrize(
    "text", ["nan", "inf", "-1", "0", "0.999", "1000.000001", "", "1/0", "0x10", "1e1001"]
)
def test_invalid_fee_multiplier(text):
    with pytest.raises(UsageError, match="--fee-multiplier"):
        fees.parse_multiplier(text)


def test_invalid_fee_multiplier_with_a_huge_exponent_is_refused_at_once():
    """Fraction('1e-999999999') computes 10^999999999 (minutes, gigabytes): the range is
    checked on the decimal first."""
    for text in ("1e-999999999", "1e999999999", "5E+999999999"):
        t0 = time.process_time()
        with pytest.raises(UsageError, match="between 1 and 1000"):
            fees.parse_multiplier(text)
        assert time.process_time() - t0 < 1.0


def test_fee_multiplier_exact():
    assert fees.parse_multiplier("1.2") == Fraction(6, 5)
    assert fees.parse_multiplier(" 1000 ") == 1000
    assert fees.parse_multiplier("1") == 1


def test_invalid_auto_fee_above_uint64():
    """Chain params near the genesis bound times --fee-multiplier 1000: the fee would not fit
    in a tx; a UsageError names the multiplier (the CLI reported it as a malformed node
    answer)."""
    p = params_from_json({"min_fee_per_byte": 2**47, "min_fee_per_msg": 0})
    k = signer(1)

    def build(f: int) -> bytes:
        return build_tx(k, chain_id="x", msgs=[send_msg(k.address, 1)], sequence=0, fee=f)

    fee, raw = fees.auto_fee(p, 1, build)
    assert fee == compute_min_fee(p, len(raw), 1)
    with pytest.raises(UsageError, match="--fee-multiplier"):
        fees.auto_fee(p, 1, build, Fraction(1000))


def test_fee_zero_in_every_unit_and_ascii_digits_only():
    """--fee 0 is allowed (the chain refuses it below its minimum), in any unit: '0.0loco' was
    refused as 'must be between 1uloco and 2^64-1' while '0loco' passed; a bare '１２' (fullwidth
    digits) was 12 uloco."""
    from node.cli.common import parse_fee

    for zero in ("0", "00", "0uloco", "0loco", "0.0loco", "0.000uloco"):
        assert parse_fee(zero) == 0, zero
    assert parse_fee(" 5 ") == 5 and parse_fee("auto") is None and parse_fee("1loco") == 10**6
    # "0LOCO": one spelling per amount, lowercase units (#28)
    for bad in ("１２", "²", "-0", "0.0", "18446744073709551616", "0LOCO"):
        with pytest.raises(UsageError, match="--fee"):
            parse_fee(bad)


def test_worker_fee_is_a_floor_never_below_the_minimum() -> None:
    """`provider run --fee N`: each tx pays N, or its exact minimum when that is higher (a fixed
    fee below a large reveal's minimum would get the reveal refused and the provider slashed)."""
    from abci_app.auth.params import compute_min_fee
    from abci_app.pb import state_pb2
    from node.client.fees import auto_fee

    p = state_pb2.AuthParams(min_fee_per_byte=10, min_fee_per_msg=1_000)

    def build(size: int):
        # a tx of `size` bytes plus the fee's own varint
        return lambda fee: b"x" * size + fee.to_bytes(8, "big").lstrip(b"\0")

    small, large = build(100), build(5_000)
    fee, raw = auto_fee(p, 1, small, floor=50_000)
    assert fee == 50_000 and compute_min_fee(p, len(raw), 1) < 50_000
    fee, raw = auto_fee(p, 1, large, floor=50_000)
    need = compute_min_fee(p, len(raw), 1)
    assert need > 50_000 and fee == need
    assert auto_fee(p, 1, small)[0] == compute_min_fee(p, len(auto_fee(p, 1, small)[1]), 1)
