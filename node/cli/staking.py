"""``loconet tx staking ...`` and ``loconet query validators|validator|params|signing-info``
(a CLI plugin: node/cli/main.py calls ``register``)."""

from __future__ import annotations

import argparse
import base64
from pathlib import Path
from typing import Any

from abci_app.pb import staking_pb2, tx_pb2
from node import safejson
from node.cli.common import (
    UsageError,
    add_command,
    add_read_flags,
    add_signer_flags,
    out,
    parse_amount,
    refuse_signer_first,
    signing_key,
)
from node.cli.tx import broadcast
from node.client.rpc import Client
from node.client.units import fmt_loco
from node.local.config import read_priv_validator_key


def _cons_address(text: str) -> bytes:
    try:
        raw = bytes.fromhex(text.strip())
    except ValueError:
        raw = b""
    if len(raw) != 20:
        raise UsageError(
            f"bad validator address {text!r}: give the 40-hex-character consensus address (see "
            "`loconet query validators`)"
        )
    return raw


def _consensus_pubkey(args: argparse.Namespace) -> bytes:
    if args.pubkey:
        try:
            pk = base64.b64decode(args.pubkey, validate=True)
        except ValueError:
            raise UsageError(
                "--pubkey must be base64 (the pub_key.value of priv_validator_key.json)"
            ) from None
    else:
        path = Path(args.validator_home) / "config" / "priv_validator_key.json"
        if not path.exists():
            raise UsageError(
                f"{path} not found: pass --validator-home of an initialized node, or --pubkey"
            )
        pk = read_priv_validator_key(path)[1]
    if len(pk) != 32:
        raise UsageError("the consensus key must be a 32-byte ed25519 public key")
    return pk


def cmd_create_validator(args: argparse.Namespace) -> int:
    refuse_signer_first(
        args.signer_first, f"loconet tx staking create-validator ... --from {args.signer_first}"
    )
    msg = staking_pb2.MsgCreateValidator(
        pub_key=_consensus_pubkey(args),
        self_bond=parse_amount(args.self_bond),
        moniker=args.moniker,
    )
    return broadcast(args, signing_key(args), [tx_pb2.Msg(create_validator=msg)])


def cmd_bond(args: argparse.Namespace) -> int:
    return _send_stake(args, "bond")


def cmd_unbond(args: argparse.Namespace) -> int:
    return _send_stake(args, "unbond")


def _send_stake(args: argparse.Namespace, verb: str) -> int:
    """``tx staking bond|unbond VALIDATOR AMOUNT``: the same two arguments, the same checks,
    one message or the other (``verb`` is both the command and the Msg field)."""
    refuse_signer_first(
        args.signer_first,
        f"loconet tx staking {verb} {args.amount} {args.signer_first} --from {args.validator}",
    )
    key = signing_key(args)
    make = staking_pb2.MsgBond if verb == "bond" else staking_pb2.MsgUnbond
    msg = make(validator=_cons_address(args.validator), amount=parse_amount(args.amount))
    return broadcast(args, key, [tx_pb2.Msg(**{verb: msg})])


def cmd_unjail(args: argparse.Namespace) -> int:
    refuse_signer_first(
        args.signer_first, f"loconet tx staking unjail {args.signer_first} --from {args.validator}"
    )
    key = signing_key(args)
    return broadcast(
        args,
        key,
        [tx_pb2.Msg(unjail=staking_pb2.MsgUnjail(validator=_cons_address(args.validator)))],
    )


def _query(args: argparse.Namespace, path: str) -> Any:
    with Client(args.node) as c:
        qr = c.abci_query(path, height=getattr(args, "height", 0) or 0)
    if qr.code != 0:
        raise UsageError(f"query {path} failed (code {qr.code}): {qr.log}")
    return safejson.loads(qr.value)


def _status(v: dict[str, Any]) -> str:
    if v["status"] == "awaiting_settlement_key":
        # out of the set with the stake to be in it: one command is missing
        return "awaiting_settlement_key (run: loconet tx settlement set-key)"
    return v["status"] + (f" until {v['jailed_until']}" if v["status"] == "jailed" else "")


def cmd_query_validators(args: argparse.Namespace) -> int:
    vals = _query(args, "/validators")
    lines = [
        f"{'MONIKER':12s} {'ADDRESS':40s} {'POWER':>8s} {'STAKE':>16s} {'SLASHED':>12s}  STATUS"
    ]
    for v in vals:
        lines.append(
            f"{v['moniker'] or '-':12s} {v['address']} {v['power']:>8d} "
            f"{fmt_loco(v['tokens']):>16s} {fmt_loco(v['slashed']):>12s}  {_status(v)}"
        )
    out(args, vals, "\n".join(lines))
    return 0


def cmd_query_validator(args: argparse.Namespace) -> int:
    v = _query(args, f"/validator/{_cons_address(args.validator).hex().upper()}")
    text = "\n".join(
        [
            f"moniker:   {v['moniker']}",
            f"address:   {v['address']}",
            f"operator:  {v['operator']}",
            f"status:    {_status(v)}",
            f"power:     {v['power']}",
            f"stake:     {v['tokens']} uloco ({fmt_loco(v['tokens'])})",
            f"self bond: {v['self_bond']} uloco",
            f"slashed:   {v['slashed']} uloco",
            "bonds:",
            *[f"  {b['delegator']}  {b['amount']} uloco" for b in v["bonds"]],
            "unbonding:",
            *[
                f"  {u['delegator']}  {u['amount']} uloco at height {u['completion_height']}"
                for u in v["unbonding"]
            ],
        ]
    )
    out(args, v, text)
    return 0


def cmd_query_params(args: argparse.Namespace) -> int:
    p = _query(args, "/params")
    out(
        args,
        p,
        "\n".join(f"{mod}.{k} = {val}" for mod in sorted(p) for k, val in sorted(p[mod].items())),
    )
    return 0


def cmd_query_signing_info(args: argparse.Namespace) -> int:
    info = _query(args, f"/signing_info/{_cons_address(args.validator).hex().upper()}")
    out(
        args,
        info,
        f"missed {info['missed_blocks_counter']} of the last "
        f"{min(info['index_offset'], info['window'])} blocks (jailed above {info['max_missed']} "
        f"in a window of {info['window']}); counting since height {info['start_height']}",
    )
    return 0


_SIGNER = "keyring key that signs (the operator or delegator)"


def register(root_sub: Any, tx_sub: Any, query_sub: Any) -> None:
    st = tx_sub.add_parser("staking", help="validator and stake transactions").add_subparsers(
        dest="staking_cmd", required=True, metavar="STAKING_COMMAND"
    )
    _register_create_validator(st)
    _register_bond_unbond(st)
    _register_unjail(st)
    _register_queries(query_sub)


def _register_create_validator(st: Any) -> None:
    p = add_command(
        st,
        "create-validator",
        "register a consensus key as a validator and self-bond stake (where the chain runs "
        "settlement, it enters the set only once its key is registered: then run `loconet tx "
        "settlement set-key --validator-home H --from OPERATOR`)",
        "loconet tx staking create-validator --from alice --validator-home ~/.loconet-node4 "
        "--self-bond 100loco --moniker node4 --home ~/.loconet",
        cmd_create_validator,
    )
    # the signer first (FROM_KEY, another CLI's order): refused naming --from
    p.add_argument("signer_first", nargs="?", help=argparse.SUPPRESS)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument(
        "--validator-home",
        help="node home whose config/priv_validator_key.json holds the consensus key",
    )
    g.add_argument("--pubkey", help="the consensus public key, base64")
    p.add_argument(
        "--self-bond", required=True, help="e.g. 100loco (at least params.min_self_bond)"
    )
    p.add_argument("--moniker", required=True)
    add_signer_flags(p, _SIGNER)


def _register_bond_unbond(st: Any) -> None:
    for name, fn, what in (
        ("bond", cmd_bond, "bond stake to a validator"),
        ("unbond", cmd_unbond, "start unbonding stake (paid after params.unbonding_blocks)"),
    ):
        p = add_command(
            st,
            name,
            what,
            f"loconet tx staking {name} 61D6804A65EEC83E7F1D3A01649AF505CDB969CA 10loco --from "
            "alice --home ~/.loconet",
            fn,
        )
        p.add_argument("validator", metavar="VALIDATOR", help="consensus address (hex)")
        p.add_argument("amount", metavar="AMOUNT", help="with a unit: 1000uloco or 2.5loco")
        # the signer first (FROM_KEY VALIDATOR AMOUNT): refused naming --from
        p.add_argument("signer_first", nargs="?", help=argparse.SUPPRESS)
        add_signer_flags(p, _SIGNER)


def _register_unjail(st: Any) -> None:
    p = add_command(
        st,
        "unjail",
        "bring a jailed validator back after its jail period (operator only)",
        "loconet tx staking unjail 61D6804A65EEC83E7F1D3A01649AF505CDB969CA --from validator "
        "--home ~/.loconet",
        cmd_unjail,
    )
    p.add_argument("validator", metavar="VALIDATOR")
    p.add_argument("signer_first", nargs="?", help=argparse.SUPPRESS)  # FROM_KEY VALIDATOR: refused
    add_signer_flags(p, _SIGNER)


def _register_queries(query_sub: Any) -> None:
    """query validators|validator|params|signing-info."""
    p = add_command(
        query_sub,
        "validators",
        "every validator: power, stake, slashed, status",
        "loconet query validators -o json",
        cmd_query_validators,
    )
    add_read_flags(p, height=True)
    p = add_command(
        query_sub,
        "validator",
        "one validator with its bonds and unbonding entries",
        "loconet query validator 61D6804A65EEC83E7F1D3A01649AF505CDB969CA",
        cmd_query_validator,
    )
    p.add_argument("validator", metavar="VALIDATOR")
    add_read_flags(p, height=True)
    p = add_command(
        query_sub,
        "params",
        "staking and slashing parameters",
        "loconet query params -o json",
        cmd_query_params,
    )
    add_read_flags(p, height=True)
    p = add_command(
        query_sub,
        "signing-info",
        "a validator's missed blocks in the liveness window",
        "loconet query signing-info 61D6804A65EEC83E7F1D3A01649AF505CDB969CA",
        cmd_query_signing_info,
    )
    p.add_argument("validator", metavar="VALIDATOR")
    add_read_flags(p)
