"""``loconet trust``: pin a header the light client trusts (node/client/trust.py)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from node.cli.common import UsageError, add_command, add_output_flag, out
from node.client.light import HeaderInvalid
from node.client.rpc import Client
from node.client.trust import TRUST_FILE, trust_store


def cmd_trust(a: argparse.Namespace) -> int:
    text = a.hash.strip().removeprefix("0x")
    try:
        want = bytes.fromhex(text)
    except ValueError:
        want = b""
    if len(want) != 32:
        raise UsageError("HASH must be a block hash: 64 hex characters (as /block shows it)")
    if a.height < 1:
        raise UsageError("HEIGHT must be a block height >= 1")
    try:
        store = trust_store(a.home)
        if store is None:
            raise UsageError(
                f"{a.home} has no config/genesis.json: --home must be a node home (`loconet "
                "init` makes one; copy the chain's genesis.json into HOME/config/)"
            )
        with Client(a.node) as c:
            t = store.pin(c, a.height, want)
    except HeaderInvalid as e:
        raise UsageError(f"not trusted: {e}") from None
    path = Path(a.home) / "data" / TRUST_FILE
    out(
        a,
        {
            "height": t.height,
            "hash": t.header_hash.hex().upper(),
            "validators": len(t.validators),
            "trust_file": str(path),
        },
        f"trusted header {t.height} ({t.header_hash.hex().upper()}), signed by "
        f"{len(t.validators)} validators; `--prove --home {a.home}` starts from it\n"
        f"kept in {path}",
    )
    return 0


def _height(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError("HEIGHT must be a block height (digits)")
    return int(text)


def register(root: Any, tx_sub: Any, query_sub: Any) -> None:
    p = add_command(
        root,
        "trust",
        "pin a block header --prove and the explorer trust, by its hash from a source you trust "
        "(for a chain past its first unbonding period; otherwise trust starts at --home's "
        "genesis)",
        "loconet trust 120000 9DC78738...037B --home ~/.loconet --node http://127.0.0.1:26657",
        cmd_trust,
    )
    p.add_argument("height", type=_height, metavar="HEIGHT")
    p.add_argument("hash", metavar="HASH", help="the block hash of HEIGHT (64 hex characters)")
    p.add_argument("--home", required=True, help="node home (its config/genesis.json)")
    p.add_argument(
        "--node",
        default="http://127.0.0.1:26657",
        help="CometBFT RPC address (default http://127.0.0.1:26657)",
    )
    add_output_flag(p)
