"""`loconet tx job create --data FILE --init-seed N --blob-source URL` on a real cometbft node:
the job records the hashes, sizes and source; a provider reads the job from the chain, fetches
both blobs from the owner's blob server over HTTP, and they hash to what the chain says."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from node.blobs import BlobClient, BlobStore, default_root, serve_blobs
from node.client.job_inputs import fetch_job_inputs
from tests.kits.clikit import SMALL_JOB, flags
from tests.kits.nodekit import Node, cli
from trainer.model import GPTConfig
from trainer.portable_init import config_from_job, initial_model_bytes


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_job_create_with_data_and_seed_then_a_provider_fetches_by_hash(tmp_path: Path) -> None:
    node = Node(tmp_path / "node")
    node.init()
    home = str(node.home)
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(b"to be or not to be, that is the question\n" * 500)
    owner_store = BlobStore(default_root(home), 1 << 30)
    server = serve_blobs(owner_store, "127.0.0.1", 0)
    node.start()
    try:
        node.wait_height(2)
        out = json.loads(
            cli(
                *("tx", "job", "create", "--from", "validator", *SMALL_JOB),
                *flags(reward_per_round="10loco", data=corpus, init_seed=42),
                *flags(blob_source=server.url, model="2,2,32,32,256"),
                *flags(home=home, node=node.url),
                *("-o", "json"),
            ).stdout
        )
        want_model = initial_model_bytes(GPTConfig.preset("tiny"), 42)  # recomputed independently
        assert out["code"] == 0
        assert out["dataset_id"] == hashlib.sha256(corpus.read_bytes()).hexdigest()
        assert out["initial_model_hash"] == hashlib.sha256(want_model).hexdigest()

        spec = json.loads(cli("query", "job", "1", "--node", node.url, "-o", "json").stdout)[
            "result"
        ]["spec"]
        assert (
            spec["dataset_id"] == out["dataset_id"]
            and spec["initial_model_hash"] == out["initial_model_hash"]
        )
        assert spec["blob_sources"] == [server.url]
        assert (spec["dataset_bytes"], spec["initial_model_bytes"]) == (
            corpus.stat().st_size,
            len(want_model),
        )

        provider = BlobStore(tmp_path / "provider-blobs", 1 << 30)
        with BlobClient(timeout_s=10, max_bytes=1 << 30) as c:
            model_path, data_path = fetch_job_inputs(spec, provider, c)
        assert (
            model_path.read_bytes() == want_model and data_path.read_bytes() == corpus.read_bytes()
        )
        assert server.stats.bytes_sent == len(want_model) + corpus.stat().st_size

        # without a source the CLI refuses before sending anything, naming the fix...
        job2 = [
            *("tx", "job", "create", "--from", "validator", *SMALL_JOB),
            *flags(reward_per_round="10loco", data=corpus, init_seed=1, home=home, node=node.url),
        ]
        r = cli(*job2, check=False)
        assert r.returncode == 1 and "--blob-source" in r.stderr
        # --blob-dir: the inputs go to another store (e.g. a provider worker's), served elsewhere
        other = BlobStore(tmp_path / "worker-blobs", 1 << 30)
        server2 = serve_blobs(other, "127.0.0.1", 0)
        try:
            cli(*job2, "--blob-dir", str(tmp_path / "worker-blobs"), "--blob-source", server2.url)
            spec2 = json.loads(cli("query", "job", "2", "--node", node.url, "-o", "json").stdout)[
                "result"
            ]["spec"]
            assert (
                spec2["blob_sources"] == [server2.url] and spec2["dataset_id"] == spec["dataset_id"]
            )
            with BlobClient(timeout_s=10, max_bytes=1 << 30) as c:
                m2, _ = fetch_job_inputs(spec2, BlobStore(tmp_path / "provider2", 1 << 30), c)
            # the default model
            assert m2.read_bytes() == initial_model_bytes(config_from_job(spec2["model"]), 1)
        finally:
            server2.stop_thread()
            other.close()
    finally:
        server.stop_thread()
        assert node.stop() == 0, node.tail()
        owner_store.close()
