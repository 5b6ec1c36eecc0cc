"""``loconet provider run``: the long-running provider/verifier worker (a CLI plugin)."""

from __future__ import annotations

import argparse
import logging
import signal
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

from node.atomic import Held, hold
from node.cli.common import DEFAULT_NODE, U32, U64, UsageError, _fee_arg, add_command

if TYPE_CHECKING:  # typing only: the worker loads torch (see the lazy imports below)
    from node.worker.worker import WorkerConfig


def cmd_provider_run(a: argparse.Namespace) -> int:
    # lazy: the CLI parser imports this module for `loconet --help`, which must not load torch
    # (node.worker.worker does) nor the keyring's crypto
    from node.client.keys import KeyError_
    from node.worker.worker import BEHAVIOURS, ProviderWorker, WorkerError

    logging.basicConfig(
        level=getattr(logging, a.log_level.upper()),
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    for noisy in ("httpx", "httpcore", "aiohttp.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if a.behaviour not in BEHAVIOURS:
        raise UsageError(f"--behaviour must be one of {', '.join(BEHAVIOURS)}")
    cfg = _config(a)
    _hold(cfg, Path(a.home), a.from_key)
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


def _config(a: argparse.Namespace) -> WorkerConfig:
    """The worker's config from the command line (its values checked: UsageError)."""
    # lazy: as in cmd_provider_run (torch; prometheus and the app for the metrics)
    from node.metrics import parse_listen
    from node.worker.worker import WorkerConfig

    home = Path(a.home)
    if a.metrics_listen:
        try:
            parse_listen(a.metrics_listen)
        except ValueError as e:
            raise UsageError(f"--metrics-listen: {e}") from None
    if a.quota_gib < 1:  # a negative quota raised ValueError from the blob store
        raise UsageError(f"--quota-gib must be at least 1, not {a.quota_gib}")
    return WorkerConfig(
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


def _hold(cfg: WorkerConfig, home: Path, key: str) -> None:
    """One worker per key and per data folder: two (a restart while the old one still runs)
    trained twice, raced on progress.json and sent each duty twice from one account."""
    # lazy: as in cmd_provider_run (the keyring's crypto)
    from node.client.keys import KeyError_, Keyring

    try:
        Keyring(home).get(key)  # a missing key is named before any folder is made
    except KeyError_ as e:
        raise UsageError(str(e)) from None
    try:
        cfg.data_dir.mkdir(parents=True, exist_ok=True)
        hold(cfg.data_dir / "worker.lock")
        if (home / "keyring").is_dir():
            hold(home / "keyring" / f".{key}.worker.lock")
    except Held as e:
        raise UsageError(
            f"another provider worker (pid {e.pid}) runs for key {key!r} or data folder "
            f"{cfg.data_dir}: stop it first (`kill {e.pid}`)"
        ) from None


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
    _add_link_args(p)
    _add_island_args(p)
    _add_store_and_policy_args(p)


def _add_link_args(p: argparse.ArgumentParser) -> None:
    """Who the worker is and where it talks: key, nodes, blob server, device."""
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


def _add_island_args(p: argparse.ArgumentParser) -> None:
    """How a round trains: an island of data-parallel processes, each maybe a pipeline."""
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


def _add_store_and_policy_args(p: argparse.ArgumentParser) -> None:
    """Its blob store, the jobs it works on, its fees, behaviour, metrics and logs."""
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
