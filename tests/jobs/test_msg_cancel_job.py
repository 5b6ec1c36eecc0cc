from abci_app.bank import keeper as bank
from abci_app.jobs.errors import ErrJobNotActive, ErrJobNotFound, ErrUnauthorized
from tests.kits.chainkit import assert_rejected
from tests.kits.marketkit import cancel_msg, jobs_pb2, new_market


def test_cancel_before_first_round_refunds_everything_but_the_fee():
    m = new_market(register=False)
    bal = bank.get_balance(m.store, m.owner.address)
    m.create_job(rounds=4, reward=1_000_000, vreward=10)
    res = m.send(m.owner, cancel_msg(1))
    assert res.code == 0, res.log
    j = m.job(1)
    assert (
        j.status == jobs_pb2.JOB_STATUS_CANCELLED and j.refunded == 4 * 1_000_010 and j.escrow == 0
    )
    assert (
        bank.get_balance(m.store, m.owner.address) == bal - j.creation_fee
        and j.creation_fee == 1_000_000
    )
    assert any(e.type == "job.closed" for e in res.events)
    m.until(m.height + 5)
    assert m.job(1).rounds_opened == 0


def test_invalid_unknown_job():
    m = new_market()
    assert_rejected(m.chain, m.tx(m.owner, cancel_msg(7)), ErrJobNotFound)


def test_invalid_not_owner():
    m = new_market()
    m.create_job()
    assert_rejected(m.chain, m.tx(m.providers[0], cancel_msg(1)), ErrUnauthorized)


def test_invalid_already_cancelled():
    m = new_market()
    m.create_job()
    assert m.send(m.owner, cancel_msg(1)).code == 0
    assert_rejected(m.chain, m.tx(m.owner, cancel_msg(1)), ErrJobNotActive)
