"""Issue #28 item 2: `loconet blob put F --quota 10` read the bare 10 as 10 bytes, stored it as
the store's quota, and the next `blob gc` deleted every unpinned blob without a word.

Now a size needs a unit (a bare number is refused, naming the fix), `--quota` is stored only when
its command succeeds, a quota below what the store holds is warned about with what gc would
evict, and `blob gc` / `blob put` / `blob get` say what they would delete (count and bytes)
before deleting: asked at a terminal, `--yes` skips the question, and off a terminal an
eviction is refused (nothing deleted) while expiring temp blobs past retention goes on."""

from __future__ import annotations

import io
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from node.blobs import BlobServer, BlobStore, EvictionNeeded
from node.blobs.store import DEFAULT_QUOTA_BYTES
from node.cli.blob import parse_size
from node.cli.main import main
from node.errors import UsageError

SIZE = 100_000


class _Terminal(io.StringIO):
    """stdin as a person at a terminal who types ``answer``."""

    def isatty(self) -> bool:
        return True


class _Pipe(io.StringIO):
    def isatty(self) -> bool:
        return False


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    o = capsys.readouterr()
    return rc, o.out, o.err


@pytest.fixture
def off_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", _Pipe(""))


def _fill(root: Path, n: int = 3, quota: int | None = None) -> list[str]:
    """n unpinned hot blobs of SIZE bytes, least recently used first."""
    with BlobStore(root, quota) as s:
        return [s.put_bytes(os.urandom(SIZE)) for _ in range(n)]


def _hashes(root: Path) -> set[str]:
    with BlobStore(root) as s:
        return {b.hash for b in s.ls()}


def _quota(root: Path) -> int:
    with BlobStore(root) as s:
        return int(s.quota_bytes)


# ------------------------------------------------------------------ the unit rule


def test_quota_10_without_unit_is_refused_and_the_next_gc_deletes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], off_terminal: None
) -> None:
    root = tmp_path / "s"
    kept = _fill(root)
    f = tmp_path / "new.bin"
    f.write_bytes(os.urandom(1000))
    rc, o, err = run(capsys, "blob", "put", str(f), "--quota", "10", "--dir", str(root))
    assert rc == 1 and o == ""
    assert "--quota 10: a size needs a unit, e.g. 10GiB" in err and "10B" in err, err
    assert len(err.strip().splitlines()) == 1
    assert _quota(root) == DEFAULT_QUOTA_BYTES  # nothing was stored
    rc, o, err = run(capsys, "blob", "gc", "--dir", str(root), "-o", "json")
    assert rc == 0 and json.loads(o)["evicted"] == [], err
    assert _hashes(root) == set(kept)


@pytest.mark.parametrize("cmd", ["put", "get", "gc"])
def test_invalid_bare_number_is_refused_by_every_size_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cmd: str
) -> None:
    """Every size the blob CLI parses (--quota of put/get/gc, --max-bytes of get) needs a unit;
    with -o json the refusal is one JSON document."""
    root = tmp_path / "s"
    _fill(root, 1)
    f = tmp_path / "x.bin"
    f.write_bytes(b"x")
    args = {"put": ["put", str(f)], "get": ["get", "a" * 64, "--source", "http://127.0.0.1:9"]}
    base = ["blob", *args.get(cmd, [cmd]), "--dir", str(root), "-o", "json"]
    flags = [["--quota", "4096"]] + ([["--max-bytes", "4096"]] if cmd == "get" else [])
    for flag in flags:
        rc, o, _ = run(capsys, *base, *flag)
        err = json.loads(o)["error"]
        assert rc == 1 and f"{flag[0]} 4096: a size needs a unit, e.g. 4096GiB" in err, err
    assert _quota(root) == DEFAULT_QUOTA_BYTES


@pytest.mark.parametrize(
    "text,n",
    [
        ("4096B", 4096),
        ("4096b", 4096),
        ("10GiB", 10 << 30),
        ("10gib", 10 << 30),
        ("10 GiB", 10 << 30),
        ("500MB", 500 * 10**6),
        ("500mb", 500 * 10**6),
        ("1.5KiB", 1536),
        ("2TB", 2 * 10**12),
        ("1kB", 1000),
    ],
)
def test_sizes_with_a_unit(text: str, n: int) -> None:
    assert parse_size(text, "--quota") == n


@pytest.mark.parametrize(
    "text,needle",
    [
        ("10", "a size needs a unit, e.g. 10GiB"),
        ("1.5", "a size needs a unit"),
        ("10G", "'g' is ambiguous: write 10GB (powers of 1000) or 10GiB"),
        ("10Ki", "ambiguous"),
        ("10 bits", "unknown unit"),
        ("0GiB", "above zero"),
        ("0.5B", "not a whole number of bytes"),
        ("-5GiB", "bad size"),
        ("lots", "bad size"),
        ("١٠GiB", "bad size"),  # Arabic-Indic digits
        ("9" * 60 + "GiB", "bad size"),
        ("99999999TiB", "below 8 EiB"),
    ],
)
def test_invalid_size(text: str, needle: str) -> None:
    with pytest.raises(UsageError) as e:
        parse_size(text, "--quota")
    assert needle in str(e.value) and str(e.value).startswith("--quota ")


# ------------------------------------------------------------------ gc says, asks, refuses


def test_gc_lowering_quota_off_a_terminal_is_refused_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], off_terminal: None
) -> None:
    root = tmp_path / "s"
    kept = _fill(root)
    rc, o, err = run(capsys, "blob", "gc", "--quota", "150KB", "--dir", str(root), "-o", "json")
    assert rc == 1
    msg = json.loads(o)["error"]  # stdout stays one JSON document
    assert "nothing was evicted" in msg and "--yes" in msg
    # what it would have deleted, count and bytes, was said first
    assert "2 evicted (195.3 KiB)" in err and kept[0] in err and kept[1] in err
    assert _hashes(root) == set(kept) and _quota(root) == DEFAULT_QUOTA_BYTES


def test_gc_at_a_terminal_asks_and_no_keeps_everything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "s"
    kept = _fill(root, quota=150_000 + 2 * SIZE)  # a quota met by the 3 blobs at put time
    with BlobStore(root) as s:
        s.set_quota(150_000)  # then lowered: gc has 2 to evict
    monkeypatch.setattr("sys.stdin", _Terminal("n\n"))
    rc, o, err = run(capsys, "blob", "gc", "--dir", str(root))
    assert rc == 1 and "cancelled: nothing was deleted" in err
    assert "gc will delete 2 blob(s), 195.3 KiB" in err and "delete them? [y/N]" in err
    assert _hashes(root) == set(kept)
    monkeypatch.setattr("sys.stdin", _Terminal(""))  # end of input is a no
    assert run(capsys, "blob", "gc", "--dir", str(root))[0] == 1
    monkeypatch.setattr("sys.stdin", _Terminal("y\n"))
    rc, o, err = run(capsys, "blob", "gc", "--dir", str(root), "-o", "json")
    rep = json.loads(o)
    assert rc == 0 and rep["evicted"] == kept[:2] and rep["evicted_bytes"] == 2 * SIZE
    assert _hashes(root) == {kept[2]}


def test_gc_yes_evicts_without_asking_and_stores_the_quota(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], off_terminal: None
) -> None:
    root = tmp_path / "s"
    kept = _fill(root)
    rc, o, err = run(
        capsys, "blob", "gc", "--quota", "150KB", "--yes", "--dir", str(root), "-o", "json"
    )
    rep = json.loads(o)
    assert rc == 0 and rep["evicted"] == kept[:2] and rep["quota_bytes"] == 150_000
    assert "gc will delete 2 blob(s)" in err  # said, even when not asked
    assert _hashes(root) == {kept[2]} and _quota(root) == 150_000


def test_gc_dry_run_lists_and_deletes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], off_terminal: None
) -> None:
    root = tmp_path / "s"
    kept = _fill(root)
    rc, o, err = run(
        capsys, "blob", "gc", "--quota", "150KB", "--dry-run", "--dir", str(root), "-o", "json"
    )
    plan = json.loads(o)
    assert rc == 0 and plan["dry_run"] is True and plan["evicted"] == kept[:2]
    assert plan["freed_bytes"] == 2 * SIZE and plan["count"] == 1
    assert _hashes(root) == set(kept) and _quota(root) == DEFAULT_QUOTA_BYTES


def test_gc_off_a_terminal_still_expires_temp_blobs_past_retention(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], off_terminal: None
) -> None:
    """Expiry is the retention temp blobs were stored under (what a cron'd gc is for): it goes
    on without --yes, and is said; nothing is evicted."""
    root = tmp_path / "s"
    an_hour_ago = time.time() - 3600
    with BlobStore(root, clock=lambda: an_hour_ago) as s:
        old = s.put_bytes(os.urandom(SIZE), tier="temp", round_key="job1/r0")
        s.release_round("job1/r0")  # released an hour ago: past the 600 s margin
        hot = s.put_bytes(os.urandom(SIZE))
    rc, o, err = run(capsys, "blob", "gc", "--dir", str(root), "-o", "json")
    rep = json.loads(o)
    assert rc == 0 and rep["expired"] == [old] and rep["evicted"] == [], err
    assert "1 expired temp blob(s) (97.7 KiB" in err
    assert _hashes(root) == {hot}


def test_gc_off_a_terminal_over_quota_still_expires_and_refuses_only_the_eviction(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], off_terminal: None
) -> None:
    """A cron'd gc on a store over its quota: the eviction nobody confirmed is refused (exit 1,
    named fix), the expired temp blobs go as the worker would let them go (they were all kept,
    so a store over its quota never expired anything)."""
    root = tmp_path / "s"
    an_hour_ago = time.time() - 3600
    with BlobStore(root, clock=lambda: an_hour_ago) as s:
        old = [s.put_bytes(os.urandom(SIZE), tier="temp", round_key="job1/r0") for _ in range(2)]
        s.release_round("job1/r0")
        hot = [s.put_bytes(os.urandom(SIZE)) for _ in range(3)]
    rc, o, err = run(capsys, "blob", "gc", "--quota", "150KB", "--dir", str(root), "-o", "json")
    assert rc == 1
    msg = json.loads(o)["error"]
    assert "expired 2 temp blob(s)" in msg and "nothing was evicted" in msg and "--yes" in msg
    assert _hashes(root) == set(hot) and not set(old) & _hashes(root)
    assert _quota(root) == DEFAULT_QUOTA_BYTES  # a refused command stores no quota


def test_gc_deletes_only_what_it_showed(make_store: Callable[..., BlobStore]) -> None:
    """Between the list a person confirmed and the deletion, the worker may put blobs into the
    same store: gc(only=shown) never deletes one it did not show."""
    s = make_store(quota=10 * SIZE)
    a, b = s.put_bytes(os.urandom(SIZE)), s.put_bytes(os.urandom(SIZE))
    s.set_quota(SIZE)
    plan = s.gc_plan()
    assert plan.evicted == [a] and plan.evicted_bytes == SIZE and plan.count == 1
    assert s.has(a) and s.has(b)  # a plan deletes nothing
    s.set_quota(10 * SIZE)
    c = s.put_bytes(os.urandom(SIZE))
    s.set_quota(SIZE)  # now a, b and c are over the quota: gc alone would evict a and b
    rep = s.gc(only=set(plan.evicted))
    assert rep.evicted == [a] and s.has(b) and s.has(c)


# ------------------------------------------------------------------ put/get and a lowered quota


def test_put_with_quota_below_usage_asks_before_evicting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], off_terminal: None
) -> None:
    root = tmp_path / "s"
    kept = _fill(root)
    f = tmp_path / "new.bin"
    f.write_bytes(os.urandom(SIZE))
    rc, o, err = run(
        capsys, "blob", "put", str(f), "--quota", "250KB", "--dir", str(root), "-o", "json"
    )
    assert rc == 1 and "nothing was deleted" in json.loads(o)["error"]
    assert "warning: --quota 250KB (244.1 KiB) is below what the store holds" in err
    assert "would evict 2 blob(s)" in err and kept[0] in err
    assert _hashes(root) == set(kept) and _quota(root) == DEFAULT_QUOTA_BYTES
    rc, o, err = run(
        capsys, "blob", "put", str(f), "--quota", "250KB", "--yes", "--dir", str(root), "-o", "json"
    )
    info = json.loads(o)
    assert rc == 0 and info["evicted"] == kept[:2] and info["size"] == SIZE
    assert _hashes(root) == {kept[2], info["hash"]} and _quota(root) == 250_000


def test_quota_below_usage_warns_with_what_gc_would_evict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], off_terminal: None
) -> None:
    """A put that needs no room (the blob is already there) stores the lowered quota, says what
    gc would now evict, and evicts nothing itself."""
    root = tmp_path / "s"
    kept = _fill(root)
    f = tmp_path / "again.bin"
    with BlobStore(root) as s:
        f.write_bytes(s.read(kept[2]))
    rc, o, err = run(capsys, "blob", "put", str(f), "--quota", "150KB", "--dir", str(root))
    assert rc == 0 and o.strip() == kept[2]
    assert "`loconet blob gc` would evict 2 blob(s) (195.3 KiB)" in err, err
    assert _hashes(root) == set(kept) and _quota(root) == 150_000


def test_get_that_must_evict_is_refused_off_a_terminal(
    served: tuple[BlobStore, BlobServer],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    off_terminal: None,
) -> None:
    src, server = served
    h = src.put_bytes(os.urandom(SIZE))
    root = tmp_path / "mine"
    kept = _fill(root, 2, quota=250_000)
    get = ["blob", "get", h, "--source", server.url, "--dir", str(root), "-o", "json"]
    rc, o, err = run(capsys, *get)
    assert rc == 1 and "--yes" in json.loads(o)["error"] and kept[0] in err
    assert _hashes(root) == set(kept)
    rc, o, _ = run(capsys, *get, "--yes")
    got = json.loads(o)
    assert rc == 0 and got["evicted"] == [kept[0]] and _hashes(root) == {kept[1], h}


def test_worker_eviction_stays_automatic(make_store: Callable[..., BlobStore]) -> None:
    """The store's callers (the provider worker) keep evicting by themselves: a put under quota
    pressure evicts the least recently used, gc() evicts down to the quota; only a store told
    so (may_evict=False, the CLI) raises EvictionNeeded, having deleted nothing."""
    s = make_store(quota=2 * SIZE)
    a, b = s.put_bytes(os.urandom(SIZE)), s.put_bytes(os.urandom(SIZE))
    c = s.put_bytes(os.urandom(SIZE))
    assert not s.has(a) and s.has(b) and s.has(c)
    s.may_evict = False
    with pytest.raises(EvictionNeeded) as e:
        s.put_bytes(os.urandom(SIZE))
    assert e.value.victims == [(b, SIZE)] and e.value.code == "eviction_needed"
    assert s.has(b) and s.has(c)
    s.may_evict = True
    s.set_quota(SIZE)
    rep = s.gc()
    assert rep.evicted == [b] and s.has(c)
