"""BlobStore: content addressing, hash validation, atomic writes (kill -9), concurrent writers,
retention per tier, quota eviction."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from node.blobs import BlobNotFound, BlobStore, InvalidHash, QuotaExceeded
from node.paths import PROJECT_ROOT
from tests.kits.blobkit import sha

MakeStore = Callable[..., BlobStore]


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def blob_files(store: BlobStore) -> list[Path]:
    return sorted(p for p in store.blob_dir.rglob("*") if p.is_file())


def test_put_bytes_and_file_are_content_addressed(make_store: MakeStore, tmp_path: Path) -> None:
    s = make_store()
    data = os.urandom(3 * 1024 * 1024 + 7)  # spans several write chunks
    h = s.put_bytes(data)
    assert h == sha(data)
    assert s.has(h) and s.read(h) == data
    assert s.path(h) == s.blob_dir / h[:2] / h
    src = tmp_path / "f.bin"
    src.write_bytes(data)
    assert s.put_file(src) == h  # the same bytes: the same blob, stored once
    assert len(s.ls()) == 1 and s.usage()["used_bytes"] == len(data)
    assert list(s.tmp_dir.iterdir()) == []


@pytest.mark.parametrize(
    "bad",
    [
        "../../etc/passwd",
        "A" * 64,
        "a" * 63,
        "a" * 65,
        "g" * 64,
        "",
        "a" * 63 + "/",
        "..",
        42,
        None,
    ],
)
def test_invalid_hash_is_refused_everywhere(make_store: MakeStore, bad: object) -> None:
    s = make_store()
    for call in (s.has, s.path, s.read, s.pin, s.unpin, s.verify, s.info):
        with pytest.raises(InvalidHash) as e:
            call(bad)  # type: ignore[arg-type]
        assert e.value.code == "invalid_hash"


def test_unknown_hash_is_not_found(make_store: MakeStore) -> None:
    s = make_store()
    h = sha(b"nothing here")
    assert not s.has(h)
    with pytest.raises(BlobNotFound) as e:
        s.read(h)
    assert e.value.code == "not_found"
    with pytest.raises(BlobNotFound):
        s.pin(h)


def test_concurrent_writers_threads_each_with_own_store(tmp_path: Path) -> None:
    data = os.urandom(2 * 1024 * 1024)
    errors: list[BaseException] = []
    hashes: list[str] = []

    def writer(i: int) -> None:
        try:
            with BlobStore(tmp_path / "s", 1 << 30) as st:
                hashes.append(st.put_bytes(data, tier="temp", round_key=f"r{i % 2}"))
                hashes.append(st.put_bytes(f"own {i}".encode()))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with BlobStore(tmp_path / "s") as st:
        infos = {b.hash: b for b in st.ls()}
        assert len(infos) == 9
        assert st.read(sha(data)) == data
        assert infos[sha(data)].rounds == ("r0", "r1")
        assert list(st.tmp_dir.iterdir()) == []
        for f in blob_files(st):
            assert sha(f.read_bytes()) == f.name


CHILD_PUT_SAME = """
import sys
from pathlib import Path
from node.blobs import BlobStore
data = bytes(range(256)) * 8192
with BlobStore(Path(sys.argv[1])) as s:
    for i in range(5):
        s.put_bytes(data, tier="hot")
        s.put_bytes(sys.argv[2].encode() + bytes([i]))
"""


def test_concurrent_writers_processes(tmp_path: Path) -> None:
    root = tmp_path / "s"
    BlobStore(root, 1 << 30).close()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD_PUT_SAME, str(root), f"p{i}"], cwd=PROJECT_ROOT
        )
        for i in range(3)
    ]
    assert [p.wait(60) for p in procs] == [0, 0, 0]
    with BlobStore(root) as st:
        assert len(st.ls()) == 1 + 3 * 5
        assert st.read(sha(bytes(range(256)) * 8192)) == bytes(range(256)) * 8192
        assert list(st.tmp_dir.iterdir()) == []


CHILD_PUT_STDIN = """
import sys
from pathlib import Path
from node.blobs import BlobStore
with BlobStore(Path(sys.argv[1])) as s:
    print(s.put_file("/dev/stdin"), flush=True)
"""


def test_kill_9_mid_write_leaves_no_blob_under_a_valid_name(tmp_path: Path) -> None:
    root = tmp_path / "s"
    BlobStore(root, 1 << 30).close()
    data = os.urandom(4 * 1024 * 1024)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD_PUT_STDIN, str(root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=PROJECT_ROOT,
    )
    assert child.stdin is not None
    child.stdin.write(data[: len(data) // 2])  # half the blob, then the writer is killed
    child.stdin.flush()
    deadline = time.monotonic() + 30
    parts: list[Path] = []
    while time.monotonic() < deadline:
        parts = [p for p in (root / "tmp").iterdir() if p.stat().st_size >= 1024 * 1024]
        if parts:
            break
        time.sleep(0.02)
    assert parts, "the child never started writing"
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    child.stdin.close()
    assert child.stdout is not None
    child.stdout.close()
    assert parts[0].exists()  # the half-written temp file is there...
    assert blob_files_in(root) == []  # ...and nothing under a blob name
    with BlobStore(root) as st:  # reopening removes the dead writer's temp file
        assert list(st.tmp_dir.iterdir()) == []
        assert st.ls() == [] and not st.has(sha(data))
        assert st.put_bytes(data) == sha(data) and st.read(sha(data)) == data


def blob_files_in(root: Path) -> list[Path]:
    return sorted(p for p in (root / "blobs").rglob("*") if p.is_file())


def test_live_writers_temp_file_survives_another_open(make_store: MakeStore) -> None:
    s = make_store()
    with s.writer() as w:
        w.write(b"in progress")
        t = make_store()  # another store opening the same root must not delete a live write
        assert w.tmp_path.exists()
        h = w.commit()
    assert t.read(h) == b"in progress"


def test_crash_between_rename_and_metadata_is_repaired_at_open(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with BlobStore(root, 1 << 30) as s:
        gone = s.put_bytes(b"row without a file")
        s.path(gone).unlink()
    data = b"complete file without a row"
    f = root / "blobs" / sha(data)[:2] / sha(data)
    f.parent.mkdir(exist_ok=True)
    f.write_bytes(data)
    with BlobStore(root) as s:
        assert not s.has(gone)
        assert s.read(sha(data)) == data and s.info(sha(data)).tier == "hot"


def test_verify_deletes_a_corrupt_blob(make_store: MakeStore) -> None:
    s = make_store()
    h = s.put_bytes(b"good bytes")
    os.chmod(s.path(h), 0o644)
    s.path(h).write_bytes(b"bad bytes!")
    assert s.gc(verify=True).corrupt_removed == [h]
    assert not s.has(h)


# ----------------------------------------------------------------------------- retention


def test_temp_blobs_live_until_their_round_is_released_plus_the_margin(
    make_store: MakeStore,
) -> None:
    clock = Clock()
    s = make_store(temp_margin_s=100, clock=clock)
    a = s.put_bytes(b"trace state r1", tier="temp", round_key="job1/r1")
    both = s.put_bytes(b"state held by r1 and r2", tier="temp", round_key="job1/r1")
    s.hold(both, "job1/r2")
    loose = s.put_bytes(b"temp without a round", tier="temp")
    clock.t += 1000
    rep = s.gc()
    assert rep.expired == [loose]  # no round held it: kept for the margin only
    assert s.has(a) and s.has(both)
    assert sorted(s.release_round("job1/r1")) == sorted([a, both])
    clock.t += 99
    assert s.gc().expired == [] and s.has(a)  # within the margin
    clock.t += 2
    assert s.gc().expired == [a]
    assert s.has(both)  # round 2 still holds it
    s.release_round("job1/r2")
    clock.t += 101
    assert s.gc().expired == [both]


def test_hot_and_cold_blobs_are_not_expired(make_store: MakeStore) -> None:
    clock = Clock()
    s = make_store(temp_margin_s=0, clock=clock)
    hot = s.put_bytes(b"an update", tier="hot", round_key="r1")
    cold = s.put_bytes(b"attested model", tier="cold")
    s.release_round("r1")
    clock.t += 10**6
    assert s.gc().expired == []
    assert s.has(hot) and s.has(cold)
    assert s.info(cold).pinned and s.info(cold).tier == "cold"


def test_reput_keeps_the_strongest_tier(make_store: MakeStore) -> None:
    s = make_store()
    h = s.put_bytes(b"x", tier="temp", round_key="r1")
    assert s.info(h).tier == "temp"
    s.put_bytes(b"x", tier="hot")
    assert s.info(h).tier == "hot"
    s.put_bytes(b"x", tier="temp")
    assert s.info(h).tier == "hot"
    s.put_bytes(b"x", tier="cold")
    assert s.info(h).tier == "cold" and s.info(h).pinned


# ----------------------------------------------------------------------------- quota


def test_quota_evicts_least_recently_used_never_pinned_or_held(make_store: MakeStore) -> None:
    s = make_store(quota=10_000)
    pinned = s.put_bytes(b"p" * 3000, tier="cold")
    old = s.put_bytes(b"o" * 2000)
    held = s.put_bytes(b"h" * 2000, tier="temp", round_key="open-round")
    newer = s.put_bytes(b"n" * 2000)
    s.path(old)  # used again: now more recent than `newer`
    s.put_bytes(b"x" * 2500)  # 9000 + 2500 > 10000: one eviction needed
    assert not s.has(newer)
    assert s.has(old) and s.has(pinned) and s.has(held)
    with pytest.raises(QuotaExceeded) as e:  # only `old` (2000) is evictable; 8000 can't fit
        s.put_bytes(b"y" * 8000)
    assert e.value.code == "quota_exceeded" and "raise the quota" in str(e.value)
    assert s.has(old) and s.has(pinned) and s.has(held)  # a refused put deletes nothing
    assert list(s.tmp_dir.iterdir()) == []
    assert s.usage()["used_bytes"] <= 10_000


def test_pinned_blobs_survive_any_pressure(make_store: MakeStore) -> None:
    s = make_store(quota=5_000)
    pins = [s.put_bytes(bytes([i]) * 1000, tier="cold") for i in range(4)]
    for i in range(20):
        s.put_bytes(bytes([100 + i]) * 900)
    assert all(s.has(p) for p in pins)
    assert s.usage()["used_bytes"] <= 5_000
    with pytest.raises(QuotaExceeded):
        s.put_bytes(b"z" * 1001 + b"!" * 100)


def test_gc_after_quota_lowered_evicts_down_but_keeps_pins(tmp_path: Path) -> None:
    with BlobStore(tmp_path / "s", 100_000) as s:
        pin = s.put_bytes(b"p" * 4000, tier="cold")
        others = [s.put_bytes(bytes([i]) * 3000) for i in range(5)]
    with BlobStore(tmp_path / "s", 8000) as s:
        rep = s.gc()
        assert rep.evicted == others[:4]  # oldest first, until under the quota
        assert s.has(pin) and s.has(others[4])
        assert rep.used_bytes == 7000 and rep.quota_bytes == 8000
    with BlobStore(tmp_path / "s") as s:  # no quota given: the stored one applies
        assert s.quota_bytes == 8000
