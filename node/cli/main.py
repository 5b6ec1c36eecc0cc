"""``loconet``: the node's command line (init, start, keys, tx, query, status, train).

Every command has ``--help`` with an example. Errors are one line naming the cause and the fix;
``-o json`` gives machine-readable output where a command prints data."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import importlib
import itertools
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any, NoReturn

from abci_app.codec.address import from_bech32
from abci_app.errors import LoconetError
from abci_app.pb import bank_pb2, tx_pb2
from abci_app.server import ABCIServer, OneClient, SocketDirError
from contracts import MissingArtifact
from node.atomic import write_new_atomic
from node.cli.common import (
    DEFAULT_NODE,
    HEIGHT,
    HOME_ENV,
    account_state,
    add_command,
    add_output_flag,
    add_read_flags,
    add_signer_flags,
    ask,
    default_home,
    is_json,
    out,
    parse_amount,
    proof_note,
    read_passphrase,
    refuse_signer_first,
    report_error,
    signing_key,
)
from node.cli.tx import broadcast
from node.client import config as client_config
from node.client.inputs import read_input_file
from node.client.keys import (
    MIN_PASSPHRASE,
    KeyError_,
    Keyring,
    export_armor,
    import_armor,
    new_mnemonic,
    seed_from_mnemonic,
)
from node.client.proofs import ProofInvalid
from node.client.rpc import Client, RpcError, TxRejected
from node.client.units import fmt_loco
from node.errors import UsageError
from node.local.config import AppConfig, abci_address_problem, resolve_abci_address
from node.local.init import InitError, init_home
from node.local.supervisor import StartError, lock_home, open_store, run_node, tune_gc
from node.paths import ToolMissing, cometbft_binary

register_train: Callable[[Any], None] | None
try:
    from trainer.cli import register as register_train
except ImportError:  # the trainer (torch) is optional for a validator-only install
    register_train = None

# modules with `register(root_subparsers, tx_subparsers, query_subparsers)` adding their commands
PLUGINS = (
    "node.cli.staking",
    "node.cli.market",
    "node.cli.evm",
    "node.cli.testnet",
    "node.cli.blob",
    "node.cli.tx",
    "node.cli.explorer",
    "node.cli.trust",
    "node.worker.cli",
)


# ----------------------------------------------------------------------------- commands


def cmd_init(args: argparse.Namespace) -> int:
    info = init_home(
        Path(args.home),
        chain_id=args.chain_id,
        moniker=args.moniker,
        abci_address=args.abci_address,
        listen=listen_addresses(args),
    )
    out(
        args,
        info,
        f"initialized {info['home']} (chain {info['chain_id']}, moniker {info['moniker']})\n"
        f"validator address: {info['validator_address']}\n"
        f"validator account: {info['validator_account']} (key 'validator', funded with 1,000,000 "
        "LOCO)\n"
        f"RPC {info['rpc']}, P2P {info['p2p']} (config/config.toml)\n"
        f"start it with: loconet start --home {info['home']}",
    )
    return 0


def port_arg(text: str) -> int:
    """An argparse ``type``: a TCP port, 1..65535."""
    t = text.strip()
    if not (t.isascii() and t.isdigit() and len(t) <= 5 and 0 < int(t) < 65536):
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a port (1..65535)")
    return int(t)


def listen_addresses(args: argparse.Namespace) -> dict[str, tuple[str, int]]:
    """``init``'s --rpc-port/--rpc.laddr and --p2p-port/--p2p.laddr as {"rpc"|"p2p": (host,
    port)}; only the ones given (node/local/init.py writes them into config.toml)."""
    got: dict[str, tuple[str, int]] = {}
    for what in ("rpc", "p2p"):
        port, laddr = getattr(args, f"{what}_port", None), getattr(args, f"{what}_laddr", None)
        if port is not None and laddr is not None:
            raise UsageError(f"give --{what}-port or --{what}.laddr, not both")
        if port is not None:
            got[what] = ("127.0.0.1", port)
        elif laddr is not None:
            m = re.fullmatch(r"tcp://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.\-]+):([0-9]{1,5})", laddr)
            if m is None or not 0 < int(m[2]) < 65536:
                raise UsageError(
                    f"bad --{what}.laddr {laddr[:60]!r}: write tcp://HOST:PORT, e.g. "
                    f"tcp://127.0.0.1:{26657 if what == 'rpc' else 26656} (HOST 0.0.0.0 listens on "
                    "every interface)"
                )
            got[what] = (m[1], int(m[2]))
    if "rpc" in got and "p2p" in got and got["rpc"][1] == got["p2p"][1]:
        raise UsageError(f"the RPC and P2P ports are both {got['rpc'][1]}: give two ports")
    return got


def cmd_start(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    return asyncio.run(run_node(Path(args.home), log_console=args.log_console))


def cmd_abci(args: argparse.Namespace) -> int:
    """The ABCI server alone, for a cometbft started elsewhere. Its connections are admitted by
    the ``OneClient`` rule (abci_app/server.py): one client at a time, at most the four
    connections cometbft opens; any other is refused with one warning line."""

    home = Path(args.home)
    if not (home / "config" / "app.toml").is_file():
        raise UsageError(
            f"{home} is not a loconet home (no config/app.toml): create it with `loconet init "
            f"--home {home}`"
        )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    cfg = AppConfig.load(home)
    if args.address and abci_address_problem(args.address):
        raise UsageError(f"bad --address: {abci_address_problem(args.address)}")
    lock_home(home)  # one node per home (node/local/supervisor.py); released when the process ends
    tune_gc()
    store = open_store(home, cfg.keep_recent)
    address = resolve_abci_address(home, args.address) if args.address else cfg.abci_address
    try:
        app = cfg.application(home, store)
    except ValueError as e:  # a bad key file or app.toml value: one line, as `start` says it
        store.close()
        raise UsageError(str(e)) from None
    server = ABCIServer(app, address, gate=OneClient())
    try:
        asyncio.run(server.serve_forever())
    except KeyboardInterrupt:
        pass
    except SocketDirError as e:
        raise StartError(str(e)) from None
    finally:
        store.close()
    return 1 if server.fatal_error else 0


def cmd_keys_add(args: argparse.Namespace) -> int:
    """A new key from a fresh 24-word BIP-39 mnemonic (printed once), or ``--recover`` the key of
    a mnemonic read from stdin (node/client/keys.py documents the derivation)."""

    ring = Keyring(Path(args.home))
    ring._path(args.name)  # a bad name fails before asking for words
    if args.recover:
        if sys.stdin.isatty():
            words = getpass.getpass("enter your BIP-39 mnemonic (input hidden): ")
        else:
            words = sys.stdin.readline()
        k = ring.add(args.name, seed=seed_from_mnemonic(words))
        out(
            args,
            {"name": k.name, "address": k.address, "recovered": True},
            f"recovered key {k.name!r}\naddress: {k.address}",
        )
        return 0
    words = new_mnemonic()
    k = ring.add(args.name, seed=seed_from_mnemonic(words))
    out(
        args,
        {"name": k.name, "address": k.address, "mnemonic": words},
        f"added key {k.name!r}\naddress: {k.address}\n\n"
        "**Write this mnemonic down and keep it safe: it is the only way to recover the key** "
        f"(`loconet keys add NAME --recover`)\n\n{words}",
    )
    return 0


def cmd_keys_delete(args: argparse.Namespace) -> int:
    ring = Keyring(Path(args.home))
    k = ring.get(args.name)
    if not args.yes:
        if not sys.stdin.isatty():
            raise UsageError(f"deleting key {args.name!r} cannot be undone: pass --yes to confirm")
        if ask(
            f"delete key {k.name!r} ({k.address})? it cannot be undone without its mnemonic [y/N]: "
        ) not in ("y", "yes"):
            raise UsageError("cancelled")
    address = ring.delete(args.name)
    out(
        args,
        {"name": args.name, "address": address, "deleted": True},
        f"deleted key {args.name!r} ({address})",
    )
    return 0


def cmd_keys_show(args: argparse.Namespace) -> int:
    k = Keyring(Path(args.home)).get(args.name)
    out(args, {"name": k.name, "address": k.address}, k.address)
    return 0


def cmd_keys_list(args: argparse.Namespace) -> int:
    if not Path(args.home).is_dir():
        if os.path.lexists(args.home):  # $LOCONET_HOME=a file: it exists, it is no home
            raise UsageError(f"{args.home} is not a folder: check --home")
        raise UsageError(
            f"{args.home} does not exist: check --home (or create a node home with "
            f"`loconet init --home {args.home}`)"
        )
    found = Keyring(Path(args.home)).scan()
    data: list[dict[str, str]] = [
        {"name": n, "address": k.address} if k is not None else {"name": n, "error": str(why)}
        for n, k, why in found
    ]
    good = [f"{n:20s} {k.address}" for n, k, _ in found if k is not None]
    out(args, data, "\n".join(good) or ("no keys" if not found else "no readable keys"))
    broken = [str(why) for _, k, why in found if k is None]
    if broken and not is_json(args):  # -o json: the entry's "error" says it
        for why in broken:
            print(f"error: {why}", file=sys.stderr)
    # like `ls` with an unreadable entry: the others are listed, the exit status says one failed
    return 1 if broken else 0


def cmd_keys_export(args: argparse.Namespace) -> int:
    """The key, sealed under a passphrase as ASCII armor (node/client/keys.py: scrypt +
    ChaCha20-Poly1305); to stdout, or to ``--to FILE`` created with mode 0600."""

    k = Keyring(Path(args.home)).get(args.name)
    if args.to and os.path.lexists(args.to):
        raise UsageError(f"{args.to} exists: pick another --to (an export never overwrites)")
    passphrase = read_passphrase(
        f"passphrase to encrypt {k.name!r} (at least {MIN_PASSPHRASE} characters): ",
        confirm=True,
    )
    armor = export_armor(k, passphrase)
    if args.to:
        try:
            write_new_atomic(Path(args.to), armor, 0o600)
        except FileExistsError:
            raise UsageError(f"{args.to} exists: pick another --to") from None
        out(
            args,
            {"name": k.name, "address": k.address, "file": args.to},
            f"exported {k.name!r} ({k.address}) to {args.to} (mode 0600, encrypted)",
        )
    else:
        out(args, {"name": k.name, "address": k.address, "armor": armor}, armor.rstrip("\n"))
    return 0


def cmd_keys_import(args: argparse.Namespace) -> int:
    """A key from a ``keys export`` file, under NAME (0600, refused when NAME or the address
    is already in the keyring)."""

    ring = Keyring(Path(args.home))
    ring._path(args.name)  # a bad name fails before asking for the passphrase
    if ring._path(args.name).exists():
        raise UsageError(f"key {args.name!r} already exists in {ring.dir}: pick another name")
    text = read_input_file(args.file, "the key file", limit=64 << 10).decode()
    passphrase = read_passphrase(f"passphrase of {args.file}: ")
    k = ring.add(args.name, seed=import_armor(text, passphrase))
    out(
        args,
        {"name": k.name, "address": k.address, "imported": True},
        f"imported key {k.name!r}\naddress: {k.address}",
    )
    return 0


COMETBFT_VERSION = "0.38.25"  # the cometbft `make setup` builds (scripts/setup.sh pins it)


def version_info() -> dict[str, str]:
    try:
        mine = metadata.version("loconet")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        mine = "unknown (not installed: run `make setup`)"
    return {"loconet": mine, "cometbft": COMETBFT_VERSION}


def version_line() -> str:
    v = version_info()
    return f"loconet {v['loconet']} (cometbft {v['cometbft']})"


def cmd_version(args: argparse.Namespace) -> int:
    """loconet's version (package metadata), the cometbft version the project pins, and the one
    the CLI would start (``cometbft version``), when it finds one."""

    data: dict[str, Any] = {**version_info(), "cometbft_binary": None}
    try:
        r = subprocess.run(
            [cometbft_binary(), "version"], capture_output=True, text=True, timeout=10, check=False
        )
        data["cometbft_binary"] = r.stdout.strip() or None
    except (ToolMissing, OSError, subprocess.TimeoutExpired):
        pass
    text = version_line()
    if data["cometbft_binary"] and data["cometbft_binary"] != data["cometbft"]:
        text += f"\nwarning: the cometbft found is {data['cometbft_binary']}: run `make setup`"
    elif not data["cometbft_binary"]:
        text += "\nno cometbft binary found: run `make setup`"
    out(args, data, text)
    return 0


def cmd_tx_bank_send(args: argparse.Namespace) -> int:
    refuse_signer_first(
        args.signer_first,
        f"loconet tx bank send {args.amount} {args.signer_first} --from {args.to_addr}",
    )
    key = signing_key(args)
    to = from_bech32(args.to_addr)
    amount = parse_amount(args.amount)
    return broadcast(args, key, [tx_pb2.Msg(send=bank_pb2.MsgSend(to_address=to, amount=amount))])


def cmd_query_account(args: argparse.Namespace) -> int:
    data = account_state(args)
    text = (
        f"address:  {data['address']}\n"
        f"balance:  {data['balance']} uloco ({fmt_loco(data['balance'])})\n"
        f"sequence: {data['sequence']}\n"
        f"height:   {data['height']}"
    )
    out(args, data, text + proof_note(data))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
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
        f"chain id:  {data['chain_id']}\n"
        f"moniker:   {data['moniker']}\n"
        f"height:    {data['latest_height']} ({data['latest_block_time']})\n"
        f"app hash:  {data['app_hash']}\n"
        "validators:\n"
        + "\n".join(f"  {v['address']}  power {v['power']}" for v in data["validators"])
    )
    out(args, data, text)
    return 0


# ----------------------------------------------------------------------------- parser


def finish_leaves(p: argparse.ArgumentParser) -> None:
    """What every command gets once all plugins registered theirs: --home defaults to
    $LOCONET_HOME, else ~/.loconet (``resolve_defaults`` fills it in: "required" homes always,
    "optional" ones, read only for the node address, when that folder exists and --node is
    absent); and the names of its append options, so a default filled into one is a list."""
    subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    for s in subs:
        for child in s.choices.values():
            finish_leaves(child)
    if subs:
        return
    lists = frozenset(a.dest for a in p._actions if isinstance(a, argparse._AppendAction))
    home = next((a for a in p._actions if a.dest == "home" and a.option_strings), None)
    kind = None
    if home is not None:
        groups = [g for g in p._mutually_exclusive_groups if home in g._group_actions]
        kind = "required" if home.required or any(g.required for g in groups) else "optional"
        home.required = False
        for g in groups:  # blob: --home or --dir, now --home by default
            g.required = False
        note = f"default: ${HOME_ENV}, else ~/.loconet"
        home.help = f"{home.help} ({note})" if home.help else note
    p.set_defaults(_list_dests=lists, _home_kind=kind)


def resolve_defaults(args: argparse.Namespace) -> None:
    """Fill --home, --node, -o and --chain-id left out on the command line: the home from
    $LOCONET_HOME or ~/.loconet (``finish_leaves``), the others from the client config of the
    home (node/client/config.py), the home's config.toml, or the built-in defaults. A value
    filled into an append option (``provider run --node``) is a list of one, as the option
    itself builds."""

    kind = getattr(args, "_home_kind", None)
    if kind is not None and getattr(args, "home", None) is None:
        implicit, source = default_home()
        if kind == "required" and getattr(args, "dir", None) is None:
            args.home, args._home_from = implicit, source
        elif kind == "optional" and getattr(args, "node", None) is None and Path(implicit).is_dir():
            args.home, args._home_from = implicit, source
    lists: frozenset[str] = getattr(args, "_list_dests", frozenset())

    def fill(dest: str, value: Any) -> None:
        setattr(args, dest, [value] if dest in lists else value)

    home = getattr(args, "home", None)
    cfg = (
        client_config.load(home)
        if home and getattr(args, "command", "") not in ("init", "testnet")
        else {}
    )
    if hasattr(args, "output") and args.output is None:
        fill("output", cfg.get("output", "text"))
    if hasattr(args, "node") and args.node is None:
        fill("node", (client_config.node_from_home(home) if home else None) or DEFAULT_NODE)
    if hasattr(args, "chain_id") and args.chain_id is None and cfg.get("chain-id"):
        fill("chain_id", cfg["chain-id"])


class Parser(argparse.ArgumentParser):
    """argparse with one change: when the command line asks for ``-o json``, a usage error
    (a missing argument, ``HEIGHT abc``) is JSON on stdout too, {"error", "usage"}, exit 2.
    Subcommand parsers inherit the class (add_subparsers' default parser_class)."""

    argv: list[str] = []

    def _parse_optional(self, arg_string: str) -> Any:
        # `-5loco` is no negative number to argparse (those are `-5`, `-.5`): it was an unknown
        # option ("unrecognized arguments", or "--fee: expected one argument")
        if (
            arg_string not in self._option_string_actions
            and re.fullmatch(r"-\.?[0-9][0-9A-Za-z.]*", arg_string)
            and not self._negative_number_matcher.match(arg_string)
        ):
            # not only amounts: `--quota -1GiB` came here too and was told "e.g. 5loco"
            self.error(
                f"{arg_string}: amounts cannot be negative, nor sizes (an amount is e.g. 5loco, "
                "a size 10GiB; a text that starts with '-' is given as --option=TEXT)"
            )
        return super()._parse_optional(arg_string)

    def error(self, message: str) -> NoReturn:
        a = Parser.argv
        if any(x in ("-ojson", "--output=json") for x in a) or any(
            x in ("-o", "--output") and y == "json" for x, y in itertools.pairwise(a)
        ):
            print(
                json.dumps(
                    {"error": f"{self.prog}: {message}", "usage": self.format_usage().strip()},
                    sort_keys=True,
                )
            )
            sys.exit(2)
        super().error(message)


def _register_node_commands(sub: Any) -> None:
    """version, init, start, abci: a node's own life."""
    p = add_command(
        sub,
        "version",
        "loconet's version and the cometbft version it pins (and the one it finds)",
        "loconet version -o json",
        cmd_version,
    )
    add_output_flag(p)

    p = add_command(
        sub,
        "init",
        "create a node home: config, keys, single-validator genesis",
        "loconet init --home ~/.loconet --chain-id loconet-local --moniker alice\n"
        "  loconet init --home ~/.loconet-2 --rpc-port 27657 --p2p-port 27656",
        cmd_init,
    )
    p.add_argument("--home", required=True)
    p.add_argument("--chain-id", default="loconet-local")
    p.add_argument("--moniker", default="node0")
    p.add_argument(
        "--abci-address",
        default="unix://data/abci.sock",
        help="where the app listens for cometbft: a Unix socket in the home (default; only this "
        "user can connect) or tcp://127.0.0.1:26658 when cometbft runs elsewhere",
    )
    p.add_argument("--rpc-port", type=port_arg, help="cometbft's RPC port (default 26657)")
    p.add_argument("--p2p-port", type=port_arg, help="cometbft's P2P port (default 26656)")
    p.add_argument(
        "--rpc.laddr",
        dest="rpc_laddr",
        metavar="tcp://HOST:PORT",
        help="cometbft's RPC listen address, as in config.toml (default tcp://127.0.0.1:26657)",
    )
    p.add_argument(
        "--p2p.laddr",
        dest="p2p_laddr",
        metavar="tcp://HOST:PORT",
        help="cometbft's P2P listen address (default tcp://127.0.0.1:26656)",
    )
    add_output_flag(p)

    p = add_command(
        sub,
        "start",
        "run cometbft and the ABCI app together (Ctrl-C stops both)",
        "loconet start --home ~/.loconet",
        cmd_start,
    )
    p.add_argument("--home", required=True)
    p.add_argument(
        "--log-console",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show cometbft's log on the console too (default: when stdout is a terminal); "
        "always in HOME/cometbft.log",
    )

    p = add_command(
        sub,
        "abci",
        "run only the ABCI server (cometbft started separately)",
        "loconet abci --home ~/.loconet",
        cmd_abci,
    )
    p.add_argument("--home", required=True)
    p.add_argument(
        "--address",
        help="listen address (unix://PATH or tcp://HOST:PORT), default from config/app.toml (a "
        "Unix socket in the home)",
    )


def _register_keys(sub: Any) -> None:
    """keys add|delete|show|list|export|import."""
    keys = sub.add_parser("keys", help="manage account keys in HOME/keyring").add_subparsers(
        dest="keys_cmd", required=True, metavar="KEYS_COMMAND"
    )
    p = add_command(
        keys,
        "add",
        "create an ed25519 account key from a new 24-word BIP-39 mnemonic (printed once), "
        "or --recover one from its mnemonic (read from stdin)",
        "loconet keys add alice --home ~/.loconet\n"
        "  echo 'word1 ... word24' | loconet keys add alice2 --recover --home ~/.loconet",
        cmd_keys_add,
    )
    p.add_argument("name")
    p.add_argument("--home", required=True)
    p.add_argument(
        "--recover",
        action="store_true",
        help="derive the key from a BIP-39 mnemonic (m/44'/118'/0'/0'/0', SLIP-0010)",
    )
    add_output_flag(p)
    p = add_command(
        keys,
        "delete",
        "delete a key from the keyring (ask first on a terminal; --yes otherwise)",
        "loconet keys delete alice --yes --home ~/.loconet",
        cmd_keys_delete,
    )
    p.add_argument("name")
    p.add_argument("--home", required=True)
    p.add_argument("-y", "--yes", action="store_true")
    add_output_flag(p)
    p = add_command(
        keys,
        "show",
        "print a key's address",
        "loconet keys show alice --home ~/.loconet",
        cmd_keys_show,
    )
    p.add_argument("name")
    p.add_argument("--home", required=True)
    add_output_flag(p)
    p = add_command(
        keys,
        "list",
        "list keys and addresses",
        "loconet keys list --home ~/.loconet",
        cmd_keys_list,
    )
    p.add_argument("--home", required=True)
    add_output_flag(p)
    p = add_command(
        keys,
        "export",
        "print a key encrypted with a passphrase (ASCII armor: scrypt + ChaCha20-Poly1305), "
        "for `keys import`; the passphrase is read from the terminal, else from stdin",
        "loconet keys export alice --to alice.key --home ~/.loconet",
        cmd_keys_export,
    )
    p.add_argument("name")
    p.add_argument("--home", required=True)
    p.add_argument(
        "--to", metavar="FILE", help="write the armor to FILE (created with mode 0600; not stdout)"
    )
    add_output_flag(p)
    p = add_command(
        keys,
        "import",
        "add a key from a `keys export` file under NAME (asks for its passphrase; refused when "
        "NAME or the key's address is already in the keyring)",
        "loconet keys import alice alice.key --home ~/.loconet",
        cmd_keys_import,
    )
    p.add_argument("name")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--home", required=True)
    add_output_flag(p)


def _register_bank(tx: Any) -> None:
    """tx bank send."""
    bank = tx.add_parser("bank", help="bank transactions").add_subparsers(
        dest="bank_cmd", required=True, metavar="BANK_COMMAND"
    )
    p = add_command(
        bank,
        "send",
        "send tokens from a keyring key to an address",
        "loconet tx bank send loco1... 2.5loco --from validator --home ~/.loconet",
        cmd_tx_bank_send,
    )
    p.add_argument("to_addr", metavar="TO_ADDR")
    p.add_argument("amount", metavar="AMOUNT", help="with a unit: 1000uloco or 2.5loco")
    # the signer first (FROM_KEY TO_ADDR AMOUNT, other CLIs' order): refused naming --from
    p.add_argument("signer_first", nargs="?", help=argparse.SUPPRESS)
    add_signer_flags(p, "keyring key that signs and pays")


def _register_account_query(q: Any) -> None:
    """query account."""
    p = add_command(
        q,
        "account",
        "balance and sequence of an address (optionally with a verified Merkle proof)",
        "loconet query account loco1... --prove -o json",
        cmd_query_account,
    )
    p.add_argument("address", metavar="ADDR")
    p.add_argument(
        "--height", type=HEIGHT, default=0, help="state after this block (default latest)"
    )
    p.add_argument(
        "--prove",
        action="store_true",
        help="fetch a Merkle proof and verify it against the next block header's app hash",
    )
    add_read_flags(p)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="loconet",
        description="loconet: a node for verifiable, decentralised low-communication AI training.",
        epilog="examples:\n"
        "  loconet init --home ~/.loconet\n"
        "  loconet start --home ~/.loconet\n"
        "  loconet status",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=version_line())
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    _register_node_commands(sub)
    _register_keys(sub)
    tx_sub = sub.add_parser("tx", help="sign and broadcast transactions").add_subparsers(
        dest="tx_module", required=True, metavar="MODULE"
    )
    _register_bank(tx_sub)
    query_sub = sub.add_parser("query", help="query chain state").add_subparsers(
        dest="query_cmd", required=True, metavar="WHAT"
    )
    _register_account_query(query_sub)
    p = add_command(
        sub,
        "status",
        "chain id, latest height, app hash and validators of a node",
        "loconet status --node http://127.0.0.1:26657",
        cmd_status,
    )
    add_read_flags(p)

    for name in PLUGINS:  # command groups owned by other parts of the node
        try:
            plugin = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
            continue
        plugin.register(sub, tx_sub, query_sub)

    if register_train is not None:
        register_train(sub)
    finish_leaves(parser)
    complete_group_help(parser)
    return parser


def first_examples(p: argparse.ArgumentParser) -> list[str]:
    """The first example of ``p``'s help: its epilog's first line that runs ``p`` itself
    (``loconet train verify ...``, else any ``loconet ...`` line) with its continuation lines,
    or, for a command group, the first example of its first command."""
    lines = (p.epilog or "").splitlines()
    starts = [
        i for i, x in enumerate(lines) if x.strip().startswith("loconet ") or "| loconet " in x
    ]
    own = [i for i in starts if f"{p.prog} " in lines[i] + " "]
    for i in own[:1] or starts[:1]:
        ex = [lines[i].strip()]
        while ex[-1].endswith("\\") and i + len(ex) < len(lines):
            ex.append("    " + lines[i + len(ex)].strip())
        return ex
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for child in a.choices.values():
                if found := first_examples(child):
                    return found
    return []


def wrap_command(line: str, width: int = 92) -> list[str]:
    """A long example command as shell continuation lines (`` \\`` at the end), broken at
    spaces outside quotes, so it still runs when pasted."""
    words, cur, quote = [], "", ""
    for ch in line:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == " ":
            words.append(cur)
            cur = ""
            continue
        cur += ch
    words.append(cur)
    pairs: list[str] = []  # a flag stays on the line of its value
    for w in words:
        if pairs and pairs[-1].startswith("-") and " " not in pairs[-1] and w[:1] not in "-|>":
            pairs[-1] += " " + w
        else:
            pairs.append(w)
    out = [""]
    for w in pairs:
        if out[-1] and len(out[-1]) + 1 + len(w) > width - 2:
            out[-1] += " \\"
            out.append("    " + w)
        else:
            out[-1] = f"{out[-1]} {w}" if out[-1] else w
    return out


def complete_group_help(p: argparse.ArgumentParser) -> None:
    """Give every command group (``keys``, ``tx``, ``tx bank``, ``query`` ...) what a leaf
    command has: a description (its one-line help) and an ``examples:`` section, one example per
    subcommand taken from the subcommand's own help, so ``loconet tx --help`` shows how each
    command under it is called."""
    for a in p._actions:
        if not isinstance(a, argparse._SubParsersAction):
            continue
        helps = {c.dest: c.help for c in a._choices_actions}
        for name, child in a.choices.items():
            if not any(isinstance(x, argparse._SubParsersAction) for x in child._actions):
                continue
            complete_group_help(child)
            if child.description is None and helps.get(name):
                child.description = helps[name]
            if not child.epilog:
                seen: dict[str, None] = {}
                for x in child._actions:
                    if isinstance(x, argparse._SubParsersAction):
                        for sub in x.choices.values():
                            ex = first_examples(sub)
                            if len(ex) == 1:
                                ex = wrap_command(ex[0])
                            seen.update(dict.fromkeys(["\n".join(ex)]))
                body = "\n".join("  " + e.replace("\n", "\n  ") for e in seen if e)
                child.epilog = f"examples:\n{body}"
                child.formatter_class = argparse.RawDescriptionHelpFormatter


def main(argv: list[str] | None = None) -> int:
    # Ctrl-C / SIGINT always stops a command, even when the parent started us with SIGINT
    # ignored (a shell's `cmd &` does that, and children inherit it): restore Python's handler
    # so `blob serve`, `explorer`, `app` and asyncio.run see KeyboardInterrupt as they expect.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
    parser = build_parser()
    Parser.argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)

    known = (
        UsageError,
        LoconetError,
        InitError,
        KeyError_,
        ToolMissing,
        RpcError,
        StartError,
        ProofInvalid,
        MissingArtifact,
    )
    try:
        refuse_empty_folders(args)
        resolve_defaults(args)
        return int(args.func(args) or 0)
    except known as e:
        msg = e.log if isinstance(e, LoconetError) else str(e)
        source = getattr(args, "_home_from", None)
        if source and str(args.home) in msg:  # "check --home": say where the home came from
            msg += f" (no --home given: {args.home} is {source})"
        if isinstance(e, TxRejected):  # the (code space/n) tag says the code once, not twice
            msg = f"tx rejected in {e.stage}: {e.log}"
        code = getattr(e, "code", None) if isinstance(e, (LoconetError, TxRejected)) else None
        space = getattr(e, "codespace", None) if code is not None else None
        return report_error(args, msg, code, space, reason=getattr(e, "reason", None))
    except (UnicodeDecodeError, UnicodeEncodeError) as e:
        return report_error(args, unicode_problem(e), None, None, reason="usage")
    # RecursionError: a peer's JSON nested past the interpreter's limit where it was parsed
    # with json.loads, not safejson
    except (
        KeyError,
        TypeError,
        ValueError,
        AttributeError,
        IndexError,
        RecursionError,
        OverflowError,
    ) as e:
        if not Client.answers:  # no node answered: a bug of this CLI, keep its traceback
            raise
        # a node answered JSON-RPC, but not with what a loconet node of this version sends
        return report_error(
            args,
            f"the node's answer is not what loconet expects ({type(e).__name__}: {e}); "
            "is --node a loconet node of this version?",
            None,
            None,
            reason="malformed",
        )
    except BrokenPipeError:  # output piped into `head` and the like (before OSError: a subclass)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as e:  # a file the command needed: one line, never a traceback
        what = f"{e.strerror}: {e.filename}" if e.filename else str(e)
        return report_error(args, what, None, None)
    except KeyboardInterrupt:
        return 130


def refuse_empty_folders(args: argparse.Namespace) -> None:
    """An unset shell variable (--home "$H") read as the current folder: keys and homes were
    made wherever the command ran. An empty folder flag is a UsageError."""
    for flag in ("home", "dir", "data_dir", "blob_dir"):
        if getattr(args, flag, None) is not None and not str(getattr(args, flag)).strip():
            raise UsageError(
                f"--{flag.replace('_', '-')} is empty: give a folder (was a variable unset?)"
            )


def unicode_problem(e: UnicodeDecodeError | UnicodeEncodeError) -> str:
    """The line for text that is not UTF-8: a file the command read (decode), or an argument
    with bytes that are not UTF-8, i.e. surrogates (encode)."""
    if isinstance(e, UnicodeDecodeError):
        return (
            f"a file given to this command is not UTF-8 text ({e.reason} at byte {e.start}): "
            "give the file the command expects (JSON, TOML or text)"
        )
    return (
        f"an argument is not valid UTF-8 text ({e.object[e.start : e.end]!r} at position "
        f"{e.start}): retype it, or check the terminal's encoding"
    )


if __name__ == "__main__":
    sys.exit(main())
