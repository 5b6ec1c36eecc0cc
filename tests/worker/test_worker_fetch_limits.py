"""Every blob the worker fetches is limited to the size it can be: a payload to the commitment's
``payload_size``, a trace state or an attested model to a cap from the job's model (ml.blob_cap),
the dataset and the initial model to the sizes the job spec states (node.client.job_inputs). A peer
that sends more is refused while the body streams, never read whole into memory, and the next
location is tried. Real HTTP: the real blob server and a lying aiohttp peer on loopback."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from abci_app.codec.address import from_bech32
from abci_app.merkle import bound_update_leaves, merkle_root
from node.blobs import BlobServer, BlobStore
from node.client.keys import Keyring
from node.metrics import worker_metrics
from node.worker import ml
from node.worker.records import Job, Participant, Round
from node.worker.worker import ProviderWorker, WorkerConfig
from tests.kits.blobkit import Peers
from trainer.commit import encode
from trainer.data import Corpus, synthetic_text
from trainer.model import GPT
from trainer.state import InnerConfig, make_inner_optimizer, model_payload, state_bytes

PAYLOAD = os.urandom(300_000)
FLOOD = 64 << 20  # what the lying peer offers for the payload's hash
CHUNK = 64 << 10
BASE = "77" * 32

MODEL = {"n_layers": 2, "n_heads": 2, "d_model": 32, "context_len": 32, "vocab_size": 256}
SPEC: dict[str, Any] = {
    "model": MODEL,
    "inner_steps": 4,
    "trace_interval": 2,
    "tokens_per_step": 64,
    "num_shards": 4,
    "dataset_id": "ab" * 32,
    "compression_policy": "dense+int8",
    "blob_sources": [],
}


@pytest.fixture
def peers() -> Iterator[Peers]:
    p = Peers()
    yield p
    p.close()


def received() -> float:
    """Body bytes every blob client of this process has read (node/metrics.py, failures too)."""
    v = worker_metrics().registry.get_sample_value("loconet_blob_bytes_total", {"direction": "in"})
    return float(v or 0.0)


def flooding(sent: list[int], *, announce: bool):
    """A peer that answers the payload's hash with FLOOD bytes (the payload, then zeros), with or
    without a Content-Length saying so; ``sent`` counts what it managed to write."""

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        if announce:
            resp.content_length = FLOOD
        await resp.prepare(request)
        body = PAYLOAD + bytes(CHUNK)
        try:
            await resp.write(body)
            sent[0] += len(body)
            zeros = bytes(CHUNK)
            while sent[0] < FLOOD:
                await resp.write(zeros)
                sent[0] += CHUNK
        except (ConnectionError, RuntimeError):
            pass  # the client hung up: what we want
        return resp

    return handler


def provider_worker(tmp: Path, endpoint: str) -> ProviderWorker:
    Keyring(tmp).add("me")
    w = ProviderWorker(
        WorkerConfig(
            home=tmp,
            key="me",
            nodes=["http://127.0.0.1:9"],
            data_dir=tmp / "me",
            check_hardware=False,
        )
    )
    w._endpoint_of = lambda address: endpoint  # type: ignore[method-assign]
    w._peer_urls = list  # type: ignore[method-assign]
    return w


def committed(tmp: Path, location: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(round, participant) whose commitment is PAYLOAD, bound to a provider 'peer'."""
    addr = Keyring(tmp).add("peer").address
    h = hashlib.sha256(PAYLOAD).hexdigest()
    root = merkle_root(bound_update_leaves(from_bech32(addr), 3, 1, bytes.fromhex(BASE), PAYLOAD))
    p = {
        "address": addr,
        "commitment": {
            "blob_location": f"{location}/blob/{h}",
            "payload_size": len(PAYLOAD),
            "update_root": root.hex(),
        },
    }
    return {"job_id": 3, "round": 1, "base_model_hash": BASE}, p


@pytest.mark.parametrize("announce", [False, True], ids=["streamed", "announced"])
def test_oversize_payload_is_refused_while_streaming_and_the_next_source_used(
    tmp_path: Path, peers: Peers, announce: bool
) -> None:
    sent = [0]
    liar = peers.http(flooding(sent, announce=announce))
    with BlobStore(tmp_path / "honest") as store, BlobServer(store, "127.0.0.1", 0) as server:
        store.put_bytes(PAYLOAD)
        w = provider_worker(tmp_path, server.url)  # the provider's own endpoint serves it right
        r, p = committed(tmp_path, liar)  # the commitment names the liar's URL first
        before = received()
        try:
            assert w._payload(Round.from_json(r), Participant.from_json(p), "3/1") == PAYLOAD
        finally:
            w.nodes.close()
        read = received() - before
    # from the liar at most the committed size and one read past it; then the honest endpoint
    assert read <= 2 * len(PAYLOAD) + 4 * CHUNK, read
    assert sent[0] < FLOOD // 4, sent[0]  # it never got to send its 64 MiB
    assert w.store.has(hashlib.sha256(PAYLOAD).hexdigest())


def test_a_provider_that_serves_more_than_it_committed_has_no_payload(
    tmp_path: Path, peers: Peers
) -> None:
    """Every location of the provider's own sends more than payload_size: a content fault (the
    same for every honest worker), not an unavailable blob to retry forever."""
    sent = [0]
    liar = peers.http(flooding(sent, announce=False))
    w = provider_worker(tmp_path, liar)
    r, p = committed(tmp_path, liar)
    try:
        assert w._payload(Round.from_json(r), Participant.from_json(p), "3/1") is None
    finally:
        w.nodes.close()
    assert not w.store.has(hashlib.sha256(PAYLOAD).hexdigest())


def test_dataset_larger_than_the_spec_states_is_refused_and_the_next_source_used(
    tmp_path: Path, peers: Peers
) -> None:
    """The job's inputs go through node.client.job_inputs.fetch_job_inputs: dataset_bytes is the
    limit."""
    data = synthetic_text(40_000)
    init = ml.initial_model_bytes(ml.config_from_job(MODEL), 0)

    async def longer(request: web.Request) -> web.StreamResponse:  # the data, then more
        return web.Response(body=data + bytes(1 << 20))

    liar = peers.http(longer)
    job: dict[str, Any] = {
        "id": 3,
        "spec": dict(
            SPEC,
            dataset_id=Corpus(data).id,
            dataset_bytes=len(data),
            initial_model_hash=hashlib.sha256(init).hexdigest(),
            initial_model_bytes=len(init),
        ),
    }
    with BlobStore(tmp_path / "owner") as store, BlobServer(store, "127.0.0.1", 0) as server:
        store.put_bytes(data, tier="cold")
        store.put_bytes(init, tier="cold")
        job["spec"]["blob_sources"] = [liar, server.url]
        w = provider_worker(tmp_path, "")
        try:
            corpus = w._corpus(Job.from_json(job))
            assert w._base(Job.from_json(job), job["spec"]["initial_model_hash"]) == init
        finally:
            w.nodes.close()
    assert corpus.id == Corpus(data).id
    assert w.store.info(Corpus(data).id).pinned  # the job's inputs stay


def test_honest_states_and_models_fit_their_caps() -> None:
    plan = ml.JobPlan.from_job({"id": 3, "spec": SPEC})
    model = GPT(plan.model)
    opt = make_inner_optimizer(model, InnerConfig())
    state = state_bytes(model, opt, InnerConfig(), round=10**9, inner_step=10**6, shard=999)
    momentum = {n: p.detach() for n, p in model.named_parameters()}
    attested = encode(model_payload(model, momentum, ml.AGGREGATION.outer_meta()))
    init = ml.model_bytes(model)
    assert len(init) <= ml.blob_cap(plan, 1)
    assert len(state) <= ml.blob_cap(plan, ml.STATE_PARTS) < 2 * len(state)
    assert len(attested) <= ml.blob_cap(plan, ml.MODEL_PARTS) < 2 * len(attested)
    assert ml.trace_list_size(plan) == 32 * 3 == len(ml.trace_list_bytes([bytes(32)] * 3))
