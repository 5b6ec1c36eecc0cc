"""Signing and sending, and the Cosmos-style commands around it (a CLI plugin):

    loconet tx ... --generate-only        an unsigned tx (JSON) for offline signing
    loconet tx sign FILE --from KEY       sign it (offline with --chain-id and --sequence)
    loconet tx broadcast FILE             broadcast a signed tx, wait for its block
    loconet tx ... --dry-run              run it through /simulate (CheckTx on a throwaway copy)
    loconet query tx HASH | txs --events "k='v'" | block [H] | balance ADDR | rewards ADDR
    loconet config set|get KEY [VALUE] --home HOME      the client config (node/client/config.py)

``run_tx`` (behind ``broadcast``, here) is the one path every ``tx`` command takes: resolve
the chain id and sequence, then generate, simulate, or sign + broadcast_tx_sync + wait for the
block, and print the hash, the height and the tx's events (``-o json``: all of them)."""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import json
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError

from abci_app.auth.params import params_from_json
from abci_app.codec.address import from_bech32, to_bech32
from abci_app.codec.tx import decode_tx, sign_body
from abci_app.errors import LoconetError
from abci_app.pb import tx_pb2
from abci_app.vote_extensions import INJECTED_PREFIX
from node import safejson
from node.atomic import locked, write_atomic
from node.cli.common import (
    HEIGHT,
    U64,
    UsageError,
    account_state,
    add_command,
    add_node_flag,
    add_output_flag,
    add_read_flags,
    ask,
    is_json,
    out,
    proof_note,
    uint_arg,
)
from node.client import config as client_config
from node.client import fees
from node.client.inputs import read_input_file
from node.client.keys import Keyring
from node.client.market_msgs import account_sequence
from node.client.rpc import Client, RpcError
from node.client.units import fmt_loco

UNSIGNED = "loconet/unsigned-tx/v1"
SIGNED = "loconet/signed-tx/v1"


# ----------------------------------------------------------------------------- building


def events_of(raw_events: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """CometBFT's event list -> [{"type", "attributes": {key: value}}] (attributes in order)."""
    res = []
    for e in raw_events or []:
        attrs = {str(a.get("key", "")): str(a.get("value", "")) for a in e.get("attributes") or []}
        res.append({"type": e.get("type", ""), "attributes": attrs})
    return res


def body_of(msgs: list[Any], memo: str = "") -> bytes:

    return tx_pb2.TxBody(messages=msgs, memo=memo).SerializeToString(deterministic=True)


def tx_hash(raw: bytes) -> str:

    return hashlib.sha256(raw).hexdigest().upper()


def msg_to_json(m: Any) -> dict[str, Any]:
    """A protobuf message as JSON a person can read: proto field names, integers as numbers,
    20-byte addresses as loco1... (consensus addresses of validators as upper-case hex, as
    CometBFT prints them), other bytes as hex; unset fields left out."""

    def conv(fd: Any, v: Any) -> Any:
        if fd.type == FieldDescriptor.TYPE_MESSAGE:
            return msg_to_json(v)
        if fd.type == FieldDescriptor.TYPE_BYTES:
            if len(v) == 20:
                return v.hex().upper() if "validator" in fd.name else to_bech32(v)
            return v.hex()
        if fd.type == FieldDescriptor.TYPE_ENUM:
            return (
                fd.enum_type.values_by_number[v].name if v in fd.enum_type.values_by_number else v
            )
        return v

    out: dict[str, Any] = {}
    for fd, v in m.ListFields():
        repeated = getattr(fd, "is_repeated", None)
        is_rep = (
            repeated if isinstance(repeated, bool) else fd.label == FieldDescriptor.LABEL_REPEATED
        )
        out[fd.name] = [conv(fd, x) for x in v] if is_rep else conv(fd, v)
    return out


def _messages_json(body_bytes: bytes) -> list[Any]:

    body = tx_pb2.TxBody.FromString(body_bytes)
    return [msg_to_json(m) for m in body.messages]


def _chain_and_sequence(args: argparse.Namespace, client: Any, address: str) -> tuple[str, int]:
    """--chain-id / --sequence, else the node's; a --chain-id that is not the node's is refused."""

    chain_id, sequence = getattr(args, "chain_id", None), getattr(args, "sequence", None)
    if client is not None:
        node_chain = client.status()["node_info"]["network"]
        if chain_id and chain_id != node_chain:
            raise UsageError(
                f"--chain-id {chain_id} but the node at {client.url} runs {node_chain}: "
                "fix --chain-id (or `loconet config set chain-id ...`) or --node"
            )
        chain_id = node_chain
        if sequence is None:
            sequence = account_sequence(client, address)
    if not chain_id or sequence is None:
        raise UsageError(
            "offline: give both --chain-id and --sequence (or let the CLI ask a node with --node)"
        )
    return chain_id, int(sequence)


def _confirm(args: argparse.Namespace, summary: str) -> None:
    """Ask before broadcasting when a person is at the terminal (skip with --yes)."""
    if (
        getattr(args, "yes", False)
        or is_json(args)
        or not (sys.stdin.isatty() and sys.stderr.isatty())
    ):
        return
    print(summary, file=sys.stderr)
    answer = ask("confirm transaction before signing and broadcasting [y/N]: ")
    if answer not in ("y", "yes"):
        raise UsageError("cancelled (pass --yes to skip this question)")


def _client_if_needed(args: argparse.Namespace) -> Any:

    offline = (
        getattr(args, "generate_only", False)
        and getattr(args, "chain_id", None)
        and getattr(args, "sequence", None) is not None
    )
    return None if offline else Client(args.node)


def broadcast(
    args: argparse.Namespace,
    key_name: str,
    msgs: list[Any],
    extra: dict[str, Any] | None = None,
    from_events: dict[str, tuple[str, str]] | None = None,
) -> int:
    """Sign msgs with a keyring key and send them (``run_tx``: --generate-only, --dry-run,
    --chain-id, --sequence, --yes; else broadcast_tx_sync, wait for the block, print hash, height
    and, with -o json, the tx's events). ``extra`` fields are printed with them; ``from_events``
    adds values read from the tx's events, e.g. {"job_id": ("job.created", "job_id")}."""
    return run_tx(args, key_name, msgs, extra, from_events)


def run_tx(
    args: argparse.Namespace,
    key_name: str,
    msgs: list[Any],
    extra: dict[str, Any] | None = None,
    from_events: dict[str, tuple[str, str]] | None = None,
) -> int:
    """The path of every ``tx`` command (module docstring). ``from_events`` names values to pick
    from the tx's events and print (e.g. {"job_id": ("job.created", "job_id")})."""

    key = Keyring(Path(args.home)).get(key_name)
    body = body_of(msgs, getattr(args, "memo", "") or "")
    extra = dict(extra or {})
    client = _client_if_needed(args)
    with contextlib.ExitStack() as stack:
        if not (
            getattr(args, "generate_only", False)
            or getattr(args, "dry_run", False)
            or getattr(args, "sequence", None) is not None
        ):
            # one signer at a time per key: two `tx` commands of one key at once read the same
            # sequence, and identical messages made identical bytes (3 sends, 1 transfer, 3
            # "successes"), different ones a wrong-sequence refusal; the lock is held until the
            # tx is in a block, so the next one reads the next sequence
            stack.enter_context(_key_lock(Path(args.home), key.name))
        return _run_tx_locked(args, key, body, msgs, client, extra, from_events)


def _key_lock(home: Path, name: str) -> Any:

    keyring = home / "keyring"
    try:
        open(keyring / f".{name}.lock", "a").close()  # noqa: SIM115 (probe: writable?)
    except OSError:  # a read-only keyring: no lock, as before
        return contextlib.nullcontext()
    return locked(keyring / f".{name}")


def _run_tx_locked(
    args: argparse.Namespace,
    key: Any,
    body: bytes,
    msgs: list[Any],
    client: Any,
    extra: dict[str, Any],
    from_events: dict[str, tuple[str, str]] | None,
) -> int:
    try:
        chain_id, sequence = _chain_and_sequence(args, client, key.address)

        def sign(f: int) -> bytes:
            return sign_body(key.signer, body, sequence=sequence, fee=f, chain_id=chain_id)

        fee, raw = _fee_and_tx(args, client, len(msgs), sign)
        if getattr(args, "generate_only", False):
            doc = {
                "type": UNSIGNED,
                "chain_id": chain_id,
                "sequence": sequence,
                "fee": fee,
                "signer": key.address,
                "public_key": key.signer.public_bytes().hex(),
                "body_bytes": base64.b64encode(body).decode(),
                "messages": _messages_json(body),
            }
            print(json.dumps(doc, indent=2, sort_keys=True))
            return 0
        if getattr(args, "dry_run", False):
            return _simulate(args, client, raw)
        _confirm(
            args,
            f"{key.name} ({key.address}) signs {len(msgs)} message(s) on {chain_id}, sequence "
            f"{sequence}, fee {fee} uloco:\n" + json.dumps(_messages_json(body), indent=2),
        )
        return _send(args, client, raw, extra, from_events)
    finally:
        if client is not None:
            client.close()


def _fee_and_tx(args: argparse.Namespace, client: Any, n_msgs: int, sign: Any) -> tuple[int, bytes]:
    """``--fee auto`` (None, the default): the chain's exact minimum for the signed bytes (times
    ``--fee-multiplier``), read from the node (node/client/fees.py); offline, from the chain's
    default params (said on stderr). An explicit ``--fee`` below the minimum is refused here, naming
    the
    minimum, unless ``--dry-run`` (which shows the chain's own answer) or offline (no node to
    ask: the chain checks it)."""

    fee, mult = getattr(args, "fee", None), getattr(args, "fee_multiplier", None)
    if fee is not None and mult is not None:
        raise UsageError("--fee-multiplier applies to --fee auto: drop one of --fee and it")
    if client is None:
        if fee is not None:
            return fee, sign(fee)
        params = params_from_json({})
        print(
            f"offline: --fee auto uses the default minimum fee ({params.min_fee_per_byte} "
            f"uloco/byte, {params.min_fee_per_msg} uloco/message); pass --fee if your chain's "
            "auth params differ (`loconet query params`)",
            file=sys.stderr,
        )
        return fees.auto_fee(params, n_msgs, sign, mult or Fraction(1))
    params = fees.auth_params(client)
    if fee is None:
        fee, raw = fees.auto_fee(params, n_msgs, sign, mult or Fraction(1))
        cap = getattr(args, "max_fee", None)
        cap = fees.DEFAULT_MAX_FEE if cap is None else cap
        fees.refuse_above_cap(fee, cap, client.url, params, len(raw), n_msgs)
        return fee, raw
    raw = sign(fee)
    if not getattr(args, "dry_run", False):
        fees.check_fee(params, raw, n_msgs, fee)
    return fee, raw


def _simulate(args: argparse.Namespace, client: Any, raw: bytes) -> int:
    qr = client.abci_query("/simulate", data=raw)
    if qr.code != 0:
        raise UsageError(
            f"the node cannot simulate (code {qr.code}): {qr.log}; is it an older loconet?"
        )
    r = safejson.loads(qr.value)
    data = {
        "dry_run": True,
        "would_succeed": r["code"] == 0,
        "code": r["code"],
        "codespace": r["codespace"],
        "log": r["log"],
        "events": r["events"],
        "txhash": tx_hash(raw),
        "height": qr.height,
    }
    if r["code"] == 0:
        text = (
            f"dry run: the tx would be accepted (state at height {qr.height}); nothing was "
            "broadcast\n" + _events_text(r["events"])
        )
    else:
        text = (
            f"dry run: the tx would be rejected with code {r['codespace']}/{r['code']}: {r['log']}"
        )
    out(args, data, text)
    return 0 if r["code"] == 0 else 1


def _events_text(evs: list[dict[str, Any]]) -> str:
    return "\n".join(
        f"  {e['type']}: " + " ".join(f"{k}={v}" for k, v in e["attributes"].items()) for e in evs
    )


def _send(
    args: argparse.Namespace,
    client: Any,
    raw: bytes,
    extra: dict[str, Any],
    from_events: dict[str, tuple[str, str]] | None,
    resend: bool = False,
) -> int:
    """Broadcast ``raw`` and wait for its block. ``resend`` (``tx broadcast FILE``): signed bytes
    the node already holds are waited for, not an error."""

    try:
        h = client.broadcast_tx_sync(raw)
    except RpcError as err:
        if not resend or "already exists in cache" not in str(err):
            raise
        # the same signed bytes were sent before (a second `tx broadcast` of one file): they
        # execute at most once; report that execution instead of CometBFT's "Internal error"
        h = tx_hash(raw)
        if not is_json(args):
            print(f"tx {h} was already broadcast; waiting for its block...", file=sys.stderr)
    else:
        if not is_json(args):
            print(f"broadcast {h}, waiting for a block...", file=sys.stderr)
    # a tx that left the mempool without a block is sent again
    res = client.wait_for_tx(h, resubmit=[raw])
    evs = events_of(res["tx_result"].get("events"))
    for name, (etype, attr) in (from_events or {}).items():
        for e in evs:
            if e["type"] == etype and attr in e["attributes"]:
                v = e["attributes"][attr]
                extra[name] = int(v) if v.isdigit() else v
                break
    data = {
        **extra,
        "txhash": h,
        "height": int(res["height"]),
        "code": 0,
        "events": evs,
        "gas_used": int(res["tx_result"].get("gas_used") or 0),
    }
    text = (
        "".join(f"{k}: {v}\n" for k, v in extra.items()) + f"txhash: {h}\nheight: {res['height']}"
    )
    out(args, data, text)
    return 0


# ----------------------------------------------------------------------------- tx sign / broadcast


def _read_doc(path: str) -> dict[str, Any]:
    try:
        text = sys.stdin.read() if path == "-" else read_input_file(path, "tx file").decode()
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError:  # a binary file: was a traceback
        text = ""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        raise UsageError(
            f"{path} is not JSON: give the output of `--generate-only` or `tx sign`"
        ) from None
    if not isinstance(doc, dict) or doc.get("type") not in (UNSIGNED, SIGNED):
        raise UsageError(f"{path} is not a loconet tx document ({UNSIGNED} or {SIGNED})")
    return doc


def _doc_uint(path: str, doc: dict[str, Any], field: str) -> int:
    """An integer field of a tx document (fee in uloco, sequence): 0..2^64-1, a JSON integer
    (1.5, "5" and true are refused: a hand-edited fee is signed exactly or not at all)."""
    v = doc.get(field, 0)
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 2**64 - 1:
        raise UsageError(
            f"{path}: {field} must be an integer between 0 and 2^64-1 (uloco for the fee), "
            f"got {v!r}"
        )
    return v


def cmd_tx_sign(args: argparse.Namespace) -> int:

    doc = _read_doc(args.file)
    if doc["type"] != UNSIGNED:
        raise UsageError(
            f"{args.file} is already signed: broadcast it with `loconet tx broadcast {args.file}`"
        )
    key = Keyring(Path(args.home)).get(args.from_key)
    for field in ("chain_id", "public_key", "signer"):
        if not isinstance(doc.get(field, ""), str):  # chain_id 5 was a TypeError traceback
            raise UsageError(
                f"{args.file}: {field} must be a string (as --generate-only wrote it), got "
                f"{doc[field]!r}"[:300]
            )
    if doc.get("public_key") and doc["public_key"] != key.signer.public_bytes().hex():
        raise UsageError(
            f"the tx was generated for {doc.get('signer')}, not for key {key.name!r} "
            f"({key.address})"
        )
    if args.chain_id is None and doc.get("chain_id"):
        args.chain_id = doc["chain_id"]
    fee = _doc_uint(args.file, doc, "fee")
    if args.sequence is None and doc.get("sequence") is not None:
        args.sequence = _doc_uint(args.file, doc, "sequence")
    try:
        body = base64.b64decode(doc["body_bytes"], validate=True)
    except (KeyError, TypeError, ValueError):
        raise UsageError(
            f"{args.file}: body_bytes must be the base64 of the tx body (as --generate-only "
            "wrote it)"
        ) from None
    # what is signed is body_bytes, not the document's "messages": a document whose messages
    # say "send 1uloco" over body_bytes that send 999999loco was signed as the latter and its
    # output still showed the former. The messages shown are decoded from the bytes signed.
    shown = _shown_messages(args.file, doc, body, "body_bytes")
    client = None
    if args.chain_id is None or args.sequence is None:
        client = Client(args.node)
    try:
        chain_id, sequence = _chain_and_sequence(args, client, key.address)
    finally:
        if client is not None:
            client.close()
    _confirm(
        args,
        f"sign as {key.address} on {chain_id}, sequence {sequence}, fee {fee}uloco:\n"
        + json.dumps(shown, indent=2, sort_keys=True),
    )
    raw = sign_body(key.signer, body, sequence=sequence, fee=fee, chain_id=chain_id)
    signed = {
        "type": SIGNED,
        "chain_id": chain_id,
        "sequence": sequence,
        "fee": fee,
        "signer": key.address,
        "txhash": tx_hash(raw),
        "tx": base64.b64encode(raw).decode(),
        "messages": shown,
    }
    text = json.dumps(signed, indent=2, sort_keys=True)
    if args.output_document:
        write_atomic(Path(args.output_document), text + "\n")  # never half a signed tx
        print(f"signed tx {signed['txhash']} written to {args.output_document}", file=sys.stderr)
    else:
        print(text)
    return 0


def cmd_tx_broadcast(args: argparse.Namespace) -> int:

    doc = _read_doc(args.file)
    if doc["type"] != SIGNED:
        raise UsageError(
            f"{args.file} is not signed: sign it first with `loconet tx sign {args.file} --from "
            "KEY --home HOME`"
        )
    try:
        raw = base64.b64decode(doc["tx"], validate=True)
    except (KeyError, TypeError, ValueError):
        raise UsageError(
            f"{args.file}: tx must be the base64 of the signed tx (as `tx sign` wrote it)"
        ) from None

    try:
        body = decode_tx(raw).body_bytes
    except LoconetError as e:
        raise UsageError(f"{args.file}: tx is not a loconet tx ({e.log})") from None
    _shown_messages(args.file, doc, body, "tx")
    with Client(args.node) as c:
        return _send(args, c, raw, {}, None, resend=True)


def _shown_messages(file: str, doc: dict[str, Any], body: bytes, field: str) -> list[Any]:
    """The messages ``body`` holds, as JSON; a document whose own "messages" say otherwise was
    altered after it was written and is refused (the bytes are what the chain executes)."""

    try:
        shown = json.loads(json.dumps(_messages_json(body)))
    except (DecodeError, ValueError, TypeError, KeyError):
        raise UsageError(f"{file}: {field} does not decode to tx messages") from None
    if "messages" in doc and doc["messages"] != shown:
        raise UsageError(
            f'{file}: its "messages" are not what its {field} holds (the file was altered after '
            f"it was written): the bytes hold {json.dumps(shown, sort_keys=True)}"[:600]
            + "; regenerate the document with --generate-only"
        )
    return shown


# ----------------------------------------------------------------------------- queries


def _client(args: argparse.Namespace) -> Any:

    return Client(args.node)


def tx_json(res: dict[str, Any]) -> dict[str, Any]:
    """A CometBFT ``tx`` answer -> hash, height, code, log, events, messages, signer, fee."""

    r = res["tx_result"]
    raw = base64.b64decode(res.get("tx", ""))
    data: dict[str, Any] = {
        "txhash": res["hash"],
        "height": int(res["height"]),
        "code": int(r.get("code") or 0),
        "codespace": r.get("codespace", ""),
        "log": r.get("log", ""),
        "events": events_of(r.get("events")),
    }

    if raw.startswith(INJECTED_PREFIX):  # no signer, no messages: say what it is
        data["kind"] = "vote_extensions"
        return data
    try:
        t = decode_tx(raw)
        data.update(
            {
                "signer": to_bech32(t.signer),
                "sequence": t.sequence,
                "fee": t.fee,
                "memo": t.memo,
                "chain_id": t.chain_id,
                "messages": _messages_json(t.body_bytes),
            }
        )
    except LoconetError:
        pass
    return data


def _tx_text(d: dict[str, Any]) -> str:
    status = "ok" if d["code"] == 0 else f"REJECTED {d['codespace']}/{d['code']}: {d['log']}"
    lines = [f"txhash:  {d['txhash']}", f"height:  {d['height']}", f"result:  {status}"]
    if d.get("kind") == "vote_extensions":
        lines.append(
            "kind:    the validators' vote extensions (randomness-beacon shares, checkpoint "
            "signatures) the block's proposer put first in the block; not a signed tx"
        )
    if "signer" in d:
        lines += [
            f"signer:  {d['signer']} (sequence {d['sequence']}, fee {d['fee']} uloco)",
            "messages:",
            *[f"  {json.dumps(m, sort_keys=True)}" for m in d["messages"]],
        ]
    if d["events"]:
        lines += ["events:", _events_text(d["events"])]
    return "\n".join(lines)


def cmd_query_tx(args: argparse.Namespace) -> int:
    h = args.hash.strip().removeprefix("0x").upper()
    try:
        ok = len(bytes.fromhex(h)) == 32
    except ValueError:
        ok = False
    if not ok:
        raise UsageError(f"bad tx hash {args.hash!r}: 64 hex characters (as `tx` commands print)")
    with _client(args) as c:
        res = c.tx(h)
    if res is None:
        raise UsageError(
            f"tx {h} not found: not in a block yet, wrong --node, or the node does not index txs"
        )
    d = tx_json(res)
    out(args, d, _tx_text(d))
    return 0


def _event_query(items: list[str]) -> str:
    """``--events "job.created.owner='loco1...'"`` (repeatable, ANDed; also TYPE.KEY=VALUE)."""
    parts = []
    for it in items:
        for clause in it.split("&"):
            clause = clause.strip()
            if not clause:
                continue
            key, op, val = clause.partition("=")
            if not op or "." not in key or not val:
                raise UsageError(
                    f"bad --events {clause!r}: write TYPE.KEY=VALUE, e.g. job.created.job_id=1"
                )
            val = val.strip().strip("'\"")
            name = key.strip().replace(".", "").replace("_", "").replace("-", "")
            if "'" in val or "\\" in val or not (name.isascii() and name.isalnum()):
                # a quote inside the value ended CometBFT's string and the node answered
                # "Internal error offset 14: got tag"; keys are event type.attribute names
                raise UsageError(
                    f"bad --events {clause!r}: TYPE.KEY is letters, digits, '_', '-' and '.', "
                    "and VALUE holds no quote or backslash"
                )
            if not (val.isascii() and val.isdigit()):
                val = f"'{val}'"
            parts.append(f"{key.strip()}={val}")
    if not parts:
        raise UsageError("give --events TYPE.KEY=VALUE")
    return " AND ".join(parts)


def cmd_query_txs(args: argparse.Namespace) -> int:
    q = _event_query(args.events)
    with _client(args) as c:
        res = c.call(
            "tx_search", query=q, page=str(args.page), per_page=str(args.limit), order_by="desc"
        )
    txs = [tx_json(t) for t in res.get("txs", [])]
    data = {"query": q, "total": int(res.get("total_count", 0)), "page": args.page, "txs": txs}
    rows = [f"{'HEIGHT':>7s}  {'TXHASH':64s}  {'CODE':>4s}  MESSAGES"]
    rows += [
        f"{t['height']:>7d}  {t['txhash']:64s}  {t['code']:>4d}  "
        + ",".join(next(iter(m), "?") for m in t.get("messages", []))
        for t in txs
    ]
    out(args, data, "\n".join(rows) + f"\n{data['total']} tx(s) match {q}")
    return 0


def cmd_query_block(args: argparse.Namespace) -> int:
    with _client(args) as c:
        b = c.block(args.height or None)
        h = int(b["block"]["header"]["height"])
        results = c.call("block_results", height=str(h))
    hdr = b["block"]["header"]
    raw_txs = b["block"]["data"].get("txs") or []
    txs = []
    # a node that returns fewer results than txs: show what it returned (no traceback)
    for raw, r in zip(raw_txs, results.get("txs_results") or [], strict=False):
        txs.append(
            {
                "txhash": tx_hash(base64.b64decode(raw)),
                "code": int(r.get("code") or 0),
                "log": r.get("log", ""),
                "events": events_of(r.get("events")),
            }
        )
    data = {
        "height": h,
        "hash": b["block_id"]["hash"],
        "time": hdr["time"],
        "chain_id": hdr["chain_id"],
        "proposer": hdr["proposer_address"],
        "app_hash": hdr["app_hash"],
        "txs": txs,
        "finalize_block_events": events_of(results.get("finalize_block_events")),
        "validator_updates": results.get("validator_updates") or [],
    }
    text = (
        f"block {h} ({data['time']})\nhash:     {data['hash']}\nproposer: {data['proposer']}\n"
        f"app hash: {data['app_hash']} (state after block {h - 1})\ntxs:      {len(txs)}\n"
        + "\n".join(
            f"  {t['txhash']}  {'ok' if t['code'] == 0 else 'code ' + str(t['code'])}" for t in txs
        )
    )
    if data["finalize_block_events"]:
        text += (
            f"\nblock events: {len(data['finalize_block_events'])} ("
            + ", ".join(sorted({e["type"] for e in data["finalize_block_events"]}))
            + ")"
        )
    out(args, data, text)
    return 0


def _proof_fields(acc: dict[str, Any]) -> dict[str, Any]:
    keys = ("proof", "proof_verified", "app_hash", "validator_set")
    return {k: acc[k] for k in keys if k in acc}


def cmd_query_balance(args: argparse.Namespace) -> int:
    acc = account_state(args, _client(args))
    data = {
        "address": args.address,
        "balance": acc["balance"],
        "denom": "uloco",
        "height": acc["height"],
        **_proof_fields(acc),
    }
    text = f"{acc['balance']} uloco ({fmt_loco(acc['balance'])}) at height {acc['height']}"
    out(args, data, text + proof_note(acc))
    return 0


def cmd_query_bank_balances(args: argparse.Namespace) -> int:
    """``query balance`` in the Cosmos SDK's shape (``simd query bank balances``): under -o json
    {"balances": [{"denom", "amount"}], "pagination"}, amounts as strings, no entry for a zero
    balance; plus the height and, with --prove, the proof fields of ``query account``."""
    acc = account_state(args, _client(args))
    bal = int(acc["balance"])
    data = {
        "balances": [{"denom": "uloco", "amount": str(bal)}] if bal else [],
        "pagination": {"next_key": None, "total": "0"},
        "height": acc["height"],
        **_proof_fields(acc),
    }
    text = f"{bal} uloco ({fmt_loco(bal)}) at height {acc['height']}"
    out(args, data, text + proof_note(acc))
    return 0


def cmd_query_rewards(args: argparse.Namespace) -> int:
    """Rewards paid to ADDR, from the block events CometBFT indexes: market payouts
    (``reward.paid``: participant, verifier, bounty) and validator rewards (``fee.distributed``:
    fees + block reward, one event per block; the most recent --limit blocks)."""

    from_bech32(args.address)
    rows: list[dict[str, Any]] = []
    matching: dict[str, int] = {}  # blocks with such a payout, and how many of them were read
    searched: dict[str, int] = {}
    with _client(args) as c:
        for etype in ("reward.paid", "fee.distributed"):
            q = f"{etype}.recipient='{args.address}'"
            res = c.call(
                "block_search",
                query=q,
                page="1",
                per_page=str(min(args.limit, 100)),
                order_by="desc",
            )
            # a node whose answer has no "blocks" (not a block_search answer) is an error, not
            # "nothing paid yet"; CometBFT sends [] for no match (null read as none too)
            blocks = res["blocks"] or []
            if not isinstance(blocks, list):
                raise TypeError(f"block_search answered blocks={type(blocks).__name__}, not a list")
            searched[etype] = len(blocks)
            matching[etype] = int(res.get("total_count", len(blocks)))
            for blk in blocks:
                h = int(blk["block"]["header"]["height"])
                br = c.call("block_results", height=str(h))
                for e in events_of(br.get("finalize_block_events")):
                    a = e["attributes"]
                    if e["type"] == etype and a.get("recipient") == args.address:
                        kind = a.get("payout", "validator")
                        where = (
                            f"job {a['job_id']} round {a['round']}"
                            if "job_id" in a
                            else "block reward + fees"
                        )
                        rows.append(
                            {"height": h, "kind": kind, "amount": int(a["amount"]), "source": where}
                        )
    rows.sort(key=lambda r: (-r["height"], r["kind"]))
    totals: dict[str, int] = {}
    for r in rows:
        totals[r["kind"]] = totals.get(r["kind"], 0) + r["amount"]
    data = {
        "address": args.address,
        "total": sum(totals.values()),
        "by_kind": totals,
        "payouts": rows,
        "blocks_matching": matching,
        "blocks_searched": searched,
        "complete": all(searched[k] >= matching[k] for k in matching),
    }
    text = "\n".join(
        [f"{'HEIGHT':>7s}  {'KIND':11s} {'AMOUNT (uloco)':>16s}  SOURCE"]
        + [f"{r['height']:>7d}  {r['kind']:11s} {r['amount']:>16d}  {r['source']}" for r in rows]
    )
    text += f"\ntotal {data['total']} uloco ({fmt_loco(data['total'])}): " + (
        ", ".join(f"{k} {v}" for k, v in sorted(totals.items())) or "nothing paid yet"
    )
    kinds = {"reward.paid": "job payouts", "fee.distributed": "validator rewards"}
    cut = [
        f"the {searched[k]} most recent of {matching[k]} blocks with {kinds[k]}"
        for k in matching
        if searched[k] < matching[k]
    ]
    if cut:  # the total is of the rows shown, not of everything ever paid
        text += f"\n(only {' and '.join(cut)} were read: the total covers those)"
    out(args, data, text)
    return 0


# ----------------------------------------------------------------------------- client config


def cmd_config_set(args: argparse.Namespace) -> int:

    cfg = client_config.set_value(Path(args.home), args.key, args.value)
    out(args, cfg, f"{args.key} = {cfg[args.key]} (in {client_config.path_of(Path(args.home))})")
    return 0


def cmd_config_get(args: argparse.Namespace) -> int:

    cfg = client_config.load(Path(args.home))
    if args.key:
        if args.key not in cfg:
            raise UsageError(
                f"{args.key} is not set in {client_config.path_of(Path(args.home))}: "
                f"`loconet config set {args.key} VALUE --home {args.home}`"
            )
        out(args, {args.key: cfg[args.key]}, cfg[args.key])
        return 0
    out(
        args,
        cfg,
        "\n".join(f"{k} = {v}" for k, v in cfg.items()) or "no client config (defaults apply)",
    )
    return 0


# ----------------------------------------------------------------------------- parsers


def _balance_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("address", metavar="ADDR")
    p.add_argument(
        "--height", type=HEIGHT, default=0, help="state after this block (default latest)"
    )
    p.add_argument(
        "--prove",
        action="store_true",
        help="fetch a Merkle proof and verify it against the next block header's app hash "
        "(as `query account --prove`)",
    )
    add_read_flags(p)


def register(root: Any, tx: Any, query: Any) -> None:
    _register_sign_broadcast(tx)
    _register_tx_queries(query)
    _register_balance_queries(query)
    _register_config(root)


def _register_sign_broadcast(tx: Any) -> None:
    """tx sign|broadcast: the offline half of --generate-only."""
    p = add_command(
        tx,
        "sign",
        "sign a tx made with --generate-only (offline with --chain-id and --sequence)",
        "loconet tx sign unsigned.json --from alice --home ~/.loconet > signed.json",
        cmd_tx_sign,
    )
    p.add_argument("file", metavar="FILE", help="the --generate-only JSON (- for stdin)")
    p.add_argument(
        "--from", dest="from_key", required=True, metavar="KEY", help="keyring key that signs"
    )
    p.add_argument("--home", required=True)
    p.add_argument("--chain-id", help="default: the file's, else the node's")
    p.add_argument(
        "--sequence",
        type=U64,
        help="the signer's account sequence (default: the file's, else the node's)",
    )
    p.add_argument(
        "--output-document", metavar="PATH", help="write the signed tx here instead of stdout"
    )
    add_node_flag(p)
    add_output_flag(p)  # the signed tx is JSON either way; -o json makes errors JSON too
    p = add_command(
        tx,
        "broadcast",
        "broadcast a signed tx (from `tx sign`) and wait for its block",
        "loconet tx broadcast signed.json --node http://127.0.0.1:26657",
        cmd_tx_broadcast,
    )
    p.add_argument("file", metavar="FILE", help="the `tx sign` JSON (- for stdin)")
    add_read_flags(p)


def _register_tx_queries(query: Any) -> None:
    """query tx|txs|block."""
    p = add_command(
        query,
        "tx",
        "a tx by hash: result, events, messages",
        "loconet query tx 9DC78738...037B -o json",
        cmd_query_tx,
    )
    p.add_argument("hash", metavar="HASH")
    add_read_flags(p)
    p = add_command(
        query,
        "txs",
        "search txs by their events (ANDed)",
        'loconet query txs --events "job.created.owner=loco1..." --events tx.signer=loco1...',
        cmd_query_txs,
    )
    p.add_argument(
        "--events",
        action="append",
        required=True,
        metavar="TYPE.KEY=VALUE",
        help="event condition (repeatable, or joined with &)",
    )
    p.add_argument("--page", type=uint_arg(32, lo=1), default=1, help="from 1 (default 1)")
    p.add_argument(
        "--limit", type=uint_arg(32, lo=1), default=30, help="txs per page, 1..100 (default 30)"
    )
    add_read_flags(p)
    p = add_command(
        query,
        "block",
        "a block: hash, time, proposer, app hash, its txs with results and events",
        "loconet query block 6",
        cmd_query_block,
    )
    p.add_argument(
        "height", metavar="HEIGHT", type=HEIGHT, nargs="?", default=0, help="default: the latest"
    )
    add_read_flags(p)


def _register_balance_queries(query: Any) -> None:
    """query balance|bank balances|rewards."""
    p = add_command(
        query,
        "balance",
        "the balance of an address in uloco (optionally with a verified Merkle proof)",
        "loconet query balance loco1... --prove",
        cmd_query_balance,
    )
    _balance_flags(p)
    bank = query.add_parser(
        "bank", help="bank queries, as the Cosmos SDK names them"
    ).add_subparsers(dest="bank_query", required=True, metavar="BANK_QUERY")
    p = add_command(
        bank,
        "balances",
        "the balances of an address, in the Cosmos SDK's JSON shape (balances: [{denom, "
        "amount}]); `query balance` in other words",
        "loconet query bank balances loco1... --prove -o json",
        cmd_query_bank_balances,
    )
    _balance_flags(p)
    p = add_command(
        query,
        "rewards",
        "rewards paid to an address: job payouts (participant, verifier, bounty) and "
        "validator rewards, from indexed block events",
        "loconet query rewards loco1... -o json",
        cmd_query_rewards,
    )
    p.add_argument("address", metavar="ADDR")
    p.add_argument(
        "--limit",
        type=uint_arg(32, lo=1),
        default=100,
        help="most recent blocks searched per kind (default 100, max 100)",
    )
    add_read_flags(p)


def _register_config(root: Any) -> None:
    """config set|get."""
    cfg = root.add_parser(
        "config", help="client config in HOME/config/client.toml: node, chain-id, output"
    ).add_subparsers(dest="config_cmd", required=True, metavar="CONFIG_COMMAND")
    p = add_command(
        cfg,
        "set",
        "set a client default (node, chain-id or output)",
        "loconet config set node tcp://127.0.0.1:26657 --home ~/.loconet",
        cmd_config_set,
    )
    p.add_argument("key", metavar="KEY", choices=["node", "chain-id", "output"])
    p.add_argument("value", metavar="VALUE")
    p.add_argument("--home", required=True)
    add_output_flag(p)
    p = add_command(
        cfg,
        "get",
        "print the client config, or one key",
        "loconet config get node --home ~/.loconet",
        cmd_config_get,
    )
    p.add_argument("key", metavar="KEY", nargs="?", choices=["node", "chain-id", "output"])
    p.add_argument("--home", required=True)
    add_output_flag(p)
