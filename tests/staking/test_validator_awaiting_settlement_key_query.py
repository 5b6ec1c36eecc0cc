"""A validator kept out of the set for want of a settlement key says so in ``/validators`` and
``/validator/{addr}`` (new-user review, issue 32): it showed ``power 0, inactive``, the status
of a validator without enough stake, so its operator could not tell that one command (``loconet
tx settlement set-key``) was missing. Now its status is ``awaiting_settlement_key`` and the CLI
names the command."""

from __future__ import annotations

from typing import Any

from node.cli.staking import _status
from tests.kits.chainkit import signer
from tests.kits.settlekit import set_key_msg
from tests.kits.stakekit import LOCO, StakeChain, create_validator_msg, new_staking_chain

NEW = signer(3000)
SECRET = bytes(31) + b"\x2a"


def _keyed_chain() -> StakeChain:
    from abci_app.settlement import evm
    from tests.kits.settlekit import settlement_secret

    vals = [signer(2000)]
    key = {
        "validator": vals[0].address.hex().upper(),
        "evm_address": "0x" + evm.address_of_private_key(settlement_secret(0)).hex(),
    }
    return new_staking_chain(
        [100 * LOCO],
        genesis={"settlement": {"params": {"checkpoint_interval": 5}, "keys": [key]}},
    )


def _listed(c: StakeChain) -> dict[str, Any]:
    return {v["address"]: v for v in c.query("/validators")}


def test_a_keyless_validator_with_stake_shows_it_awaits_its_settlement_key() -> None:
    c = _keyed_chain()
    c.ok(c.keys[0], [create_validator_msg(NEW, 1000 * LOCO)])
    c.blocks(2)
    addr = NEW.address.hex().upper()
    v = _listed(c)[addr]
    assert v["power"] == 0
    assert v["status"] == "awaiting_settlement_key"
    assert c.query(f"/validator/{addr}")["status"] == "awaiting_settlement_key"
    assert "tx settlement set-key" in _status(v)
    assert _listed(c)[c.vals[0].address.hex().upper()]["status"] == "active"

    c.ok(c.keys[0], [set_key_msg(NEW.address, SECRET)])
    c.blocks(1)
    assert _listed(c)[addr]["status"] == "active"


def test_a_chain_without_settlement_never_shows_awaiting_settlement_key() -> None:
    c = new_staking_chain([100 * LOCO])
    c.ok(c.keys[0], [create_validator_msg(NEW, 1000 * LOCO)])
    c.blocks(1)
    assert _listed(c)[NEW.address.hex().upper()]["status"] == "active"
