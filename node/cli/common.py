"""What every command group of the CLI shares: amounts and numbers on the command line, the
common flags (``--node``, ``-o json``, the tx flags), output, the signer (``--from``), account
state with its proof, and the one-line error report. No command lives here."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import re
import sys
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

from abci_app.codec.address import from_bech32
from node import safejson
from node.client.fees import DEFAULT_MAX_FEE, parse_multiplier
from node.client.proofs import expected_chain_id, trust_of, verified_account
from node.client.rpc import Client
from node.client.units import ULOCO
from node.errors import UsageError  # re-exported for the plugins

DEFAULT_NODE = "http://127.0.0.1:26657"


_AMOUNT_SHAPE = re.compile(r"([+-]?)([0-9]*\.?[0-9]*)")  # ASCII digits only: never '٥'


def parse_amount(text: str, what: str = "amount") -> int:
    """``1000uloco`` -> 1000; ``2.5loco`` -> 2500000. A bare number is refused (5 what? write
    5uloco or 5loco): on chain every amount is an integer of uloco, 1 LOCO = 10^6 uloco.

    One spelling per amount: digits, an optional decimal part, a lowercase unit. ``-5loco``,
    ``+5loco``, ``5LOCO``, ``.5loco`` and ``5.loco`` are refused, each naming the spelling to use
    (``+5loco`` and ``5LOCO`` were sent as 5loco; a negative one never is)."""
    t = text.strip()
    unit = next((u for u in ("uloco", "loco") if t.lower().endswith(u)), "")
    num = t[: len(t) - len(unit)]
    m = _AMOUNT_SHAPE.fullmatch(num)
    if m is None or not any(c.isdigit() for c in m[2]):
        raise UsageError(f"bad {what} {text!r}: write e.g. 1000uloco or 2.5loco")
    v = Decimal(m[1] + m[2])
    if v <= 0:  # before the unit hint: "give a unit, -3uloco" would suggest another refusal
        sign = "amounts cannot be negative; " if m[1] == "-" else ""
        raise UsageError(f"bad {what} {text!r}: {sign}must be between 1uloco and 2^64-1 uloco")
    digits = m[2]
    if digits.startswith("."):
        digits = "0" + digits
    digits = digits.rstrip(".")
    canonical = digits + unit.lower()
    if m[1] == "+":
        raise UsageError(f"bad {what} {text!r}: write it without the sign: {canonical}")
    if unit and t[-len(unit) :] != unit.lower():
        raise UsageError(f"bad {what} {text!r}: units are lowercase: write {canonical}")
    if digits != m[2]:
        raise UsageError(f"bad {what} {text!r}: write {canonical}")
    if not unit:
        raise UsageError(
            f"bad {what} {text!r}: give a unit, {num}uloco or {num}loco (1 LOCO = 10^6 uloco)"
        )
    n = v * (1 if unit == "uloco" else ULOCO)
    if n != n.to_integral_value():
        raise UsageError(f"bad {what} {text!r}: the smallest unit is 1uloco (0.000001loco)")
    if n <= 0 or n > 2**64 - 1:
        raise UsageError(f"bad {what} {text!r}: must be between 1uloco and 2^64-1 uloco")
    return int(n)


def parse_fee(text: str) -> int | None:
    """``--fee``: auto (None: the chain's exact minimum, node/client/fees.py), 100uloco or
    0.001loco; a bare integer is uloco (the fee is always in uloco); 0 is allowed. The amount
    spellings are
    ``parse_amount``'s (no sign, lowercase units)."""
    t = str(text).strip()
    if t.lower() == "auto":
        return None
    if t.isascii() and t.isdigit():  # ASCII: str.isdigit also takes '１２' and '²'
        n = int(t)
        if n > 2**64 - 1:
            raise UsageError(f"bad --fee {text!r}: at most 2^64-1 uloco")
        return n
    if re.fullmatch(r"0+(\.0+)?(u?loco)", t):  # 0loco, 0.0loco, 0uloco: no fee
        return 0
    # +0loco, 0LOCO, 0.loco; and a unit-less 0.0 or -0, which were told "must be between
    # 1uloco and 2^64-1 uloco" (a fee of 0 is allowed)
    if re.fullmatch(r"[+-]?(0+\.?0*|\.0+)(u?loco)?", t, re.IGNORECASE):
        raise UsageError(f"bad --fee {text!r}: write 0uloco (no sign, a lowercase unit)")
    return parse_amount(t, "--fee")


def uint_arg(bits: int = 64, lo: int = 0) -> Callable[[str], int]:
    """An argparse ``type``: an unsigned integer of ``bits`` bits in ASCII decimal digits. A sign,
    Unicode digits (``١``), ``1e3`` or a value past the field's width is a usage error naming the
    range (they were Python's int() letting ``١`` through, or protobuf's "Value out of range"
    traceback when the message was built)."""
    hi = (1 << bits) - 1

    def parse(text: str) -> int:
        t = text.strip()
        if not (0 < len(t) <= 20 and t.isascii() and t.isdigit()) or not lo <= int(t) <= hi:
            top = "2^64-1" if bits == 64 else "2^63-1" if bits == 63 else str(hi)
            raise argparse.ArgumentTypeError(
                f"{text[:40]!r} is not a whole number between {lo} and {top} (decimal digits)"
            )
        return int(t)

    parse.__name__ = f"u{bits}"
    return parse


U64 = uint_arg(64)


U32 = uint_arg(32)


HEIGHT = uint_arg(63)  # CometBFT heights are int64


POSITIVE = uint_arg(32, lo=1)  # counts and sizes: --procs, --quota-gib, --validators ...


def positive_seconds(text: str) -> float:
    """An argparse ``type`` for a duration in seconds: finite and > 0 (nan, inf, 0, -1 refused)."""
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not (v > 0 and v < 10**9):
        raise argparse.ArgumentTypeError(
            f"{text[:40]!r} is not a number of seconds (more than 0, e.g. 2 or 0.5)"
        )
    return v


def out(args: argparse.Namespace, data: Any, text: str) -> None:
    if getattr(args, "output", "text") == "json":
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        print(text)


def is_json(args: argparse.Namespace) -> bool:
    return getattr(args, "output", "text") == "json"


def ask(question: str) -> str:
    """A question on stderr, the answer from stdin (stripped, lowercase; "" at end of input).
    input() printed the question on stdout, into the JSON document of `keys delete -o json |
    jq` at a terminal."""
    print(question, end="", file=sys.stderr, flush=True)
    return sys.stdin.readline().strip().lower()


def read_passphrase(prompt: str, confirm: bool = False) -> str:
    """A passphrase from the terminal (hidden; typed twice with ``confirm``), else the first
    line of stdin (a script: ``echo "$PASS" | loconet keys export ...``)."""
    if sys.stdin.isatty():
        first = getpass.getpass(prompt)
        if confirm and getpass.getpass("repeat it: ") != first:
            raise UsageError("the two passphrases differ: nothing was written")
        return first
    line = sys.stdin.readline()
    if not line:
        raise UsageError("no passphrase on stdin: type it at a terminal, or pipe it in")
    return line.removesuffix("\n").removesuffix("\r")


def signing_key(args: argparse.Namespace) -> str:
    """``--from KEY``, the key that signs and pays."""
    flag = getattr(args, "from_key", None)
    if not flag:
        raise UsageError(
            "give the signing key with --from KEY (see `loconet keys list --home HOME`)"
        )
    return str(flag)


def refuse_signer_first(extra: str | None, fix: str) -> None:
    """A command given the signer as its first positional (another CLI's order, and this one's
    before ``--from``): refused, naming the command to type (``fix``)."""
    if extra is not None:
        raise UsageError(f"one positional too many: the signer goes in --from: write `{fix}`")


def proof_note(data: dict[str, Any]) -> str:
    """The lines --prove adds to a text answer ("" without a proof)."""
    if not data.get("proof_verified"):
        return ""
    return (
        "\n"
        f"proof:    verified against app hash {data['app_hash']} (header "
        f"{data['height'] + 1}, signed by >2/3 of the validators)\n"
        f"signers:  {signers_note(data['validator_set'])}"
    )


def account_state(args: argparse.Namespace, client: Any = None) -> dict[str, Any]:
    """``/account/ADDR`` at ``--height`` (address, balance, sequence, height); with ``--prove``
    also its Merkle proof, verified against the next header's app hash (proof, proof_verified,
    app_hash, validator_set). ``query account``, ``query balance`` and ``query bank balances``
    all read it here."""

    addr = from_bech32(args.address)
    prove = bool(getattr(args, "prove", False))
    with client if client is not None else Client(args.node) as c:
        qr = c.abci_query(f"/account/{args.address}", height=args.height or 0, prove=prove)
        if qr.code != 0:
            raise UsageError(f"query failed (code {qr.code}): {qr.log}")
        data = safejson.loads(qr.value)
        data["height"] = qr.height
        if prove:
            v = verified_account(
                c,
                qr,
                addr,
                asked=args.height or 0,
                chain_id=expected_chain_id(getattr(args, "home", None)),
                trust=(trust := trust_of(getattr(args, "home", None))),
            )
            if (v["balance"], v["sequence"]) != (data["balance"], data["sequence"]):
                raise UsageError(
                    "the node's answer disagrees with its own proof: do not trust this node"
                )
            data["proof"] = v["proof"]
            data["proof_verified"] = True
            data["app_hash"] = v["app_hash"]
            data["validator_set"] = "genesis" if trust is not None else "node"
    return dict(data)


def signers_note(validator_set: str) -> str:
    """How far --prove's header check trusted its signers (node/client/trust.py), in words."""
    if validator_set == "genesis":
        return "trusted from --home's genesis (light-client skipping verification)"
    return (
        "the set the node reports (give a node home as --home to check them against its "
        "genesis: a node forging a whole chain is caught only then)"
    )


def add_command(
    sub: Any, name: str, help: str, example: str, fn: Callable[[argparse.Namespace], int]
) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        name,
        help=help,
        description=help,
        epilog=f"example:\n  {example}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.set_defaults(func=fn)
    return p


def _has(p: argparse.ArgumentParser, flag: str) -> bool:
    return any(flag in a.option_strings for a in p._actions)


def add_node_flag(p: argparse.ArgumentParser) -> None:
    """--node (http://, tcp:// or HOST:PORT) and, if the command has none, an optional --home
    whose client config or config.toml gives the node when --node is absent
    (node/client/config.py)."""
    p.add_argument(
        "--node",
        default=None,
        help=f"CometBFT RPC address: http://H:P, tcp://H:P or H:P (default: the "
        f"home's client config or config.toml, else {DEFAULT_NODE})",
    )
    if not _has(p, "--home"):
        p.add_argument(
            "--home", default=None, help="node home to read the RPC address from (optional)"
        )


def add_output_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-o",
        "--output",
        choices=["text", "json"],
        default=None,
        help="output format (default: the client config's, else text); errors are JSON too",
    )


def add_read_flags(p: argparse.ArgumentParser, *, height: bool = False) -> None:
    """The tail every command that reads the chain shares, in the order its --help lists them:
    ``--height`` (0: the latest) when the read can be made at a past block, ``--node`` and
    ``-o``."""
    if height:
        p.add_argument("--height", type=HEIGHT, default=0)
    add_node_flag(p)
    add_output_flag(p)


def _fee_arg(text: str) -> int | None:
    try:
        return parse_fee(text)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _multiplier_arg(text: str) -> Any:
    try:
        return parse_multiplier(text)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_tx_flags(p: argparse.ArgumentParser) -> None:
    """The flags of every tx command: --home (keyring), --fee, --chain-id, --sequence,
    --generate-only, --dry-run, --yes, --memo, --node, -o."""
    if not _has(p, "--home"):
        p.add_argument("--home", required=True, help="home whose keyring holds the --from key")
    p.add_argument(
        "--fee",
        "--fees",  # the Cosmos SDK's spelling: its values (5000uloco) mean the same here
        dest="fee",
        type=_fee_arg,
        default=None,
        help="fee: auto (default: the chain's exact minimum for this tx, read from the node's "
        "auth params), or 5000uloco, 0.005loco, an integer of uloco; below the minimum is refused",
    )
    p.add_argument(
        "--fee-multiplier",
        type=_multiplier_arg,
        default=None,
        help="with --fee auto: pay this multiple of the minimum, rounded up (e.g. 1.2; default 1)",
    )
    p.add_argument(
        "--max-fee",
        type=_fee_arg,
        default=None,
        help="with --fee auto: refuse to sign if the node's fee params ask more than this "
        f"(default {DEFAULT_MAX_FEE // ULOCO}loco; a hostile --node could ask for your balance)",
    )
    p.add_argument(
        "--chain-id",
        default=None,
        help="expected chain id (default: client config; checked against the node; needed offline)",
    )
    p.add_argument(
        "--sequence",
        type=U64,
        default=None,
        help="the signer's account sequence (default: asked from the node)",
    )
    p.add_argument("--memo", default="", help="a note stored with the tx (at most 256 bytes)")
    p.add_argument(
        "--generate-only",
        action="store_true",
        help="print the unsigned tx as JSON (for `tx sign`), send nothing",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="simulate on the node (as CheckTx, nothing kept), broadcast nothing",
    )
    p.add_argument(
        "-y",
        "--yes",
        action="store_true",
        help="do not ask for confirmation (asked only on a terminal)",
    )
    add_node_flag(p)
    add_output_flag(p)


def add_signer_flags(p: argparse.ArgumentParser, signer: str, *, required: bool = False) -> None:
    """``--from KEY`` (``signer`` says, in the command's words, whose key signs) and then the tx
    flags: the tail every command that signs a tx shares, in the order its --help lists them."""
    p.add_argument("--from", dest="from_key", required=required, metavar="KEY", help=signer)
    add_tx_flags(p)


HOME_ENV = "LOCONET_HOME"


def default_home() -> tuple[str, str]:
    """(the home a command without --home uses, where it comes from): $LOCONET_HOME, else
    ~/.loconet (as a Cosmos SDK app's ~/.simd)."""
    env = os.environ.get(HOME_ENV, "")
    if env.strip():
        # `Environment=LOCONET_HOME=~/.loconet` (systemd, .env files) is not expanded by a shell:
        # the literal "~" made a folder named ~ wherever the command ran
        return os.path.expanduser(env), f"${HOME_ENV}"
    return str(Path.home() / ".loconet"), "the default home"


def report_error(
    args: argparse.Namespace,
    msg: str,
    code: int | None,
    codespace: str | None,
    reason: str | None = None,
) -> int:
    """``error (code space/n): msg`` on stderr; with -o json, {"error", "code", "codespace"} on
    stdout."""
    if is_json(args):
        body: dict[str, Any] = {"error": msg}
        if code is not None:
            body.update(code=code, codespace=codespace)
        if reason:
            body["reason"] = reason
        print(json.dumps(body, sort_keys=True))
    else:
        tag = f" (code {codespace}/{code})" if code is not None else ""
        print(f"error{tag}: {msg}", file=sys.stderr)
    return 1
