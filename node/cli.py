"""``loconet``: the node's command line (init, start, keys, tx, query, status, train).

Every command has ``--help`` with an example. Errors are one line naming the cause and the fix;
``-o json`` gives machine-readable output where a command prints data."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

DEFAULT_NODE = "http://127.0.0.1:26657"
ULOCO = 1_000_000
# modules with `register(root_subparsers, tx_subparsers, query_subparsers)` adding their commands
PLUGINS = ("node.cli_staking", "node.cli_market", "node.testnet", "node.cli_blob")


from node.errors import UsageError  # re-exported for the plugins


def parse_amount(text: str) -> int:
    """``1000uloco`` -> 1000; ``2.5loco`` -> 2500000; a bare integer is uloco."""
    t = text.strip().lower()
    try:
        if t.endswith("uloco"):
            v = Decimal(t[:-5])
            scale = 1
        elif t.endswith("loco"):
            v = Decimal(t[:-4])
            scale = ULOCO
        else:
            v = Decimal(t)
            scale = 1
    except InvalidOperation:
        raise UsageError(f"bad amount {text!r}: write e.g. 1000uloco or 2.5loco") from None
    n = v * scale
    if n != n.to_integral_value():
        raise UsageError(f"bad amount {text!r}: the smallest unit is 1uloco (0.000001loco)")
    if n <= 0 or n > 2**64 - 1:
        raise UsageError(f"bad amount {text!r}: must be between 1uloco and 2^64-1 uloco")
    return int(n)


def fmt_loco(uloco: int) -> str:
    whole, frac = divmod(uloco, ULOCO)
    return f"{whole}.{frac:06d}".rstrip("0").rstrip(".") + " LOCO"


def out(args: argparse.Namespace, data: Any, text: str) -> None:
    if getattr(args, "output", "text") == "json":
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        print(text)


# ----------------------------------------------------------------------------- commands


def cmd_init(args: argparse.Namespace) -> int:
    from node.init import init_home

    info = init_home(Path(args.home), chain_id=args.chain_id, moniker=args.moniker, abci_address=args.abci_address)
    out(
        args,
        info,
        f"initialized {info['home']} (chain {info['chain_id']}, moniker {info['moniker']})\n"
        f"validator address: {info['validator_address']}\n"
        f"validator account: {info['validator_account']} (key 'validator', funded with 1,000,000 LOCO)\n"
        f"start it with: loconet start --home {info['home']}",
    )
    return 0


def cmd_start(args: argparse.Namespace) -> int:
    from node.supervisor import run_node

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    return asyncio.run(run_node(Path(args.home)))


def cmd_abci(args: argparse.Namespace) -> int:
    from abci_app.server import ABCIServer
    from abci_app.store import MerkleStore
    from node.config import AppConfig, resolve_abci_address

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    home = Path(args.home)
    cfg = AppConfig.load(home)
    store = MerkleStore(home / "data" / "app.db", keep_recent=cfg.keep_recent)
    address = resolve_abci_address(home, args.address) if args.address else cfg.abci_address
    server = ABCIServer(cfg.application(home, store), address)
    try:
        asyncio.run(server.serve_forever())
    except KeyboardInterrupt:
        pass
    finally:
        store.close()
    return 1 if server.fatal_error else 0


def cmd_keys_add(args: argparse.Namespace) -> int:
    from node.keys import Keyring

    k = Keyring(Path(args.home)).add(args.name)
    out(args, {"name": k.name, "address": k.address}, f"added key {k.name!r}\naddress: {k.address}")
    return 0


def cmd_keys_show(args: argparse.Namespace) -> int:
    from node.keys import Keyring

    k = Keyring(Path(args.home)).get(args.name)
    out(args, {"name": k.name, "address": k.address}, k.address)
    return 0


def cmd_keys_list(args: argparse.Namespace) -> int:
    from node.keys import Keyring

    keys = Keyring(Path(args.home)).list()
    data = [{"name": k.name, "address": k.address} for k in keys]
    out(args, data, "\n".join(f"{k.name:20s} {k.address}" for k in keys) or "no keys")
    return 0


def broadcast(args: argparse.Namespace, key_name: str, msgs: list[Any], extra: dict[str, Any] | None = None) -> int:
    """Sign msgs with a keyring key, broadcast_tx_sync, wait for the block, print hash and height
    (node.market_msgs.send_tx with the account's current sequence, no retry); ``extra`` fields
    are printed with them."""
    from node.keys import Keyring
    from node.market_msgs import send_tx
    from node.rpc import Client

    key = Keyring(Path(args.home)).get(key_name)
    def said(tx_hash: str) -> None:
        if args.output != "json":
            print(f"broadcast {tx_hash}, waiting for a block...", file=sys.stderr)

    with Client(args.node) as c:
        res = send_tx(c, key.signer, msgs, fee=args.fee, sequence_retries=0, on_broadcast=said)
    extra = extra or {}
    out(args, {**extra, "txhash": res["txhash"], "height": res["height"], "code": 0},
        "".join(f"{k}: {v}\n" for k, v in extra.items()) + f"txhash: {res['txhash']}\nheight: {res['height']}")
    return 0


def cmd_tx_bank_send(args: argparse.Namespace) -> int:
    from abci_app.codec.address import from_bech32
    from abci_app.pb import bank_pb2, tx_pb2

    to = from_bech32(args.to_addr)
    amount = parse_amount(args.amount)
    return broadcast(args, args.from_key, [tx_pb2.Msg(send=bank_pb2.MsgSend(to_address=to, amount=amount))])


def cmd_query_account(args: argparse.Namespace) -> int:
    from abci_app.codec.address import from_bech32
    from node.proofs import verified_account
    from node.rpc import Client

    addr = from_bech32(args.address)
    with Client(args.node) as c:
        qr = c.abci_query(f"/account/{args.address}", height=args.height or 0, prove=args.prove)
        if qr.code != 0:
            raise UsageError(f"query failed (code {qr.code}): {qr.log}")
        data = json.loads(qr.value)
        data["height"] = qr.height
        if args.prove:
            v = verified_account(c, qr, addr)
            if (v["balance"], v["sequence"]) != (data["balance"], data["sequence"]):
                raise UsageError("the node's answer disagrees with its own proof: do not trust this node")
            data["proof"] = v["proof"]
            data["proof_verified"] = True
            data["app_hash"] = v["app_hash"]
    text = f"address:  {data['address']}\nbalance:  {data['balance']} uloco ({fmt_loco(data['balance'])})\nsequence: {data['sequence']}\nheight:   {data['height']}"
    if args.prove:
        text += f"\nproof:    verified against app hash {data['app_hash']} (header {data['height'] + 1}, signed by >2/3 of the validators)"
    out(args, data, text)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from node.rpc import Client

    with Client(args.node) as c:
        st = c.status()
        vals = c.validators()
    si = st["sync_info"]
    data = {
        "chain_id": st["node_info"]["network"],
        "moniker": st["node_info"]["moniker"],
        "latest_height": int(si["latest_block_height"]),
        "latest_block_time": si["latest_block_time"],
        "app_hash": si["latest_app_hash"],
        "catching_up": si["catching_up"],
        "validators": [{"address": v["address"], "power": int(v["voting_power"])} for v in vals],
    }
    text = (
        f"chain id:  {data['chain_id']}\nmoniker:   {data['moniker']}\nheight:    {data['latest_height']} ({data['latest_block_time']})\n"
        f"app hash:  {data['app_hash']}\nvalidators:\n" + "\n".join(f"  {v['address']}  power {v['power']}" for v in data["validators"])
    )
    out(args, data, text)
    return 0


# ----------------------------------------------------------------------------- parser


def add_command(sub: Any, name: str, help: str, example: str, fn: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        name, help=help, description=help, epilog=f"example:\n  {example}", formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.set_defaults(func=fn)
    return p


def add_node_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--node", default=DEFAULT_NODE, help=f"CometBFT RPC URL (default {DEFAULT_NODE})")


def add_output_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", choices=["text", "json"], default="text", help="output format")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loconet",
        description="loconet: a node for verifiable, decentralised low-communication AI training.",
        epilog="examples:\n  loconet init --home ~/.loconet\n  loconet start --home ~/.loconet\n  loconet status",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = add_command(sub, "init", "create a node home: config, keys, single-validator genesis", "loconet init --home ~/.loconet --chain-id loconet-local --moniker alice", cmd_init)
    p.add_argument("--home", required=True)
    p.add_argument("--chain-id", default="loconet-local")
    p.add_argument("--moniker", default="node0")
    p.add_argument(
        "--abci-address", default="unix://data/abci.sock",
        help="where the app listens for cometbft: a Unix socket in the home (default; only this user "
        "can connect) or tcp://127.0.0.1:26658 when cometbft runs elsewhere",
    )
    add_output_flag(p)

    p = add_command(sub, "start", "run cometbft and the ABCI app together (Ctrl-C stops both)", "loconet start --home ~/.loconet", cmd_start)
    p.add_argument("--home", required=True)

    p = add_command(sub, "abci", "run only the ABCI server (cometbft started separately)", "loconet abci --home ~/.loconet", cmd_abci)
    p.add_argument("--home", required=True)
    p.add_argument("--address", help="listen address (unix://PATH or tcp://HOST:PORT), default from config/app.toml (a Unix socket in the home)")

    keys = sub.add_parser("keys", help="manage account keys in HOME/keyring").add_subparsers(dest="keys_cmd", required=True, metavar="KEYS_COMMAND")
    p = add_command(keys, "add", "create a new ed25519 account key", "loconet keys add alice --home ~/.loconet", cmd_keys_add)
    p.add_argument("name"); p.add_argument("--home", required=True); add_output_flag(p)
    p = add_command(keys, "show", "print a key's address", "loconet keys show alice --home ~/.loconet", cmd_keys_show)
    p.add_argument("name"); p.add_argument("--home", required=True); add_output_flag(p)
    p = add_command(keys, "list", "list keys and addresses", "loconet keys list --home ~/.loconet", cmd_keys_list)
    p.add_argument("--home", required=True); add_output_flag(p)

    tx = sub.add_parser("tx", help="sign and broadcast transactions").add_subparsers(dest="tx_module", required=True, metavar="MODULE")
    tx_sub = tx
    bank = tx.add_parser("bank", help="bank transactions").add_subparsers(dest="bank_cmd", required=True, metavar="BANK_COMMAND")
    p = add_command(bank, "send", "send tokens from a keyring key to an address", "loconet tx bank send validator loco1... 2.5loco --home ~/.loconet --fee 100", cmd_tx_bank_send)
    p.add_argument("from_key", metavar="FROM_KEY"); p.add_argument("to_addr", metavar="TO_ADDR"); p.add_argument("amount", metavar="AMOUNT", help="e.g. 1000uloco or 2.5loco")
    p.add_argument("--home", required=True); p.add_argument("--fee", type=int, default=100, help="fee in uloco (default 100)")
    add_node_flag(p); add_output_flag(p)

    q = sub.add_parser("query", help="query chain state").add_subparsers(dest="query_cmd", required=True, metavar="WHAT")
    query_sub = q
    p = add_command(q, "account", "balance and sequence of an address (optionally with a verified Merkle proof)", "loconet query account loco1... --prove -o json", cmd_query_account)
    p.add_argument("address", metavar="ADDR"); p.add_argument("--height", type=int, default=0, help="state after this block (default latest)")
    p.add_argument("--prove", action="store_true", help="fetch a Merkle proof and verify it against the next block header's app hash")
    add_node_flag(p); add_output_flag(p)

    p = add_command(sub, "status", "chain id, latest height, app hash and validators of a node", "loconet status --node http://127.0.0.1:26657", cmd_status)
    add_node_flag(p); add_output_flag(p)

    import importlib

    for name in PLUGINS:  # command groups owned by other parts of the node
        try:
            plugin = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
            continue
        plugin.register(sub, tx_sub, query_sub)

    try:
        from trainer.cli import register as register_train
    except ImportError:  # the trainer (torch) is optional for a validator-only install
        pass
    else:
        register_train(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from abci_app.errors import LoconetError
    from node.init import InitError
    from node.keys import KeyError_
    from node.paths import ToolMissing
    from node.proofs import ProofInvalid
    from node.rpc import RpcError
    from node.supervisor import StartError

    known = (UsageError, LoconetError, InitError, KeyError_, ToolMissing, RpcError, StartError, ProofInvalid)
    try:
        return int(args.func(args) or 0)
    except known as e:
        msg = e.log if isinstance(e, LoconetError) else str(e)
        code = f" (code {e.codespace}/{e.code})" if isinstance(e, LoconetError) else ""
        print(f"error{code}: {msg}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into `head` and the like
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
