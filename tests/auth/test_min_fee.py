"""Minimum fee (issue 11, junk transactions): auth params min_fee_per_byte and min_fee_per_msg,
enforced by the ante handler in CheckTx and FinalizeBlock alike."""

from __future__ import annotations

import json

import pytest

from abci_app.app import Application
from abci_app.auth.keeper import get_account
from abci_app.auth.params import (
    DEFAULTS,
    compute_min_fee,
    fee_fixpoint,
    fee_params,
    get_params,
    params_from_json,
    set_params,
)
from abci_app.bank import keeper as bank
from abci_app.bank.keys import FEE_COLLECTOR
from abci_app.codec.tx import MAX_TX_BYTES, build_tx, decode_tx
from abci_app.errors import ErrInsufficientFee
from abci_app.pb import abci
from abci_app.store import CacheKV, MerkleStore
from tests.kits.chainkit import (
    Chain,
    assert_rejected,
    genesis_request,
    new_chain,
    send_msg,
    signer,
    tx_fee,
)

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


def tx_at_minimum(c: Chain, k, msgs) -> tuple[bytes, int]:
    """The tx paying exactly its minimum fee (the fee's own bytes count: iterate to the
    fixpoint)."""
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
    res = c.block([raw])
    assert res.tx_results[0].code == 0, res.tx_results[0].log
    assert bank.get_balance(c.store, k.address) == 10**12 - fee - 12
    # fees are not burned: the end block pays the collector out to the validators by power
    assert bank.get_balance(c.store, FEE_COLLECTOR) == 0
    assert bank.get_balance(c.store, c.validators[0].address) >= fee


def test_invalid_fee_below_the_minimum():
    """One uloco short, or no fee at all (the junk-transaction spammer): refused in CheckTx and
    FinalizeBlock with ErrInsufficientFee, and nothing changes (no fee taken, no sequence)."""
    c = fee_chain()
    k, to = c.keys[0], c.keys[1].address
    _raw, fee = tx_at_minimum(c, k, [send_msg(to, 5)])
    short = c.tx(k, [send_msg(to, 5)], fee=fee - 1)
    res = assert_rejected(c, short, ErrInsufficientFee)
    assert "pay at least" in res.log
    assert_rejected(c, c.tx(k, [send_msg(to, 5)], fee=0), ErrInsufficientFee)
    # every message counts: the same fee does not cover two messages
    assert_rejected(c, c.tx(k, [send_msg(to, 5), send_msg(to, 5)], fee=fee), ErrInsufficientFee)


def test_a_genesis_may_switch_the_floor_off():
    c = fee_chain(0, 0)
    assert (
        c.block([c.tx(c.keys[0], [send_msg(c.keys[1].address, 5)], fee=0)]).tx_results[0].code == 0
    )


def test_default_params_charge_a_real_minimum():
    """A genesis without ``auth.params`` gets the defaults: 10 uloco a byte, 1,000 a message.
    An ordinary transfer costs a few thousand uloco (~0.0025 LOCO); the largest tx (64 KiB)
    at least 655,360 uloco (0.66 LOCO): state growth is paid for."""
    c = new_chain()  # chainkit's genesis has no auth section
    p = get_params(c.store)
    assert (p.min_fee_per_byte, p.min_fee_per_msg) == (10, 1_000) == tuple(DEFAULTS.values())
    k, to = c.keys[0], c.keys[1].address
    raw = c.tx(k, [send_msg(to, 5)])  # the kit pays exactly the minimum by default
    fee = decode_tx(raw).fee
    assert fee == 10 * len(raw) + 1_000 and 2_000 < fee < 5_000
    assert compute_min_fee(p, MAX_TX_BYTES, 1) >= 655_360
    res = c.block([raw])
    assert res.tx_results[0].code == 0 and tx_fee(res) == fee
    assert_rejected(c, c.tx(k, [send_msg(to, 5)], fee=0), ErrInsufficientFee)
    assert_rejected(c, c.tx(k, [send_msg(to, 5)], fee=fee - 1), ErrInsufficientFee)


def test_invalid_zero_fee_tx_included_by_a_proposer():
    """A proposer can put a zero-fee tx in its block (ProcessProposal checks txs statelessly, so
    the block is accepted): FinalizeBlock refuses that tx with tx/13 and it writes nothing, no
    fee, no sequence, no transfer; the paying txs around it run as they would without it."""
    c = new_chain()
    k, to = c.keys[0], c.keys[1].address
    free = c.tx(k, [send_msg(to, 5)], fee=0)
    paid_before = c.tx(c.keys[2], [send_msg(to, 7)])
    paid_after = c.tx(c.keys[3], [send_msg(to, 9)])
    txs = [paid_before, free, paid_after]
    req = c.request(txs)
    pp = abci.RequestProcessProposal(txs=txs, height=req.height, hash=req.hash, time=req.time)
    assert c.app.process_proposal(pp).status == abci.ResponseProcessProposal.ACCEPT
    bal = bank.get_balance(c.store, k.address)
    res = assert_rejected(c, free, ErrInsufficientFee, before=[paid_before], after=[paid_after])
    assert "pay at least" in res.log
    assert bank.get_balance(c.store, k.address) == bal
    assert get_account(c.store, k.address).sequence == 0  # the sequence did not move


def test_fee_fixpoint_covers_its_own_varint():
    """The fee is inside the signed bytes: at a varint boundary a larger fee makes the tx longer,
    and the fixpoint still pays the minimum of the final bytes (with or without a margin)."""
    p = params_from_json({"min_fee_per_byte": 127, "min_fee_per_msg": 0})
    k = signer(1)

    def build(f: int) -> bytes:
        return build_tx(k, chain_id="x", msgs=[send_msg(k.address, 1)], sequence=0, fee=f)

    fee, raw = fee_fixpoint(p, 1, build)
    assert raw == build(fee) and fee == compute_min_fee(p, len(raw), 1)
    fee2, raw2 = fee_fixpoint(p, 1, build, margin=lambda n: n * 3 // 2)
    assert fee2 >= compute_min_fee(p, len(raw2), 1) * 3 // 2


def test_invalid_params():
    with pytest.raises(ValueError, match="unknown keys"):
        params_from_json({"min_fee": 1})
    with pytest.raises(ValueError, match="non-negative integer"):
        params_from_json({"min_fee_per_byte": -1})
    # not an object: a clear ValueError, not AttributeError/TypeError from inside
    for bad in (["min_fee_per_byte"], None, "min_fee_per_byte", 5):
        with pytest.raises(ValueError, match="must be an object"):
            params_from_json(bad)


def test_invalid_auth_genesis_shapes():
    from abci_app.auth.module import init_genesis

    for bad in ({"params": ["min_fee_per_byte"]}, {"params": None}, "abc", ["params"]):
        with pytest.raises(ValueError, match="auth"):
            init_genesis(None, bad, None)


def test_invalid_params_that_no_tx_could_pay():
    """A genesis whose minimum fee for the largest tx (MAX_TX_BYTES, MAX_MSGS messages) exceeds
    the largest fee a tx can carry (2^64-1 uloco, a uint64) would brick the chain: every tx
    refused with tx/13 asking for an impossible fee. Refused at genesis, naming the bound."""
    from abci_app.codec.tx import MAX_MSGS

    top = 2**64 - 1
    per_byte = (top - PER_MSG * MAX_MSGS) // MAX_TX_BYTES
    ok = params_from_json({"min_fee_per_byte": per_byte, "min_fee_per_msg": PER_MSG})
    assert compute_min_fee(ok, MAX_TX_BYTES, MAX_MSGS) <= top
    for bad in (
        {"min_fee_per_byte": per_byte + 1, "min_fee_per_msg": PER_MSG},
        {"min_fee_per_byte": top},
        {"min_fee_per_byte": 0, "min_fee_per_msg": top // MAX_MSGS + 1},
    ):
        with pytest.raises(ValueError, match="2\\^64-1"):
            params_from_json(bad)
    with pytest.raises(ValueError, match="non-negative integer"):
        params_from_json({"min_fee_per_byte": 2**64})
    # digits in other scripts are not a canonical genesis integer
    for odd in ("１２", "²", "٣"):
        with pytest.raises(ValueError, match="non-negative integer"):
            params_from_json({"min_fee_per_byte": odd})


def test_invalid_fee_fixpoint_above_uint64():
    """A margin that pushes the fee past 2^64-1 gets a clear error, not protobuf's 'Value out
    of range' from inside the signer."""
    p = params_from_json({"min_fee_per_byte": 2**47, "min_fee_per_msg": 0})
    k = signer(1)

    def build(f: int) -> bytes:
        return build_tx(k, chain_id="x", msgs=[send_msg(k.address, 1)], sequence=0, fee=f)

    with pytest.raises(ValueError, match="above 2\\^64-1"):
        fee_fixpoint(p, 1, build, margin=lambda n: n * 1000)


def test_fee_params_follow_the_stored_params() -> None:
    """The ante's memo of the decoded fee params is keyed by the stored bytes: other params in
    the store give other values at once; absent params are the message defaults (0, 0)."""
    store = CacheKV(MerkleStore(None))
    assert tuple(fee_params(store)) == (0, 0) == (get_params(store).min_fee_per_byte, 0)
    for per_byte, per_msg in ((10, 1_000), (7, 3), (10, 1_000)):
        set_params(
            store, params_from_json({"min_fee_per_byte": per_byte, "min_fee_per_msg": per_msg})
        )
        assert tuple(fee_params(store)) == (per_byte, per_msg)
        p = get_params(store)
        assert compute_min_fee(fee_params(store), 151, 1) == compute_min_fee(p, 151, 1)
