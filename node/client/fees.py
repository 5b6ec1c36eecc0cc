"""The minimum fee, client side: every client pays exactly what the chain asks, by default.

The chain's floor is ``min_fee_per_byte x len(signed tx) + min_fee_per_msg x #messages``
(abci_app/auth/params.py, enforced in CheckTx and FinalizeBlock). A client reads the two params
from the node (``/params/auth``), then signs the tx at the fee that covers its own bytes
(``fee_fixpoint``: the fee is inside the signed bytes). ``--fee-multiplier`` (default 1) pays
a margin above it, like the Cosmos SDK's ``--gas-adjustment``; the floor is exact (no gas
estimate), so the margin only matters if the params change between signing and the block.

Used by the CLI (``--fee auto``, the default), ``node.client.market_msgs.send_tx`` (the worker, the
testnet tooling, the demo)."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

from abci_app.auth.params import compute_min_fee, fee_fixpoint, params_from_json
from abci_app.pb import state_pb2
from node import safejson
from node.client.units import ULOCO, fmt_loco
from node.errors import UsageError

# an auto fee is what the node's auth params ask, and a hostile node could ask the balance: above
# this cap no client signs unasked (the CLI's --max-fee, ``market_msgs.send_tx``'s ``max_fee``);
# the default params ask ~0.66 LOCO for the largest tx, 64 KiB
DEFAULT_MAX_FEE = 10 * ULOCO


def auth_params(client: Any) -> state_pb2.AuthParams:
    """The node's auth params (the minimum fee), from ``/params/auth``."""
    qr = client.abci_query("/params/auth")
    if qr.code != 0:
        raise UsageError(
            f"the node at {client.url} did not answer /params/auth (code {qr.code}: {qr.log}); "
            "is it an older loconet? pass an explicit --fee"
        )
    return params_from_json(safejson.loads(qr.value))


def parse_multiplier(text: str) -> Fraction:
    """``--fee-multiplier``: a decimal >= 1 (1.2 = 20 % above the minimum), kept exact."""
    # Decimal first: Fraction('1e-999999999') computes 10^999999999 (a hang); the range check on
    # the Decimal is cheap, and a value in [1, 1000] has as many digits as its text
    try:
        d = Decimal(str(text).strip())
    except InvalidOperation:
        d = Decimal("NaN")
    if not d.is_finite():
        raise UsageError(f"bad --fee-multiplier {text!r}: write a number >= 1, e.g. 1.2")
    if d < 1 or d > 1000:
        raise UsageError(f"bad --fee-multiplier {text!r}: must be between 1 and 1000, e.g. 1.2")
    return Fraction(d)


def auto_fee(
    params: state_pb2.AuthParams,
    n_msgs: int,
    build: Callable[[int], bytes],
    multiplier: Fraction = Fraction(1),
    floor: int = 0,
) -> tuple[int, bytes]:
    """(fee, tx signed with it): the minimum for the signed bytes, times ``multiplier`` rounded
    up to a whole uloco, and at least ``floor``. ``build(fee)`` signs the tx at that fee."""

    def margin(need: int) -> int:
        return max(floor, -((-need * multiplier) // 1))

    try:
        return fee_fixpoint(params, n_msgs, build, margin=margin)
    except ValueError as e:
        if "2^64-1" not in str(e):
            raise
        raise UsageError(
            f"{e}: lower --fee-multiplier (now {float(multiplier):g}) or pass an explicit --fee"
        ) from None


def refuse_above_cap(
    fee: int, cap: int, node_url: str, params: state_pb2.AuthParams, tx_bytes: int, n_msgs: int
) -> None:
    """The one fee cap: an auto ``fee`` above ``cap`` is refused before anything is sent (a
    UsageError naming the node, the fee, why the node asks it, and the fix)."""
    if fee > cap:
        raise UsageError(
            f"the node at {node_url} asks a fee of {fee} uloco ({fmt_loco(fee)}) for this tx "
            f"({explain(params, tx_bytes, n_msgs)}), above the cap of {cap} "
            "uloco (--max-fee): not signed; if you trust this node, pass --max-fee or an "
            "explicit --fee"
        )


def explain(params: state_pb2.AuthParams, tx_bytes: int, n_msgs: int) -> str:
    need = compute_min_fee(params, tx_bytes, n_msgs)
    return (
        f"{need} uloco ({params.min_fee_per_byte} uloco/byte x {tx_bytes} bytes + "
        f"{params.min_fee_per_msg} uloco/message x {n_msgs})"
    )


def check_fee(params: state_pb2.AuthParams, raw: bytes, n_msgs: int, fee: int) -> None:
    """Refuse, before broadcasting, an explicit fee below the chain's minimum for ``raw``."""
    need = compute_min_fee(params, len(raw), n_msgs)
    if fee < need:
        raise UsageError(
            f"--fee {fee}uloco is below this chain's minimum fee for this tx: "
            f"{explain(params, len(raw), n_msgs)}; pass --fee {need}uloco or more, "
            "or leave --fee out (auto: the exact minimum)"
        )
