"""Red-team: a challenged provider commits a trace whose entry H/k is a blob with a deeply
nested JSON meta (40 KB, under MAX_META). The verifier fetches it by its committed hash (it
is the committed state, so the hash check passes), and judge() runs decode_meta on it, which
raises RecursionError: judge catches only BlobError / ValueError / PayloadError, so no vote is
ever cast (do_verify fails and is retried forever); the honest verifier is "silent" instead of
voting INVALID on a provably malformed trace. The same holds for entry 0 and the payload
(verify_challenge -> decode -> RecursionError / TypeError / RuntimeError)."""

import hashlib
import struct

from node.client.keys import Keyring
from node.worker import ml
from node.worker.worker import ProviderWorker, WorkerConfig
from tests.kits.workerkit import tiny_job
from trainer.commit import MAGIC


def job() -> dict:
    return tiny_job(inner_steps=4, trace_interval=2, initial_model_hash="cd" * 32, blob_sources=[])


def deep_state() -> bytes:
    meta = b"[" * 20000 + b"]" * 20000
    return (
        MAGIC
        + struct.pack(">HBB", 1, 2, 0)
        + bytes([3])
        + b"raw"
        + struct.pack(">I", len(meta))
        + meta
        + struct.pack(">I", 0)
    )


def test_a_state_that_breaks_the_decoder_gets_an_invalid_vote(tmp_path, monkeypatch) -> None:
    Keyring(tmp_path).add("ver")
    w = ProviderWorker(
        WorkerConfig(
            home=tmp_path,
            key="ver",
            nodes=["http://127.0.0.1:1"],
            data_dir=tmp_path / "data",
            check_hardware=False,
            device="cpu",
        )
    )
    j = job()
    plan = ml.JobPlan.from_job(j)
    w._plans[7] = plan
    states = [b"state0", b"state1", deep_state()]  # entries 0, 1, H/k = 2
    trace = [hashlib.sha256(s).digest() for s in states]
    blobs = {hashlib.sha256(s).hexdigest(): s for s in states}
    tl = b"".join(trace)
    blobs[hashlib.sha256(tl).hexdigest()] = tl
    monkeypatch.setattr(w, "fetch", lambda h, first=(), **kw: blobs[h])
    monkeypatch.setattr(w, "_endpoint_of", lambda a: "")
    target = {
        "address": "loco1qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq",  # unused before the crash
        "shard": 0,
        "commitment": {
            "trace_root": "00" * 32,
            "update_root": "00" * 32,
            "blob_location": "http://x/blob/" + "ab" * 32,
            "payload_size": 1,
        },
        "challenge": {
            "segment": 0,
            "reveal": {},
            "reveals": [
                {
                    "segment": 0,
                    "trace_list_hash": hashlib.sha256(tl).hexdigest(),
                    "start_state_hash": trace[0].hex(),
                    "start_location": "http://x",
                    "end_state_hash": trace[1].hex(),
                    "end_location": "http://x",
                    "end_leaf_hash": "",
                }
            ],
        },
    }
    rnd = {
        "job_id": 7,
        "round": 0,
        "base_model_hash": "cd" * 32,
        "phase": "verdict",
        "windows": {"verdict_end": 100},
    }
    try:
        vote = w.judge(j, rnd, target, height=10)
    finally:
        w.store.close()
    assert vote is not None and vote.valid is False  # INVALID, not an exception
