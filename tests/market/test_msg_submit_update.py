from marketkit import MODEL0, job_in_commit, non_participant, submit_msg

from abci_app.jobs import keeper


def test_submit_records_commitment():
    m, r = job_in_commit()
    p = r.participants[0]
    res = m.send(m.key(p.address), submit_msg(p.address, 1, 0))
    assert res.code == 0, res.log
    c = m.round(1, 0).participants[0].commitment
    assert c.base_model_hash == MODEL0 and c.tokens_processed == 8192 and c.height == m.height
    assert [e.type for e in res.events][-1] == "update.submitted"


def test_invalid_unknown_job_and_round():
    m, r = job_in_commit()
    a = r.participants[0].address
    m.rejected(m.key(a), submit_msg(a, 9, 0), code=501)
    m.rejected(m.key(a), submit_msg(a, 1, 5), code=502)


def test_invalid_not_selected():
    m, r = job_in_commit()
    k = non_participant(m, r)
    m.rejected(k, submit_msg(k.address, 1, 0), code=504)
    m.rejected(m.owner, submit_msg(m.owner.address, 1, 0), code=504)


def test_invalid_duplicate():
    m, r = job_in_commit()
    a = r.participants[0].address
    assert m.send(m.key(a), submit_msg(a, 1, 0)).code == 0
    m.rejected(m.key(a), submit_msg(a, 1, 0), code=505)


def test_invalid_late():
    m, r = job_in_commit()
    a = r.participants[0].address
    m.until(r.commit_deadline)
    res = m.rejected(m.key(a), submit_msg(a, 1, 0), code=503)
    assert "reveal" in res.log


def test_last_block_of_window_is_accepted():
    m, r = job_in_commit()
    a = r.participants[0].address
    m.until(r.commit_deadline - 1)
    assert m.send(m.key(a), submit_msg(a, 1, 0)).code == 0
    assert m.height == r.commit_deadline
    assert keeper.get_round(m.store, 1, 0).participants[0].HasField("commitment")


def test_invalid_fields():
    m, r = job_in_commit()
    a = r.participants[0].address
    k = m.key(a)
    m.rejected(k, submit_msg(a, 1, 0, base=b"\x01" * 32), code=506)
    m.rejected(k, submit_msg(a, 1, 0, update_root=b"\x01" * 31), code=507)
    m.rejected(k, submit_msg(a, 1, 0, trace_root=b""), code=507)
    m.rejected(k, submit_msg(a, 1, 0, payload_size=0), code=508)
    m.rejected(k, submit_msg(a, 1, 0, tokens=8 * 1024 + 1), code=508)
    m.rejected(k, submit_msg(a, 1, 0, tokens=0), code=508)
    m.rejected(k, submit_msg(a, 1, 0, loss_after_mnats=10**9 + 1), code=508)
    m.rejected(k, submit_msg(a, 1, 0, blob_location="s3://bucket/x"), code=509)


def test_invalid_copied_update_root_or_trace_root():
    """Regression: a participant could commit another's update_root, trace_root and blob
    location, and with challenge_bps=500 both were accepted and paid. The first commitment in
    block order keeps its roots; a copy of either root (either way round) gets 522."""
    m, r = job_in_commit(n_providers=3, participants_per_round=2)
    a, b = r.participants[0].address, r.participants[1].address
    orig = submit_msg(a, 1, 0).submit_update
    assert m.send(m.key(a), submit_msg(a, 1, 0)).code == 0
    kb = m.key(b)
    own = submit_msg(b, 1, 0).submit_update
    # the whole commitment copied
    m.rejected(kb, submit_msg(b, 1, 0, update_root=orig.update_root, trace_root=orig.trace_root,
                              blob_location=orig.blob_location), code=522)
    # either root alone
    m.rejected(kb, submit_msg(b, 1, 0, update_root=orig.update_root), code=522)
    m.rejected(kb, submit_msg(b, 1, 0, trace_root=orig.trace_root), code=522)
    # another's update_root as my trace_root, another's trace_root as my update_root
    m.rejected(kb, submit_msg(b, 1, 0, trace_root=orig.update_root), code=522)
    m.rejected(kb, submit_msg(b, 1, 0, update_root=orig.trace_root), code=522)
    # its own work is accepted
    assert m.send(kb, submit_msg(b, 1, 0)).code == 0
    c = m.round(1, 0).participants
    assert {p.commitment.update_root for p in c} == {orig.update_root, own.update_root}


def test_invalid_copy_in_same_block_first_wins():
    """Two submissions with the same roots in one block: the first in block order is accepted,
    the second refused (deterministic on every node)."""
    m, r = job_in_commit(n_providers=3, participants_per_round=2)
    a, b = r.participants[1].address, r.participants[0].address  # not address order: block order decides
    msg_a = submit_msg(a, 1, 0)
    copy = submit_msg(b, 1, 0, update_root=msg_a.submit_update.update_root, trace_root=msg_a.submit_update.trace_root)
    resp = m.block([(m.key(a), msg_a), (m.key(b), copy)])
    assert [t.code for t in resp.tx_results] == [0, 522]
    rr = m.round(1, 0)
    assert next(p for p in rr.participants if p.address == a).HasField("commitment")
    assert not next(p for p in rr.participants if p.address == b).HasField("commitment")

