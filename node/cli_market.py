"""``loconet tx provider|job|round ...`` and ``loconet query provider|providers|job|jobs|round|rounds|market-params``
(a CLI plugin: node/cli.py calls ``register``).

The ``build_*`` functions turn plain values into messages; the provider and verifier workers
call the same functions, so the CLI and the workers sign identical messages."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from node.cli import (
    UsageError,
    add_command,
    add_node_flag,
    add_output_flag,
    broadcast,
    fmt_loco,
    out,
    parse_amount,
)

# ----------------------------------------------------------------------------- message builders


def _hex32(text: str, what: str) -> bytes:
    try:
        raw = bytes.fromhex(text.strip().removeprefix("0x"))
    except ValueError:
        raw = b""
    if len(raw) != 32:
        raise UsageError(f"{what} must be 64 hex characters (a sha256), got {text!r}")
    return raw


def parse_gpu(text: str) -> Any:
    """``H100:8:81920`` -> GpuSpec(model, count, memory MiB)."""
    from abci_app.pb import providers_pb2

    parts = text.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        raise UsageError(f"bad --gpu {text!r}: write MODEL:COUNT:MEMORY_MIB, e.g. H100:8:81920")
    return providers_pb2.GpuSpec(model=parts[0], count=int(parts[1]), memory_mib=int(parts[2]))


def build_register_provider(bond: int, gpus: Sequence[str], throughput: int, region: str, endpoint: str) -> Any:
    from abci_app.pb import providers_pb2, tx_pb2

    return tx_pb2.Msg(register_provider=providers_pb2.MsgRegisterProvider(
        bond=bond, hardware=[parse_gpu(g) for g in gpus], throughput_tokens_per_sec=throughput, region=region,
        endpoint=endpoint))


def build_update_provider(add_bond: int = 0, gpus: Sequence[str] = (), throughput: int = 0, region: str = "", endpoint: str = "") -> Any:
    from abci_app.pb import providers_pb2, tx_pb2

    return tx_pb2.Msg(update_provider=providers_pb2.MsgUpdateProvider(
        add_bond=add_bond, hardware=[parse_gpu(g) for g in gpus], throughput_tokens_per_sec=throughput,
        region=region, endpoint=endpoint))


def build_exit_provider() -> Any:
    from abci_app.pb import providers_pb2, tx_pb2

    return tx_pb2.Msg(exit_provider=providers_pb2.MsgExitProvider())


def build_create_job(d: dict[str, Any]) -> Any:
    """From a dict shaped like ``/job`` JSON's ``spec`` plus ``rounds``, ``reward_per_round`` and
    ``verifier_reward_per_round`` (hashes hex, windows as {commit, reveal, verdict, attest})."""
    from abci_app.pb import jobs_pb2, tx_pb2

    try:
        w = d["windows"]
        spec = jobs_pb2.JobSpec(
            model=jobs_pb2.ModelConfig(**{k: int(v) for k, v in d["model"].items()}),
            initial_model_hash=_hex32(d["initial_model_hash"], "initial_model_hash"),
            dataset_id=_hex32(d["dataset_id"], "dataset_id"),
            inner_steps=int(d["inner_steps"]), trace_interval=int(d["trace_interval"]),
            compression_policy=str(d["compression_policy"]),
            compression_params=[jobs_pb2.CompressionParam(key=k, value=int(v)) for k, v in sorted(d.get("compression_params", {}).items())],
            participants_per_round=int(d["participants_per_round"]), num_shards=int(d["num_shards"]),
            tokens_per_step=int(d["tokens_per_step"]),
            commit_blocks=int(w["commit"]), reveal_blocks=int(w["reveal"]), verdict_blocks=int(w["verdict"]),
            attest_blocks=int(w["attest"]), min_reputation=int(d.get("min_reputation", 0)),
            min_stake=int(d.get("min_stake", 0)), challenge_bps=int(d["challenge_bps"]),
            verifiers_per_challenge=int(d["verifiers_per_challenge"]),
        )
        return tx_pb2.Msg(create_job=jobs_pb2.MsgCreateJob(
            spec=spec, rounds=int(d["rounds"]), reward_per_round=int(d["reward_per_round"]),
            verifier_reward_per_round=int(d.get("verifier_reward_per_round", 0))))
    except KeyError as e:
        raise UsageError(f"job spec is missing {e.args[0]!r}") from None
    except (TypeError, ValueError) as e:
        raise UsageError(f"bad job spec: {e}") from None


def build_cancel_job(job_id: int) -> Any:
    from abci_app.pb import jobs_pb2, tx_pb2

    return tx_pb2.Msg(cancel_job=jobs_pb2.MsgCancelJob(job_id=job_id))


def build_submit_update(job_id: int, round_: int, *, base_model: bytes, update_root: bytes, payload_size: int,
                        trace_root: bytes, tokens: int, loss_before: int, loss_after: int, blob: str,
                        update_binding_proof: Sequence[bytes] = (), trace_binding_proof: Sequence[bytes] = ()) -> Any:
    from abci_app.pb import jobs_pb2, tx_pb2

    return tx_pb2.Msg(submit_update=jobs_pb2.MsgSubmitUpdate(
        job_id=job_id, round=round_, base_model_hash=base_model, update_root=update_root, payload_size=payload_size,
        trace_root=trace_root, tokens_processed=tokens, loss_before_mnats=loss_before, loss_after_mnats=loss_after,
        blob_location=blob, update_binding_proof=list(update_binding_proof), trace_binding_proof=list(trace_binding_proof)))


def bound_trace_leaves(provider: bytes, job_id: int, round_: int, base_model: bytes, trace: Sequence[bytes]) -> list[bytes]:
    """Leaf data of a bound trace tree: binding_leaf(b"trace", provider, job, round, base), then
    the state hashes (entry i is leaf i + 1). Its root is the trace_root the chain accepts."""
    from abci_app.merkle import binding_leaf

    return [binding_leaf(b"trace", provider, job_id, round_, base_model)] + list(trace)


def bound_update_leaves(provider: bytes, job_id: int, round_: int, base_model: bytes, payload: bytes) -> list[bytes]:
    """Leaf data of a bound update tree: binding_leaf(b"update", ...), then the 1 MiB chunks."""
    from abci_app.merkle import binding_leaf, chunk_bytes

    return [binding_leaf(b"update", provider, job_id, round_, base_model)] + chunk_bytes(payload)


def build_reveal_from_trace(job_id: int, round_: int, segment: int, trace: Sequence[bytes], start_location: str,
                            end_location: str, *, provider: bytes, base_model: bytes) -> Any:
    """Reveal trace entries ``segment`` and ``segment+1`` with their Merkle proofs (abci_app.merkle)
    in the provider's bound trace: they are leaves ``segment+1`` and ``segment+2`` (leaf 0 is the
    binding leaf)."""
    from abci_app.merkle import merkle_proof
    from abci_app.pb import jobs_pb2, tx_pb2

    if not 0 <= segment < len(trace) - 1:
        raise UsageError(f"segment {segment} is outside the trace's {len(trace) - 1} segments")
    leaves = bound_trace_leaves(provider, job_id, round_, base_model, trace)
    return tx_pb2.Msg(reveal_segment=jobs_pb2.MsgRevealSegment(
        job_id=job_id, round=round_, segment=segment, start_state_hash=trace[segment], end_state_hash=trace[segment + 1],
        start_proof=merkle_proof(leaves, segment + 1), end_proof=merkle_proof(leaves, segment + 2),
        start_location=start_location, end_location=end_location))


def build_verdict(job_id: int, round_: int, target: bytes, valid: bool, quality: int) -> Any:
    from abci_app.pb import jobs_pb2, tx_pb2

    return tx_pb2.Msg(verdict=jobs_pb2.MsgVerdict(job_id=job_id, round=round_, target=target, valid=valid, quality=quality))


def build_attest(job_id: int, round_: int, model_hash: bytes) -> Any:
    from abci_app.pb import jobs_pb2, tx_pb2

    return tx_pb2.Msg(attest_model=jobs_pb2.MsgAttestModel(job_id=job_id, round=round_, model_hash=model_hash))


def read_trace(path: str) -> list[bytes]:
    """A trace file: JSON list of the 64-hex state hashes (steps 0, k, ..., H)."""
    try:
        items = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot read trace file {path}: {e}") from None
    if not isinstance(items, list) or len(items) < 2:
        raise UsageError(f"{path}: a trace is a JSON list of at least 2 hex state hashes")
    return [_hex32(str(x), f"{path} entry") for x in items]


# ----------------------------------------------------------------------------- tx commands


def cmd_provider_register(a: argparse.Namespace) -> int:
    return broadcast(a, a.from_key, [build_register_provider(parse_amount(a.bond), a.gpu, a.throughput, a.region, a.endpoint)])


def cmd_provider_update(a: argparse.Namespace) -> int:
    add = parse_amount(a.add_bond) if a.add_bond else 0
    return broadcast(a, a.from_key, [build_update_provider(add, a.gpu or (), a.throughput, a.region, a.endpoint)])


def cmd_provider_exit(a: argparse.Namespace) -> int:
    return broadcast(a, a.from_key, [build_exit_provider()])


def cmd_job_create(a: argparse.Namespace) -> int:
    d: dict[str, Any] = {}
    if a.spec:
        try:
            d = json.loads(Path(a.spec).read_text())
        except (OSError, ValueError) as e:
            raise UsageError(f"cannot read --spec {a.spec}: {e}") from None
    flags = {
        "rounds": a.rounds, "reward_per_round": parse_amount(a.reward_per_round) if a.reward_per_round else None,
        "verifier_reward_per_round": parse_amount(a.verifier_reward) if a.verifier_reward else None,
        "initial_model_hash": a.initial_model, "dataset_id": a.dataset_id, "inner_steps": a.inner_steps,
        "trace_interval": a.trace_interval, "compression_policy": a.compression, "participants_per_round": a.participants,
        "num_shards": a.shards, "tokens_per_step": a.tokens_per_step, "min_reputation": a.min_reputation,
        "min_stake": parse_amount(a.min_stake) if a.min_stake else None, "challenge_bps": a.challenge_bps,
        "verifiers_per_challenge": a.verifiers,
    }
    d.update({k: v for k, v in flags.items() if v is not None})
    if a.windows:
        c, r, v, at = _ints(a.windows, 4, "--windows COMMIT,REVEAL,VERDICT,ATTEST")
        d["windows"] = {"commit": c, "reveal": r, "verdict": v, "attest": at}
    if a.model:
        n_layers, n_heads, d_model, ctx, vocab = _ints(a.model, 5, "--model LAYERS,HEADS,D_MODEL,CONTEXT,VOCAB")
        d["model"] = {"n_layers": n_layers, "n_heads": n_heads, "d_model": d_model, "context_len": ctx, "vocab_size": vocab}
    for kv in a.compression_param or ():
        k, _, v = kv.partition("=")
        if not v.isdigit():
            raise UsageError(f"bad --compression-param {kv!r}: write KEY=INTEGER")
        d.setdefault("compression_params", {})[k] = int(v)
    d.setdefault("windows", {"commit": 10, "reveal": 5, "verdict": 5, "attest": 5})
    d.setdefault("compression_policy", "raw")
    d.setdefault("challenge_bps", 1_000)
    d.setdefault("verifiers_per_challenge", 1)
    d.setdefault("model", {"n_layers": 2, "n_heads": 2, "d_model": 64, "context_len": 64, "vocab_size": 256})
    return broadcast(a, a.from_key, [build_create_job(d)])


def _ints(text: str, n: int, what: str) -> list[int]:
    parts = text.split(",")
    if len(parts) != n or not all(p.strip().isdigit() for p in parts):
        raise UsageError(f"bad value {text!r}: write {what}")
    return [int(p) for p in parts]


def cmd_job_cancel(a: argparse.Namespace) -> int:
    return broadcast(a, a.from_key, [build_cancel_job(a.job_id)])


def _hex_list(text: str, what: str) -> list[bytes]:
    """``HEX,HEX,...`` (32-byte hashes; the empty string is the empty list)."""
    return [_hex32(x.strip(), what) for x in text.split(",") if x.strip()]


def _signer_address(a: argparse.Namespace) -> bytes:
    from node.keys import Keyring

    return Keyring(Path(a.home)).get(a.from_key).address_bytes


def cmd_round_submit(a: argparse.Namespace) -> int:
    """Both roots are bound to the signer (leaf 0 = abci_app.merkle.binding_leaf): with
    --trace-file / --payload-file the roots and the proofs of leaf 0 are computed here."""
    from abci_app.merkle import merkle_proof, merkle_root

    base = _hex32(a.base_model, "--base-model")
    me = _signer_address(a)
    if a.trace_file:
        if a.trace_root or a.trace_proof is not None:
            raise UsageError("give either --trace-file or --trace-root with --trace-proof, not both")
        leaves = bound_trace_leaves(me, a.job_id, a.round, base, read_trace(a.trace_file))
        trace_root, trace_proof = merkle_root(leaves), merkle_proof(leaves, 0)
    elif a.trace_root and a.trace_proof is not None:
        trace_root, trace_proof = _hex32(a.trace_root, "--trace-root"), _hex_list(a.trace_proof, "--trace-proof")
    else:
        raise UsageError("give --trace-file FILE, or --trace-root HEX with --trace-proof HEX,HEX,...")
    if a.payload_file:
        if a.update_root or a.update_proof is not None:
            raise UsageError("give either --payload-file or --update-root with --update-proof, not both")
        try:
            payload = Path(a.payload_file).read_bytes()
        except OSError as e:
            raise UsageError(f"cannot read payload file {a.payload_file}: {e}") from None
        if a.payload_size is not None and a.payload_size != len(payload):
            raise UsageError(f"--payload-size {a.payload_size} is not the payload file's size {len(payload)}")
        leaves = bound_update_leaves(me, a.job_id, a.round, base, payload)
        update_root, update_proof, size = merkle_root(leaves), merkle_proof(leaves, 0), len(payload)
    elif a.update_root and a.update_proof is not None and a.payload_size is not None:
        update_root, update_proof = _hex32(a.update_root, "--update-root"), _hex_list(a.update_proof, "--update-proof")
        size = a.payload_size
    else:
        raise UsageError("give --payload-file FILE, or --update-root HEX with --update-proof HEX,HEX,... and --payload-size")
    msg = build_submit_update(
        a.job_id, a.round, base_model=base, update_root=update_root, payload_size=size, trace_root=trace_root,
        tokens=a.tokens, loss_before=a.loss_before, loss_after=a.loss_after, blob=a.blob,
        update_binding_proof=update_proof, trace_binding_proof=trace_proof)
    return broadcast(a, a.from_key, [msg])


def cmd_round_reveal(a: argparse.Namespace) -> int:
    trace = read_trace(a.trace_file)
    if a.base_model:
        base = _hex32(a.base_model, "--base-model")
    else:  # the round's base model, as committed in the signer's binding leaf
        from node.rpc import Client

        with Client(a.node) as c:
            qr = c.abci_query(f"/round/{a.job_id}/{a.round}")
            if qr.code != 0:
                raise UsageError(f"query round {a.job_id}/{a.round} failed (code {qr.code}): {qr.log}")
            base = bytes.fromhex(json.loads(qr.value)["base_model_hash"])
    msg = build_reveal_from_trace(a.job_id, a.round, a.segment, trace, a.start_location, a.end_location,
                                  provider=_signer_address(a), base_model=base)
    return broadcast(a, a.from_key, [msg])


def cmd_round_verdict(a: argparse.Namespace) -> int:
    from abci_app.codec.address import from_bech32

    if a.valid == a.invalid:
        raise UsageError("give exactly one of --valid or --invalid")
    return broadcast(a, a.from_key, [build_verdict(a.job_id, a.round, from_bech32(a.target), a.valid, a.quality)])


def cmd_round_attest(a: argparse.Namespace) -> int:
    return broadcast(a, a.from_key, [build_attest(a.job_id, a.round, _hex32(a.model_hash, "MODEL_HASH"))])


# ----------------------------------------------------------------------------- queries


def _query(a: argparse.Namespace, path: str, rederive: Callable[[dict[bytes, bytes | None]], Any] | None = None) -> Any:
    """Run an abci_query; with --prove, verify every proof against the next header's app hash and
    re-derive the answer from the proven bytes (it must equal what the node said)."""
    from node.proofs import ProofInvalid, verify_query
    from node.rpc import Client

    prove = bool(getattr(a, "prove", False))
    with Client(a.node) as c:
        qr = c.abci_query(path, height=getattr(a, "height", 0) or 0, prove=prove)
        if qr.code != 0:
            raise UsageError(f"query {path} failed (code {qr.code}): {qr.log}")
        data = json.loads(qr.value)
        if prove:
            if rederive is None:
                raise UsageError("--prove is not available for this query")
            try:
                root, proven = verify_query(c, qr)
            except ProofInvalid as e:
                raise UsageError(f"proof check failed: {e}: do not trust this node") from None
            if rederive(proven) != data:
                raise UsageError("the node's answer disagrees with its own proof: do not trust this node")
            return {"height": qr.height, "result": data, "proof_verified": True, "app_hash": root.hex().upper()}
    return {"height": qr.height, "result": data}


def _proven_one(decode: Callable[[bytes], Any], to_json: Callable[[Any], Any]) -> Callable[[dict[bytes, bytes | None]], Any]:
    def f(proven: dict[bytes, bytes | None]) -> Any:
        if len(proven) != 1:
            raise UsageError("proof covers an unexpected set of keys")
        (raw,) = proven.values()
        if raw is None:
            raise UsageError("the proof shows the record does not exist")
        return to_json(decode(raw))
    return f


def _emit(a: argparse.Namespace, res: dict[str, Any], text: str) -> int:
    if res.get("proof_verified"):
        text += f"\nproof: verified against app hash {res['app_hash']} (header {res['height'] + 1})"
    out(a, res, text)
    return 0


def cmd_query_provider(a: argparse.Namespace) -> int:
    from abci_app.encoding import decode_msg
    from abci_app.pb import providers_pb2
    from abci_app.providers.queries import provider_to_json

    res = _query(a, f"/provider/{a.address}", _proven_one(lambda b: decode_msg(providers_pb2.Provider, b), provider_to_json))
    p = res["result"]
    hw = ", ".join(f"{g['count']}x {g['model']} ({g['memory_mib']} MiB)" for g in p["hardware"])
    text = (f"provider:   {p['address']}\nstatus:     {p['status']}\nbond:       {p['bond']} uloco ({fmt_loco(p['bond'])})\n"
            f"unbonding:  {p['unbonding']} uloco (at height {p['unbonding_height']})\nreputation: {p['reputation']} / 10000\n"
            f"hardware:   {hw}\nthroughput: {p['throughput_tokens_per_sec']} tokens/s\nregion:     {p['region']}\n"
            f"endpoint:   {p['endpoint']}\nslashed:    {p['slashed_total']} uloco\nheight:     {res['height']}")
    return _emit(a, res, text)


def cmd_query_providers(a: argparse.Namespace) -> int:
    q = f"/providers?from={a.start}&limit={a.limit}" + (f"&status={a.status}" if a.status else "")
    res = _query(a, q)
    rows = [f"{'address':44s} {'status':8s} {'bond (uloco)':>16s} {'rep':>5s}  region"]
    rows += [f"{p['address']:44s} {p['status']:8s} {p['bond']:>16d} {p['reputation']:>5d}  {p['region']}" for p in res["result"]["providers"]]
    return _emit(a, res, "\n".join(rows) + f"\n{res['result']['total']} provider(s) at height {res['height']}")


def cmd_query_job(a: argparse.Namespace) -> int:
    from abci_app.encoding import decode_msg
    from abci_app.jobs.queries import job_to_json
    from abci_app.pb import jobs_pb2

    res = _query(a, f"/job/{a.job_id}", _proven_one(lambda b: decode_msg(jobs_pb2.Job, b), job_to_json))
    j = res["result"]
    s = j["spec"]
    text = (f"job {j['id']} ({j['status']}) owner {j['owner']}\n"
            f"rounds: {j['rounds_finalized']} finalized / {j['rounds_opened']} opened / {j['rounds']}\n"
            f"reward per round: {j['reward_per_round']} uloco + {j['verifier_reward_per_round']} uloco to verifiers\n"
            f"escrow: {j['escrow']} uloco (funded {j['escrow_funded']}, paid {j['paid_total']}, refunded {j['refunded']})\n"
            f"model: {j['current_model_hash']}\ndataset: {s['dataset_id']}\n"
            f"H={s['inner_steps']} k={s['trace_interval']} {s['compression_policy']} participants={s['participants_per_round']} "
            f"windows={s['windows']}\nheight: {res['height']}")
    return _emit(a, res, text)


def cmd_query_jobs(a: argparse.Namespace) -> int:
    q = f"/jobs?from={a.start}&limit={a.limit}" + (f"&owner={a.owner}" if a.owner else "") + (f"&status={a.status}" if a.status else "")
    res = _query(a, q)
    rows = [f"{'id':>5s} {'status':10s} {'rounds':>9s} {'escrow (uloco)':>16s}  owner"]
    rows += [f"{j['id']:>5d} {j['status']:10s} {j['rounds_finalized']:>4d}/{j['rounds']:<4d} {j['escrow']:>16d}  {j['owner']}" for j in res["result"]["jobs"]]
    return _emit(a, res, "\n".join(rows) + f"\n{res['result']['total']} job(s) at height {res['height']}")


def round_table(r: dict[str, Any]) -> str:
    """A readable table of one round (``query round`` without ``-o json``)."""
    w = r["windows"]

    def short(x: str) -> str:
        return (x[:12] + "…") if x else "-"

    lines = [
        f"round {r['job_id']}/{r['round']}  phase {r['phase']}",
        f"windows: opened {w['open_height']} | commit ≤{w['commit_deadline']} | reveal ≤{w['reveal_end']} | "
        f"verdict ≤{w['verdict_end']} | attest ≤{w['attest_end']}" + (f" | finalized at {r['finalized_height']}" if r["finalized_height"] else ""),
        f"base model: {short(r['base_model_hash'])}   attested: {short(r['attested_model_hash'])}",
        "",
        f"{'participant':44s} {'shard':>5s} {'rep':>5s} {'commit':6s} {'seg':>3s} {'reveal':6s} {'votes':9s} {'outcome':13s} {'quality':>7s} {'reward':>10s} {'slashed':>10s}",
    ]
    for p in r["participants"]:
        ch = p["challenge"]
        votes = "-"
        if ch:
            vs = ch["verifiers"]
            votes = f"{sum(v['voted'] and v['valid'] for v in vs)}✓{sum(v['voted'] and not v['valid'] for v in vs)}✗/{len(vs)}"
        lines.append(
            f"{p['address']:44s} {p['shard']:>5d} {p['reputation']:>5d} {'yes' if p['commitment'] else 'no':6s} "
            f"{(str(ch['segment']) if ch else '-'):>3s} {('yes' if ch and ch['reveal'] else ('no' if ch else '-')):6s} "
            f"{votes:9s} {p['outcome']:13s} {p['quality']:>7d} {p['reward']:>10d} {p['slashed']:>10d}"
        )
    lines.append("")
    lines.append(f"paid: {r['reward_paid']} uloco to participants, {r['verifier_paid']} uloco to verifiers; "
                 f"{r['returned_to_escrow']} uloco back to escrow")
    for s in r["slashes"]:
        lines.append(f"slashed: {s['address']} {s['amount']} uloco ({s['reason']}; {s['burned']} burned)")
    for p in r["payouts"]:
        if p["kind"] == "bounty":
            lines.append(f"bounty: {p['address']} {p['amount']} uloco")
    return "\n".join(lines)


def cmd_query_round(a: argparse.Namespace) -> int:
    from abci_app.encoding import decode_msg
    from abci_app.jobs.queries import round_to_json
    from abci_app.pb import jobs_pb2

    res = _query(a, f"/round/{a.job_id}/{a.round}", _proven_one(lambda b: decode_msg(jobs_pb2.Round, b), round_to_json))
    return _emit(a, res, round_table(res["result"]) + f"\nheight: {res['height']}")


def cmd_query_rounds(a: argparse.Namespace) -> int:
    from abci_app.encoding import decode_msg
    from abci_app.jobs.queries import round_to_json
    from abci_app.pb import jobs_pb2

    def rederive(proven: dict[bytes, bytes | None]) -> Any:
        rounds = [round_to_json(decode_msg(jobs_pb2.Round, v)) for _, v in sorted(proven.items()) if v is not None]
        return {"rounds": rounds, "total": total[0]}

    total = [0]
    res0 = _query(argparse.Namespace(**{**vars(a), "prove": False}), f"/rounds/{a.job_id}?from={a.start}&limit={a.limit}")
    total[0] = res0["result"]["total"]
    res = _query(a, f"/rounds/{a.job_id}?from={a.start}&limit={a.limit}", rederive) if a.prove else res0
    rows = [f"{'round':>5s} {'phase':10s} {'participants':>12s} {'accepted':>8s} {'paid':>10s}  attested"]
    for r in res["result"]["rounds"]:
        acc = sum(p["outcome"] == "accepted" for p in r["participants"])
        rows.append(f"{r['round']:>5d} {r['phase']:10s} {len(r['participants']):>12d} {acc:>8d} {r['reward_paid'] + r['verifier_paid']:>10d}  {r['attested_model_hash'][:16] or '-'}")
    return _emit(a, res, "\n".join(rows) + f"\n{res['result']['total']} round(s) opened; height {res['height']}")


def cmd_query_market_params(a: argparse.Namespace) -> int:
    from abci_app.encoding import decode_msg
    from abci_app.jobs.keys import PARAMS_KEY as JK
    from abci_app.jobs.params import params_to_json
    from abci_app.pb import jobs_pb2, providers_pb2
    from abci_app.providers.keys import PARAMS_KEY as PK
    from abci_app.providers.params import params_to_json as pp_json

    def rederive(proven: dict[bytes, bytes | None]) -> Any:
        pv, jv = proven.get(PK), proven.get(JK)
        if pv is None or jv is None:
            raise UsageError("proof does not cover both params keys")
        return {"providers": pp_json(decode_msg(providers_pb2.ProvidersParams, pv)), "jobs": params_to_json(decode_msg(jobs_pb2.JobsParams, jv))}

    res = _query(a, "/market_params", rederive)
    d = res["result"]
    text = "\n".join([f"providers.{k} = {v}" for k, v in d["providers"].items()] + [f"jobs.{k} = {v}" for k, v in d["jobs"].items()])
    return _emit(a, res, text)


# ----------------------------------------------------------------------------- parser


def _tx_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--from", dest="from_key", required=True, metavar="KEY", help="keyring key that signs")
    p.add_argument("--home", required=True)
    p.add_argument("--fee", type=int, default=100, help="fee in uloco (default 100)")
    add_node_flag(p)
    add_output_flag(p)


def _q_flags(p: argparse.ArgumentParser, prove: bool = True) -> None:
    p.add_argument("--height", type=int, default=0, help="state after this block (default latest)")
    if prove:
        p.add_argument("--prove", action="store_true", help="verify a Merkle proof against the next block header's app hash")
    add_node_flag(p)
    add_output_flag(p)


def register(root: Any, tx: Any, query: Any) -> None:
    prov = tx.add_parser("provider", help="GPU provider transactions").add_subparsers(dest="provider_cmd", required=True, metavar="CMD")
    p = add_command(prov, "register", "register as a GPU provider, bonding BOND", "loconet tx provider register --from alice --bond 2000loco --gpu H100:8:81920 --throughput 50000 --region eu-west --endpoint http://10.0.0.1:26680 --home ~/.loconet", cmd_provider_register)
    p.add_argument("--bond", required=True, help="e.g. 2000loco (>= min_provider_stake)")
    p.add_argument("--gpu", action="append", required=True, help="MODEL:COUNT:MEMORY_MIB (repeatable)")
    p.add_argument("--throughput", type=int, required=True, help="claimed tokens/s")
    p.add_argument("--region", required=True)
    p.add_argument("--endpoint", required=True, help="blob endpoint http(s) URL")
    _tx_flags(p)
    p = add_command(prov, "update", "change hardware, throughput, region, endpoint or top up the bond", "loconet tx provider update --from alice --add-bond 100loco --home ~/.loconet", cmd_provider_update)
    p.add_argument("--add-bond"); p.add_argument("--gpu", action="append"); p.add_argument("--throughput", type=int, default=0)
    p.add_argument("--region", default=""); p.add_argument("--endpoint", default="")
    _tx_flags(p)
    p = add_command(prov, "exit", "leave: the bond unbonds over unbonding_blocks (still slashable)", "loconet tx provider exit --from alice --home ~/.loconet", cmd_provider_exit)
    _tx_flags(p)

    job = tx.add_parser("job", help="training job transactions").add_subparsers(dest="job_cmd", required=True, metavar="CMD")
    p = add_command(job, "create", "create a training job, escrowing rounds x (reward + verifier reward)",
                    "loconet tx job create --from owner --rounds 3 --reward-per-round 10loco --verifier-reward 1loco --initial-model HEX --dataset-id HEX --inner-steps 8 --trace-interval 2 --participants 2 --shards 4 --tokens-per-step 1024 --windows 4,2,2,2 --challenge-bps 10000 --verifiers 1 --home ~/.loconet", cmd_job_create)
    p.add_argument("--spec", help="JSON file with the job (fields as in `query job -o json` spec, plus rounds and rewards); flags override it")
    p.add_argument("--rounds", type=int); p.add_argument("--reward-per-round"); p.add_argument("--verifier-reward")
    p.add_argument("--initial-model", help="64-hex model hash"); p.add_argument("--dataset-id", help="64-hex sha256 of the data")
    p.add_argument("--inner-steps", type=int); p.add_argument("--trace-interval", type=int)
    p.add_argument("--compression", default=None, help="compression policy id, e.g. topk+int4")
    p.add_argument("--compression-param", action="append", help="KEY=INTEGER (repeatable)")
    p.add_argument("--participants", type=int); p.add_argument("--shards", type=int); p.add_argument("--tokens-per-step", type=int)
    p.add_argument("--windows", help="COMMIT,REVEAL,VERDICT,ATTEST in blocks (default 10,5,5,5)")
    p.add_argument("--model", help="LAYERS,HEADS,D_MODEL,CONTEXT,VOCAB (default 2,2,64,64,256)")
    p.add_argument("--min-reputation", type=int); p.add_argument("--min-stake"); p.add_argument("--challenge-bps", type=int)
    p.add_argument("--verifiers", type=int, help="verifiers per challenge (default 1); proving fraud needs >= min_fraud_verifiers (3)")
    _tx_flags(p)
    p = add_command(job, "cancel", "cancel a job: no new rounds; unspent escrow refunded when the rounds in flight are final", "loconet tx job cancel 1 --from owner --home ~/.loconet", cmd_job_cancel)
    p.add_argument("job_id", type=int, metavar="JOB_ID"); _tx_flags(p)

    rnd = tx.add_parser("round", help="round duties of providers and verifiers").add_subparsers(dest="round_cmd", required=True, metavar="CMD")
    p = add_command(rnd, "submit-update", "commit to this round's update (commit window); both roots are bound to the signer: "
                    "leaf 0 = binding_leaf(update|trace, signer, job, round, base) (abci_app/merkle.py), proven on chain",
                    "loconet tx round submit-update 1 0 --from alice --base-model HEX --payload-file update.bin --trace-file trace.json --tokens 8192 --loss-before 5500 --loss-after 5200 --blob http://10.0.0.1:26680/blob/HEX --home ~/.loconet", cmd_round_submit)
    p.add_argument("job_id", type=int, metavar="JOB_ID"); p.add_argument("round", type=int, metavar="ROUND")
    p.add_argument("--base-model", required=True)
    p.add_argument("--payload-file", help="the compressed update payload: bound update root, its leaf-0 proof and the size computed here")
    p.add_argument("--update-root", help="expert: a bound update root (leaf 0 = binding_leaf(b'update', ...)); needs --update-proof and --payload-size")
    p.add_argument("--update-proof", help="expert: HEX,HEX,... sibling hashes of leaf 0 under --update-root")
    p.add_argument("--payload-size", type=int, help="bytes (taken from --payload-file when given)")
    p.add_argument("--trace-file", help="JSON list of hex state hashes (bound root and leaf-0 proof computed here)")
    p.add_argument("--trace-root", help="expert: a bound trace root; needs --trace-proof")
    p.add_argument("--trace-proof", help="expert: HEX,HEX,... sibling hashes of leaf 0 under --trace-root")
    p.add_argument("--tokens", type=int, required=True); p.add_argument("--loss-before", type=int, required=True, help="milli-nats")
    p.add_argument("--loss-after", type=int, required=True, help="milli-nats"); p.add_argument("--blob", required=True, help="http(s) URL of the payload")
    _tx_flags(p)
    p = add_command(rnd, "reveal", "reveal the challenged trace segment with Merkle proofs in the signer's bound trace (reveal window)", "loconet tx round reveal 1 0 --from alice --segment 2 --trace-file trace.json --start-location URL --end-location URL --home ~/.loconet", cmd_round_reveal)
    p.add_argument("job_id", type=int, metavar="JOB_ID"); p.add_argument("round", type=int, metavar="ROUND")
    p.add_argument("--segment", type=int, required=True); p.add_argument("--trace-file", required=True)
    p.add_argument("--base-model", help="the round's base model (default: asked from --node)")
    p.add_argument("--start-location", required=True); p.add_argument("--end-location", required=True)
    _tx_flags(p)
    p = add_command(rnd, "verdict", "post a verdict on a challenged segment (verdict window)", "loconet tx round verdict 1 0 loco1target... --valid --quality 8000 --from bob --home ~/.loconet", cmd_round_verdict)
    p.add_argument("job_id", type=int, metavar="JOB_ID"); p.add_argument("round", type=int, metavar="ROUND"); p.add_argument("target", metavar="TARGET")
    p.add_argument("--valid", action="store_true"); p.add_argument("--invalid", action="store_true")
    p.add_argument("--quality", type=int, default=0, help="0..10000"); _tx_flags(p)
    p = add_command(rnd, "attest", "attest the aggregated model hash (attest window)", "loconet tx round attest 1 0 HEX --from alice --home ~/.loconet", cmd_round_attest)
    p.add_argument("job_id", type=int, metavar="JOB_ID"); p.add_argument("round", type=int, metavar="ROUND"); p.add_argument("model_hash", metavar="MODEL_HASH")
    _tx_flags(p)

    p = add_command(query, "provider", "a provider's bond, status, reputation and hardware", "loconet query provider loco1... --prove -o json", cmd_query_provider)
    p.add_argument("address", metavar="ADDR"); _q_flags(p)
    p = add_command(query, "providers", "list providers", "loconet query providers --status active", cmd_query_providers)
    p.add_argument("--status", choices=["active", "jailed", "exiting"]); p.add_argument("--from", dest="start", type=int, default=0)
    p.add_argument("--limit", type=int, default=100); _q_flags(p, prove=False)
    p = add_command(query, "job", "a job: spec, escrow, progress", "loconet query job 1 --prove", cmd_query_job)
    p.add_argument("job_id", type=int, metavar="JOB_ID"); _q_flags(p)
    p = add_command(query, "jobs", "list jobs", "loconet query jobs --owner loco1... -o json", cmd_query_jobs)
    p.add_argument("--owner"); p.add_argument("--status", choices=["active", "cancelling", "cancelled", "completed"])
    p.add_argument("--from", dest="start", type=int, default=0); p.add_argument("--limit", type=int, default=100); _q_flags(p, prove=False)
    p = add_command(query, "round", "one round: phase, participants and shards, commitments, challenges, verdicts, attested model, payouts, slashes", "loconet query round 1 0 --prove", cmd_query_round)
    p.add_argument("job_id", type=int, metavar="JOB_ID"); p.add_argument("round", type=int, metavar="ROUND"); _q_flags(p)
    p = add_command(query, "rounds", "a job's rounds", "loconet query rounds 1 --from 0 --limit 20", cmd_query_rounds)
    p.add_argument("job_id", type=int, metavar="JOB_ID"); p.add_argument("--from", dest="start", type=int, default=0)
    p.add_argument("--limit", type=int, default=100); _q_flags(p)
    p = add_command(query, "market-params", "providers and jobs params (abci path /market_params)", "loconet query market-params -o json", cmd_query_market_params)
    _q_flags(p)
