"""Hostile chain data read by the worker (red-team regression). A job the chain accepts (every
model dimension up to 2^20) whose model is huge made every worker build it when planning the
job: with memory to overcommit it allocated until the kernel killed it, under a limit torch's
RuntimeError escaped ``_job`` and every job after it (higher ids) never got a duty. Now the
parameter count is computed without building the model, such a job is skipped, and a failure
in one job no longer starves the others. A real HTTP JSON-RPC server plays the node."""

from __future__ import annotations

import base64
import http.server
import json
import threading
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

import pytest

from node.client.keys import Keyring
from node.worker import ml
from node.worker.worker import ProviderWorker, WorkerConfig
from trainer.model import GPT, GPTConfig

SMALL = {"n_layers": 1, "n_heads": 2, "d_model": 16, "context_len": 16, "vocab_size": 256}
HUGE = {"n_layers": 64, "n_heads": 1, "d_model": 8192, "context_len": 16, "vocab_size": 256}


def job(jid: int, model: dict[str, int]) -> dict[str, Any]:
    return {
        "id": jid,
        "status": "active",
        "spec": {
            "model": model,
            "inner_steps": 4,
            "trace_interval": 2,
            "tokens_per_step": 64,
            "num_shards": 4,
            "dataset_id": "ab" * 32,
            "compression_policy": "dense+int8",
            "blob_sources": [],
        },
    }


class Node(http.server.BaseHTTPRequestHandler):
    jobs: ClassVar[list[dict[str, Any]]] = []
    asked: ClassVar[list[str]] = []

    def do_POST(self) -> None:  # noqa: N802
        req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        method, params = req["method"], req.get("params", {})
        result: object
        if method == "status":
            result = {
                "node_info": {"network": "loconet-local"},
                "sync_info": {"latest_block_height": "7"},
            }
        else:
            path = params.get("path", "")
            Node.asked.append(path)
            u = urlsplit(path)
            if u.path == "/jobs":
                st = parse_qs(u.query).get("status", [""])[0]
                value: object = {"jobs": [j for j in Node.jobs if j["status"] == st]}
            elif u.path.startswith("/rounds/"):
                value = {"rounds": []}
            else:
                value = {}
            enc = base64.b64encode(json.dumps(value).encode()).decode()
            result = {"response": {"code": 0, "value": enc, "height": "7"}}
        body = json.dumps({"jsonrpc": "2.0", "id": req.get("id", 1), "result": result}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a: object) -> None:
        pass


@pytest.mark.parametrize(
    "cfg",
    [GPTConfig(), GPTConfig(block_size=7, vocab_size=256, n_layer=3, n_head=3, n_embd=24)],
)
def test_param_count_without_building_matches_the_model(cfg: GPTConfig) -> None:
    assert ml.gpt_num_params(cfg) == GPT(cfg).num_params()


def test_invalid_huge_model_job_is_skipped_and_does_not_starve_later_jobs(
    tmp_path, monkeypatch
) -> None:
    # the huge job must be refused from its spec alone: building its 51 G-parameter model (any
    # path that constructs a trainer GPT) fails the test at once instead of exhausting memory
    built: list[int] = []
    real_init = GPT.__init__

    def spy_init(self: GPT, cfg: GPTConfig) -> None:
        built.append(cfg.n_layer)
        if cfg.n_layer == HUGE["n_layers"]:
            raise AssertionError("the huge job's model was built")
        real_init(self, cfg)

    monkeypatch.setattr(GPT, "__init__", spy_init)
    Keyring(tmp_path).add("prov")
    Node.jobs = [job(1, HUGE), job(2, SMALL)]
    Node.asked = []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Node)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        w = ProviderWorker(
            WorkerConfig(
                home=tmp_path,
                key="prov",
                nodes=[url],
                data_dir=tmp_path / "data",
                check_hardware=False,
            )
        )
        assert w.tick() == 7
        assert HUGE["n_layers"] not in built  # refused from its spec, before any model
        # the worker's own record of the refusal: job 1 is marked unfit (never planned again; its
        # rounds are only polled to decline the ones it is drawn in, tests/worker/
        # test_worker_feasibility.py) and no plan (model, codec, data) was made for it, while
        # job 2 was planned and its rounds polled
        assert "parameters" in w._unfit[1]
        assert 1 not in w._plans
        assert 2 in w._plans
        assert any(p.startswith("/rounds/2") for p in Node.asked), Node.asked
        w.nodes.close()
    finally:
        srv.shutdown()
