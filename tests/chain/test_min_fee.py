"""Minimum fee (issue 11, junk transactions): auth params min_fee_per_byte and min_fee_per_msg,
enforced by the ante handler in CheckTx and FinalizeBlock alike."""

from __future__ import annotations

import json

import pytest
from chainkit import Chain, assert_rejected, genesis_request, send_msg, signer

from abci_app.app import Application
from abci_app.auth.params import compute_min_fee, get_params, params_from_json
from abci_app.bank import keeper as bank
from abci_app.bank.keys import FEE_COLLECTOR
from abci_app.errors import ErrInsufficientFee
from abci_app.pb import abci
from abci_app.store import MerkleStore

PER_BYTE, PER_MSG = 2, 1_000


def fee_chain(per_byte: int = PER_BYTE, per_msg: int = PER_MSG) -> Chain:
    keys = [signer(i) for i in range(3)]
    vals = [signer(1000)]
    app = Application(MerkleStore(None, keep_recent=50), check_invariants=True)
    app.info(abci.RequestInfo())
    req = genesis_request({k.address: 10**12 for k in keys}, [(vals[0], 10)])
    state = json.loads(req.app_state_bytes)
    state["auth"] = {"params": {"min_fee_per_byte": per_byte, "min_fee_per_msg": per_msg}}
    req.app_state_bytes = json.dumps(state).encode()
    app.init_chain(req)
    c = Chain(app, keys, vals)
    c.block([])
    return c


def tx_at_minimum(c: Chain, k, msgs) -> tuple[bytes, int]:  # type: ignore[no-untyped-def]
    """The tx paying exactly its minimum fee (the fee's own bytes count: iterate to the fixpoint)."""
    fee = 0
    while True:
        raw = c.tx(k, msgs, fee=fee)
        need = compute_min_fee(get_params(c.store), len(raw), len(msgs))
        if need == fee:
            return raw, fee
        fee = need


def test_fee_at_the_minimum_is_accepted_and_collected():
    c = fee_chain()
    k, to = c.keys[0], c.keys[1].address
    msgs = [send_msg(to, 5), send_msg(to, 7)]
    raw, fee = tx_at_minimum(c, k, msgs)
    assert fee == PER_BYTE * len(raw) + PER_MSG * 2
    assert c.check(raw).code == 0
    before = bank.get_balance(c.store, FEE_COLLECTOR)
    res = c.block([raw])
    assert res.tx_results[0].code == 0, res.tx_results[0].log
    assert bank.get_balance(c.store, k.address) == 10**12 - fee - 12


def test_invalid_fee_below_the_minimum():
    """One uloco short, or no fee at all (the junk-transaction spammer): refused in CheckTx and
    FinalizeBlock with ErrInsufficientFee, and nothing changes (no fee taken, no sequence)."""
    c = fee_chain()
    k, to = c.keys[0], c.keys[1].address
    raw, fee = tx_at_minimum(c, k, [send_msg(to, 5)])
    short = c.tx(k, [send_msg(to, 5)], fee=fee - 1)
    res = assert_rejected(c, short, ErrInsufficientFee)
    assert "pay at least" in res.log
    assert_rejected(c, c.tx(k, [send_msg(to, 5)], fee=0), ErrInsufficientFee)
    # every message counts: the same fee does not cover two messages
    assert_rejected(c, c.tx(k, [send_msg(to, 5), send_msg(to, 5)], fee=fee), ErrInsufficientFee)


def test_default_has_no_floor():
    c = fee_chain(0, 0)
    assert c.block([c.tx(c.keys[0], [send_msg(c.keys[1].address, 5)], fee=0)]).tx_results[0].code == 0


def test_invalid_params():
    with pytest.raises(ValueError, match="unknown keys"):
        params_from_json({"min_fee": 1})
    with pytest.raises(ValueError, match="non-negative integer"):
        params_from_json({"min_fee_per_byte": -1})
