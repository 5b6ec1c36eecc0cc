"""A new validator's steps in the wrong order (new-user review, issue 32): ``set-key`` before
``create-validator`` is refused (the key proves possession for a consensus address that must be
a validator), and the refusal now names the order to follow; both in one transaction, in order,
seat the validator at once."""

from __future__ import annotations

from abci_app.settlement.errors import ErrValidatorNotFound
from tests.kits.chainkit import assert_rejected, signer
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


def test_set_key_before_create_validator_is_refused_naming_the_order() -> None:
    c = _keyed_chain()
    raw = c.tx(c.keys[0], [set_key_msg(NEW.address, SECRET)])
    log = assert_rejected(c, raw, ErrValidatorNotFound).log
    assert "create-validator" in log and "first" in log


def test_create_validator_and_set_key_in_one_transaction_seat_the_validator() -> None:
    c = _keyed_chain()
    resp = c.ok(
        c.keys[0], [create_validator_msg(NEW, 1000 * LOCO), set_key_msg(NEW.address, SECRET)]
    )
    assert [u.power for u in resp.validator_updates] == [1000]
