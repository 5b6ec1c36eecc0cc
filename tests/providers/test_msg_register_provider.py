"""MsgRegisterProvider: pre / operation / post, and every rejection with its stable code."""

from abci_app.bank import keeper as bank
from abci_app.bank.errors import ErrInsufficientFunds
from abci_app.pb import providers_pb2
from abci_app.providers.errors import (
    ErrBondTooSmall,
    ErrInvalidBond,
    ErrInvalidEndpoint,
    ErrInvalidHardware,
    ErrInvalidRegion,
    ErrInvalidThroughput,
    ErrProviderExists,
)
from abci_app.providers.keys import PROVIDER_BONDS
from tests.kits.chainkit import assert_rejected
from tests.kits.marketkit import BOND, new_market, register_msg


def test_register_bonds_into_module_account():
    m = new_market(register=False)
    k = m.providers[0]
    before = bank.get_balance(m.store, k.address)
    res = m.send(
        k, register_msg(BOND, region="us-east", hardware=[("H100", 8, 81920), ("A100", 2, 40960)])
    )
    assert res.code == 0, res.log
    p = m.provider(k.address)
    assert (
        p is not None
        and p.bond == BOND
        and p.reputation == 5000
        and p.status == providers_pb2.PROVIDER_STATUS_ACTIVE
    )
    assert [g.model for g in p.hardware] == ["H100", "A100"] and p.region == "us-east"
    assert bank.get_balance(m.store, k.address) == before - BOND
    assert bank.get_balance(m.store, PROVIDER_BONDS) == BOND
    assert any(e.type == "provider.registered" for e in res.events)


def test_invalid_already_registered():
    m = new_market()
    assert_rejected(m.chain, m.tx(m.providers[0], register_msg()), ErrProviderExists)


def test_invalid_bond_below_min_stake():
    m = new_market(register=False)
    assert_rejected(m.chain, m.tx(m.providers[0], register_msg(999_999_999)), ErrBondTooSmall)


def test_invalid_bond_zero():
    m = new_market(register=False)
    assert_rejected(m.chain, m.tx(m.providers[0], register_msg(0)), ErrInvalidBond)


def test_invalid_insufficient_funds():
    m = new_market(register=False)
    assert_rejected(m.chain, m.tx(m.providers[0], register_msg(10**12 + 1)), ErrInsufficientFunds)


def test_invalid_hardware():
    m = new_market(register=False)
    k = m.providers[0]
    assert_rejected(m.chain, m.tx(k, register_msg(hardware=[])), ErrInvalidHardware)
    assert_rejected(m.chain, m.tx(k, register_msg(hardware=[("H100", 0, 80)])), ErrInvalidHardware)
    assert_rejected(m.chain, m.tx(k, register_msg(hardware=[("H100", 1, 0)])), ErrInvalidHardware)
    assert_rejected(m.chain, m.tx(k, register_msg(hardware=[("", 1, 10)])), ErrInvalidHardware)
    assert_rejected(
        m.chain, m.tx(k, register_msg(hardware=[("H100", 1, 10)] * 9)), ErrInvalidHardware
    )


def test_invalid_endpoint():
    m = new_market(register=False)
    k = m.providers[0]
    for url in [
        "ftp://x.org",
        "http://",
        "http://a b",
        "10.0.0.1:80",
        "http://x.org:0",
        "http://x.org:70000",
        "javascript:alert(1)",
        "http://x.org/" + "a" * 300,
        "https://exämple.org",
        "http://[:::::]:1",  # IPv6 literals no HTTP client accepts (red-team regression)
        "http://[1.2.3]:1",
        "http://[:]",
    ]:
        assert_rejected(m.chain, m.tx(k, register_msg(endpoint=url)), ErrInvalidEndpoint)


def test_valid_endpoints():
    from abci_app.validation import is_http_url

    for url in [
        "http://10.0.0.1:26680",
        "https://blob.example.org/v1/",
        "http://[::1]:8080/x",
        "http://[2001:db8::1]/x",
        "http://[::ffff:10.0.0.1]:80",
        "http://localhost",
    ]:
        assert is_http_url(url), url


def test_invalid_region_and_throughput():
    m = new_market(register=False)
    k = m.providers[0]
    assert_rejected(m.chain, m.tx(k, register_msg(region="EU West")), ErrInvalidRegion)
    assert_rejected(m.chain, m.tx(k, register_msg(region="")), ErrInvalidRegion)
    assert_rejected(m.chain, m.tx(k, register_msg(throughput=0)), ErrInvalidThroughput)
