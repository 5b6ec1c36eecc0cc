"""chainkit.assert_rejected, the check every test_invalid_* relies on, fails when it should: an
accepted tx, the right code in the wrong codespace, and the wrong code."""

from __future__ import annotations

import pytest

from abci_app.bank import keeper
from abci_app.bank.errors import ErrInsufficientFunds, ErrInvalidAmount
from abci_app.errors import LoconetError
from tests.kits.chainkit import assert_rejected, new_chain, send_msg


class ErrSameCodeOtherCodespace(LoconetError):
    code = ErrInsufficientFunds.code
    codespace = "staking"


def test_passes_for_the_right_class() -> None:
    c = new_chain()
    k0, k1 = c.keys[0], c.keys[1]
    bal = keeper.get_balance(c.store, k0.address)
    res = assert_rejected(c, c.tx(k0, [send_msg(k1.address, bal + 1)]), ErrInsufficientFunds)
    assert "insufficient" in res.log and keeper.get_balance(c.store, k0.address) == bal


@pytest.mark.parametrize("err", [ErrInvalidAmount, ErrSameCodeOtherCodespace])
def test_fails_for_another_code_or_codespace(err: type[LoconetError]) -> None:
    c = new_chain()
    k0, k1 = c.keys[0], c.keys[1]
    bal = keeper.get_balance(c.store, k0.address)
    with pytest.raises(AssertionError):
        assert_rejected(c, c.tx(k0, [send_msg(k1.address, bal + 1)]), err)


def test_fails_for_an_accepted_tx() -> None:
    c = new_chain()
    with pytest.raises(AssertionError, match="changed state"):
        assert_rejected(c, c.tx(c.keys[0], [send_msg(c.keys[1].address, 5)]), ErrInsufficientFunds)
