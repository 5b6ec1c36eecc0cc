"""EVM settlement commands (a CLI plugin: node/cli/main.py calls ``register``):

loconet tx settlement withdraw|set-key ...     loconet query checkpoint|claim ...
loconet evm deploy|claim|balance ...           loconet relayer run ...

web3 and eth_account take about a second to import, and ``loconet --help`` loads every command
module: they (and node/evm/'s modules built on web3) are imported by the commands that use them.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from abci_app.encoding import decode_msg
from abci_app.pb import settlement_pb2, tx_pb2
from abci_app.settlement import evm, keeper
from abci_app.settlement.keys import PARAMS_KEY, SIGNER_SET_KEY
from abci_app.settlement.params import params_from_json, params_to_json
from abci_app.settlement.queries import set_to_json
from node import safejson
from node.atomic import Held, hold
from node.cli.common import (
    U64,
    UsageError,
    add_command,
    add_output_flag,
    add_read_flags,
    add_signer_flags,
    add_tx_flags,
    out,
    parse_amount,
    positive_seconds,
    signing_key,
)
from node.cli.tx import broadcast
from node.client import settlement_key
from node.client.proofs import ProofInvalid, expected_chain_id, trust_of, verify_answer
from node.client.rpc import Client, RpcError
from node.client.units import fmt_loco
from node.evm.sign import owed_signature, proven_pending
from node.local.config import read_priv_validator_key


def _evm_address(text: str) -> bytes:
    try:
        raw = evm.parse_address(text)
    except ValueError as e:
        raise UsageError(f"{e} (e.g. 0x70997970C51812dc3A010C7d01b50e0d17dc79C8)") from None
    digits = text[2:]
    if (
        digits != digits.lower()
        and digits != digits.upper()
        and text[2:] != evm.to_checksum(raw)[2:]
    ):
        # EIP-55: mixed case is a checksum; a typo that breaks it sent the LOCO to an address
        # nobody holds (all-lower or all-upper carries no checksum and is taken as it is)
        raise UsageError(
            f"EVM address {text} fails its EIP-55 checksum (a mistyped character?): the "
            f"checksummed form of these digits is {evm.to_checksum(raw)}; check the address"
        )
    return raw


def _query(node: str, path: str, height: int = 0) -> Any:
    with Client(node) as c:
        qr = c.abci_query(path, height=height)
    if qr.code != 0:
        raise UsageError(f"query {path} failed: {qr.log}")
    return safejson.loads(qr.value)


def _proven_settlement(node: str, home: str | None) -> tuple[Any, str]:
    """``/settlement`` and the loconet chain id, its stored signer set checked as ``--prove``
    checks an answer (proof against the app hash of a header signed by >2/3 of the validators):
    the contract will trust exactly that set, for exactly that chain id, which the proven header
    must name (``--home``'s chain id when it has one, else the one the node reports). Before the
    first checkpoint no set is stored (the one shown is computed from staking) and nothing can
    be proven: said on stderr."""
    stored: list[bytes] = []

    def shown(s: dict[str, Any]) -> Any:
        # what the contract will be built from: the set, its keyless power, and (when the node
        # sent them) the params naming the deployment
        return (
            s["signer_set"],
            int(s.get("signer_set_keyless_power") or 0),
            s.get("params"),
        )

    def rederive(proven: dict[bytes, bytes | None]) -> Any:
        if SIGNER_SET_KEY not in proven:  # proven present or proven absent, never left out
            raise ProofInvalid("the node's proof does not cover the signer set")
        params: Any = s.get("params")
        if params is not None:
            if PARAMS_KEY not in proven:
                raise ProofInvalid("the node's proof does not cover the settlement params")
            raw_p = proven[PARAMS_KEY]
            params = params_to_json(
                decode_msg(settlement_pb2.Params, raw_p)
                if raw_p is not None
                else params_from_json({})
            )
        raw = proven[SIGNER_SET_KEY]
        if raw is None:  # not stored yet: nothing to check the set against
            return (s["signer_set"], int(s.get("signer_set_keyless_power") or 0), params)
        stored.append(raw)
        decoded = decode_msg(settlement_pb2.SignerSet, raw)
        return (set_to_json(decoded), decoded.keyless_power, params)

    with Client(node) as c:
        chain_id = expected_chain_id(home) or str(c.status()["node_info"]["network"])
        qr = c.abci_query("/settlement", prove=True)
        if qr.code != 0:
            raise UsageError(f"query /settlement failed: {qr.log}")
        s = safejson.loads(qr.value)
        try:
            verify_answer(c, qr, shown(s), rederive, chain_id=chain_id, trust=trust_of(home))
        except ProofInvalid as e:
            raise UsageError(
                f"the signer set's proof check failed: {e}: do not trust this node"
            ) from None
    if not stored:
        print(
            "note: no checkpoint yet, so the signer set is not stored and cannot be proven; "
            "deploy against a node you run",
            file=sys.stderr,
        )
    return s, chain_id


def _chain_id(node: str) -> str:
    with Client(node) as c:
        return str(c.status()["node_info"]["network"])


def _evm_key(text: str) -> Any:
    """--from-key: 0x-hex secret, or a file holding one (or a settlement_key.json)."""
    from eth_account import Account  # lazy: eth_account takes 0.6 s

    raw = text.strip()
    p = Path(raw)
    try:
        if not raw.startswith("0x") and p.exists():
            content = p.read_text().strip()
            # a settlement_key.json that is not JSON, or has no secret, was a traceback
            raw = str(json.loads(content)["secret"]) if content.startswith("{") else content
        return Account.from_key(raw if raw.startswith("0x") else "0x" + raw)
    except (ValueError, TypeError, KeyError):
        raise UsageError(
            "--from-key must be a 0x-prefixed 32-byte hex secret or a file holding one"
        ) from None


def _w3(url: str) -> Any:
    from web3 import Web3  # lazy: web3 takes 1 s

    w3 = Web3(Web3.HTTPProvider(url, request_kwargs={"timeout": 10}))
    try:
        _ = w3.eth.chain_id
    except Exception as e:  # noqa: BLE001 - any transport error: one line naming the fix
        raise UsageError(
            f"no EVM node answers at {url} ({type(e).__name__}): start one (e.g. `loconet testnet "
            "up --evm`) or fix --evm-rpc"
        ) from None
    return w3


def _deployment(path: str) -> Any:
    from node.evm.client import Deployment  # lazy: web3 takes 1 s

    try:
        return Deployment.load(Path(path))
    except ValueError as e:
        raise UsageError(str(e)) from None


# ----------------------------------------------------------------------------- tx / query


def cmd_withdraw(args: argparse.Namespace) -> int:
    msg = settlement_pb2.MsgWithdrawToEvm(
        evm_address=_evm_address(args.evm_address), amount=parse_amount(args.amount)
    )
    return broadcast(args, signing_key(args), [tx_pb2.Msg(withdraw_to_evm=msg)])


def cmd_set_key(args: argparse.Namespace) -> int:
    home = Path(args.validator_home)
    pv = home / "config" / "priv_validator_key.json"
    if not pv.exists():
        raise UsageError(f"{pv} not found: --validator-home must be the validator node's home")
    cons = read_priv_validator_key(pv)[0]
    try:
        secret = settlement_key.load(home)
    except ValueError as e:  # a corrupt settlement_key.json: one line, not a traceback
        raise UsageError(str(e)) from None
    if secret is None:
        settlement_key.create(home)
        secret = settlement_key.load(home)
        assert secret is not None
        print(
            f"created {settlement_key.path(home)}; restart the node so it signs checkpoints",
            file=sys.stderr,
        )
    chain_id = args.chain_id or _chain_id(args.node)
    addr = evm.address_of_private_key(secret)
    sig = evm.sign_digest(secret, keeper.key_proof_digest(chain_id, cons))
    msg = settlement_pb2.MsgSetSettlementKey(validator=cons, evm_address=addr, signature=sig)
    return broadcast(
        args,
        signing_key(args),
        [tx_pb2.Msg(set_settlement_key=msg)],
        extra={"evm_address": "0x" + addr.hex()},
    )


def cmd_sign_pending(args: argparse.Namespace) -> int:
    """Sign the pending checkpoint by transaction if this validator's key is a member that has
    not signed it; with --watch, check again every N seconds (until interrupted)."""
    home = Path(args.validator_home)
    try:
        secret = settlement_key.load(home)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if secret is None:
        raise UsageError(
            f"{settlement_key.path(home)} not found: register a key first (tx settlement set-key)"
        )
    # what is signed must be the chain's own checkpoint: read as proven state, against headers
    # the validator's own genesis trusts (a signature over a made-up one is slashable as forged)
    chain_id = args.chain_id or expected_chain_id(str(home)) or _chain_id(args.node)
    try:
        trust = trust_of(str(home))
    except ProofInvalid as e:
        raise UsageError(str(e)) from None
    signing = signing_key(args)
    while True:
        try:
            with Client(args.node) as c:
                pending, params = proven_pending(c, chain_id, trust)
        except ProofInvalid as e:
            # never retried quietly: a node whose answers do not prove is lying or not ours
            raise UsageError(
                f"the node's pending checkpoint failed its proof check ({e}): nothing was "
                "signed; point --node at your own validator node"
            ) from None
        except (RpcError, OSError, ValueError, KeyError) as e:
            if not args.watch:
                raise
            print(f"sign-pending: node unreachable ({e}); retrying", file=sys.stderr)
            pending = None
        sig = None if pending is None else owed_signature(pending, params, chain_id, secret)
        if sig is not None:
            assert pending is not None
            msg = settlement_pb2.MsgSignCheckpoint(number=int(pending["number"]), signature=sig)
            rc = broadcast(
                args, signing, [tx_pb2.Msg(sign_checkpoint=msg)], extra={"number": msg.number}
            )
            if not args.watch:
                return rc
        elif not args.watch:
            print("nothing to sign: no pending checkpoint this key owes a signature")
            return 0
        time.sleep(args.watch)


def _checkpoint_text(cp: dict[str, Any]) -> str:
    state = f"final at height {cp['final_height']}" if cp["final"] else "pending"
    if cp.get("superseded_by"):
        state = f"superseded by checkpoint {cp['superseded_by']} (never final, never posted)"
    if cp.get("valset_update"):
        state += "; a valset update (moves the signer set only)"
    return "\n".join(
        [
            f"checkpoint {cp['number']}: height {cp['height']}, {state}",
            f"app hash:      {cp['app_hash']}",
            f"rewards root:  {cp['rewards_root']}",
            f"signed:        {cp['signed_power']} of {cp['total_power']} power "
            f"({len(cp['signatures'])} of {len(cp['signers'])} signers"
            + (
                f"; {cp['keyless_power']} of the power has no settlement key"
                if cp.get("keyless_power")
                else ""
            )
            + ")",
            f"set hash:      {cp['set_hash']}"
            + ("" if cp["next_set_hash"] == cp["set_hash"] else f" -> next {cp['next_set_hash']}"),
        ]
    )


def cmd_query_checkpoint(args: argparse.Namespace) -> int:
    cp = _query(args.node, f"/checkpoint/{args.number}", args.height)
    out(args, cp, _checkpoint_text(cp))
    return 0


def cmd_query_claim(args: argparse.Namespace) -> int:
    c = _query(args.node, f"/claim/0x{_evm_address(args.evm_address).hex()}", args.height)
    out(
        args,
        c,
        f"{c['evm_address']}: {c['cumulative']} uloco ({fmt_loco(c['cumulative'])}) withdrawn in "
        f"total; proof of {len(c['proof'])} hashes against root {c['rewards_root']}",
    )
    return 0


# ----------------------------------------------------------------------------- evm


def cmd_evm_deploy(args: argparse.Namespace) -> int:
    from node.evm import client  # lazy: web3 takes 1 s

    s, chain_id = _proven_settlement(args.node, getattr(args, "home", None))
    if not s["signer_set"]:
        raise UsageError(
            "no validator has a settlement key yet: register one with `loconet tx settlement "
            "set-key`"
        )
    params = s["params"]
    w3 = _w3(args.evm_rpc)
    if int(w3.eth.chain_id) != int(params["evm_chain_id"]):
        raise UsageError(
            f"loconet signs checkpoints for EVM chain {params['evm_chain_id']}, but --evm-rpc is "
            f"chain {w3.eth.chain_id}: deploy on the chain the genesis names (settlement params "
            "evm_chain_id)"
        )
    signers, powers = client.set_of(s["signer_set"])
    keyless = int(s.get("signer_set_keyless_power") or 0)
    try:
        d = client.deploy(
            w3,
            _evm_key(args.from_key),
            chain_id,
            signers,
            powers,
            int(s["latest_final"]),
            keyless_power=keyless,
            guardian=_evm_checksum(args.guardian) if args.guardian else None,
            mint_limit=parse_amount(args.mint_limit),
            mint_window=int(args.mint_window),
            expect_address=evm.parse_address(params["evm_contract"]),
        )
    except ValueError as e:
        raise UsageError(str(e)) from None
    d.save(Path(args.out))
    out(
        args,
        {"deployment": str(args.out), **d.__dict__},
        f"Checkpoints        {d.checkpoints}\n"
        f"RewardsDistributor {d.distributor}\n"
        f"LocoToken          {d.token}\n"
        f"signer set of {len(signers)} validators (total power {sum(powers) + keyless}, "
        f"{keyless} of it without a settlement key), next checkpoint {d.start_number + 1}\n"
        f"guardian {d.guardian} (may pause); mints at most {fmt_loco(d.mint_limit)} per "
        f"{d.mint_window} s\n"
        f"deployment written to {args.out}",
    )
    return 0


def _evm_checksum(text: str) -> str:
    return evm.to_checksum(_evm_address(text))


def cmd_evm_claim(args: argparse.Namespace) -> int:
    """Claim against the contract's newest root. When the node no longer serves the state of
    that root's height (the relayer lags past the node's state history), or ``--relay`` is given,
    this command posts the newest final checkpoints itself first (the claimant pays their gas):
    a claim never depends on how far a relayer lags."""
    from web3 import Web3  # lazy: web3 takes 1 s

    from node.evm import client  # lazy: web3 takes 1 s

    d = _deployment(args.deployment)
    w3 = _w3(args.evm_rpc)
    sender = _evm_key(args.from_key)
    account = _evm_address(args.account) if args.account else bytes.fromhex(sender.address[2:])
    cps, dist = client.checkpoints(w3, d), client.distributor(w3, d)
    number, height, claim = _newest_claim(cps, args.node, account)
    if claim is None or args.relay:
        _post_checkpoints_first(args, w3, d, sender)
        number, height, claim = _newest_claim(cps, args.node, account)
    if claim is None:
        raise UsageError(
            "the contract holds no checkpoint whose state the node still serves: run the relayer "
            "(`loconet relayer run`) or retry with --relay"
        )
    root = cps.functions.rewardsRoot().call()
    if bytes.fromhex(claim["rewards_root"]) != root:
        raise UsageError(
            f"loconet's rewards root at height {height} does not match the contract's: is --node "
            "the chain of this deployment?"
        )
    holder = Web3.to_checksum_address(account)
    already = int(dist.functions.claimed(holder).call())
    if claim["cumulative"] <= already:
        raise UsageError(
            f"nothing to claim: {already} uloco already claimed of {claim['cumulative']} proven "
            f"at height {height}; a newer withdrawal becomes claimable after the next checkpoint "
            "is posted"
        )
    r = client.send(w3, dist.functions.claim(*client.claim_args(claim, number)), sender)
    paid = int(dist.functions.claimed(holder).call()) - already
    bal = int(client.token(w3, d).functions.balanceOf(holder).call())
    data = {
        "account": holder,
        "paid": paid,
        "cumulative": claim["cumulative"],
        "left_by_rate_limit": claim["cumulative"] - already - paid,
        "balance": bal,
        "tx": r["transactionHash"].hex(),
        "gas_used": r["gasUsed"],
        "checkpoint": number,
        "checkpoint_height": height,
    }
    out(args, data, _claim_text(data))
    return 0


def _newest_claim(cps: Any, node: str, account: bytes) -> tuple[int, int, Any]:
    """(number, height, the account's claim at that height) of the contract's newest
    checkpoint; the claim is None before any checkpoint, or when the node no longer serves that
    height's state."""
    number = int(cps.functions.lastNumber().call())
    height = int(cps.functions.lastHeight().call())
    if height == 0:
        return number, height, None
    try:
        return number, height, _query(node, f"/claim/0x{account.hex()}", height)
    except UsageError as e:
        if "nothing was withdrawn" in str(e):
            raise
        return number, height, None  # that height's state is gone from the node


def _post_checkpoints_first(args: argparse.Namespace, w3: Any, d: Any, sender: Any) -> None:
    """One relayer pass paid by the claimant (its own journal beside the deployment file), so
    the contract holds a checkpoint whose state the node still serves."""
    from node.evm.relayer import LoconetSource, Relayer  # lazy: web3 takes 1 s

    journal = Path(str(args.deployment) + f".claim-{sender.address}.json")
    try:
        posted = Relayer(w3, d, sender, LoconetSource(args.node), journal).step()
    except Exception as e:  # noqa: BLE001 - either node, or a reverted post: one line
        raise UsageError(
            f"could not post the newest checkpoint first ({type(e).__name__}: {e}): check "
            "--node and --evm-rpc, or run the relayer"
        ) from None
    if posted:
        print(f"posted checkpoints {', '.join(str(p.number) for p in posted)}", file=sys.stderr)


def _claim_text(c: dict[str, Any]) -> str:
    """``evm claim``'s text answer, from its JSON one."""
    paid, bal, left = c["paid"], c["balance"], c["left_by_rate_limit"]
    return (
        f"claimed {paid} ({fmt_loco(paid)}) for {c['account']} against "
        f"checkpoint {c['checkpoint']} (height {c['checkpoint_height']})\n"
        f"tx 0x{c['tx'].removeprefix('0x')} (gas {c['gas_used']}); LOCO balance "
        f"now {bal} ({fmt_loco(bal)})"
        + (
            f"\n{left} ({fmt_loco(left)}) is left by the contract's mint rate limit: claim again "
            "after its window"
            if left
            else ""
        )
    )


def cmd_evm_address(args: argparse.Namespace) -> int:
    """The contract address a deployer's CREATE with a nonce gets: what a genesis writes as
    ``settlement.params.evm_contract`` before the contract exists."""
    addr = evm.to_checksum(evm.create_address(_evm_address(args.deployer), args.nonce))
    out(
        args,
        {
            "deployer": evm.to_checksum(_evm_address(args.deployer)),
            "nonce": args.nonce,
            "address": addr,
        },
        f"{addr}  (settlement.params.evm_contract for a deploy from {args.deployer} at nonce "
        f"{args.nonce})",
    )
    return 0


def cmd_evm_report_forged(args: argparse.Namespace) -> int:
    """Scan the contract's accepted checkpoints; report each that loconet never made
    (MsgReportForgedCheckpoint: its signers are slashed, jailed and tombstoned)."""
    from node.evm.relayer import LoconetSource  # lazy: web3 takes 1 s
    from node.evm.watch import forged_checkpoints  # lazy: web3 takes 1 s

    d = _deployment(args.deployment)
    w3 = _w3(args.evm_rpc)
    reports = forged_checkpoints(w3, d, LoconetSource(args.node), from_block=int(d.block))
    if not reports:
        out(args, {"forged": []}, "every checkpoint the contract accepted is loconet's own")
        return 0
    for r in reports:
        print(
            f"checkpoint {r.number} on the contract is not loconet's: reporting its "
            f"{len(r.signatures)} signatures",
            file=sys.stderr,
        )
    return broadcast(
        args,
        signing_key(args),
        [tx_pb2.Msg(report_forged_checkpoint=r) for r in reports],
        extra={"forged": [r.number for r in reports]},
    )


def cmd_evm_pause(args: argparse.Namespace) -> int:
    """The guardian stops (or, with ``unpause``, restarts) checkpoints and claims."""
    from node.evm import client  # lazy: web3 takes 1 s

    d = _deployment(args.deployment)
    w3 = _w3(args.evm_rpc)
    sender = _evm_key(args.from_key)
    cps = client.checkpoints(w3, d)
    guardian = str(cps.functions.guardian().call())
    if guardian.lower() != sender.address.lower():
        raise UsageError(
            f"only the guardian {guardian} may {args.evm_cmd}; --from-key is {sender.address}"
        )
    fn = cps.functions.pause() if args.evm_cmd == "pause" else cps.functions.unpause()
    r = client.send(w3, fn, sender)
    paused = bool(cps.functions.paused().call())
    out(
        args,
        {"paused": paused, "tx": r["transactionHash"].hex(), "guardian": guardian},
        f"{d.distributor}: checkpoints and claims {'paused' if paused else 'running'} "
        f"(tx 0x{r['transactionHash'].hex().removeprefix('0x')})",
    )
    return 0


def cmd_evm_balance(args: argparse.Namespace) -> int:
    from web3 import Web3  # lazy: web3 takes 1 s

    from node.evm import client  # lazy: web3 takes 1 s

    d = _deployment(args.deployment)
    w3 = _w3(args.evm_rpc)
    a = Web3.to_checksum_address(_evm_address(args.address))
    bal = int(client.token(w3, d).functions.balanceOf(a).call())
    claimed = int(client.distributor(w3, d).functions.claimed(a).call())
    n = int(client.checkpoints(w3, d).functions.lastNumber().call())
    out(
        args,
        {"address": a, "balance": bal, "claimed": claimed, "last_checkpoint": n},
        f"{a}: {bal} LOCO units ({fmt_loco(bal)}); claimed in total {claimed}; contract at "
        f"checkpoint {n}",
    )
    return 0


def cmd_relayer_run(args: argparse.Namespace) -> int:
    from node.evm.relayer import LoconetSource, Relayer  # lazy: web3 takes 1 s

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s relayer %(message)s", stream=sys.stdout, force=True
    )
    for noisy in ("httpx", "httpcore", "web3", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    d = _deployment(args.deployment)
    journal = Path(args.journal or (str(args.deployment) + ".relayer.json"))
    try:  # two relayers on one journal both posted each checkpoint (and overwrote its record)
        hold(Path(str(journal) + ".lock"))
    except Held as e:
        raise UsageError(
            f"another relayer (pid {e.pid}) runs with the journal {journal}: stop it first, or "
            "give this one its own --journal (it still posts each checkpoint the contract lacks)"
        ) from None
    w3 = _w3(args.evm_rpc)
    r = Relayer(w3, d, _evm_key(args.from_key), LoconetSource(args.node), journal)
    if args.once:
        posted = r.step()
        out(
            args,
            [p.__dict__ for p in posted],
            "\n".join(f"posted checkpoint {p.number}: {p.tx_hash} gas {p.gas_used}" for p in posted)
            or "nothing to post",
        )
        return 0
    r.run(poll=args.poll, until=args.until)
    return 0


# ----------------------------------------------------------------------------- parser


def _evm_flags(p: argparse.ArgumentParser, deployment: bool = True) -> None:
    p.add_argument(
        "--evm-rpc",
        default="http://127.0.0.1:8545",
        help="EVM JSON-RPC URL (default http://127.0.0.1:8545, anvil's)",
    )
    if deployment:
        p.add_argument(
            "--deployment", required=True, help="deployment file written by `loconet evm deploy`"
        )


def register(root_sub: Any, tx_sub: Any, query_sub: Any) -> None:
    _register_settlement_txs(tx_sub)
    _register_settlement_queries(query_sub)
    ev = root_sub.add_parser(
        "evm", help="the EVM side of settlement: contracts, claims, balances"
    ).add_subparsers(dest="evm_cmd", required=True, metavar="EVM_COMMAND")
    _register_evm_deploy(ev)
    _register_evm_guard(ev)
    _register_evm_claims(ev)
    _register_relayer(root_sub)


def _register_settlement_txs(tx_sub: Any) -> None:
    """tx settlement withdraw|set-key|sign-pending."""
    st = tx_sub.add_parser(
        "settlement", help="withdrawals to the EVM chain, settlement keys"
    ).add_subparsers(dest="settlement_cmd", required=True, metavar="SETTLEMENT_COMMAND")
    p = add_command(
        st,
        "withdraw",
        "move LOCO into the settlement escrow, claimable as ERC-20 by an EVM address after the "
        "next checkpoint",
        "loconet tx settlement withdraw 0x70997970C51812dc3A010C7d01b50e0d17dc79C8 5loco --from "
        "validator0 --home .loconet-testnet",
        cmd_withdraw,
    )
    p.add_argument("evm_address", metavar="EVM_ADDRESS")
    p.add_argument("amount", metavar="AMOUNT", help="5loco or 5000000uloco")
    add_signer_flags(p, "keyring key that pays")
    p = add_command(
        st,
        "set-key",
        "register the validator's settlement key (HOME/config/settlement_key.json, created if "
        "missing) with a proof of possession; where the chain runs settlement a validator enters "
        "the set only once this is done (after create-validator; restart the node after it)",
        "loconet tx settlement set-key --validator-home ~/.loconet-node4 --from alice --home "
        "~/.loconet",
        cmd_set_key,
    )
    p.add_argument(
        "--validator-home",
        required=True,
        help="the validator node's home (priv_validator_key.json, settlement_key.json)",
    )
    add_signer_flags(p, "the validator's operator key")
    p = add_command(
        st,
        "sign-pending",
        "sign the pending checkpoint by transaction (MsgSignCheckpoint) if this validator's "
        "settlement key is a member that has not signed it (its vote extension missed it); the "
        "checkpoint is read as proven state, checked against --validator-home's genesis",
        "loconet tx settlement sign-pending --validator-home ~/.loconet-node4 --from alice "
        "--watch 5 --home ~/.loconet",
        cmd_sign_pending,
    )
    p.add_argument(
        "--validator-home", required=True, help="the validator node's home (settlement_key.json)"
    )
    p.add_argument("--from", dest="from_key", metavar="KEY", help="keyring key that pays the fee")
    p.add_argument(
        "--watch",
        type=positive_seconds,
        default=0,
        metavar="SECONDS",
        help="keep checking every SECONDS (a validator-side loop); default: once",
    )
    add_tx_flags(p)


def _register_settlement_queries(query_sub: Any) -> None:
    """query checkpoint|claim."""
    p = add_command(
        query_sub,
        "checkpoint",
        "a settlement checkpoint: N, latest (newest final) or pending",
        "loconet query checkpoint latest -o json",
        cmd_query_checkpoint,
    )
    p.add_argument("number", metavar="N|latest|pending")
    add_read_flags(p, height=True)
    p = add_command(
        query_sub,
        "claim",
        "cumulative withdrawals to an EVM address and its Merkle proof (at --height: a "
        "checkpoint's)",
        "loconet query claim 0x70997970C51812dc3A010C7d01b50e0d17dc79C8 --height 40",
        cmd_query_claim,
    )
    p.add_argument("evm_address", metavar="EVM_ADDRESS")
    add_read_flags(p, height=True)


def _register_evm_deploy(ev: Any) -> None:
    """evm deploy."""
    p = add_command(
        ev,
        "deploy",
        "deploy Checkpoints, RewardsDistributor and LocoToken with loconet's current signer set",
        "loconet evm deploy --evm-rpc http://127.0.0.1:8545 --from-key 0xac09...ff80 --out "
        "deployment.json",
        cmd_evm_deploy,
    )
    _evm_flags(p, deployment=False)
    p.add_argument(
        "--from-key", required=True, help="EVM deployer key: 0x-hex secret or a file holding it"
    )
    p.add_argument(
        "--out",
        default="deployment.json",
        help="deployment file to write (default deployment.json)",
    )
    p.add_argument(
        "--guardian",
        help="EVM address that may pause checkpoints and claims (default: the deployer)",
    )
    p.add_argument(
        "--mint-limit",
        default="100000loco",
        help="most LOCO all claims together may mint per window (default 100000loco)",
    )
    p.add_argument(
        "--mint-window",
        type=U64,
        default=3600,
        help="seconds of the mint rate limit's window (default 3600)",
    )
    add_read_flags(p)


def _register_evm_guard(ev: Any) -> None:
    """evm report-forged|pause|unpause: the watchtower and the guardian."""
    p = add_command(
        ev,
        "report-forged",
        "the watchtower: report every checkpoint the contract accepted that loconet never made "
        "(its signers are slashed, jailed and tombstoned)",
        "loconet evm report-forged --deployment deployment.json --evm-rpc http://127.0.0.1:8545 "
        "--from alice --home ~/.loconet",
        cmd_evm_report_forged,
    )
    _evm_flags(p)
    add_signer_flags(p, "keyring key that pays the fee")
    for verb, what in (
        ("pause", "stop checkpoints and claims (the guardian only; nothing else is in its power)"),
        ("unpause", "let checkpoints and claims run again (the guardian only)"),
    ):
        p = add_command(
            ev,
            verb,
            what,
            f"loconet evm {verb} --deployment deployment.json --from-key guardian.key",
            cmd_evm_pause,
        )
        _evm_flags(p)
        p.add_argument("--from-key", required=True, help="the guardian's EVM key")
        add_output_flag(p)


def _register_evm_claims(ev: Any) -> None:
    """evm address|claim|balance."""
    p = add_command(
        ev,
        "address",
        "the address `evm deploy` from DEPLOYER at NONCE will get: the genesis names it in "
        "settlement.params.evm_contract before it exists",
        "loconet evm address 0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266 --nonce 0",
        cmd_evm_address,
    )
    p.add_argument("deployer", metavar="DEPLOYER")
    p.add_argument("--nonce", type=U64, default=0, help="the deployer's nonce at the deploy")
    add_output_flag(p)
    p = add_command(
        ev,
        "claim",
        "claim the LOCO withdrawn to an EVM address, with the proof fetched from loconet",
        "loconet evm claim --deployment deployment.json --from-key 0x5de4...a1 --node http://127.0.0.1:26657",
        cmd_evm_claim,
    )
    _evm_flags(p)
    p.add_argument(
        "--from-key", required=True, help="EVM key that sends (and, without --account, receives)"
    )
    p.add_argument(
        "--account",
        help="claim for this EVM address instead (anyone may send a claim; the tokens go to the "
        "account)",
    )
    p.add_argument(
        "--relay",
        action="store_true",
        help="post the newest final checkpoints first (done anyway when the contract's newest is "
        "older than the node's state history)",
    )
    add_read_flags(p)
    p = add_command(
        ev,
        "balance",
        "LOCO ERC-20 balance and claimed total of an EVM address",
        "loconet evm balance 0x70997970C51812dc3A010C7d01b50e0d17dc79C8 --deployment "
        "deployment.json",
        cmd_evm_balance,
    )
    p.add_argument("address", metavar="EVM_ADDRESS")
    _evm_flags(p)
    add_output_flag(p)


def _register_relayer(root_sub: Any) -> None:
    """relayer run."""
    rl = root_sub.add_parser(
        "relayer", help="post loconet checkpoints to the EVM contract"
    ).add_subparsers(dest="relayer_cmd", required=True, metavar="RELAYER_COMMAND")
    p = add_command(
        rl,
        "run",
        "post every final checkpoint to the Checkpoints contract (resumes after a restart "
        "without double posting)",
        "loconet relayer run --evm-rpc http://127.0.0.1:8545 --deployment deployment.json "
        "--from-key 0x59c6...690d",
        cmd_relayer_run,
    )
    _evm_flags(p)
    p.add_argument("--from-key", required=True, help="EVM key that pays for the submissions")
    p.add_argument(
        "--poll", type=positive_seconds, default=1.0, help="seconds between passes (default 1)"
    )
    p.add_argument(
        "--until",
        type=U64,
        default=None,
        help="exit once the contract holds this checkpoint number",
    )
    p.add_argument("--once", action="store_true", help="one pass, then exit")
    p.add_argument("--journal", help="in-flight tx journal (default: DEPLOYMENT.relayer.json)")
    add_read_flags(p)
