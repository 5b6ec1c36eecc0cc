"""Exact mode holds on one stack only (trainer.determinism.stack_id): a worker on another torch
version or device class would re-execute an honest round to other bytes and vote it INVALID (and
be slashed for it). So a worker skips an exact-mode job pinned to another stack: drawn, it
declines the round before committing (MsgDeclineRound: no slash); as a verifier it lets the vote
go; one log line per job. A job pinned to its own stack, as the testnet's built-in job is (made
by stack_id in the CLI process), is trained and verified as before. The chain's answers are
plain round JSON; txs are recorded."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

import pytest

from node.client.keys import Keyring
from node.worker import ml
from node.worker.worker import ProviderWorker, WorkerConfig
from trainer.determinism import stack_id

MODEL = {"n_layers": 1, "n_heads": 2, "d_model": 16, "context_len": 16, "vocab_size": 256}
OTHER = "torch=1.13.1;device=cpu;dtype=float32;tf32=off"


def job(stack: str, mode: str = "exact") -> dict[str, Any]:
    return {
        "id": 3,
        "spec": {
            "model": MODEL,
            "inner_steps": 4,
            "trace_interval": 2,
            "tokens_per_step": 64,
            "num_shards": 4,
            "dataset_id": "ab" * 32,
            "initial_model_hash": "cd" * 32,
            "compression_policy": "dense+int8",
            "blob_sources": [],
            "determinism_mode": mode,
            "tolerance_ppm": 1000 if mode == "tolerance" else 0,
            "stack": stack,
        },
    }


class Stand:
    def __init__(self, tmp: Path, j: dict[str, Any]) -> None:
        Keyring(tmp).add("prov")
        self.w = ProviderWorker(
            WorkerConfig(
                home=tmp,
                key="prov",
                nodes=["http://127.0.0.1:9"],
                data_dir=tmp / "data",
                check_hardware=False,
            )
        )
        self.w._plans[3] = ml.JobPlan.from_job(j)
        self.sent: list[Any] = []
        self.duties: list[str] = []
        self.w._send = self.send  # type: ignore[method-assign]
        self.w.do_commit = lambda *a, **k: self.duties.append("commit")  # type: ignore[method-assign]
        self.w.do_verify = lambda *a, **k: self.duties.append("verify")  # type: ignore[method-assign]

    def send(self, *msgs: Any) -> dict[str, Any]:
        self.sent.extend(msgs)
        return {"txhash": "00" * 32, "height": 11}

    def commit_round(self, rn: int = 1, outcome: str = "pending") -> dict[str, Any]:
        me = {
            "address": self.w.me,
            "shard": 1,
            "commitment": None,
            "challenge": None,
            "outcome": outcome,
            "attested_hash": "",
        }
        return {
            "job_id": 3,
            "round": rn,
            "phase": "commit",
            "base_model_hash": "cd" * 32,
            "windows": {"commit_deadline": 100},
            "participants": [me],
        }

    def verdict_round(self) -> dict[str, Any]:
        opening = {"segment": 0}
        target = {
            "address": "loco1target",
            "shard": 2,
            "commitment": {"payload_size": 1},
            "outcome": "pending",
            "challenge": {
                "segment": 0,
                "reveal": opening,
                "reveals": [opening],
                "verifiers": [
                    {"address": self.w.me, "panel": 0, "committed": False, "voted": False}
                ],
            },
        }
        return {"job_id": 3, "round": 2, "phase": "verdict", "participants": [target]}

    def close(self) -> None:
        self.w._pool.shutdown(wait=True)
        self.w.nodes.close()


def test_exact_job_on_another_stack_is_declined_and_not_verified(tmp_path, caplog) -> None:
    st = Stand(tmp_path, job(OTHER))
    j = job(OTHER)
    with caplog.at_level(logging.WARNING, logger="loconet.worker"):
        st.w._round(j, st.commit_round(), height=50)
        st.w._round(j, st.verdict_round(), height=60)
        st.w._round(j, st.commit_round(rn=4, outcome="declined"), height=70)  # declined already
        st.w._round(j, st.commit_round(rn=5), height=99)  # too late: it would land in block D
    assert st.duties == []  # neither trained nor verified
    (msg,) = st.sent
    assert msg.WhichOneof("sum") == "decline_round", msg
    assert (msg.decline_round.job_id, msg.decline_round.round) == (3, 1)
    assert st.w.progress.round(3, 1)["declined"]
    said = [r.getMessage() for r in caplog.records if "pinned to stack" in r.getMessage()]
    assert len(said) == 1, said  # once per job
    assert OTHER in said[0] and st.w.stack in said[0]
    st.close()


@pytest.mark.parametrize("mode", ["exact", "tolerance"])
def test_a_job_on_our_stack_or_in_tolerance_mode_is_trained_and_verified(tmp_path, mode) -> None:
    pinned = OTHER if mode == "tolerance" else ml.worker_stack("cpu")  # tolerance: any stack
    st = Stand(tmp_path, job(pinned, mode))
    j = job(pinned, mode)
    st.w._round(j, st.commit_round(), height=50)
    st.w._round(j, st.verdict_round(), height=60)
    assert st.w._duties.join(30)  # a verification runs on the duty thread, beside training
    assert st.duties == ["commit", "verify"] and st.sent == []
    st.close()


def test_the_testnet_job_pins_the_stack_its_cpu_workers_run(tmp_path) -> None:
    """node/testnet_market.builtin_job derives its stack from stack_id("cpu") (in the CLI
    process, where TF32 reads as on by default): the testnet's CPU workers take it as theirs."""
    from node.local.manifest import WorkerInfo
    from node.local.testnet_market import builtin_job

    w = WorkerInfo("provider0", "provider0", "loco1x", str(tmp_path), 26680, ["http://x:1"])
    spec, data, _model = builtin_job(3, [w])
    assert spec["stack"] == stack_id("cpu") and spec["determinism_mode"] == "exact"
    assert spec["dataset_id"] == hashlib.sha256(data).hexdigest()
    st = Stand(tmp_path, job(spec["stack"]))
    assert st.w.stack == ml.worker_stack("cpu") and not st.w._foreign_stack(3)
    st.close()


def test_same_stack() -> None:
    mine = ml.worker_stack("cpu")
    torch = mine.split(";")[0]
    assert ml.same_stack(mine, mine)
    assert ml.same_stack(mine.replace("tf32=off", "tf32=on"), mine)  # TF32 is no CPU mode
    assert not ml.same_stack(OTHER, mine)  # another torch
    assert not ml.same_stack(mine.replace("device=cpu", "device=cuda/NVIDIA H200"), mine)
    assert not ml.same_stack(mine.replace("float32", "bfloat16"), mine)
    gpu = f"{torch};device=cuda/NVIDIA H200;dtype=float32;tf32=off"
    assert ml.same_stack(gpu, gpu)
    assert not ml.same_stack(gpu.replace("tf32=off", "tf32=on"), gpu)  # on CUDA it counts
    assert not ml.same_stack(mine + ";cudnn=9", mine)  # a field we do not know differs
    assert ml.same_stack("torch-2.4", "torch-2.4") and not ml.same_stack("torch-2.4", mine)
    assert ml.worker_stack("cpu").endswith(";tf32=off") and torch.startswith("torch=")
