"""Crash safety: a store reopened after any failure holds exactly one committed version."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from abci_app.store import MerkleStore, verify_proof
from tests.kits.storekit import apply, crash_block, model_range

REPO = Path(__file__).resolve().parents[2]
KEEP = 4

# Commits crash_block(h) for h = height+1, height+2, ... printing "h root" after each.
# With argv[2] = TABLE:N the process SIGKILLs itself at the N-th row written to TABLE
# (insert, update or delete) by commit, i.e. in the middle of the SQLite transaction.
CHILD = """
import os, signal, sys
from abci_app.store import MerkleStore
from tests.kits.storekit import crash_block
store = MerkleStore(sys.argv[1], keep_recent=KEEP_RECENT)
if sys.argv[2] != "-":
    table, n = sys.argv[2].split(":")
    calls = [0]
    def die():
        calls[0] += 1
        if calls[0] >= int(n):
            os.kill(os.getpid(), signal.SIGKILL)
    store._db.create_function("die", 0, die)
    for event in ("INSERT", "UPDATE", "DELETE"):
        store._db.execute(
            f"CREATE TEMP TRIGGER die_{event} AFTER {event} ON main.{table} BEGIN SELECT die(); END"
        )
print("start", store.height, flush=True)
while True:
    h = store.height + 1
    store.stage(h, crash_block(h))
    print(h, store.commit().hex(), flush=True)
""".replace("KEEP_RECENT", str(KEEP))


class Expected:
    """Roots and states of every height, replayed in memory."""

    def __init__(self) -> None:
        self.store = MerkleStore(None, keep_recent=10_000)
        self.models: list[dict[bytes, bytes]] = [{}]
        self.roots = [self.store.app_hash]

    def upto(self, height: int) -> None:
        while len(self.roots) <= height:
            h = len(self.roots)
            self.store.stage(h, crash_block(h))
            self.roots.append(self.store.commit())
            self.models.append(apply(self.models[-1], crash_block(h)))


def _child(path: Path, kill_at: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), kill_at],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )


def _check_exact_version(path: Path, expected: Expected, low: int, high: int) -> int:
    """Reopens the store and checks it is exactly one of the versions low..high."""
    store = MerkleStore(path, keep_recent=KEEP)
    try:
        h = store.height
        assert low <= h <= high, (low, h, high)
        expected.upto(h)
        assert store.app_hash == expected.roots[h]
        assert list(store.iterate(b"")) == model_range(expected.models[h], b"", None)
        assert store.earliest_height >= h - KEEP + 1
        for past in range(store.earliest_height, h + 1):
            assert store.root_at(past) == expected.roots[past]
            got = list(store.iterate_at(past, b""))
            assert got == model_range(expected.models[past], b"", None)
            for key in (b"k000", b"k077", b"k149", b"none"):
                proof = store.prove(key, past)
                assert verify_proof(
                    proof, expected.roots[past], key, expected.models[past].get(key)
                )
        return h
    finally:
        store.close()


def test_stage_without_commit_is_not_persisted(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = MerkleStore(path)
    store.stage(1, {b"a": b"1"})
    root = store.commit()
    store.stage(2, {b"a": b"2", b"b": b"3"})
    store.close()
    again = MerkleStore(path)
    assert (again.height, again.app_hash, again.get(b"a"), again.get(b"b")) == (1, root, b"1", None)
    again.close()


@pytest.mark.parametrize(
    "table", ["pages", "stale_pages", "kv_history", "stale_kv", "roots", "meta"]
)
def test_failure_inside_commit_transaction_rolls_back(tmp_path: Path, table: str) -> None:
    path = tmp_path / "state.db"
    store = MerkleStore(path, keep_recent=2)
    expected = Expected()
    for h in range(1, 6):
        store.stage(h, crash_block(h))
        store.commit()
    expected.upto(6)
    for event in ("INSERT", "UPDATE", "DELETE"):
        store._db.execute(
            f"CREATE TEMP TRIGGER fail_{event} AFTER {event} ON main.{table} "
            "BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
        )
    assert store.stage(6, crash_block(6)) == expected.roots[6]
    with pytest.raises(sqlite3.DatabaseError, match="injected failure"):
        store.commit()
    assert (store.height, store.app_hash) == (5, expected.roots[5])
    assert list(store.iterate(b"")) == model_range(expected.models[5], b"", None)
    assert _check_exact_version(path, expected, 5, 5) == 5
    for event in ("INSERT", "UPDATE", "DELETE"):
        store._db.execute(f"DROP TRIGGER fail_{event}")
    assert store.commit() == expected.roots[6]  # the staged block is still there
    store.close()
    assert _check_exact_version(path, expected, 6, 6) == 6


def _read_progress(child: subprocess.Popen[str], commits: int) -> int:
    """Reads the child's output until `commits` commits were reported; returns the last."""
    assert child.stdout is not None
    first = child.stdout.readline().split()
    assert first[0] == "start", first
    last = int(first[1])
    for _ in range(commits):
        line = child.stdout.readline()
        if not line:
            break
        last = int(line.split()[0])
    return last


def test_sigkill_at_random_moments_leaves_old_or_new_version(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    expected = Expected()
    rng = random.Random(1234)  # the test's own schedule, not state-machine code
    height = 0
    for _ in range(15):
        child = _child(path, "-")
        last = _read_progress(child, rng.randint(1, 3))
        time.sleep(rng.random() * 0.03)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        assert child.stdout is not None
        for line in child.stdout:  # lines printed before the kill landed
            last = int(line.split()[0])
        height = _check_exact_version(path, expected, max(height, last), last + 1)
    assert height >= 15


@pytest.mark.parametrize(
    "kill_at",
    [
        "pages:1",
        "pages:25",
        "stale_pages:3",
        "kv_history:17",
        "kv_history:33",
        "stale_kv:5",
        "roots:2",
        "meta:1",
    ],
)
def test_sigkill_inside_commit_transaction(tmp_path: Path, kill_at: str) -> None:
    path = tmp_path / "state.db"
    expected = Expected()
    store = MerkleStore(path, keep_recent=KEEP)
    for h in range(1, 7):  # past keep_recent, so commits also prune
        store.stage(h, crash_block(h))
        store.commit()
    store.close()
    child = _child(path, kill_at)
    last = _read_progress(child, 100)  # the child dies by itself
    assert child.wait(timeout=60) == -signal.SIGKILL
    assert _check_exact_version(path, expected, last, last) == last
    # and the node carries on from there
    child = _child(path, "-")
    last2 = _read_progress(child, 2)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert last2 == last + 2
    assert child.stdout is not None
    for line in child.stdout:  # commits that landed before the kill did (a loaded machine)
        last2 = int(line.split()[0])
    _check_exact_version(path, expected, last + 2, last2 + 1)
