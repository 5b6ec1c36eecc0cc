"""A handler that raises something other than a LoconetError (a bug a hostile tx can reach, like
protobuf's ValueError on a uint64 overflow) must not halt the chain: FinalizeBlock used to raise
and the node stopped. The tx now fails with ErrInternal (tx code 15) and changes nothing."""

from __future__ import annotations

import pytest

from abci_app import app as app_module
from abci_app.errors import ErrInternal, InvariantBroken
from tests.kits.chainkit import Chain, assert_rejected, send_msg


def _buggy(exc: Exception):
    real = app_module.ROUTES["send"]

    def handler(ctx, signer, msg):
        real(ctx, signer, msg)  # writes first: those writes must be dropped
        raise exc

    return handler


@pytest.mark.parametrize(
    "exc",
    [
        ValueError("Value out of range: 18446744073709551616"),
        OverflowError("int too big"),
        ZeroDivisionError("division by zero"),
        TypeError("bad"),
        IndexError("i"),
        KeyError("k"),
    ],
)
def test_invalid_tx_that_trips_a_handler_bug_fails_alone(
    chain: Chain, monkeypatch: pytest.MonkeyPatch, exc: Exception
) -> None:
    k0, k1 = chain.keys[0], chain.keys[1]
    ok = chain.tx(k1, [send_msg(k0.address, 5)])
    monkeypatch.setitem(app_module.ROUTES, "send", _buggy(exc))
    bad = chain.tx(k0, [send_msg(k1.address, 7)])
    res = assert_rejected(chain, bad, ErrInternal, after=[ok])
    assert type(exc).__name__ in res.log
    assert chain.store.height > 1  # the block committed: the chain goes on


def test_invariant_broken_still_halts(chain: Chain, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(app_module.ROUTES, "send", _buggy(InvariantBroken("corrupt state")))
    with pytest.raises(InvariantBroken):
        chain.finalize([chain.tx(chain.keys[0], [send_msg(chain.keys[1].address, 7)])])
