from abci_app.bank import keeper as bank
from abci_app.pb import providers_pb2
from abci_app.providers.errors import ErrProviderExists, ErrProviderExiting, ErrProviderNotFound
from abci_app.providers.keys import PROVIDER_BONDS
from abci_app.providers.params import get_params
from tests.kits.chainkit import assert_rejected
from tests.kits.marketkit import BOND, exit_msg, new_market, register_msg


def test_exit_unbonds_after_unbonding_blocks():
    m = new_market()
    k = m.providers[0]
    bal = bank.get_balance(m.store, k.address)
    res = m.send(k, exit_msg())
    assert res.code == 0, res.log
    p = m.provider(k.address)
    done = m.height + get_params(m.store).unbonding_blocks
    assert (
        p.status == providers_pb2.PROVIDER_STATUS_EXITING
        and p.bond == 0
        and p.unbonding == BOND
        and p.unbonding_height == done
    )
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
    assert_rejected(m.chain, m.tx(m.providers[0], exit_msg()), ErrProviderNotFound)


def test_invalid_already_exiting():
    m = new_market()
    k = m.providers[0]
    assert m.send(k, exit_msg()).code == 0
    assert_rejected(m.chain, m.tx(k, exit_msg()), ErrProviderExiting)
    assert_rejected(m.chain, m.tx(k, register_msg()), ErrProviderExists)


def _exit_and_wait(m, k):
    assert m.send(k, exit_msg()).code == 0
    m.until(m.provider(k.address).unbonding_height)
    assert m.provider(k.address) is None


def test_reputation_survives_exit_and_reregister():
    """Regression: exiting deleted the record and re-registering reset reputation to 5000. The
    last reputation is kept under 0x44 and restored as min(last, initial_reputation)."""
    from abci_app.providers import keeper as pk
    from abci_app.providers.keys import last_reputation_key
    from tests.kits.marketkit import run_job

    m = new_market(n_providers=2)
    m.create_job(rounds=1)
    lazy = m.providers[0]
    run_job(m, 1, skip_commit=frozenset({lazy.address}))
    low = m.provider(lazy.address).reputation
    assert low == 4500  # missed commit (-500); it never verifies its co-participant
    _exit_and_wait(m, lazy)
    assert pk.get_last_reputation(m.store, lazy.address) == low
    assert m.send(lazy, register_msg()).code == 0
    assert m.provider(lazy.address).reputation == low
    assert m.store.get(last_reputation_key(lazy.address)) is None  # lives in the record again


def test_exit_never_raises_reputation():
    """A provider above initial_reputation comes back at initial_reputation (min), never higher."""
    from tests.kits.marketkit import run_job

    m = new_market(n_providers=3)  # a round's rivals never verify each other: the third verifies
    m.create_job(rounds=2)
    run_job(m, 1)
    k = max(m.providers, key=lambda k: m.provider(k.address).reputation)
    high = m.provider(k.address).reputation
    assert high > 5000
    _exit_and_wait(m, k)
    assert m.send(k, register_msg()).code == 0
    assert m.provider(k.address).reputation == 5000
