"""``loconet provider run``: the long-running provider/verifier worker (a CLI plugin)."""

from __future__ import annotations

import argparse
import logging
import signal
from pathlib import Path
from typing import Any

from node.cli import DEFAULT_NODE, UsageError, add_command


def cmd_provider_run(a: argparse.Namespace) -> int:
    from node.keys import KeyError_
    from node.worker.worker import BEHAVIOURS, ProviderWorker, WorkerConfig, WorkerError

    logging.basicConfig(level=getattr(logging, a.log_level.upper()),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
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
    cfg = WorkerConfig(
        home=home, key=a.from_key, nodes=a.node or [DEFAULT_NODE],
        data_dir=Path(a.data_dir) if a.data_dir else home / "worker" / a.from_key,
        listen=a.listen, device=a.device, behaviour=a.behaviour, quota_bytes=a.quota_gib << 30,
        jobs=frozenset(a.job or ()), fee=a.fee, check_hardware=not a.skip_hardware_check,
        metrics_listen=a.metrics_listen,
    )
    try:
        w = ProviderWorker(cfg)
    except (WorkerError, KeyError_) as e:
        raise UsageError(str(e)) from None

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
        dest="provider_cmd", required=True, metavar="CMD")
    p = add_command(prov, "run", "train, commit, serve, reveal, verify and attest for a registered provider, "
                    "following the chain until stopped (Ctrl-C / SIGTERM)",
                    "loconet provider run --home ~/.loconet --from alice --node http://127.0.0.1:26657 "
                    "--node http://127.0.0.1:26757 --listen 0.0.0.0:26680", cmd_provider_run)
    p.add_argument("--home", required=True, help="node home whose keyring holds --from")
    p.add_argument("--from", dest="from_key", required=True, metavar="KEY", help="the provider's key")
    p.add_argument("--node", action="append", metavar="URL",
                   help=f"CometBFT RPC URL; repeat for fallbacks (default {DEFAULT_NODE})")
    p.add_argument("--listen", metavar="HOST:PORT", help="blob server address (default: the registered "
                   "endpoint's port, on 127.0.0.1 for a loopback endpoint else 0.0.0.0)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--data-dir", metavar="DIR", help="blob store and progress (default HOME/worker/KEY)")
    p.add_argument("--quota-gib", type=int, default=20, help="blob store disk quota in GiB (default 20)")
    p.add_argument("--job", type=int, action="append", metavar="ID", help="work only on these jobs (repeatable)")
    p.add_argument("--fee", type=int, default=100, help="fee per tx in uloco (default 100)")
    p.add_argument("--behaviour", default="honest",
                   help="FOR TESTS AND DEMOS ONLY: honest (default), random-root, withhold, lazy-verifier, "
                        "poison; every other value is refused")
    p.add_argument("--skip-hardware-check", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--metrics-listen", metavar="HOST:PORT",
                   help="serve Prometheus /metrics (blob bytes in/out, training loss, step time, rounds) here")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning"])
