"""``loconet provider run``: the long-running provider/verifier worker (a CLI plugin)."""

from __future__ import annotations

import argparse
import logging
import signal
from pathlib import Path
from typing import Any

from node.cli.common import DEFAULT_NODE, U32, U64, UsageError, _fee_arg, add_command


def cmd_provider_run(a: argparse.Namespace) -> int:
    from node.client.keys import KeyError_
    from node.worker.worker import BEHAVIOURS, ProviderWorker, WorkerConfig, WorkerError

    logging.basicConfig(
        level=getattr(logging, a.log_level.upper()),
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    for noisy in ("httpx", "httpcore", "aiohttp.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if a.behaviour not in BEHAVIOURS:
        raise UsageError(f"--behaviour must be one of {', '.join(BEHAVIOURS)}")
    home = Path(a.home)
    if a.metrics_listen:
        from node.metrics import parse_listen

        try:
            parse_listen(a.metrics_listen)
        except ValueError as e:
            raise UsageError(f"--metrics-listen: {e}") from None
    if a.quota_gib < 1:  # a negative quota raised ValueError from the blob store
        raise UsageError(f"--quota-gib must be at least 1, not {a.quota_gib}")
    cfg = WorkerConfig(
        home=home,
        key=a.from_key,
        # a list (--node appends); a string here was split into the nodes "h", "t", "t", "p"...
        nodes=[a.node] if isinstance(a.node, str) else list(a.node or [DEFAULT_NODE]),
        data_dir=Path(a.data_dir) if a.data_dir else home / "worker" / a.from_key,
        listen=a.listen,
        device=a.device,
        procs=a.procs,
        pipeline=a.pipeline,
        microbatches=a.microbatches,
        behaviour=a.behaviour,
        quota_bytes=a.quota_gib << 30,
        jobs=frozenset(a.job or ()),
        fee=a.fee,
        check_hardware=not a.skip_hardware_check,
        metrics_listen=a.metrics_listen,
    )
    # one worker per key and per data folder: two (a restart while the old one still runs)
    # trained twice, raced on progress.json and sent each duty twice from one account
    from node.atomic import Held, hold
    from node.client.keys import Keyring

    try:
        Keyring(home).get(a.from_key)  # a missing key is named before any folder is made
    except KeyError_ as e:
        raise UsageError(str(e)) from None
    try:
        cfg.data_dir.mkdir(parents=True, exist_ok=True)
        hold(cfg.data_dir / "worker.lock")
        if (home / "keyring").is_dir():
            hold(home / "keyring" / f".{a.from_key}.worker.lock")
    except Held as e:
        raise UsageError(
            f"another provider worker (pid {e.pid}) runs for key {a.from_key!r} or data folder "
            f"{cfg.data_dir}: stop it first (`kill {e.pid}`)"
        ) from None
    import sqlite3

    try:
        w = ProviderWorker(cfg)
    except (WorkerError, KeyError_) as e:
        raise UsageError(str(e)) from None
    except sqlite3.DatabaseError as e:  # a damaged DATA_DIR/blobs/meta.db: was a traceback
        meta = cfg.data_dir / "blobs" / "meta.db"
        raise UsageError(
            f"cannot open the worker's blob store ({e}): if {meta} is damaged, move it away; "
            "the next start adopts the blob files it finds"
        ) from None

    def stop(signum: int, frame: Any) -> None:
        w.stop_event.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        return w.run()
    except WorkerError as e:
        raise UsageError(str(e)) from None


def register(root: Any, tx: Any, query: Any) -> None:
    prov = root.add_parser("provider", help="run a provider/verifier worker").add_subparsers(
        dest="provider_cmd", required=True, metavar="CMD"
    )
    p = add_command(
        prov,
        "run",
        "train, commit, serve, reveal, verify and attest for a registered provider, "
        "following the chain until stopped (Ctrl-C / SIGTERM)",
        "loconet provider run --home ~/.loconet --from alice --node http://127.0.0.1:26657 "
        "--node http://127.0.0.1:26757 --listen 0.0.0.0:26680",
        cmd_provider_run,
    )
    p.add_argument("--home", required=True, help="node home whose keyring holds --from")
    p.add_argument(
        "--from", dest="from_key", required=True, metavar="KEY", help="the provider's key"
    )
    p.add_argument(
        "--node",
        action="append",
        metavar="URL",
        help="CometBFT RPC URL; repeat for fallbacks (default: --home's client config node, "
        f"else its config.toml's RPC address, else {DEFAULT_NODE})",
    )
    p.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="blob server address (default: the registered "
        "endpoint's port, on 127.0.0.1 for a loopback endpoint else 0.0.0.0)",
    )
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument(
        "--procs",
        "--gpus",
        dest="procs",
        type=int,
        default=1,
        metavar="N",
        help="train each round data-parallel on N processes (torchrun; with --device cuda one "
        "per GPU over NCCL, on CPU gloo): still one payload, trace and commitment per round, "
        "and a single-process verifier re-executes it (default 1)",
    )
    p.add_argument(
        "--pipeline",
        type=int,
        default=1,
        metavar="S",
        help="split the job's model into S pipeline stages, one process each (torch."
        "distributed.pipelining, GPipe; NCCL on cuda, gloo on CPU): --procs N --pipeline S "
        "runs N x S processes, N data-parallel replicas of an S-stage pipeline, each stage "
        "holding its share of the model; a job with fewer than S layers is declined; still one "
        "commitment a single-process verifier re-executes (default 1: no pipeline)",
    )
    p.add_argument(
        "--microbatches",
        type=int,
        default=0,
        metavar="M",
        help="microbatches per replica and step with --pipeline (default: the largest divisor "
        "of the replica's rows up to 2S)",
    )
    p.add_argument(
        "--data-dir", metavar="DIR", help="blob store and progress (default HOME/worker/KEY)"
    )
    p.add_argument(
        "--quota-gib", type=U32, default=20, help="blob store disk quota in GiB (default 20)"
    )
    p.add_argument(
        "--job",
        type=U64,
        action="append",
        metavar="ID",
        help="work only on these jobs (repeatable)",
    )
    p.add_argument(
        "--fee",
        "--fees",  # the Cosmos SDK's spelling
        dest="fee",
        type=_fee_arg,
        default=None,
        help="fee per tx: auto (default: the chain's exact minimum for each tx, read from the "
        "node) or an amount in uloco paid as a floor: a tx whose minimum is higher pays the "
        "minimum (a worker's reveal refused for its fee would be slashed)",
    )
    p.add_argument(
        "--behaviour",
        default="honest",
        help="FOR TESTS AND DEMOS ONLY: honest (default), random-root, withhold, lazy-verifier, "
        "poison; every other value is refused",
    )
    p.add_argument("--skip-hardware-check", action="store_true", help=argparse.SUPPRESS)
    p.add_argument(
        "--metrics-listen",
        metavar="HOST:PORT",
        help="serve Prometheus /metrics (blob bytes in/out, training loss, step time, rounds) here",
    )
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning"])
