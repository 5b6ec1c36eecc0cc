"""Genesis: power comes from stake bonded out of the operator's balance; InitChain returns it."""

from __future__ import annotations

import base64
import json

import pytest

from abci_app.app import Application
from abci_app.bank import keeper as bank
from abci_app.codec.address import to_bech32
from abci_app.pb import abci
from abci_app.staking.keys import BONDED_POOL
from abci_app.store import MerkleStore
from tests.kits.chainkit import new_chain, signer
from tests.kits.stakekit import LOCO, new_staking_chain


def test_genesis_bonds_self_stake_and_returns_the_set() -> None:
    c = new_staking_chain([100 * LOCO, 250 * LOCO + 7])
    resp = c.init_response  # type: ignore[attr-defined]
    got = {u.pub_key.ed25519: u.power for u in resp.validators}
    assert got == {c.vals[0].public_bytes(): 100, c.vals[1].public_bytes(): 250}
    assert c.balance(BONDED_POOL) == 350 * LOCO + 7
    assert c.balance(c.vals[0].address) == 10**12 - 100 * LOCO
    assert c.validator(c.vals[1].address).tokens == 250 * LOCO + 7


def test_legacy_genesis_mints_stake_from_cometbft_power() -> None:
    c = new_chain(n_validators=2, powers=[3, 5])
    assert bank.get_balance(c.store, BONDED_POOL) == 8 * LOCO
    assert bank.get_balance(c.store, c.validators[0].address) == 0


def _init(app_state: dict) -> abci.ResponseInitChain:
    req = abci.RequestInitChain(
        chain_id="x", initial_height=1, app_state_bytes=json.dumps(app_state).encode()
    )
    app = Application(MerkleStore(None), check_invariants=True)
    return app.init_chain(req)


def _entry(k, bond: str) -> dict:
    return {
        "pub_key": base64.b64encode(k.public_bytes()).decode(),
        "operator": to_bech32(k.address),
        "moniker": "m",
        "self_bond": bond,
    }


def test_invalid_genesis_self_bond_above_balance() -> None:
    k = signer(7)
    with pytest.raises(ValueError, match="cannot self-bond"):
        _init(
            {
                "bank": {"balances": [{"address": to_bech32(k.address), "amount": "5"}]},
                "staking": {"validators": [_entry(k, "2000000")]},
            }
        )


def test_invalid_genesis_self_bond_below_min() -> None:
    k = signer(7)
    with pytest.raises(ValueError, match="below min_self_bond"):
        _init(
            {
                "bank": {"balances": [{"address": to_bech32(k.address), "amount": "5000000"}]},
                "staking": {"validators": [_entry(k, "10")]},
            }
        )


def test_invalid_genesis_without_validators() -> None:
    with pytest.raises(ValueError, match="no validator"):
        _init({"staking": {"validators": []}})


def test_invalid_genesis_unknown_param() -> None:
    with pytest.raises(ValueError, match="unknown keys"):
        _init({"staking": {"params": {"unbonding_days": 3}}})


def test_pools_are_blocked_module_accounts() -> None:
    """bank refuses MsgSend to the pools, so their balances equal the staking books exactly."""
    from abci_app.bank.errors import ErrSendToModule
    from abci_app.staking.keys import UNBONDING_POOL
    from tests.kits.chainkit import assert_rejected, send_msg

    c = new_staking_chain([10 * LOCO])
    for pool in (BONDED_POOL, UNBONDING_POOL):
        assert_rejected(c, c.tx(c.keys[0], [send_msg(pool, 1)]), ErrSendToModule)
