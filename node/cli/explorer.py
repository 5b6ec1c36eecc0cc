"""``loconet explorer``: the network in a browser (node/explorer/)."""

from __future__ import annotations

import argparse
from typing import Any

from node.cli.common import UsageError, add_command, add_node_flag
from node.client.proofs import ProofInvalid, trust_of
from node.client.rpc import normalize_url


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"bad --listen {text!r}: write HOST:PORT, e.g. 127.0.0.1:8080")
    # [::1]:8080: the brackets are URL syntax, not part of the host (bind() said "Name or
    # service not known"), as `blob serve --listen` reads it
    return host.strip("[]"), int(port)


def cmd_explorer(a: argparse.Namespace) -> int:
    from node.explorer.server import serve  # lazy: aiohttp, 0.35 s at every --help

    host, port = parse_listen(a.listen)
    node = normalize_url(a.node)  # http://, tcp:// or HOST:PORT; anything else names the forms
    if not 0 < a.poll < 10**9:  # nan and inf too
        raise UsageError("--poll must be a positive number of seconds")

    try:
        trust = trust_of(a.home)
    except ProofInvalid as e:
        raise UsageError(str(e)) from None
    try:
        serve(node, host, port, a.poll, trust=trust, heldout=not a.no_heldout)
    except OSError as e:
        raise UsageError(
            f"cannot listen on {a.listen}: {e.strerror or e}; pick another --listen port"
        ) from None
    return 0


def register(root: Any, tx_sub: Any, query_sub: Any) -> None:
    p = add_command(
        root,
        "explorer",
        "serve a web page of the network: search, blocks, txs, accounts, validators, providers "
        "with their SLA figures and earnings, jobs as training dashboards (held-out loss, "
        "throughput, bytes, ETA), model lineage, charts (state proven against signed headers; "
        "live)",
        "loconet explorer --node http://127.0.0.1:26657 --listen 127.0.0.1:8080   # then open http://127.0.0.1:8080/",
        cmd_explorer,
    )
    add_node_flag(p)
    p.add_argument(
        "--listen", default="127.0.0.1:8080", help="HOST:PORT to serve on (default 127.0.0.1:8080)"
    )
    p.add_argument(
        "--poll", type=float, default=2.0, help="seconds between reads of the node (default 2)"
    )
    p.add_argument(
        "--no-heldout",
        action="store_true",
        help="do not evaluate the held-out loss of attested models (the explorer fetches each "
        "by hash from the job's blob sources and the providers, and runs it on the corpus' "
        "held-out split on one CPU thread)",
    )
