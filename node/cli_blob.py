"""``loconet blob put|get|ls|gc|pin|unpin|serve``: the operator's view of a node's blob store
(HOME/blobs; see node/blobs/). A CLI plugin: node/cli.py calls ``register``."""

from __future__ import annotations

import argparse
import contextlib
import functools
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from node.cli import add_command, add_output_flag, out, positive_seconds
from node.errors import UsageError

_SIZE = re.compile(r"(\d+)\s*(|b|kb|kib|mb|mib|gb|gib|tb|tib)", re.IGNORECASE)
_UNITS = {
    "": 1,
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


def parse_size(text: str) -> int:
    """``10GiB`` -> 10737418240; ``500MB`` -> 500000000; a bare integer is bytes."""
    m = _SIZE.fullmatch(text.strip())
    if not m or int(m.group(1)) <= 0:
        raise UsageError(f"bad size {text!r}: write e.g. 10GiB, 500MB or a number of bytes")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def fmt_size(n: int) -> str:
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:.1f} {unit}"
    return f"{n} B"


def _store(args: argparse.Namespace) -> Any:
    from node.blobs import default_root

    quota = parse_size(args.quota) if getattr(args, "quota", None) else None
    writes = getattr(args, "blob_cmd", "") in ("put", "get")  # these may start a new home's store
    if not args.dir and not writes and not Path(args.home).is_dir():
        # a mistyped --home made a new empty store there (`blob ls` of it said "0 blobs")
        raise UsageError(
            f"{args.home} is not a node home (no such folder): fix --home, create one with "
            f"`loconet init --home {args.home}`, or give the store itself with --dir"
        )
    root = Path(args.dir) if args.dir else default_root(args.home)
    return open_store(root, quota)


def open_store(root: Path, quota: int | None = None) -> Any:
    """BlobStore(root); a meta.db that is not SQLite is a UsageError naming it and the way out
    (a sqlite3.DatabaseError traceback from every blob command and the worker)."""
    import sqlite3

    from node.blobs import BlobStore

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
        from node.blobs import BlobError

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
        h = s.put_file(src, tier=args.tier, round_key=args.round)
        if args.pin:
            s.pin(h)
        info = s.info(h).to_dict()
    out(args, info, h)
    return 0


@_blob_errors
def cmd_get(args: argparse.Namespace) -> int:
    from node.blobs import BlobClient, check_hash

    check_hash(args.hash)
    if args.legacy_sources:  # --from is the signing key everywhere else
        print("warning: blob get --from URL is deprecated: write --source URL", file=sys.stderr)
        args.sources = (args.sources or []) + args.legacy_sources
    if not args.sources:
        raise UsageError(
            "give at least one --source URL (a peer's blob server, e.g. http://10.0.0.1:26680)"
        )
    t0 = time.monotonic()
    with (
        _store(args) as s,
        BlobClient(args.timeout, parse_size(args.max_bytes)) as c,
        _transfer_bar(args, c),
    ):
        path = c.fetch(args.hash, args.sources, s, tier=args.tier, round_key=args.round)
        data = {
            "hash": args.hash,
            "path": str(path),
            "size": path.stat().st_size,
            "bytes_received": c.bytes_received,
            "seconds": round(time.monotonic() - t0, 3),
        }
        if args.to:
            from node.atomic import copy_atomic

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
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

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
        rep = s.gc(verify=args.verify)
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
    import asyncio

    from node.blobs import BlobServer

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


def _where(p: argparse.ArgumentParser, quota: bool = False) -> None:
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--home", help="node home: the store is HOME/blobs")
    g.add_argument("--dir", help="the blob store folder itself (instead of --home)")
    if quota:
        p.add_argument(
            "--quota", help="disk quota, e.g. 50GiB (stored; default: the store's own, else 10GiB)"
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
    _where(p, quota=True)
    add_output_flag(p)

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
    # now --source
    p.add_argument("--from", dest="legacy_sources", action="append", help=argparse.SUPPRESS)
    p.add_argument("--to", metavar="FILE", help="also copy the verified blob to FILE")
    p.add_argument("--tier", choices=["temp", "hot", "cold"], default="hot")
    p.add_argument("--round", help="hold it for this round key")
    p.add_argument("--max-bytes", default="4GiB", help="refuse a larger blob (default 4GiB)")
    p.add_argument(
        "--timeout",
        type=positive_seconds,
        default=30.0,
        help="seconds without a byte before a peer is dropped (default 30)",
    )
    _where(p, quota=True)
    add_output_flag(p)

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
        "or held blobs)",
        "loconet blob gc --home ~/.loconet --verify",
        cmd_gc,
    )
    p.add_argument(
        "--verify", action="store_true", help="also re-hash every blob and delete corrupt ones"
    )
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
