"""Issue 32: a validator cannot enter the active set without a settlement key. Staking reads
settlement's key registry (read-only, its ``SettlementKeys`` Protocol): where the genesis has a
settlement section (``require_settlement_key`` = 1, the default there), a validator without a
key takes no seat in CometBFT's set, however much stake it has; its key registered, it enters
at that block's end (CometBFT applies it two heights later). A chain whose genesis has no
settlement section needs no key."""

from __future__ import annotations

from typing import Any

import pytest

from abci_app.app import GenesisError
from abci_app.settlement.keeper import compute_signer_set
from abci_app.staking import keeper as staking_keeper
from abci_app.staking.errors import ErrLastValidator
from tests.kits.chainkit import assert_rejected, signer
from tests.kits.settlekit import set_key_msg
from tests.kits.stakekit import (
    LOCO,
    StakeChain,
    create_validator_msg,
    new_staking_chain,
    unbond_msg,
)

KEYED = {"checkpoint_interval": 5}
NEW = signer(3000)  # the newcomer's consensus key; its operator is keys[0]
SECRET = bytes(31) + b"\x2a"


def _genesis_key(c_vals: list[Any], i: int = 0) -> dict[str, Any]:
    from abci_app.settlement import evm
    from tests.kits.settlekit import settlement_secret

    return {
        "validator": c_vals[i].address.hex().upper(),
        "evm_address": "0x" + evm.address_of_private_key(settlement_secret(i)).hex(),
    }


def _keyed_chain() -> StakeChain:
    """One genesis validator (100 LOCO of power) with its settlement key in the genesis."""
    vals = [signer(2000)]
    return new_staking_chain(
        [100 * LOCO], genesis={"settlement": {"params": KEYED, "keys": [_genesis_key(vals)]}}
    )


def _events(resp: Any, kind: str) -> list[dict[str, str]]:
    out = []
    for r in resp.tx_results:
        for e in r.events:
            if e.type == kind:
                out.append({a.key: a.value for a in e.attributes})
    return out


def test_keyless_validator_with_enough_stake_is_not_in_the_set_until_it_registers_a_key() -> None:
    c = _keyed_chain()
    resp = c.ok(c.keys[0], [create_validator_msg(NEW, 1000 * LOCO)])  # 10x the genesis power
    assert not resp.validator_updates
    assert _events(resp, "validator.awaiting_settlement_key") == [
        {"validator": NEW.address.hex().upper(), "power": "1000"}
    ]
    c.blocks(4)
    assert NEW.address not in c.comet_set(c.height + 2)
    assert c.validator(NEW.address).power == 0
    now = compute_signer_set(c.store, staking_keeper)  # what the next checkpoint would carry
    assert [s.validator for s in now.signers] == [c.vals[0].address]
    assert now.keyless_power == 0  # out of the set: not even counted as keyless power

    h = c.height + 1
    resp = c.ok(c.keys[0], [set_key_msg(NEW.address, SECRET)])
    assert [u.power for u in resp.validator_updates] == [1000]  # this block's end-block
    assert c.comet_set(h + 2)[NEW.address] == 1000 and c.comet_set(h + 1).get(NEW.address) is None
    assert c.validator(NEW.address).power == 1000
    now = compute_signer_set(c.store, staking_keeper)
    assert {s.validator: s.power for s in now.signers}[NEW.address] == 1000


def test_a_keyless_validator_cannot_keep_the_chain_alive_alone() -> None:
    """The last keyed validator cannot unbond all: a keyless one would leave CometBFT with an
    empty set (213), stake or not."""
    c = _keyed_chain()
    c.ok(c.keys[0], [create_validator_msg(NEW, 1000 * LOCO)])
    v0 = c.vals[0]
    assert_rejected(c, c.tx(v0, [unbond_msg(v0.address, 100 * LOCO)]), ErrLastValidator)


def test_genesis_refuses_a_powered_validator_without_a_settlement_key() -> None:
    with pytest.raises(GenesisError, match="have power but no settlement key"):
        new_staking_chain([100 * LOCO], genesis={"settlement": {"params": KEYED}})


def test_a_chain_without_settlement_in_its_genesis_needs_no_key() -> None:
    c = new_staking_chain([100 * LOCO])
    assert c.query("/settlement")["params"]["require_settlement_key"] == 0
    resp = c.ok(c.keys[0], [create_validator_msg(NEW, 1000 * LOCO)])
    assert [u.power for u in resp.validator_updates] == [1000]
    assert not _events(resp, "validator.awaiting_settlement_key")


def test_require_settlement_key_is_0_or_1() -> None:
    with pytest.raises(GenesisError, match="require_settlement_key must be 0 or 1"):
        new_staking_chain(
            [100 * LOCO],
            genesis={"settlement": {"params": {"require_settlement_key": 2}}},
        )
