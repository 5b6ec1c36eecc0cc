from abci_app.bank import keeper as bank
from abci_app.bank.errors import ErrInsufficientFunds
from abci_app.providers.errors import (
    ErrInvalidEndpoint,
    ErrInvalidHardware,
    ErrInvalidRegion,
    ErrNothingToUpdate,
    ErrProviderExiting,
    ErrProviderNotFound,
)
from abci_app.providers.keys import PROVIDER_BONDS
from tests.kits.chainkit import assert_rejected
from tests.kits.marketkit import BOND, new_market, providers_pb2, update_msg


def test_update_fields_and_top_up():
    m = new_market()
    k = m.providers[0]
    res = m.send(
        k,
        update_msg(
            add_bond=5,
            region="ap-south",
            endpoint="https://p.example.org",
            hardware=[providers_pb2.GpuSpec(model="L4", count=1, memory_mib=24576)],
        ),
    )
    assert res.code == 0, res.log
    p = m.provider(k.address)
    assert p.bond == BOND + 5 and p.region == "ap-south" and p.endpoint == "https://p.example.org"
    assert [g.model for g in p.hardware] == ["L4"]
    assert bank.get_balance(m.store, PROVIDER_BONDS) == 3 * BOND + 5


def test_invalid_not_registered():
    m = new_market(register=False)
    assert_rejected(m.chain, m.tx(m.providers[0], update_msg(region="eu")), ErrProviderNotFound)


def test_invalid_nothing_to_update():
    m = new_market()
    assert_rejected(m.chain, m.tx(m.providers[0], update_msg()), ErrNothingToUpdate)


def test_invalid_fields():
    m = new_market()
    k = m.providers[0]
    assert_rejected(m.chain, m.tx(k, update_msg(region="EU")), ErrInvalidRegion)
    assert_rejected(m.chain, m.tx(k, update_msg(endpoint="gopher://x")), ErrInvalidEndpoint)
    assert_rejected(
        m.chain,
        m.tx(k, update_msg(hardware=[providers_pb2.GpuSpec(model="x", count=0, memory_mib=1)])),
        ErrInvalidHardware,
    )
    assert_rejected(m.chain, m.tx(k, update_msg(add_bond=10**13)), ErrInsufficientFunds)


def test_invalid_while_exiting():
    from tests.kits.marketkit import exit_msg

    m = new_market()
    k = m.providers[0]
    assert m.send(k, exit_msg()).code == 0
    assert_rejected(m.chain, m.tx(k, update_msg(add_bond=1)), ErrProviderExiting)
