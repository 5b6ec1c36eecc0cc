from abci_app.jobs.errors import ErrDuplicate, ErrInvalidHash, ErrNotAttester, ErrWrongPhase
from abci_app.pb import jobs_pb2
from tests.kits.chainkit import assert_rejected
from tests.kits.marketkit import agg_hash, attest_msg, job_in_phase


def test_attest_recorded_and_quorum_fixes_model():
    m, r = job_in_phase(jobs_pb2.PHASE_ATTEST)
    for p in r.participants:
        assert m.send(m.key(p.address), attest_msg(1, 0, agg_hash(1, 0))).code == 0
    m.until(r.attest_end)
    assert m.round(1, 0).attested_model_hash == agg_hash(1, 0)
    assert m.job(1).current_model_hash == agg_hash(1, 0)


def test_invalid_not_attester():
    m, r = job_in_phase(jobs_pb2.PHASE_ATTEST)
    assert_rejected(m.chain, m.tx(m.owner, attest_msg(1, 0, agg_hash(1, 0))), ErrNotAttester)


def test_invalid_duplicate_hash_phase():
    m, r = job_in_phase(jobs_pb2.PHASE_ATTEST)
    k = m.key(r.participants[0].address)
    assert_rejected(m.chain, m.tx(k, attest_msg(1, 0, b"\x00" * 31)), ErrInvalidHash)
    assert m.send(k, attest_msg(1, 0, agg_hash(1, 0))).code == 0
    assert_rejected(m.chain, m.tx(k, attest_msg(1, 0, agg_hash(1, 0))), ErrDuplicate)
    m.until(r.attest_end)
    assert_rejected(
        m.chain,
        m.tx(m.key(r.participants[1].address), attest_msg(1, 0, agg_hash(1, 0))),
        ErrWrongPhase,
    )


def test_pay_follows_the_aggregate_a_screened_out_update_is_not_paid_as_if_in():
    """Issue 31, 13: the attest quorum also names the accepted updates the aggregate screened
    out (MsgAttestModel.excluded); such a participant is not paid as if its update were in the
    model: half its slot (``SCREENED_PAY_BPS``), the other half stays in the escrow, and its
    reputation does not move; the others are paid exactly what they would be with it in. An
    attester that agrees on the hash but not on the screened-out set is not paid at all."""
    from abci_app.jobs import keeper as jobs_keeper

    m, r = job_in_phase(jobs_pb2.PHASE_ATTEST, n_providers=5, participants_per_round=3)
    accepted = sorted(p.address for p in r.participants)
    assert len(accepted) == 3
    out, a, b = accepted[0], accepted[1], accepted[2]
    rep_before = {x: m.provider(x).reputation for x in accepted}
    h = agg_hash(1, 0)
    txs = [
        (m.key(out), attest_msg(1, 0, h, excluded=[out])),
        (m.key(a), attest_msg(1, 0, h, excluded=[out])),
        (m.key(b), attest_msg(1, 0, h, excluded=[out])),
    ]
    resp = m.block(txs)
    assert [t.code for t in resp.tx_results] == [0, 0, 0]
    m.until(m.round(1, 0).attest_end)
    rr = jobs_keeper.get_round(m.store, 1, 0)
    assert rr is not None and rr.attested_model_hash == h and list(rr.screened_out) == [out]
    pay = {x.address: x.amount for x in rr.payouts if x.kind == "participant"}
    assert set(pay) == {a, b, out}
    assert pay[a] == pay[b] == 1_000_000 // 3 and pay[out] == (1_000_000 // 3) // 2
    # half the screened-out slot stayed in the escrow
    assert rr.returned_to_escrow >= 1_000_000 // 3 - pay[out]
    assert m.provider(out).reputation == rep_before[out]
    assert all(m.provider(x).reputation >= rep_before[x] for x in (a, b))


def test_an_attester_disagreeing_on_the_screened_out_set_is_not_paid():
    m, r = job_in_phase(jobs_pb2.PHASE_ATTEST, n_providers=5, participants_per_round=3)
    x, y, z = sorted(p.address for p in r.participants)
    h = agg_hash(1, 0)
    resp = m.block(
        [
            (m.key(x), attest_msg(1, 0, h)),
            (m.key(y), attest_msg(1, 0, h)),
            (m.key(z), attest_msg(1, 0, h, excluded=[x])),  # a minority claim
        ]
    )
    assert [t.code for t in resp.tx_results] == [0, 0, 0]
    m.until(m.round(1, 0).attest_end)
    rr = m.round(1, 0)
    assert list(rr.screened_out) == []
    pay = {p.address: p.amount for p in rr.payouts if p.kind == "participant"}
    assert set(pay) == {x, y}


def test_invalid_excluded_sets_are_refused():
    m, r = job_in_phase(jobs_pb2.PHASE_ATTEST, n_providers=5, participants_per_round=3)
    x, y, z = sorted(p.address for p in r.participants)
    k = m.key(x)
    h = agg_hash(1, 0)
    for bad in ([z, y], [y, y], [m.owner.address], [b"\x01" * 20]):
        assert_rejected(m.chain, m.tx(k, attest_msg(1, 0, h, excluded=bad)), ErrNotAttester)
    assert m.send(k, attest_msg(1, 0, h, excluded=[y, z])).code == 0
