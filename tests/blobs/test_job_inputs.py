"""A job's dataset and initial model by hash: the owner stores them pinned; a provider fetches
them from the job's blob_sources, verified and limited to the sizes the job states."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from aiohttp import web

from node.blobs import BlobClient, BlobServer, BlobStore, FetchFailed, HashMismatch, Oversize
from node.client.job_inputs import fetch_job_inputs, prepare_job_inputs
from node.errors import UsageError
from tests.kits.blobkit import Peers
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
    inputs = prepare_job_inputs(owner, MODEL, init_seed=1, data=_file(tmp_path, b"x" * 2000))

    async def liar(request: web.Request) -> web.Response:
        return web.Response(body=b"y" * 2000)

    bad = peers.http(liar)
    spec = {**inputs.spec_fields(), "blob_sources": [bad, server.url]}
    with BlobClient(timeout_s=5, max_bytes=1 << 30) as c:
        fetch_job_inputs(spec, make_store("p1"), c)
        # a job that states a smaller dataset than the source serves: refused from Content-Length
        small = {**spec, "blob_sources": [server.url], "dataset_bytes": 1999}
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
    assert (
        prepare_job_inputs(s, MODEL, init_model=good).initial_model_hash
        == hashlib.sha256(good.read_bytes()).hexdigest()
    )
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


@pytest.mark.parametrize(
    "model,says",
    [
        ({**MODEL, "d_model": 99_999_999_999}, "d_model must be 1..1048576"),  # hung the CLI
        ({**MODEL, "n_heads": 0}, "n_heads must be 1.."),
        ({**MODEL, "n_heads": 3}, "multiple of n_heads"),
        ({**MODEL, "n_layers": 4096, "d_model": 8192}, "too large to build here"),
    ],
)
def test_invalid_model_shape_is_refused_before_building(
    make_store: MakeStore, model: dict[str, int], says: str
) -> None:
    """`tx job create --model 99999999999,1,1,1,1 --init-seed 0` tried to build that model (the
    CLI hung until killed); the chain's shape rules and a size bound are checked first."""
    with pytest.raises(UsageError, match=says):
        prepare_job_inputs(make_store("owner"), model, init_seed=0)


def test_invalid_dataset_too_small_to_train(make_store: MakeStore, tmp_path: Path) -> None:
    """An empty --data file made a job no provider could train (trainer.data.Corpus needs 1024
    bytes): every drawn provider would miss its commit."""
    data = tmp_path / "tiny.txt"
    for size in (0, 1023):
        data.write_bytes(b"x" * size)
        with pytest.raises(UsageError, match="at least 1024"):
            prepare_job_inputs(make_store("owner"), MODEL, data=data)
    data.write_bytes(b"x" * 1024)
    assert prepare_job_inputs(make_store("owner2"), MODEL, data=data).dataset_bytes == 1024


def test_dry_run_hashes_without_storing(make_store: MakeStore, tmp_path: Path) -> None:
    """`tx job create --data BIG --dry-run` copied the dataset into HOME/blobs, pinned (never
    collected), although nothing was broadcast; a dry run now only hashes: same ids, no store."""
    from tests.kits.clikit import run

    data = _file(tmp_path, os.urandom(5000))
    stored = prepare_job_inputs(make_store("owner"), MODEL, data=data, init_seed=3)
    assert prepare_job_inputs(None, MODEL, data=data, init_seed=3) == stored
    home = tmp_path / "home"
    assert run("init", "--home", str(home)).returncode == 0
    r = run(
        "tx", "job", "create", "--from", "validator", "--home", str(home), "--rounds", "1",
        "--reward-per-round", "1loco", "--inner-steps", "2", "--trace-interval", "1",
        "--participants", "1", "--shards", "1", "--tokens-per-step", "1", "--data", str(data),
        "--init-seed", "3", "--blob-source", "http://x", "--model", "2,2,32,32,256",
        "--dry-run", "--node", "http://127.0.0.1:9",
    )  # fmt: skip
    assert "hashed, not stored (dry run)" in r.stderr and stored.dataset_id in r.stderr, r.stderr
    assert not (home / "blobs").exists()
