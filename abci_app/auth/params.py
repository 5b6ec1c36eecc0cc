"""auth params (genesis ``auth.params``): the minimum fee (issue 11, junk transactions).

``compute_min_fee(params, tx_bytes, n_msgs) = min_fee_per_byte x tx_bytes + min_fee_per_msg x n_msgs``;
the ante handler (abci_app/app.py ``process_ante``) refuses a smaller fee with ErrInsufficientFee,
in CheckTx and FinalizeBlock alike (they share ``process_tx``). The defaults are 0: a chain
switches the floor on in its genesis (see the README's *Transactions*)."""

from __future__ import annotations

from typing import Any

from abci_app.auth.keys import PARAMS_KEY
from abci_app.encoding import decode_msg, encode_msg
from abci_app.pb import state_pb2
from abci_app.store import CacheKV, KVReader

DEFAULTS: dict[str, int] = {
    "min_fee_per_byte": 0,
    "min_fee_per_msg": 0,
}


def params_from_json(d: dict[str, Any]) -> state_pb2.AuthParams:
    unknown = set(d) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"auth.params: unknown keys {sorted(unknown)}")
    vals: dict[str, int] = {}
    for k, default in DEFAULTS.items():
        v = d.get(k, default)
        if isinstance(v, bool) or not isinstance(v, (int, str)) or not str(v).isdigit():
            raise ValueError(f"auth.params.{k}: must be a non-negative integer, got {v!r}")
        vals[k] = int(v)
    return state_pb2.AuthParams(**vals)


def params_to_json(p: state_pb2.AuthParams) -> dict[str, int]:
    return {k: int(getattr(p, k)) for k in DEFAULTS}


def get_params(store: KVReader) -> state_pb2.AuthParams:
    raw = store.get(PARAMS_KEY)
    return state_pb2.AuthParams() if raw is None else decode_msg(state_pb2.AuthParams, raw)


def set_params(store: CacheKV, p: state_pb2.AuthParams) -> None:
    store.set(PARAMS_KEY, encode_msg(p))


def compute_min_fee(p: state_pb2.AuthParams, tx_bytes: int, n_msgs: int) -> int:
    return p.min_fee_per_byte * tx_bytes + p.min_fee_per_msg * n_msgs
