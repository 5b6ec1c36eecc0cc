"""A job's dataset and initial model by hash: the owner stores them pinned; a provider fetches
them from the job's blob_sources, verified and limited to the sizes the job states."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from aiohttp import web
from blobkit import Peers

from node.blobs import BlobClient, BlobServer, BlobStore, FetchFailed, HashMismatch, Oversize
from node.errors import UsageError
from node.job_inputs import fetch_job_inputs, prepare_job_inputs
from trainer.model import GPTConfig
from trainer.portable_init import initial_model_bytes

MODEL = {"n_layers": 2, "n_heads": 2, "d_model": 32, "context_len": 32, "vocab_size": 256}
MakeStore = Callable[..., BlobStore]


def test_owner_stores_pinned_inputs_and_provider_fetches_them(
    served: tuple[BlobStore, BlobServer], make_store: MakeStore, tmp_path: Path
) -> None:
    owner, server = served
    data = tmp_path / "corpus.txt"
    data.write_bytes(os.urandom(50_000))
    inputs = prepare_job_inputs(owner, MODEL, data=data, init_seed=5)
    want_model = initial_model_bytes(GPTConfig.preset("tiny"), 5)
    assert inputs.dataset_id == hashlib.sha256(data.read_bytes()).hexdigest()
    assert inputs.initial_model_hash == hashlib.sha256(want_model).hexdigest()
    assert (inputs.dataset_bytes, inputs.initial_model_bytes) == (50_000, len(want_model))
    assert owner.info(inputs.dataset_id).pinned and owner.info(inputs.initial_model_hash).pinned

    spec = {**inputs.spec_fields(), "blob_sources": [server.url]}
    provider = make_store("provider")
    with BlobClient(timeout_s=5, max_bytes=1 << 30) as c:
        model_path, data_path = fetch_job_inputs(spec, provider, c)
    assert model_path.read_bytes() == want_model and data_path.read_bytes() == data.read_bytes()


def test_provider_skips_a_lying_source_and_refuses_oversize(
    peers: Peers, served: tuple[BlobStore, BlobServer], make_store: MakeStore, tmp_path: Path
) -> None:
    owner, server = served
    inputs = prepare_job_inputs(owner, MODEL, init_seed=1, data=_file(tmp_path, b"x" * 1000))

    async def liar(request: web.Request) -> web.Response:
        return web.Response(body=b"y" * 1000)

    bad = peers.http(liar)
    spec = {**inputs.spec_fields(), "blob_sources": [bad, server.url]}
    with BlobClient(timeout_s=5, max_bytes=1 << 30) as c:
        fetch_job_inputs(spec, make_store("p1"), c)
        # a job that states a smaller dataset than the source serves: refused from Content-Length
        small = {**spec, "blob_sources": [server.url], "dataset_bytes": 999}
        with pytest.raises(FetchFailed) as e:
            fetch_job_inputs(small, make_store("p2"), c)
        assert isinstance(e.value.attempts[0][1], Oversize)
        with pytest.raises(FetchFailed) as e:
            fetch_job_inputs({**spec, "blob_sources": [bad]}, make_store("p3"), c)
        assert isinstance(e.value.attempts[0][1], HashMismatch)


def _file(tmp_path: Path, data: bytes) -> Path:
    p = tmp_path / "f.bin"
    p.write_bytes(data)
    return p


def test_init_model_file_is_checked(make_store: MakeStore, tmp_path: Path) -> None:
    s = make_store()
    good = _file(tmp_path, initial_model_bytes(GPTConfig.preset("tiny"), 2))
    assert prepare_job_inputs(s, MODEL, init_model=good).initial_model_hash == hashlib.sha256(good.read_bytes()).hexdigest()
    with pytest.raises(UsageError, match="not the job's model"):
        prepare_job_inputs(s, {**MODEL, "d_model": 64}, init_model=good)
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"junk")
    with pytest.raises(UsageError, match="not a loconet model"):
        prepare_job_inputs(s, MODEL, init_model=junk)
    with pytest.raises(UsageError, match="exactly one"):
        prepare_job_inputs(s, MODEL, init_model=good, init_seed=1)
    with pytest.raises(UsageError, match="not a file"):
        prepare_job_inputs(s, MODEL, data=tmp_path / "missing.txt")
