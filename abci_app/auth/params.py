"""auth params (genesis ``auth.params``): the minimum fee (issue 11, junk transactions).

``compute_min_fee(params, tx_bytes, n_msgs) = min_fee_per_byte x tx_bytes
+ min_fee_per_msg x n_msgs``; the ante handler (abci_app/app.py ``process_ante``) refuses a
smaller fee with ErrInsufficientFee, in CheckTx and FinalizeBlock alike (they share
``process_tx``). The defaults (10 uloco a byte, 1,000 uloco a message) are explained in the
module README; ``fee_fixpoint`` is how a client pays exactly the minimum of the tx it signs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from abci_app.auth.keys import PARAMS_KEY
from abci_app.codec.tx import MAX_MSGS, MAX_TX_BYTES
from abci_app.encoding import decode_msg, encode_msg
from abci_app.pb import state_pb2
from abci_app.store import CacheKV, KVReader

# a tx's fee is a uint64: params whose minimum for the largest tx is above it would refuse every
# large tx (or, for big enough params, every tx) with a fee no one can pay
MAX_FEE = 2**64 - 1

DEFAULTS: dict[str, int] = {
    # a 64 KiB tx (the largest) pays >= 0.66 LOCO, an ordinary transfer (~170 bytes) ~0.003 LOCO
    "min_fee_per_byte": 10,
    # each message is a handler run and usually a state write: 0.001 LOCO
    "min_fee_per_msg": 1_000,
}


def params_from_json(d: dict[str, Any]) -> state_pb2.AuthParams:
    if not isinstance(d, dict):
        raise ValueError(
            f"auth.params: must be an object {{min_fee_per_byte, min_fee_per_msg}}, got {d!r}"
        )
    unknown = set(d) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"auth.params: unknown keys {sorted(unknown)}")
    vals: dict[str, int] = {}
    for k, default in DEFAULTS.items():
        v = d.get(k, default)
        text = str(v)
        if isinstance(v, bool) or not isinstance(v, (int, str)) or not _is_uint(text):
            raise ValueError(
                f"auth.params.{k}: must be a non-negative integer (at most 2^64-1), got {v!r}"
            )
        vals[k] = int(text)
    p = state_pb2.AuthParams(**vals)
    top = compute_min_fee(p, MAX_TX_BYTES, MAX_MSGS)
    if top > MAX_FEE:
        raise ValueError(
            f"auth.params: the minimum fee of the largest tx ({MAX_TX_BYTES} bytes, {MAX_MSGS} "
            f"messages) would be {top} uloco, above 2^64-1 (a fee is a uint64, so no such tx "
            "could pay it): lower min_fee_per_byte or min_fee_per_msg"
        )
    return p


def _is_uint(text: str) -> bool:
    """ASCII decimal digits of a value <= 2^64-1 (str.isdigit also takes '²' and '１２')."""
    return text.isascii() and text.isdigit() and int(text) <= MAX_FEE


def params_to_json(p: state_pb2.AuthParams) -> dict[str, int]:
    return {k: int(getattr(p, k)) for k in DEFAULTS}


def get_params(store: KVReader) -> state_pb2.AuthParams:
    raw = store.get(PARAMS_KEY)
    return state_pb2.AuthParams() if raw is None else decode_msg(state_pb2.AuthParams, raw)


class FeeParams(NamedTuple):
    min_fee_per_byte: int
    min_fee_per_msg: int


_FEE_PARAMS: dict[bytes | None, FeeParams] = {}  # stored bytes -> decoded (a pure function)


def fee_params(store: KVReader) -> FeeParams:
    """The fee floor's two parameters, decoded once per distinct stored value (every tx's ante
    reads them: a protobuf decode per tx otherwise). Same values as ``get_params``."""
    raw = store.get(PARAMS_KEY)
    hit = _FEE_PARAMS.get(raw)
    if hit is None:
        p = get_params(store)
        if len(_FEE_PARAMS) >= 64:  # bounded: params change by governance only
            _FEE_PARAMS.clear()
        hit = _FEE_PARAMS[raw] = FeeParams(p.min_fee_per_byte, p.min_fee_per_msg)
    return hit


def set_params(store: CacheKV, p: state_pb2.AuthParams) -> None:
    store.set(PARAMS_KEY, encode_msg(p))


def compute_min_fee(p: state_pb2.AuthParams | FeeParams, tx_bytes: int, n_msgs: int) -> int:
    return p.min_fee_per_byte * tx_bytes + p.min_fee_per_msg * n_msgs


def fee_fixpoint(
    p: state_pb2.AuthParams,
    n_msgs: int,
    build: Callable[[int], bytes],
    margin: Callable[[int], int] = lambda need: need,
) -> tuple[int, bytes]:
    """The smallest fee (after ``margin``) that covers the tx it is signed into: the fee is part of
    the signed bytes (a varint), so a larger fee can make the tx a byte longer. ``build(fee)``
    signs the tx with that fee; ``margin(need) >= need`` is non-decreasing (e.g. x 1.2, rounded
    up). Starting from 0, fee <- margin(min fee of build(fee)) only grows and stops within a few
    steps (the varint adds at most 10 bytes). Returns (fee, the tx signed with it)."""
    fee = 0
    for _ in range(32):
        raw = build(fee)
        need = compute_min_fee(p, len(raw), n_msgs)
        want = max(need, margin(need))
        if want > MAX_FEE:
            raise ValueError(
                f"fee_fixpoint: the fee would be {want} uloco (minimum {need}), above 2^64-1, "
                "the largest fee a tx can carry"
            )
        if fee >= want:
            return fee, raw
        fee = want
    raise ValueError("fee_fixpoint: the fee did not settle (build(fee) keeps growing)")
