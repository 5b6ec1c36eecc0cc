"""The job page as a training dashboard (issue 36), in headless Chromium against a real node and a
real blob server: the held-out loss of each attested model (the explorer fetches the model by
its hash from the providers' endpoint and evaluates it on the corpus' held-out split, as `make
demo` does), tokens and wall time on the x-axis, throughput, bytes per round and their reduction,
and each provider's live progress read from its endpoint's /metrics.

The market is the hand-driven one of tests/integration/test_explorer.py (three providers, two
rounds, every update challenged); here the job's initial model, dataset and the two attested
models are real blobs, so their held-out losses can be computed and checked."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

import tests.integration.test_explorer as itest
from abci_app.codec.tx import Ed25519Signer
from abci_app.pb import bank_pb2, tx_pb2
from node.blobs import BlobStore, serve_blobs
from node.client.keys import Keyring
from node.client.market_msgs import build_create_job, build_register_provider, send_tx
from node.client.rpc import Client
from node.explorer import views
from node.metrics import worker_metrics
from tests.kits.nodekit import LOCONET, ROOT, Node, free_port_base
from trainer.data import Corpus, default_corpus_bytes
from trainer.determinism import stack_id
from trainer.portable_init import config_from_job, initial_model_bytes

MODEL = {"n_layers": 2, "n_heads": 2, "d_model": 64, "context_len": 64, "vocab_size": 256}


def test_n_params_is_the_trainers() -> None:
    from node.worker.ml import gpt_num_params

    assert views.n_params(MODEL) == gpt_num_params(config_from_job(MODEL))


def test_dashboard_figures_from_rounds_and_header_times() -> None:
    def commit(tokens: int, size: int, height: int) -> dict[str, Any]:
        return {
            "tokens_processed": tokens,
            "payload_size": size,
            "height": height,
            "loss_after_mnats": 3000,
        }

    rounds = [
        {
            "round": rn,
            "phase": "finalized",
            "windows": {"open_height": 10 + 10 * rn},
            "finalized_height": 20 + 10 * rn,
            "attested_model_hash": f"{rn:064x}",
            "participants": [
                {"commitment": commit(8192, 100_000, 14 + 10 * rn)},
                {"commitment": commit(8192, 100_000, 16 + 10 * rn)},
            ],
        }
        for rn in range(2)
    ]
    job = {
        "id": 1,
        "status": "active",
        "rounds": 4,
        "created_height": 10,
        "round_records": rounds,
        "spec": {"inner_steps": 8, "model": MODEL, "initial_model_hash": "ff" * 32},
    }
    times = {h: float(h) for h in range(60)}  # one block a second

    class Held:
        def get(self, h: str) -> float | None:
            return {"ff" * 32: 5.5, f"{0:064x}": 4.0, f"{1:064x}": 3.5}.get(h)

    d = views.dashboard(job, times, Held(), now=40.0)
    assert [x["cum_tokens"] for x in d["rows"]] == [16384, 32768]
    assert [x["wall_s"] for x in d["rows"]] == [10.0, 10.0]
    assert d["rows"][0]["throughput"] == 16384 / 10
    assert d["rows"][0]["step_s"] == ((14 - 10) + (16 - 10)) / 2 / 8
    assert d["rows"][0]["reduction"] == 2 * 4 * views.n_params(MODEL) / 200_000
    assert d["throughput"] == 32768 / 20 and d["bytes_per_round"] == 200_000
    # two rounds final 10 s apart since creation: two left take ~20 s
    assert d["rounds_left"] == 2 and d["eta_s"] == 20.0
    assert d["initial_heldout"] == 5.5 and [x["heldout"] for x in d["rows"]] == [4.0, 3.5]
    charts = views.dashboard_charts(job, d)
    assert "Loss against tokens trained" in charts[0] and charts[0].count("<polyline") == 2


# long: one live chain and browser session through a job's rounds; splitting hides the order
@pytest.mark.integration
@pytest.mark.timeout(400)
def test_job_dashboard_shows_heldout_loss_in_chromium(tmp_path: Path, monkeypatch) -> None:
    cfg = config_from_job(MODEL)
    dataset = default_corpus_bytes()
    models = [initial_model_bytes(cfg, seed) for seed in (0, 1, 2)]
    store = BlobStore(tmp_path / "blobs", quota_bytes=1 << 30)
    ds_hash = store.put_bytes(dataset)
    m_hash = [store.put_bytes(b) for b in models]
    blobs = serve_blobs(store, "127.0.0.1", 0)
    # the providers' endpoint serves its worker figures too: one round trained of job 1
    worker_metrics().step(3.25, 0.05, 1)
    worker_metrics().round_trained(1, 1, 8, 0.4)

    # the hand-driven market attests the real models: round r's aggregate is model r + 1
    real_h = itest.h

    def h(s: str) -> bytes:
        for rn in (0, 1):
            if s == f"aggregate/1/{rn}":
                return bytes.fromhex(m_hash[rn + 1])
        return real_h(s)

    monkeypatch.setattr(itest, "h", h)
    node = Node(tmp_path / "node")
    node.init()
    node.start()
    explorer = None
    log = open(tmp_path / "explorer.out", "wb")  # noqa: SIM115 (closed in finally)
    try:
        node.wait_height(2)
        val = Keyring(node.home).get("validator").signer
        provs = [Ed25519Signer(real_h(f"dashboard-provider-{i}")) for i in range(3)]
        with Client(node.url) as c:
            send_tx(
                c,
                val,
                [
                    tx_pb2.Msg(send=bank_pb2.MsgSend(to_address=k.address, amount=5_000_000_000))
                    for k in provs
                ],
            )

        def register(k: Ed25519Signer) -> None:
            with Client(node.url) as c:
                send_tx(
                    c,
                    k,
                    [
                        build_register_provider(
                            2_000_000_000, ["H100:8:81920"], 50_000, "eu", blobs.url
                        )
                    ],
                )

        regs = [threading.Thread(target=register, args=(k,)) for k in provs]
        for t in regs:
            t.start()
        for t in regs:
            t.join()
        with Client(node.url) as c:
            send_tx(
                c,
                val,
                [
                    build_create_job(
                        {
                            "model": MODEL,
                            "initial_model_hash": m_hash[0],
                            "dataset_id": ds_hash,
                            "inner_steps": 8,
                            "trace_interval": 2,
                            "compression_policy": "topk:0.01+int4",
                            "participants_per_round": 2,
                            "num_shards": 4,
                            "tokens_per_step": 1024,
                            "windows": itest.WINDOWS,
                            "challenge_bps": 10_000,
                            "verifiers_per_challenge": 1,
                            "segments_per_challenge": 1,
                            "determinism_mode": "exact",
                            "tolerance_ppm": 0,
                            "stack": stack_id(),
                            "rounds": 2,
                            "reward_per_round": 10_000_000,
                            "verifier_reward_per_round": 1_000_000,
                        }
                    )
                ],
            )
        port = free_port_base()
        url = f"http://127.0.0.1:{port}"
        explorer = subprocess.Popen(
            [
                *LOCONET,
                "explorer",
                "--node",
                node.url,
                "--listen",
                f"127.0.0.1:{port}",
                "--poll",
                "1",
            ],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        m = itest.Market(node, provs)
        deadline = time.monotonic() + 200
        live_seen = False
        while True:
            m.step()
            with Client(node.url) as c:
                if m.query(c, "/job/1")["status"] == "completed":
                    break
            try:  # while the job runs: the providers' live progress from their /metrics
                page = httpx.get(url + "/job/1", timeout=10).text
                live_seen = live_seen or 'id="live"' in page
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "job 1 did not complete"
            time.sleep(0.2)
        assert live_seen, "the job page never showed the providers' live progress"

        # what make demo computes: each attested model's held-out loss on the corpus
        from node.worker import ml

        with Client(node.url) as c:
            job = m.query(c, "/job/1")
        plan = ml.JobPlan.from_job(job)
        want = [ml.val_loss(plan, b, Corpus(dataset)) for b in models]
        for _ in range(120):  # the explorer evaluates them in the background
            page = httpx.get(url + "/job/1", timeout=10).text
            if all(f"{v:.3f}" in page for v in want) and "Round 1" in page:
                break
            time.sleep(1)
        prof = tmp_path / "chromium-profile"
        dom = itest.chromium(prof, "--dump-dom", url + "/job/1")
        for v in want:
            assert f"{v:.3f}" in dom, (v, want)
        assert "Loss against tokens trained" in dom and "Loss against wall time" in dom
        assert re.search(r'id="tokens">[0-9,]+<', dom) and 'id="throughput"' in dom
        assert re.search(r'id="bytes">[0-9.]+ [kMG]?B<', dom) and "smaller than dense fp32" in dom
        assert 'id="eta">done<' in dom
        cells = re.findall(r'<td class="r heldout">([0-9.]+)</td>', dom)
        assert sorted(cells) == sorted(f"{v:.3f}" for v in want[1:]), cells
        itest.chromium(
            prof,
            "--screenshot=" + str(tmp_path / "explorer-dashboard.png"),
            "--window-size=1400,1800",
            url + "/job/1",
        )
        assert (tmp_path / "explorer-dashboard.png").stat().st_size > 20_000
    finally:
        if explorer is not None:
            explorer.terminate()
            try:
                explorer.wait(10)
            except subprocess.TimeoutExpired:
                explorer.kill()
                explorer.wait(10)
        log.close()
        node.stop()
        blobs.stop_thread()
