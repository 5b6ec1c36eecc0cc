"""`tx job create --data F` stores the job's inputs in the owner's blob store; under a quota it
never evicts another blob unasked (issue 28: a quota may be a typo, and `blob gc` evicting
without a word lost data): it refuses, names the commands that show the victims or raise the
quota, and deletes nothing."""

from __future__ import annotations

import os

from node.blobs import BlobStore
from tests.kits.clikit import SMALL_JOB, flags, offline, run


def test_job_create_under_a_full_quota_refuses_instead_of_evicting(tmp_path):
    home = tmp_path / "home"
    assert run("init", "--home", str(home), "--chain-id", "c").returncode == 0
    store_dir = tmp_path / "store"
    with BlobStore(store_dir, quota_bytes=60_000) as s:
        kept = s.put_bytes(os.urandom(40_000), tier="hot")  # unpinned: evictable
    data = tmp_path / "corpus.txt"
    data.write_bytes(os.urandom(30_000))
    r = run(
        *offline(
            home,
            *("tx", "job", "create", "--from", "validator", *SMALL_JOB),
            *flags(
                reward_per_round="1loco",
                data=data,
                init_seed=0,
                blob_source="http://127.0.0.1:26680",
                blob_dir=store_dir,
            ),
        )
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "would evict 1 blob(s)" in r.stderr and "nothing was deleted" in r.stderr
    assert f"loconet blob gc --dry-run --dir {store_dir}" in r.stderr
    assert "Traceback" not in r.stderr
    with BlobStore(store_dir) as s:
        assert s.has(kept)
