"""The worker's verifier duty runs the full check (ml.verify_round = trainer.verify.verify_challenge):
an honest round is VALID with the evidence the chain expects, a poisoned round (honest trace, update
scaled by POISON_SCALE) is INVALID on the payload check, and a reveal that names no trace list is
INVALID. Provider and verifier are two real workers with their own blob stores; the chain's answers
are plain round JSON and a fetch reads the provider's store (tests/testnet runs the real network)."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from abci_app.jobs.incentives import compute_evidence
from node.keys import Keyring
from node.worker import ml
from node.worker.worker import ProviderWorker, WorkerConfig
from trainer.data import Corpus, synthetic_text
from trainer.determinism import set_determinism

DATA = synthetic_text(40_000)
MODEL = {"n_layers": 1, "n_heads": 2, "d_model": 16, "context_len": 16, "vocab_size": 256}
JOB = {"id": 3, "spec": {"model": MODEL, "inner_steps": 4, "trace_interval": 2, "tokens_per_step": 64,
                         "num_shards": 4, "dataset_id": Corpus(DATA).id, "compression_policy": "dense+int8",
                         "blob_sources": []}}


def worker(tmp: Path, key: str, behaviour: str, source) -> ProviderWorker:
    Keyring(tmp).add(key)
    w = ProviderWorker(WorkerConfig(home=tmp, key=key, nodes=["http://127.0.0.1:9"], data_dir=tmp / key,
                                    check_hardware=False, behaviour=behaviour))
    w.endpoint = f"http://127.0.0.1:1/{key}"
    w._plans[3] = ml.JobPlan.from_job(JOB)
    w._endpoint_of = lambda address: "http://127.0.0.1:1/prov"  # type: ignore[method-assign]

    def fetch(h, first=(), *, tier="hot", round_key=None):  # as the blob client does: hash-checked, stored
        data = source(h)
        assert w.store.put_bytes(data, tier=tier, round_key=round_key) == h
        return data

    w.fetch = fetch  # type: ignore[method-assign]
    return w


def judged(tmp: Path, behaviour: str, segment: int = 1, drop_trace_list: bool = False):
    set_determinism(0, threads=1)
    base = ml.initial_model_bytes(ml.config_from_job(MODEL), 0)
    blobs = {hashlib.sha256(base).hexdigest(): base, JOB["spec"]["dataset_id"]: DATA}
    sent: list = []
    prov = worker(tmp, "prov", behaviour, lambda h: blobs[h])
    prov._send = lambda *m: sent.extend(m) or {"txhash": "00" * 32, "height": 10}  # type: ignore[method-assign]
    r = {"job_id": 3, "round": 1, "phase": "commit", "base_model_hash": hashlib.sha256(base).hexdigest(),
         "windows": {"commit_deadline": 100, "verdict_end": 200}}
    me = {"address": prov.me, "shard": 2, "commitment": None, "challenge": None}
    r["participants"] = [me]
    prov.do_commit(JOB, r, me, height=50)
    deadline = time.monotonic() + 60
    while prov._training is not None and not prov._training[1].done():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    prov.do_commit(JOB, r, me, height=51)
    prov._pool.shutdown(wait=True)
    (submit,) = [m.submit_update for m in sent]
    ch = {"segment": segment, "segments": [segment], "opened": [], "reveal": None, "verifiers": []}
    prov.do_reveal(JOB, dict(r, phase="reveal"), {"challenge": ch})
    (rev,) = [m.reveal_segment for m in sent[1:]]
    start_loc, end_loc = rev.start_location, rev.end_location
    if drop_trace_list:
        start_loc, end_loc = start_loc.split("?")[0], end_loc.split("?")[0]
    opening = {"segment": rev.segment, "start_state_hash": rev.start_state_hash.hex(),
               "end_state_hash": rev.end_state_hash.hex(), "start_location": start_loc, "end_location": end_loc}
    target = {"address": prov.me, "shard": 2,
              "commitment": {"update_root": submit.update_root.hex(), "trace_root": submit.trace_root.hex(),
                             "payload_size": submit.payload_size, "blob_location": submit.blob_location},
              "challenge": dict(ch, opened=[segment], reveals=[opening], reveal=opening)}
    ver = worker(tmp, "ver", "honest", lambda h: bytes(prov.store.read(h)) if prov.store.has(h) else blobs[h])
    vote = ver.judge(JOB, dict(r, phase="verdict", participants=[target]), target, height=150)
    ver._pool.shutdown(wait=True)
    return vote, compute_evidence([rev.end_state_hash])


@pytest.mark.parametrize("segment", [0, 1])
def test_honest_round_is_valid_with_the_expected_evidence(tmp_path, segment):
    (valid, quality, evidence, why), expected = judged(tmp_path, "honest", segment)
    assert valid, why
    assert evidence == expected and 1 <= quality <= ml.MAX_QUALITY
    assert "start, payload and 1 segment(s)" in why


def test_poisoned_round_is_refused_on_the_payload(tmp_path):
    (valid, quality, evidence, why), expected = judged(tmp_path, "poison")
    assert not valid and quality == 0
    assert why.startswith("payload:") and "update roots differ" in why
    assert evidence != expected  # an invalid vote never carries the valid vote's evidence


def test_a_reveal_without_its_trace_list_is_refused(tmp_path):
    (valid, _q, evidence, why), expected = judged(tmp_path, "honest", drop_trace_list=True)
    assert not valid and "trace list" in why and evidence != expected
