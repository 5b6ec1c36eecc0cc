from marketkit import BOND, exit_msg, new_market, register_msg

from abci_app.bank import keeper as bank
from abci_app.providers.keys import PROVIDER_BONDS
from abci_app.providers.params import get_params


def test_exit_unbonds_after_unbonding_blocks():
    m = new_market()
    k = m.providers[0]
    bal = bank.get_balance(m.store, k.address)
    res = m.send(k, exit_msg())
    assert res.code == 0, res.log
    p = m.provider(k.address)
    done = m.height + get_params(m.store).unbonding_blocks
    assert p.status == 3 and p.bond == 0 and p.unbonding == BOND and p.unbonding_height == done
    m.until(done - 1)
    assert m.provider(k.address) is not None and bank.get_balance(m.store, k.address) == bal
    m.until(done)
    assert m.provider(k.address) is None
    assert bank.get_balance(m.store, k.address) == bal + BOND
    assert bank.get_balance(m.store, PROVIDER_BONDS) == 2 * BOND
    # may register again after leaving honestly
    assert m.send(k, register_msg()).code == 0


def test_invalid_not_registered():
    m = new_market(register=False)
    m.rejected(m.providers[0], exit_msg(), code=402)


def test_invalid_already_exiting():
    m = new_market()
    k = m.providers[0]
    assert m.send(k, exit_msg()).code == 0
    m.rejected(k, exit_msg(), code=409)
    m.rejected(k, register_msg(), code=401)
