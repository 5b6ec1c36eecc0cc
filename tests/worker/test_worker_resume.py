"""kill -9 and restart: the worker resumes from progress.json and its blob store without
training again or sending a second commitment, and what it reveals after the restart proves
against the roots it committed before it. The chain's answers are stand-ins here (the duties'
inputs are plain round JSON); tests/testnet/test_testnet_market.py runs the same duties on a
real network."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from abci_app.jobs.incentives import compute_hidden_entries, mask_trace
from abci_app.merkle import (
    binding_leaf,
    entry_leaf,
    hash_leaf,
    n_trace_leaves,
    verify_leaf_hash_proof,
    verify_merkle_proof,
)
from node.client.keys import Keyring
from node.worker import ml
from node.worker.worker import ProviderWorker, WorkerConfig
from trainer.data import Corpus, synthetic_text
from trainer.determinism import set_determinism

DATA = synthetic_text(40_000)
MODEL = {"n_layers": 1, "n_heads": 2, "d_model": 16, "context_len": 16, "vocab_size": 256}


def fixtures():
    cfg = ml.config_from_job(MODEL)
    base = ml.initial_model_bytes(cfg, 0)
    job = {
        "id": 3,
        "spec": {
            "model": MODEL,
            "inner_steps": 4,
            "trace_interval": 2,
            "tokens_per_step": 64,
            "num_shards": 4,
            "dataset_id": Corpus(DATA).id,
            "initial_model_hash": hashlib.sha256(base).hexdigest(),
            "compression_policy": "dense+int8",
            "blob_sources": [],
        },
    }
    return job, base


def round_json(me: str, base: bytes, phase: str = "commit", challenge: dict | None = None) -> dict:
    part = {
        "address": me,
        "shard": 2,
        "commitment": None,
        "challenge": challenge,
        "outcome": "pending",
        "attested_hash": "",
    }
    return {
        "job_id": 3,
        "round": 1,
        "phase": phase,
        "base_model_hash": hashlib.sha256(base).hexdigest(),
        "windows": {"commit_deadline": 100, "verdict_end": 200},
        "participants": [part],
    }


class Stand:
    """A worker whose chain answers and blob fetches are stand-ins; txs are recorded."""

    def __init__(self, tmp: Path, blobs: dict[str, bytes]) -> None:
        self.sent: list = []
        self.w = ProviderWorker(
            WorkerConfig(
                home=tmp,
                key="prov",
                nodes=["http://127.0.0.1:9"],
                data_dir=tmp / "data",
                check_hardware=False,
            )
        )
        self.w.endpoint = "http://127.0.0.1:26680"
        self.blobs = blobs
        for b in blobs.values():  # the job's inputs, as the owner hands them out (seed_stores)
            self.w.store.put_bytes(b, tier="cold")
        self.w.fetch = self.fetch  # type: ignore[method-assign]
        self.w._send = self.send  # type: ignore[method-assign]

    def fetch(self, h, first=(), *, tier="hot", round_key=None, max_bytes=None):
        """As the blob client does: the (hash-checked) bytes land in the worker's store."""
        assert self.w.store.put_bytes(self.blobs[h], tier=tier, round_key=round_key) == h
        return self.blobs[h]

    def send(self, *msgs):
        self.sent.extend(msgs)
        return {"txhash": f"{len(self.sent):064X}", "height": 10}


# long: one worker's commit, kill -9 and restart on one data dir; splitting hides the order
def test_kill_9_after_commit_and_restart(tmp_path, monkeypatch):
    set_determinism(0, threads=1)
    Keyring(tmp_path).add("prov")
    job, base = fixtures()
    blobs = {hashlib.sha256(base).hexdigest(): base, job["spec"]["dataset_id"]: DATA}
    a = Stand(tmp_path, blobs)
    w = a.w
    w._plans[3] = ml.JobPlan.from_job(job)
    r = round_json(w.me, base)
    me = r["participants"][0]
    w.do_commit(job, r, me, height=50)  # training starts in the background thread
    assert w._training is not None
    deadline = time.monotonic() + 60
    while not w._training[1].done():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    w.do_commit(job, r, me, height=51)  # stores the work, then sends MsgSubmitUpdate
    (submit,) = [m.submit_update for m in a.sent]
    assert (
        submit.job_id == 3
        and submit.round == 1
        and submit.blob_location.endswith(w.progress.round(3, 1)["payload"])
    )
    w._pool.shutdown(wait=True)

    # kill -9: a new process on the same data dir; the chain does not show the commitment yet
    def no_training(*_a, **_k):
        raise AssertionError("trained again after a restart")

    monkeypatch.setattr(ml, "train_round", no_training)
    b = Stand(tmp_path, blobs)
    b.w._plans[3] = ml.JobPlan.from_job(job)
    b.w.do_commit(job, r, me, height=52)
    assert b.sent == [] and b.w._training is None  # it landed before the kill: nothing to redo

    # the crash came between storing the work and the tx: the same commitment is sent again
    prog = b.w.progress.round(3, 1)
    del prog["submitted"]
    b.w.progress.save()
    c = Stand(tmp_path, blobs)
    c.w._plans[3] = ml.JobPlan.from_job(job)
    c.w.do_commit(job, r, me, height=53)
    (again,) = [m.submit_update for m in c.sent]
    # same roots, same proofs: the chain would refuse it as a duplicate (505)
    assert again == submit

    # challenged after the restart: the reveal proves against the trace root committed before
    ch = {"segment": 0, "segments": [0, 1], "opened": [], "reveal": None, "verifiers": []}
    c.w.do_reveal(job, round_json(c.w.me, base, "reveal", ch), {"challenge": ch})
    reveals = [m.reveal_segment for m in c.sent[1:]]
    assert [x.segment for x in reveals] == [0, 1]
    n = n_trace_leaves(len(prog["trace"]))
    submitted_trace = [bytes.fromhex(t) for t in prog["trace"]]
    for x in reveals:
        if x.segment == 0:  # the run's start is opened; segment 1's start is entry 1, secret
            assert verify_merkle_proof(
                submit.trace_root, x.start_state_hash, entry_leaf(0), n, list(x.start_proof)
            )
            assert x.start_location.endswith(x.start_state_hash.hex())
        else:
            assert not x.start_state_hash and not x.start_location
            assert x.start_leaf_hash == hash_leaf(submitted_trace[x.segment])
            assert verify_leaf_hash_proof(
                submit.trace_root, x.start_leaf_hash, entry_leaf(x.segment), n, list(x.start_proof)
            )
        # the end is opened by its leaf hash only (its state stays secret until the votes)
        end = submitted_trace[x.segment + 1]
        assert not x.end_state_hash and x.end_leaf_hash == hash_leaf(end)
        assert verify_leaf_hash_proof(
            submit.trace_root, x.end_leaf_hash, entry_leaf(x.segment + 1), n, list(x.end_proof)
        )
        # both openings name the trace list's hash; the first carries the list (the chain proves
        # it against the trace root), the second does not need to
        # (the list holds the secret entries 1 and 2 of 0..H/k = 4 as their leaf hashes)
        masked = mask_trace(submitted_trace, compute_hidden_entries([0, 1], len(prog["trace"]) - 1))
        assert x.trace_list_hash == hashlib.sha256(b"".join(masked)).digest()
        assert c.w.store.has(x.trace_list_hash.hex())
    assert reveals[0].trace_list == b"".join(masked) and reveals[1].trace_list == b""
    for x in reveals:
        assert c.w.store.has(submitted_trace[x.segment].hex())
        assert c.w.store.has(submitted_trace[x.segment + 1].hex())
    leaf0 = binding_leaf(b"trace", c.w.me_bytes, 3, 1, hashlib.sha256(base).digest())
    assert verify_merkle_proof(submit.trace_root, leaf0, 0, n, list(submit.trace_binding_proof))


@pytest.mark.parametrize("behaviour", ["random-root", "poison"])
def test_cheating_behaviours_commit_what_they_claim(tmp_path, behaviour):
    set_determinism(0, threads=1)
    Keyring(tmp_path).add("prov")
    job, base = fixtures()
    blobs = {hashlib.sha256(base).hexdigest(): base, job["spec"]["dataset_id"]: DATA}
    a = Stand(tmp_path, blobs)
    a.w.cfg.behaviour = behaviour
    a.w._plans[3] = ml.JobPlan.from_job(job)
    r = round_json(a.w.me, base)
    me = r["participants"][0]
    a.w.do_commit(job, r, me, height=50)
    if a.w._training is not None:
        a.w._training[1].result(timeout=60)
        a.w.do_commit(job, r, me, height=51)
    (submit,) = [m.submit_update for m in a.sent]
    payload = a.w.store.read(a.w.progress.round(3, 1)["payload"])
    assert submit.payload_size == len(payload)
    plan = ml.JobPlan.from_job(job)
    if behaviour == "random-root":
        with pytest.raises(ValueError):
            ml.decode_update(plan, bytes(payload))  # no update at all
    else:
        assert ml.decode_update(plan, bytes(payload))  # a well-formed, scaled update
    a.w._pool.shutdown(wait=True)
