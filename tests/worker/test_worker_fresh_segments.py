"""Issue 31, item 5, on the worker: escalated, the provider opens the fresh segments the chain
drew for the appeal panel (MsgRevealSegment with panel 1, no trace list, the start of a
segment right after an opened one as a leaf hash), and an appeal verifier judges the first
panel's segment and the fresh one, re-executing the run through: its evidence is the ends the
chain committed (is_reached_valid for panel 1), a lazy verifier's is not. The first opening's
trace list masks every entry but 0, H/k and the run's start. Two real workers with their own
blob stores; the chain's answers are plain round JSON (tests/worker/test_worker_verify.py's
harness)."""

from __future__ import annotations

import hashlib
import time
from typing import Any

from abci_app.jobs.incentives import compute_masked_entries, is_reached_valid
from abci_app.merkle import hash_leaf
from abci_app.pb import jobs_pb2
from node.worker import ml
from node.worker.records import Challenge
from tests.worker.test_worker_verify import DATA, JOB, fields, worker
from trainer.determinism import set_determinism

# H/k = 4: the first panel opens segment 1; the appeal panel's candidates are {2} (0 is right
# before 1, 3 ends at H/k)
JOB8: dict[str, Any] = {"id": 3, "spec": dict(JOB["spec"], inner_steps=8)}
JOB8_TOL: dict[str, Any] = {
    "id": 3,
    "spec": dict(JOB8["spec"], determinism_mode="tolerance", tolerance_ppm=1000),
}
FIRST, FRESH = 1, 2


def _opening(x: Any, panel: int) -> dict[str, Any]:
    return {
        "segment": x.segment,
        "start_state_hash": x.start_state_hash.hex(),
        "end_state_hash": x.end_state_hash.hex(),
        "start_location": x.start_location,
        "end_location": x.end_location,
        "trace_list_hash": x.trace_list_hash.hex(),
        "end_leaf_hash": x.end_leaf_hash.hex(),
        "start_leaf_hash": x.start_leaf_hash.hex(),
        "panel": panel,
    }


def escalated(tmp, verifier: str = "honest", job: dict[str, Any] = JOB8):
    """(the appeal verifier's vote, the true trace, the first and the fresh openings, the
    target, the verifier)."""
    set_determinism(0, threads=1)
    base = ml.initial_model_bytes(ml.config_from_job(job["spec"]["model"]), 0)
    blobs = {hashlib.sha256(base).hexdigest(): base, job["spec"]["dataset_id"]: DATA}
    sent: list = []
    prov = worker(tmp, "prov", "honest", lambda h: blobs[h], job=job)

    def send(*msgs: Any) -> dict[str, Any]:
        sent.extend(msgs)
        return {"txhash": "00" * 32, "height": 10}

    prov._send = send  # type: ignore[method-assign]
    r: dict[str, Any] = {
        "job_id": 3,
        "round": 1,
        "phase": "commit",
        "base_model_hash": hashlib.sha256(base).hexdigest(),
        "windows": {"commit_deadline": 100, "verdict_end": 200, "appeal_end": 300},
    }
    me: dict[str, Any] = {"address": prov.me, "shard": 2, "commitment": None, "challenge": None}
    r["participants"] = [me]
    prov.do_commit(job, r, me, height=50)
    deadline = time.monotonic() + 60
    while prov._training is not None and not prov._training[1].done():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    prov.do_commit(job, r, me, height=51)
    prov._pool.shutdown(wait=True)
    (submit,) = [m.submit_update for m in sent]
    ch: dict[str, Any] = {
        "segment": FIRST,
        "segments": [FIRST],
        "appeal_segments": [],
        "final_segments": [],
        "opened": [],
        "reveal": None,
        "verifiers": [],
    }
    prov.do_reveal(job, dict(r, phase="reveal"), {"challenge": ch})
    (first,) = [m.reveal_segment for m in sent[1:]]
    reveals = [_opening(first, 0)]
    # escalated: the chain drew FRESH for the appeal panel; the provider opens it in APPEAL
    ch.update(appeal_segments=[FRESH], opened=[FIRST], reveals=reveals, reveal=reveals[0])
    assert Challenge.from_json(ch).fresh_unopened(1) == [FRESH]
    prov.do_reveal_fresh(job, dict(r, phase="appeal"), {"challenge": ch}, 1)
    (fresh,) = [m.reveal_segment for m in sent[2:]]
    reveals.append(_opening(fresh, 1))
    parsed = Challenge.from_json(ch)
    assert parsed.fresh_unopened(1) == []
    assert [o.segment for o in parsed.panel_openings(1)] == [FIRST, FRESH]
    assert [o.segment for o in parsed.panel_openings(0)] == [FIRST]
    target = {
        "address": prov.me,
        "shard": 2,
        "commitment": {
            "update_root": submit.update_root.hex(),
            "trace_root": submit.trace_root.hex(),
            "payload_size": submit.payload_size,
            "blob_location": submit.blob_location,
        },
        "challenge": ch,
    }

    def serve(h: str) -> bytes:
        return bytes(prov.store.read(h)) if prov.store.has(h) else blobs[h]

    trace = [bytes.fromhex(x) for x in prov.progress.round(3, 1)["trace"]]
    # the provider never stored the list in clear (it would name every end): only the masked one
    assert not prov.store.has(hashlib.sha256(ml.trace_list_bytes(trace)).hexdigest())
    assert prov.store.has(first.trace_list_hash.hex())
    ver = worker(tmp, "ver", verifier, serve, job=job)
    rr = dict(r, phase="appeal", participants=[target])
    vote = ver.judge(job, rr, target, height=250)
    ver._pool.shutdown(wait=True)
    return fields(vote), trace, first, fresh, target, ver


def test_escalated_provider_opens_its_fresh_segments_and_the_appeal_verifier_judges_them(
    tmp_path,
):
    (valid, _q, reached, why), trace, first, fresh, target, _ver = escalated(tmp_path)
    n = 4
    # the first opening's list: every entry but 0, H/k and the run's start is a leaf hash, so
    # the fresh segment's end (entry 3) was never public
    listed = ml.parse_trace_list(first.trace_list)
    masked = compute_masked_entries([FIRST], n)
    assert masked == {2, 3}
    assert listed == [hash_leaf(x) if i in masked else x for i, x in enumerate(trace)]
    # the fresh opening: panel 1, no list, the start (entry 2, the first segment's secret end)
    # and the end as leaf hashes only
    assert fresh.panel == 1 and fresh.segment == FRESH and not fresh.trace_list
    assert fresh.trace_list_hash == first.trace_list_hash
    assert not fresh.start_state_hash and fresh.start_leaf_hash == hash_leaf(trace[FRESH])
    assert fresh.end_leaf_hash == hash_leaf(trace[FRESH + 1]) and not fresh.end_state_hash
    # the appeal verifier re-executed the run [1, 2] through: its evidence is both ends
    assert valid, why
    assert reached == [trace[FIRST + 1], trace[FRESH + 1]]
    p = jobs_pb2.Participant(segments=[FIRST], appeal_segments=[FRESH])
    for o in target["challenge"]["reveals"]:
        p.reveals.add(
            segment=o["segment"], end_leaf_hash=bytes.fromhex(o["end_leaf_hash"]), panel=o["panel"]
        )
    assert is_reached_valid(p, reached, 1)


def test_a_lazy_appeal_verifier_cannot_name_the_fresh_end(tmp_path):
    """Public data (and the first panel's opened evidence) give no preimage of the fresh end:
    the chain would refuse the lazy valid vote (is_reached_valid false for panel 1)."""
    (valid, _q, reached, why), trace, _first, _fresh, target, _ver = escalated(
        tmp_path, "lazy-verifier"
    )
    assert valid and "lazy" in why
    p = jobs_pb2.Participant(segments=[FIRST], appeal_segments=[FRESH])
    for o in target["challenge"]["reveals"]:
        p.reveals.add(
            segment=o["segment"], end_leaf_hash=bytes.fromhex(o["end_leaf_hash"]), panel=o["panel"]
        )
    # even with the first panel's reached state copied in, the fresh end is a guess
    copied = [trace[FIRST + 1], reached[1]]
    assert not is_reached_valid(p, copied, 1)
    assert hash_leaf(reached[1]) != hash_leaf(trace[FRESH + 1])


def test_tolerance_mode_appeal_verifier_probes_both_segments(tmp_path):
    """Tolerance mode: the appeal verifier's blind vote carries the probes of both ends its
    re-execution reached (the first panel's segment and the fresh one), in segment order."""
    from abci_app.jobs.probe import PROBE_DIM

    (valid, _q, _reached, why), _trace, _first, fresh, target, ver = escalated(
        tmp_path, job=JOB8_TOL
    )
    assert valid, why
    assert fresh.panel == 1
    probes = ver._probes[(3, 1, target["address"])]
    assert len(probes) == 2 * PROBE_DIM and any(probes[PROBE_DIM:])
