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
