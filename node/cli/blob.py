"""``loconet blob put|get|ls|gc|pin|unpin|serve``: the operator's view of a node's blob store
(HOME/blobs; see node/blobs/). A CLI plugin: node/cli/main.py calls ``register``.

node.blobs loads aiohttp and the store (0.4 s), and ``loconet --help`` loads every command
module: the commands import it when they run (``# lazy:``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import re
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from node.atomic import copy_atomic
from node.cli.common import add_command, add_output_flag, out, positive_seconds
from node.errors import UsageError

# Sizes (--quota, --max-bytes): a number, then a unit; letters in any case, a space allowed.
#   B                  bytes (4096B)
#   KB MB GB TB        powers of 1000 (500MB = 500,000,000 B), as disks are sold
#   KiB MiB GiB TiB    powers of 1024 (10GiB = 10,737,418,240 B), as `blob ls` prints
# Everything here counts bytes: `10gb` is 10 GB, never gigabits. A decimal is fine when it
# makes whole bytes (1.5GiB). Refused, with the fix in the error: a bare number (`--quota 10`
# was read as 10 bytes and the next gc evicted every unpinned blob), a bare prefix (`10G`:
# 10^9 or 2^30?), zero, and anything else.
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([a-z]*)", re.IGNORECASE)
_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
}
SIZE_UNITS_HELP = "units B, KB/MB/GB/TB (powers of 1000), KiB/MiB/GiB/TiB (powers of 1024)"
MAX_SIZE = (1 << 63) - 1  # SQLite's integers, and far past any disk


def parse_size(text: str, flag: str = "size") -> int:
    """``10GiB`` -> 10737418240; ``500MB`` -> 500000000; ``4096B`` -> 4096. A number without a
    unit is refused (UsageError naming ``flag`` and the fix), as is anything not positive."""
    shown = text.strip()
    m = _SIZE.fullmatch(shown) if len(shown) <= 40 else None
    if m is None:
        raise UsageError(
            f"{flag} {text!r}: bad size: write a number and a unit, e.g. 10GiB, 500MB or 4096B "
            f"({SIZE_UNITS_HELP})"
        )
    number, unit = m.group(1), m.group(2).lower()
    if not unit:
        raise UsageError(
            f"{flag} {shown}: a size needs a unit, e.g. {number}GiB (or {number}B for bytes; "
            f"{SIZE_UNITS_HELP})"
        )
    if unit in ("k", "m", "g", "t", "ki", "mi", "gi", "ti"):
        p = unit[0].upper()
        raise UsageError(
            f"{flag} {shown}: {unit!r} is ambiguous: write {number}{p}B (powers of 1000) or "
            f"{number}{p}iB (powers of 1024)"
        )
    if unit not in _UNITS:
        raise UsageError(f"{flag} {shown}: unknown unit {m.group(2)!r}: {SIZE_UNITS_HELP}")
    n = Fraction(number) * _UNITS[unit]
    if n.denominator != 1:
        raise UsageError(f"{flag} {shown}: not a whole number of bytes ({float(n):.2f} B)")
    if not 0 < n <= MAX_SIZE:
        raise UsageError(f"{flag} {shown}: a size must be above zero and below 8 EiB")
    return int(n)


def fmt_size(n: int) -> str:
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:.1f} {unit}"
    return f"{n} B"


def _store(args: argparse.Namespace) -> Any:
    """The store the command names. ``--quota`` applies to this command at once but is stored
    (for later commands and gc) only by ``_keep_quota`` once the command succeeded: a refused or
    cancelled command changes nothing. A quota below what the store holds is warned about, with
    what gc would evict (gc evicts nothing unconfirmed; put and get ask before evicting)."""
    from node.blobs import default_root  # lazy: 0.4 s (module docstring)

    # `is not None`: `--quota ""` (an unset variable) was read as no --quota at all
    quota = parse_size(args.quota, "--quota") if getattr(args, "quota", None) is not None else None
    writes = getattr(args, "blob_cmd", "") in ("put", "get")  # these may start a new home's store
    if not args.dir and not writes and not Path(args.home).is_dir():
        # a mistyped --home made a new empty store there (`blob ls` of it said "0 blobs")
        raise UsageError(
            f"{args.home} is not a node home (no such folder): fix --home, create one with "
            f"`loconet init --home {args.home}`, or give the store itself with --dir"
        )
    root = Path(args.dir) if args.dir else default_root(args.home)
    s = open_store(root)
    if quota is not None:
        old = s.quota_bytes
        s.set_quota(quota, persist=False)
        used = s.usage()["used_bytes"]
        if quota < used and args.blob_cmd != "gc":  # gc lists what it would delete anyway
            plan = s.gc_plan()
            print(
                f"warning: --quota {args.quota} ({fmt_size(quota)}) is below what the store "
                f"holds ({fmt_size(used)}; its quota was {fmt_size(old)}): `loconet blob gc` "
                f"would evict {len(plan.evicted)} blob(s) ({fmt_size(plan.evicted_bytes)}); it "
                "lists them and asks first (`loconet blob gc --dry-run` shows them)",
                file=sys.stderr,
            )
    return s


def _keep_quota(args: argparse.Namespace, s: Any) -> None:
    """The command succeeded: store its --quota for later commands (and the worker's gc)."""
    if getattr(args, "quota", None):
        s.set_quota(s.quota_bytes)


def _list_blobs(s: Any, rows: list[tuple[str, str]], limit: int = 10) -> str:
    """``  evict  <hash>  1.0 MiB  hot`` lines, at most ``limit`` of them, then a count."""
    infos = {b.hash: b for b in s.ls()}
    lines = []
    for why, h in rows[:limit]:
        b = infos.get(h)
        size, tier = (fmt_size(b.size), b.tier) if b is not None else ("?", "?")
        lines.append(f"  {why:6s} {h}  {size:>10s}  {tier}")
    if len(rows) > limit:
        lines.append(f"  ... and {len(rows) - limit} more (`loconet blob ls` lists every blob)")
    return "\n".join(lines)


def _confirm_delete(args: argparse.Namespace, summary: str, evicts: bool, fix: str) -> None:
    """Go on with a deletion ``summary`` described (it is printed on stderr first, so -o json's
    stdout stays one JSON document) when:

    - ``--yes`` was given;
    - stdin is a terminal and the person answers y;
    - stdin is not a terminal and nothing would be *evicted* (``evicts`` False). Like apt-get
      and the Cosmos SDK's tx commands, an unattended run never takes a destructive decision it
      was not given: evicting (a quota decision that may be a typo) is refused, exit 1, nothing
      deleted, with the fix (``--yes``). Expiring temp blobs past their rounds' release plus
      the margin is not a decision: it is the retention they were stored under, what the
      worker does by itself every few minutes, and what a cron'd `blob gc` is for.
    """
    print(summary, file=sys.stderr)
    if getattr(args, "yes", False):
        return
    if not sys.stdin.isatty():
        if not evicts:
            return
        raise UsageError(
            f"not at a terminal, so nobody confirmed the eviction: nothing was deleted; {fix}"
        )
    # the question on stderr (input() would print it on stdout, into -o json's document)
    print("delete them? [y/N]: ", end="", file=sys.stderr, flush=True)
    answer = sys.stdin.readline()  # "" at end of input: no
    if answer.strip().lower() not in ("y", "yes"):
        raise UsageError("cancelled: nothing was deleted (--yes skips this question)")


def open_store(root: Path, quota: int | None = None) -> Any:
    """BlobStore(root); a meta.db that is not SQLite is a UsageError naming it and the way out
    (a sqlite3.DatabaseError traceback from every blob command and the worker)."""
    from node.blobs import BlobStore  # lazy: 0.4 s (module docstring)

    try:
        return BlobStore(root, quota)
    except sqlite3.DatabaseError as e:
        meta = Path(root) / "meta.db"
        raise UsageError(
            f"the blob store's metadata {meta} is damaged ({e}): move it away (`mv {meta} "
            f"{meta}.bad`); the next open adopts the blob files it finds (unpinned)"
        ) from None


def _blob_errors(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A BlobError becomes the CLI's one-line error (its message starts with the stable code)."""

    @functools.wraps(fn)
    def wrapped(args: argparse.Namespace) -> int:
        from node.blobs import BlobError  # lazy: 0.4 s (module docstring)

        try:
            return fn(args)
        except BlobError as e:
            raise UsageError(f"blob/{e}") from None
        except ValueError as e:  # a bad tier or round key
            raise UsageError(str(e)) from None

    return wrapped


@_blob_errors
def cmd_put(args: argparse.Namespace) -> int:
    src = Path(args.file)
    if not src.is_file():
        raise UsageError(f"{src} is not a file: give the path of the file to store")
    with _store(args) as s:
        evicted = _evicting(
            args, s, f"storing {src}", lambda: s.put_file(src, tier=args.tier, round_key=args.round)
        )
        h = evicted.pop("result")
        if args.pin:
            s.pin(h)
        info = s.info(h).to_dict()
        _keep_quota(args, s)
    out(args, {**info, **evicted}, h)
    return 0


def _evicting(
    args: argparse.Namespace, s: Any, what: str, put: Callable[[], Any]
) -> dict[str, Any]:
    """Run ``put`` with the store told not to evict; when it would, list the blobs it would
    evict, confirm (``_confirm_delete``), and run it again allowed to evict those only.
    Returns ``{"result": put's result, "evicted": [hashes]}``."""
    from node.blobs import EvictionNeeded  # lazy: 0.4 s (module docstring)

    s.may_evict = False
    try:
        return {"result": put(), "evicted": []}
    except EvictionNeeded as e:
        victims = e.victims
    freed = sum(size for _, size in victims)
    summary = (
        f"{what} needs room under the quota of {fmt_size(s.quota_bytes)} "
        f"({fmt_size(s.usage()['used_bytes'])} used): it would evict {len(victims)} blob(s), "
        f"{fmt_size(freed)} (least recently used first; pinned and held blobs are kept):\n"
        + _list_blobs(s, [("evict", h) for h, _ in victims])
    )
    _confirm_delete(
        args,
        summary,
        evicts=True,
        fix="pass --yes to evict them, or raise the quota (--quota, e.g. 50GiB)",
    )
    s.may_evict = frozenset(h for h, _ in victims)
    result = put()
    return {"result": result, "evicted": [h for h, _ in victims if not s.has(h)]}


@_blob_errors
def cmd_get(args: argparse.Namespace) -> int:
    from node.blobs import BlobClient, check_hash  # lazy: 0.4 s (module docstring)

    check_hash(args.hash)
    if args.from_url:  # --from is the signing key everywhere else
        raise UsageError(
            f"blob get takes --source URL, not --from: write --source {args.from_url[0]}"
        )
    if not args.sources:
        raise UsageError(
            "give at least one --source URL (a peer's blob server, e.g. http://10.0.0.1:26680)"
        )
    t0 = time.monotonic()
    max_bytes = parse_size(args.max_bytes, "--max-bytes")
    with _store(args) as s, BlobClient(args.timeout, max_bytes) as c:

        def fetch() -> Path:
            with _transfer_bar(args, c):  # closed before any question about evicting
                return c.fetch(args.hash, args.sources, s, tier=args.tier, round_key=args.round)

        # a fetch that would evict is asked about, then fetched again (it was not kept)
        got = _evicting(args, s, f"storing blob {args.hash[:12]}", fetch)
        path = got["result"]
        data = {
            "hash": args.hash,
            "path": str(path),
            "size": path.stat().st_size,
            "bytes_received": c.bytes_received,
            "seconds": round(time.monotonic() - t0, 3),
            "evicted": got["evicted"],
        }
        _keep_quota(args, s)
        if args.to:
            # complete or absent under its name (a kill -9 mid-copy left half a blob there)
            copy_atomic(path, Path(args.to))
            data["copied_to"] = str(args.to)
    text = f"{args.hash}  {fmt_size(data['size'])}  verified, stored at {path}"
    if args.to:
        text += f"\ncopied to {args.to}"
    out(args, data, text)
    return 0


@contextlib.contextmanager
def _transfer_bar(args: argparse.Namespace, client: Any) -> Iterator[None]:
    """A rich download bar (bytes, speed, ETA) on a terminal; nothing otherwise or with -o json."""
    if args.output == "json" or not sys.stderr.isatty():
        yield
        return
    with Progress(
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task(args.hash[:12], total=None)
        client.on_progress = lambda done, total: bar.update(task, completed=done, total=total)
        yield


@_blob_errors
def cmd_ls(args: argparse.Namespace) -> int:
    with _store(args) as s:
        blobs = s.ls()
        usage = s.usage()
    data = {**usage, "blobs": [b.to_dict() for b in blobs]}
    lines = [f"{'HASH':64s}  {'SIZE':>10s}  TIER  PIN  ROUNDS"]
    for b in blobs:
        lines.append(
            f"{b.hash}  {fmt_size(b.size):>10s}  {b.tier:4s}  {'yes' if b.pinned else 'no ':3s}  "
            f"{','.join(b.rounds) or '-'}"
        )
    lines.append(
        f"{usage['count']} blob(s), {fmt_size(usage['used_bytes'])} of "
        f"{fmt_size(usage['quota_bytes'])} quota"
    )
    out(args, data, "\n".join(lines))
    return 0


@_blob_errors
def cmd_gc(args: argparse.Namespace) -> int:
    with _store(args) as s:
        plan = s.gc_plan()
        doomed = [("expire", h) for h in plan.expired] + [("evict", h) for h in plan.evicted]
        summary = (
            f"gc will delete {len(doomed)} blob(s), {fmt_size(plan.freed_bytes)}: "
            f"{len(plan.expired)} expired temp blob(s) ({fmt_size(plan.expired_bytes)}; their "
            f"rounds were released more than the margin ago) and {len(plan.evicted)} evicted "
            f"({fmt_size(plan.evicted_bytes)}) to get under the quota of "
            f"{fmt_size(s.quota_bytes)}; pinned blobs and blobs an open round holds are kept:\n"
            + _list_blobs(s, doomed)
        )
        if args.dry_run:
            if doomed:
                print(summary.replace("gc will delete", "gc would delete"), file=sys.stderr)
            out(
                args,
                {**plan.to_dict(), "dry_run": True},
                f"dry run: gc would expire {len(plan.expired)} temp blob(s) and evict "
                f"{len(plan.evicted)} blob(s), freeing {fmt_size(plan.freed_bytes)}; nothing "
                f"was deleted\n{plan.count} blob(s), {fmt_size(plan.used_bytes)} of "
                f"{fmt_size(plan.quota_bytes)} quota after it",
            )
            return 0
        if doomed:
            unattended = not args.yes and not sys.stdin.isatty()
            if unattended and plan.evicted:
                # the eviction is a decision nobody confirmed: refused; the expiry is not (the
                # retention those blobs were stored under), so a cron'd gc on a store over its
                # quota still expires them, as the worker would
                print(summary, file=sys.stderr)
                rep = s.gc(only=set(plan.expired)) if plan.expired else None
                done = (
                    f"expired {len(rep.expired)} temp blob(s) ({fmt_size(rep.freed_bytes)}); "
                    if rep is not None
                    else ""
                )
                raise UsageError(
                    f"not at a terminal, so nobody confirmed the eviction: {done}nothing was "
                    f"evicted; pass --yes to evict them, or raise the quota (--quota, e.g. "
                    "50GiB); `loconet blob gc --dry-run` lists them"
                )
            _confirm_delete(
                args,
                summary,
                evicts=bool(plan.evicted),
                fix="pass --yes to evict them, or raise the quota (--quota, e.g. 50GiB); "
                "`loconet blob gc --dry-run` lists them",
            )
        # only what was shown: a blob put meanwhile (the worker shares the store) is not
        # deleted unasked; if that leaves the store over its quota, the next gc says so
        rep = s.gc(verify=args.verify, only={h for _, h in doomed})
        _keep_quota(args, s)
    d = rep.to_dict()
    text = (
        f"expired {len(rep.expired)} temp blob(s), evicted {len(rep.evicted)}, freed "
        f"{fmt_size(rep.freed_bytes)}; removed {rep.stale_tmp_removed} stale temp file(s)"
        + (f", {len(rep.corrupt_removed)} corrupt blob(s)" if args.verify else "")
        + f"\n{rep.count} blob(s), {fmt_size(rep.used_bytes)} of {fmt_size(rep.quota_bytes)} quota"
    )
    out(args, d, text)
    return 0


@_blob_errors
def cmd_pin(args: argparse.Namespace) -> int:
    with _store(args) as s:
        (s.pin if args.blob_cmd == "pin" else s.unpin)(args.hash)
        info = s.info(args.hash).to_dict()
    out(args, info, f"{args.hash} {'pinned (cold)' if info['pinned'] else 'unpinned (hot)'}")
    return 0


@_blob_errors
def cmd_serve(args: argparse.Namespace) -> int:
    from node.blobs import BlobServer  # lazy: 0.4 s (module docstring)

    host, _, port = args.listen.rpartition(":")
    if not host or not (port.isascii() and port.isdigit()) or not 0 <= int(port) <= 65535:
        raise UsageError(
            f"bad --listen {args.listen!r}: write HOST:PORT with a port 0..65535, e.g. "
            "0.0.0.0:26680"
        )
    with _store(args) as s:
        server = BlobServer(s, host.strip("[]"), int(port))
        print(
            f"serving {s.root} at http://{host}:{port}/blob/<sha256> (Ctrl-C stops)",
            file=sys.stderr,
        )
        try:
            asyncio.run(server.serve_forever())
        except KeyboardInterrupt:
            pass
        except OSError as e:
            raise UsageError(
                f"cannot listen on {args.listen}: {e.strerror or e}; pick another --listen port"
            ) from None
    return 0


def _yes(p: argparse.ArgumentParser, cmd: str) -> None:
    what = "evicts to get under the quota" if cmd == "gc" else "must evict to make room"
    p.add_argument(
        "-y",
        "--yes",
        action="store_true",
        help=f"delete without asking what {cmd} {what} (asked at a terminal; refused elsewhere)",
    )


def _where(p: argparse.ArgumentParser, quota: bool = False) -> None:
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--home", help="node home: the store is HOME/blobs")
    g.add_argument("--dir", help="the blob store folder itself (instead of --home)")
    if quota:
        p.add_argument(
            "--quota",
            help="disk quota with a unit, e.g. 50GiB or 500GB (stored once the command succeeds; "
            "default: the store's own, else 10GiB); " + SIZE_UNITS_HELP,
        )


def register(root: Any, tx_sub: Any, query_sub: Any) -> None:
    blob = root.add_parser(
        "blob",
        help="the node's content-addressed blob store (payloads, trace states, models, datasets)",
        description="Blobs are files named by their sha256, kept in HOME/blobs in three tiers: "
        "temp (trace states of open rounds), hot (models and updates of recent rounds) and cold "
        "(attested models, pinned). Peers fetch them from `loconet blob serve` (or the "
        "provider worker) at /blob/<sha256>.",
    ).add_subparsers(dest="blob_cmd", required=True, metavar="BLOB_COMMAND")
    _register_put(blob)
    _register_get(blob)
    _register_keeping(blob)
    _register_serve(blob)


def _register_put(blob: Any) -> None:
    p = add_command(
        blob,
        "put",
        "store a file; prints its sha256",
        "loconet blob put model.bin --tier cold --home ~/.loconet",
        cmd_put,
    )
    p.add_argument("file", metavar="FILE")
    p.add_argument(
        "--tier",
        choices=["temp", "hot", "cold"],
        default="hot",
        help="retention tier (default hot; cold pins)",
    )
    p.add_argument(
        "--round", help="hold it for this round key until `release_round` (e.g. job1/r3)"
    )
    p.add_argument("--pin", action="store_true", help="pin it (same as --tier cold)")
    _yes(p, "put")
    _where(p, quota=True)
    add_output_flag(p)


def _register_get(blob: Any) -> None:
    p = add_command(
        blob,
        "get",
        "fetch a blob by hash from peers, verify its sha256, store it (and copy it with --to)",
        "loconet blob get 3f5a...e1 --source http://10.0.0.1:26680 --source "
        "http://10.0.0.2:26680 --to model.bin --home ~/.loconet",
        cmd_get,
    )
    p.add_argument("hash", metavar="HASH", help="sha256, 64 lowercase hex characters")
    p.add_argument(
        "--source",
        dest="sources",
        action="append",
        metavar="URL",
        help="a peer's blob server (repeat: tried in order until one delivers the right bytes)",
    )
    # --from is the signing key everywhere else: refused, naming --source
    p.add_argument("--from", dest="from_url", action="append", help=argparse.SUPPRESS)
    p.add_argument("--to", metavar="FILE", help="also copy the verified blob to FILE")
    p.add_argument("--tier", choices=["temp", "hot", "cold"], default="hot")
    p.add_argument("--round", help="hold it for this round key")
    p.add_argument(
        "--max-bytes",
        default="4GiB",
        help="refuse a larger blob, with a unit (default 4GiB); " + SIZE_UNITS_HELP,
    )
    p.add_argument(
        "--timeout",
        type=positive_seconds,
        default=30.0,
        help="seconds without a byte before a peer is dropped (default 30)",
    )
    _yes(p, "get")
    _where(p, quota=True)
    add_output_flag(p)


def _register_keeping(blob: Any) -> None:
    """blob ls|gc|pin|unpin: what the store keeps."""
    p = add_command(
        blob,
        "ls",
        "list stored blobs (least recently used first) and the quota",
        "loconet blob ls --home ~/.loconet -o json",
        cmd_ls,
    )
    _where(p)
    add_output_flag(p)

    p = add_command(
        blob,
        "gc",
        "delete expired temp blobs and stale temp files, evict down to the quota (never pinned "
        "or held blobs); says what it will delete first and asks before evicting",
        "loconet blob gc --home ~/.loconet --verify",
        cmd_gc,
    )
    p.add_argument(
        "--verify", action="store_true", help="also re-hash every blob and delete corrupt ones"
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="list what gc would expire and evict (count, bytes), delete nothing",
    )
    _yes(p, "gc")
    _where(p, quota=True)
    add_output_flag(p)

    for name, what in (
        ("pin", "pin a blob: cold, never evicted"),
        ("unpin", "unpin a blob: hot, evictable under quota pressure"),
    ):
        p = add_command(
            blob, name, what, f"loconet blob {name} 3f5a...e1 --home ~/.loconet", cmd_pin
        )
        p.add_argument("hash", metavar="HASH")
        _where(p)
        add_output_flag(p)


def _register_serve(blob: Any) -> None:
    p = add_command(
        blob,
        "serve",
        "serve the store read-only over HTTP (GET/HEAD /blob/<sha256>, /stats) in the foreground",
        "loconet blob serve --home ~/.loconet --listen 0.0.0.0:26680",
        cmd_serve,
    )
    p.add_argument(
        "--listen", default="127.0.0.1:26680", help="HOST:PORT (default 127.0.0.1:26680)"
    )
    _where(p)
