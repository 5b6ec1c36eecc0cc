"""``loconet tx provider|job|round ...`` and ``loconet query
provider|providers|job|jobs|round|rounds|market-params`` (a CLI plugin: node/cli/main.py calls
``register``).

Three parts: the commands (argparse namespace -> a message from node/client/market_msgs.py, signed
and sent; or a query, verified with --prove and rendered by node/client/market_render.py), and at
the
end
``COMMANDS``, one table of every command with its flags, which ``register`` turns into parsers.

``loconet --help`` loads this module: torch (seconds) and node.blobs (aiohttp, 0.4 s) are
imported by the commands that need them (``# lazy:``)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from abci_app.codec.address import from_bech32
from abci_app.encoding import decode_msg
from abci_app.jobs import sla
from abci_app.jobs.incentives import compute_evidence
from abci_app.jobs.keys import PARAMS_KEY as JOBS_PARAMS_KEY
from abci_app.jobs.keys import job_key, round_key, sla_key
from abci_app.jobs.params import DEFAULTS
from abci_app.jobs.params import params_to_json as jobs_params_to_json
from abci_app.jobs.policy import PolicyError, canonical_policy
from abci_app.jobs.probe import PROBE_DIM, check_probe, compute_probe_evidence
from abci_app.jobs.queries import job_to_json, round_to_json, sla_to_json
from abci_app.pb import jobs_pb2, providers_pb2
from abci_app.providers.keys import PARAMS_KEY as PROVIDERS_PARAMS_KEY
from abci_app.providers.keys import provider_key
from abci_app.providers.params import params_to_json as providers_params_to_json
from abci_app.providers.queries import provider_to_json
from node import safejson
from node.cli.common import (
    HEIGHT,
    U32,
    U64,
    UsageError,
    add_command,
    add_read_flags,
    add_tx_flags,
    is_json,
    out,
    parse_amount,
    signers_note,
)
from node.cli.tx import _client_if_needed, broadcast
from node.client import market_render
from node.client.inputs import read_input_file
from node.client.keys import Keyring
from node.client.market_msgs import (
    DEFAULT_BLOCK_S,
    DEFAULT_CHALLENGE_BPS,
    DEFAULT_COMPRESSION,
    DEFAULT_SEGMENTS_PER_CHALLENGE,
    DEFAULT_VERIFIERS_PER_CHALLENGE,
    WINDOW_SLACK,
    bound_trace_commitment,
    bound_update_commitment,
    build_attest,
    build_cancel_job,
    build_create_job,
    build_decline_round,
    build_exit_provider,
    build_open_end,
    build_register_provider,
    build_reveal_from_trace,
    build_reveal_vote,
    build_submit_update,
    build_update_provider,
    build_verdict,
    cap_windows,
    compute_windows,
    estimate_compute_s,
    hex32,
    job_audit_warning,
    measure_block_time,
    probe_fields,
    read_trace,
)
from node.client.proofs import (
    ProofInvalid,
    expected_chain_id,
    proven_record,
    proven_records,
    trust_of,
    verify_answer,
)
from node.client.rpc import Client

# ----------------------------------------------------------------------------- tx commands


def cmd_provider_register(a: argparse.Namespace) -> int:
    gpus = a.gpu
    if not gpus:  # what torch sees: the CUDA GPUs, or the CPU when there is none
        try:
            from node.worker.ml import detect_hardware  # lazy: torch takes seconds
        except ImportError:
            raise UsageError(
                "torch is not installed here: give the hardware with --gpu MODEL:COUNT:MEMORY_MIB"
            ) from None
        gpus = detect_hardware()
    msg = build_register_provider(parse_amount(a.bond), gpus, a.throughput, a.region, a.endpoint)
    warnings = [] if a.skip_hardware_check else hardware_warnings(a.throughput, a.gpu)
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    extra = {"warnings": warnings} if is_json(a) else None
    return broadcast(a, a.from_key, [msg], extra)


# the default job model (`tx job create` without --model: 2 layers, d_model 64, context 64,
# vocabulary 256): training costs about 6 FLOPs per parameter per token (forward + backward),
# 12·L·d² in the blocks plus V·d in the output layer; attention scores are left out, so the
# ceiling below is generous
DEFAULT_MODEL_FLOPS_PER_TOKEN = 6 * (12 * 2 * 64 * 64 + 256 * 64)
THROUGHPUT_SLACK = 4  # the measurement runs ~0.1 s on a possibly busy machine: warn only far above


def hardware_warnings(throughput: int, gpu_flags: list[str] | None) -> list[str]:
    """What ``tx provider register`` warns about (stderr, and "warnings" under -o json): torch
    sees no CUDA GPU here, or --throughput is above a quick ceiling for this machine (a ~0.1 s
    matmul timing, times ``THROUGHPUT_SLACK``, over the default job model's FLOPs per token).
    The ceiling is checked only when the registered hardware is this machine's (no --gpu, or
    --gpu naming what torch sees): a registration for another machine cannot be measured here.
    Imports torch, only in this command."""
    try:
        import torch  # lazy: torch takes seconds; only this command needs it

        from node.worker.ml import detect_hardware  # lazy: torch takes seconds
    except ImportError:
        return ["torch is not installed here: the throughput claim and the GPU are unchecked"]
    warnings = []
    cuda = torch.cuda.is_available()
    if not cuda:
        warnings.append(
            "torch sees no CUDA GPU on this machine: a provider worker here trains on the CPU "
            "(and `provider run` refuses registered hardware it does not see)"
        )
    here = detect_hardware()
    if gpu_flags and sorted(g.lower() for g in gpu_flags) != sorted(h.lower() for h in here):
        return warnings
    flops = _matmul_flops(torch, "cuda" if cuda else "cpu")
    devices = torch.cuda.device_count() if cuda else 1
    ceiling = int(flops * devices * THROUGHPUT_SLACK // DEFAULT_MODEL_FLOPS_PER_TOKEN)
    if throughput > ceiling:
        warnings.append(
            f"--throughput {throughput} tokens/s is above what this machine can train: a quick "
            f"estimate ({flops / 1e9:.1f} GFLOP/s per {'GPU' if cuda else 'CPU'}, x"
            f"{THROUGHPUT_SLACK} margin) allows at most ~{ceiling} tokens/s even for the default "
            "job model; claim what the machine sustains"
        )
    return warnings


def _matmul_flops(torch: Any, device: str) -> float:
    """FLOP/s of square matmuls on ``device`` (fp32 on CPU, fp16 on CUDA): the best of ~20 ms
    slices over ~0.15 s, so a busy moment on a shared machine does not lower the ceiling."""

    n = 4096 if device == "cuda" else 256
    dtype = torch.float16 if device == "cuda" else torch.float32
    x = torch.randn(n, n, device=device, dtype=dtype)
    y = torch.randn(n, n, device=device, dtype=dtype)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    torch.matmul(x, y)  # warm-up: kernels chosen, memory touched
    sync()
    best, start = 0.0, time.perf_counter()
    while time.perf_counter() - start < 0.15:
        reps, t0 = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - t0) < 0.02:
            torch.matmul(x, y)
            sync()
            reps += 1
        best = max(best, 2 * n**3 * reps / elapsed)
    return best


def cmd_provider_update(a: argparse.Namespace) -> int:
    add = parse_amount(a.add_bond) if a.add_bond else 0
    return broadcast(
        a, a.from_key, [build_update_provider(add, a.gpu or (), a.throughput, a.region, a.endpoint)]
    )


def cmd_provider_exit(a: argparse.Namespace) -> int:
    return broadcast(a, a.from_key, [build_exit_provider()])


def cmd_job_create(a: argparse.Namespace) -> int:
    d = _read_spec(a)
    _apply_job_flags(a, d)
    _refuse_missing(a, d)
    _fill_job_defaults(a, d)
    # a spec field of the wrong type is refused before any warning reads it; the hashes that
    # --data/--init-seed/--init-model fill in below are not known yet, so stand in for them
    stand_in = {"commit": 10, "reveal": 5, "verdict": 5, "attest": 5}  # sized below
    build_create_job(
        {"dataset_id": "00" * 32, "initial_model_hash": "00" * 32, "windows": stand_in, **d}
    )
    if "windows" not in d:
        d["windows"], note = _windows_from_job(a, d)
        print(note, file=sys.stderr)
    warning = job_audit_warning(d)
    if warning:  # the chain takes the job anyway: what the owner pays for is its own choice
        print(warning, file=sys.stderr)
    extra = _job_inputs(a, d)
    return broadcast(
        a,
        a.from_key,
        [build_create_job(d)],
        extra,
        from_events={"job_id": ("job.created", "job_id")},
    )


def _read_spec(a: argparse.Namespace) -> dict[str, Any]:
    """``--spec FILE``'s JSON object ({} without one)."""
    d: dict[str, Any] = {}
    if a.spec:
        try:
            d = json.loads(read_input_file(a.spec, "--spec"))
        except (OSError, ValueError, RecursionError) as e:  # RecursionError: [[[[...
            raise UsageError(f"cannot read --spec {a.spec}: {e}") from None
        if not isinstance(d, dict):  # a list was an AttributeError traceback
            raise UsageError(
                f"--spec {a.spec} must hold a JSON object (the fields of `query job -o json`'s "
                f"spec, plus rounds and rewards), not {type(d).__name__}"
            )
    return d


def _apply_job_flags(a: argparse.Namespace, d: dict[str, Any]) -> None:
    """The flags given, over the spec's fields (a flag wins), and the compression policy in the
    chain's spelling."""
    flags = {
        "rounds": a.rounds,
        "reward_per_round": parse_amount(a.reward_per_round) if a.reward_per_round else None,
        "verifier_reward_per_round": parse_amount(a.verifier_reward) if a.verifier_reward else None,
        "initial_model_hash": a.initial_model,
        "dataset_id": a.dataset_id,
        "inner_steps": a.inner_steps,
        "trace_interval": a.trace_interval,
        "compression_policy": a.compression,
        "participants_per_round": a.participants,
        "num_shards": a.shards,
        "tokens_per_step": a.tokens_per_step,
        "min_reputation": a.min_reputation,
        "min_stake": parse_amount(a.min_stake) if a.min_stake else None,
        "challenge_bps": a.challenge_bps,
        "verifiers_per_challenge": a.verifiers,
        "segments_per_challenge": a.segments,
        "determinism_mode": a.determinism,
        "tolerance_ppm": a.tolerance_ppm,
        "stack": a.stack,
    }
    d.update({k: v for k, v in flags.items() if v is not None})
    if a.windows:
        c, r, v, at = _ints(a.windows, 4, "--windows COMMIT,REVEAL,VERDICT,ATTEST")
        d["windows"] = {"commit": c, "reveal": r, "verdict": v, "attest": at}
    if a.model:
        n_layers, n_heads, d_model, ctx, vocab = _ints(
            a.model, 5, "--model LAYERS,HEADS,D_MODEL,CONTEXT,VOCAB"
        )
        d["model"] = {
            "n_layers": n_layers,
            "n_heads": n_heads,
            "d_model": d_model,
            "context_len": ctx,
            "vocab_size": vocab,
        }
    for kv in a.compression_param or ():
        k, _, v = kv.partition("=")
        if not (v.isascii() and v.isdigit()):
            raise UsageError(f"bad --compression-param {kv!r}: write KEY=INTEGER")
        d.setdefault("compression_params", {})[k] = int(v)
    # int8 by default (issue 29): the payloads are the other half of a round's bytes; float32
    # ones all-gathered among 4 kept a job at H = 100 at 75x below AllReduce, int8 ones make it
    # 104x with verification counted (benchmarks/deterrence.py); the seeded DiLoCo table saw no
    # loss cost down to int4 at the same outer settings (benchmarks/RESULTS.md)
    d.setdefault("compression_policy", DEFAULT_COMPRESSION)
    d["compression_policy"] = _canonical_compression(a, str(d["compression_policy"]))


def _refuse_missing(a: argparse.Namespace, d: dict[str, Any]) -> None:
    """Every field a job needs is given, by a flag or the spec (one error names them all)."""
    missing = [flag for flag, key in JOB_REQUIRED if key not in d]
    if (
        a.initial_model is None
        and a.init_seed is None
        and a.init_model is None
        and "initial_model_hash" not in d
    ):
        missing.append("--init-seed N, --init-model FILE or --initial-model HEX")
    if a.dataset_id is None and a.data is None and "dataset_id" not in d:
        missing.append("--data FILE or --dataset-id HEX")
    if missing:
        raise UsageError(
            f"missing {', '.join(missing)}: required (or give them in --spec FILE); "
            "see `loconet tx job create --help`"
        )


def _fill_job_defaults(a: argparse.Namespace, d: dict[str, Any]) -> None:
    """The fields left out: the challenge, determinism and model defaults."""
    # challenge defaults (docs/threat-model.md "Enough segments"): 5 % of commitments, one
    # segment each; the required bond keeps faking a loss (>= 2x its gain) at any rate, and the
    # round's verification bytes stay within half of the 100x traffic budget
    d.setdefault("challenge_bps", DEFAULT_CHALLENGE_BPS)
    d.setdefault("segments_per_challenge", DEFAULT_SEGMENTS_PER_CHALLENGE)
    d.setdefault("determinism_mode", "tolerance")
    d.setdefault("tolerance_ppm", 1_000 if d["determinism_mode"] == "tolerance" else 0)
    d.setdefault("verifiers_per_challenge", DEFAULT_VERIFIERS_PER_CHALLENGE)
    d.setdefault(
        "model", {"n_layers": 2, "n_heads": 2, "d_model": 64, "context_len": 64, "vocab_size": 256}
    )
    if a.compute_per_round is not None:
        d["compute_s_per_round"] = a.compute_per_round


# a round's compute when the owner states none (--compute-per-round): 6 x params x tokens at this
# speed, about one CPU core's; the windows are upper bounds, so a faster machine loses nothing
REFERENCE_FLOPS = 1e11


def parse_duration(text: str, flag: str) -> int:
    """``30s``, ``5m``, ``2h`` -> whole seconds (a unit is required: ``30`` could be blocks)."""
    units = {"s": 1, "m": 60, "h": 3600}
    t = text.strip().lower()
    num, unit = t[:-1], t[-1:]
    if unit not in units or not (num.isascii() and num.isdigit()) or len(num) > 9:
        raise UsageError(f"bad {flag} {text!r}: write a whole number with a unit, e.g. 30s, 5m, 2h")
    return int(num) * units[unit]


def _compute_arg(text: str) -> int:
    try:
        return parse_duration(text, "--compute-per-round")
    except UsageError as e:  # argparse prints an ArgumentTypeError as a one-line usage error
        raise argparse.ArgumentTypeError(str(e).removeprefix("bad --compute-per-round ")) from None


def _windows_from_job(a: argparse.Namespace, d: dict[str, Any]) -> tuple[dict[str, int], str]:
    """The job's windows from its compute per round (stated, or estimated from its size) and the
    chain's measured block time (jobs README "Windows"); and a line saying how."""

    stated = int(d.get("compute_s_per_round") or 0)
    compute = float(stated) if stated else estimate_compute_s(d, REFERENCE_FLOPS)
    client = _client_if_needed(a)
    block_s = measure_block_time(client) if client is not None else None
    how_block = f"{block_s:.2f} s/block measured" if block_s else "1 s/block assumed"
    w, cut = cap_windows(
        compute_windows(
            compute,
            block_s or DEFAULT_BLOCK_S,
            inner_steps=int(d["inner_steps"]),
            trace_interval=int(d["trace_interval"]),
            segments=int(d.get("segments_per_challenge") or 1),
        ),
        int(DEFAULTS["max_window_blocks"]),
    )
    how_compute = (
        f"--compute-per-round {stated}s"
        if stated
        else f"an estimated {compute:.3g} s of compute per round (pass --compute-per-round)"
    )
    note = (
        f"windows {w['commit']},{w['reveal']},{w['verdict']},{w['attest']} blocks "
        f"(commit, reveal, verdict, attest) from {how_compute} at {how_block}, "
        f"{WINDOW_SLACK}x slack; phases end early once every message is in"
    )
    if cut:
        note += (
            f"; {', '.join(cut)} cut to the chain's {DEFAULTS['max_window_blocks']}-block "
            "maximum: a provider slower than the stated compute may miss it"
        )
    return w, note


JOB_REQUIRED = (
    ("--rounds", "rounds"),
    ("--reward-per-round", "reward_per_round"),
    ("--inner-steps", "inner_steps"),
    ("--trace-interval", "trace_interval"),
    ("--participants", "participants_per_round"),
    ("--shards", "num_shards"),
    ("--tokens-per-step", "tokens_per_step"),
)


def _canonical_compression(a: argparse.Namespace, text: str) -> str:
    """The trainer's spellings (``int8``, ``topk:.01+int4``) -> the canonical policy the chain
    takes (``dense+int8``, ``topk:0.01+int4``), before signing; a note says so."""

    try:
        canon = canonical_policy(text)
    except PolicyError as e:
        raise UsageError(f"--compression: {e}") from None
    if canon != text and a.output != "json":
        print(f"--compression {text} is written {canon} on chain", file=sys.stderr)
    return canon


def _job_inputs(a: argparse.Namespace, d: dict[str, Any]) -> dict[str, Any]:
    """--data / --init-seed / --init-model: hash them, store them pinned in HOME/blobs, and fill
    dataset_id, initial_model_hash, their sizes and blob_sources into the spec."""
    from node.blobs import BlobStore, default_root  # lazy: aiohttp, 0.4 s at every --help
    from node.client.job_inputs import prepare_job_inputs  # lazy: aiohttp, 0.4 s at every --help

    if a.blob_source:
        d["blob_sources"] = list(a.blob_source)
    if a.data is None and a.init_seed is None and a.init_model is None:
        return {}
    if a.init_seed is not None and a.init_model is not None:
        raise UsageError("give one of --init-seed N and --init-model FILE, not both")
    if a.data is not None and a.dataset_id:
        raise UsageError("give --data FILE or --dataset-id HEX, not both (--data computes the id)")
    if (a.init_seed is not None or a.init_model is not None) and a.initial_model:
        raise UsageError("give --init-seed/--init-model or --initial-model HEX, not both")
    if not d.get("blob_sources"):
        raise UsageError(
            "providers must be able to fetch the data and the model: add --blob-source URL, where "
            "the store is served (e.g. `loconet blob serve --home HOME --listen 0.0.0.0:26680`)"
        )
    root = Path(a.blob_dir) if a.blob_dir else default_root(a.home)
    kw: dict[str, Any] = {
        "data": Path(a.data) if a.data else None,
        "init_seed": a.init_seed,
        "init_model": Path(a.init_model) if a.init_model else None,
    }
    dry = bool(getattr(a, "dry_run", False))
    if dry:  # a dry run hashes only: it pinned a copy of the dataset in the store for nothing
        inputs = prepare_job_inputs(None, d["model"], **kw)
    else:
        from node.blobs import EvictionNeeded  # lazy: aiohttp, 0.4 s at every --help

        with BlobStore(root) as store:
            # storing the job's inputs never evicts another blob unasked (issue 28: a store's
            # quota may be a typo); the owner frees room or raises the quota, knowingly
            store.may_evict = False
            try:
                inputs = prepare_job_inputs(store, d["model"], **kw)
            except EvictionNeeded as e:
                freed = sum(size for _, size in e.victims)
                raise UsageError(
                    f"storing the job's inputs in {root} would evict {len(e.victims)} blob(s) "
                    f"({freed:,} bytes) under the store's quota; nothing was deleted: see them "
                    f"with `loconet blob gc --dry-run --dir {root}`, or raise the quota "
                    f"(`loconet blob gc --dir {root} --quota 50GiB` stores it), then run this "
                    "again"
                ) from None
    fields = inputs.spec_fields()
    d.update(fields)
    if a.output != "json":
        where = "hashed, not stored (dry run)" if dry else f"stored in {root} (pinned)"
        print(f"{where}: " + ", ".join(f"{k} {v}" for k, v in fields.items()), file=sys.stderr)
    return {k: v for k, v in fields.items() if k in ("dataset_id", "initial_model_hash")}


def _ints(text: str, n: int, what: str) -> list[int]:
    parts = text.split(",")
    if len(parts) != n or not all(p.strip().isascii() and p.strip().isdigit() for p in parts):
        raise UsageError(f"bad value {text!r}: write {what}")
    return [int(p) for p in parts]


def cmd_job_cancel(a: argparse.Namespace) -> int:
    return broadcast(a, a.from_key, [build_cancel_job(a.job_id)])


def _hex_list(text: str, what: str) -> list[bytes]:
    """``HEX,HEX,...`` (32-byte hashes; the empty string is the empty list)."""
    return [hex32(x.strip(), what) for x in text.split(",") if x.strip()]


def _signer_address(a: argparse.Namespace) -> bytes:

    return Keyring(Path(a.home)).get(a.from_key).address_bytes


def cmd_round_submit(a: argparse.Namespace) -> int:
    """Both roots are bound to the signer (leaf 0 = abci_app.merkle.binding_leaf): with
    --trace-file / --payload-file the roots and the proofs of leaf 0 are computed here."""
    base = hex32(a.base_model, "--base-model")
    me = _signer_address(a)
    if a.trace_file:
        if a.trace_root or a.trace_proof is not None:
            raise UsageError(
                "give either --trace-file or --trace-root with --trace-proof, not both"
            )
        trace_root, trace_proof = bound_trace_commitment(
            me, a.job_id, a.round, base, read_trace(a.trace_file)
        )
    elif a.trace_root and a.trace_proof is not None:
        trace_root, trace_proof = (
            hex32(a.trace_root, "--trace-root"),
            _hex_list(a.trace_proof, "--trace-proof"),
        )
    else:
        raise UsageError(
            "give --trace-file FILE, or --trace-root HEX with --trace-proof HEX,HEX,..."
        )
    if a.payload_file:
        if a.update_root or a.update_proof is not None:
            raise UsageError(
                "give either --payload-file or --update-root with --update-proof, not both"
            )
        try:
            payload = read_input_file(a.payload_file, "payload file", limit=1 << 36)
        except OSError as e:
            raise UsageError(f"cannot read payload file {a.payload_file}: {e}") from None
        if a.payload_size is not None and a.payload_size != len(payload):
            raise UsageError(
                f"--payload-size {a.payload_size} is not the payload file's size {len(payload)}"
            )
        update_root, update_proof = bound_update_commitment(me, a.job_id, a.round, base, payload)
        size = len(payload)
    elif a.update_root and a.update_proof is not None and a.payload_size is not None:
        update_root, update_proof = (
            hex32(a.update_root, "--update-root"),
            _hex_list(a.update_proof, "--update-proof"),
        )
        size = a.payload_size
    else:
        raise UsageError(
            "give --payload-file FILE, or --update-root HEX with --update-proof HEX,HEX,... and "
            "--payload-size"
        )
    msg = build_submit_update(
        a.job_id,
        a.round,
        base_model=base,
        update_root=update_root,
        payload_size=size,
        trace_root=trace_root,
        tokens=a.tokens,
        loss_before=a.loss_before,
        loss_after=a.loss_after,
        blob=a.blob,
        update_binding_proof=update_proof,
        trace_binding_proof=trace_proof,
        **probe_fields(a.job_id, a.round, me, base, read_probes(a.probe_file))
        if a.probe_file
        else {},
    )
    return broadcast(a, a.from_key, [msg])


def _round_base(a: argparse.Namespace) -> bytes:
    """--base-model, or the round's base model asked from --node (what the signer's binding
    leaves commit to)."""
    if a.base_model:
        return hex32(a.base_model, "--base-model")

    with Client(a.node) as c:
        qr = c.abci_query(f"/round/{a.job_id}/{a.round}")
        if qr.code != 0:
            raise UsageError(f"query round {a.job_id}/{a.round} failed (code {qr.code}): {qr.log}")
        return bytes.fromhex(safejson.loads(qr.value)["base_model_hash"])


def _segments(text: str) -> list[int]:
    segs = [p.strip() for p in str(text).split(",")]
    if not all(
        p.isascii() and p.isdigit() and len(p) <= 10 and int(p) < 2**32 for p in segs
    ) or len(set(segs)) != len(segs):
        raise UsageError(
            f"bad --segment {text!r}: write the challenged segments, e.g. 2 or 1,5,9 "
            "(`loconet query round JOB ROUND` shows them under challenge.segments)"
        )
    return [int(x) for x in segs]


def cmd_round_reveal(a: argparse.Namespace) -> int:
    trace = read_trace(a.trace_file)
    base = _round_base(a)
    segs = _segments(a.segment)
    panel = int(getattr(a, "panel", 0) or 0)
    if panel not in (0, 1, 2):
        raise UsageError(f"bad --panel {panel}: 0 (first), 1 (appeal) or 2 (final)")
    judged = _segments(a.judged) if getattr(a, "judged", None) else segs
    msgs = [
        build_reveal_from_trace(
            a.job_id,
            a.round,
            sg,
            trace,
            a.start_location,
            "",
            provider=_signer_address(a),
            base_model=base,
            segments=segs,  # the list masks every entry but 0, H/k and the runs' starts
            panel=panel,
            judged=judged,
        )
        for sg in segs
    ]
    return broadcast(a, a.from_key, msgs)


def read_probes(path: str, what: str = "--probe-file") -> list[list[int]]:
    """A probe file: JSON list of lists of 32 integers (abci_app.jobs.probe.PROBE_DIM)."""

    try:
        items = json.loads(read_input_file(path, what))
    except (OSError, ValueError, RecursionError) as e:
        raise UsageError(f"cannot read {what} {path}: {e}") from None
    if not isinstance(items, list) or not items:
        raise UsageError(f"{what} {path}: a JSON list of probes ({PROBE_DIM} integers each)")
    out = []
    for i, p in enumerate(items):
        if not isinstance(p, list) or not all(isinstance(x, int) for x in p):
            raise UsageError(f"{what} {path}: entry {i} is not a list of integers")
        why = check_probe(p)
        if why:
            raise UsageError(f"{what} {path}: entry {i}: {why}")
        out.append([int(x) for x in p])
    return out


def _vote_args(a: argparse.Namespace) -> tuple[Any, bytes, list[bytes], list[int] | None]:
    """(signer, target, reached end states (exact mode), flat probes (tolerance mode) or None).
    --unavailable: no evidence (nothing reached)."""

    if a.unavailable:
        if a.valid or a.invalid or a.evidence or a.probes or a.quality:
            raise UsageError(
                "--unavailable is a vote of its own: give none of --valid, --invalid, --quality,"
                " --evidence, --probes with it"
            )
        return Keyring(Path(a.home)).get(a.from_key).signer, from_bech32(a.target), [], None
    if a.valid == a.invalid:
        raise UsageError("give exactly one of --valid, --invalid or --unavailable")
    if bool(a.evidence) == bool(a.probes):
        raise UsageError(
            "give --evidence HEX,... (exact-mode job: the end states your re-execution reached)"
            " or --probes FILE (tolerance-mode job: their probes), not both"
        )
    signer = Keyring(Path(a.home)).get(a.from_key).signer
    if a.probes:
        flat = [x for p in read_probes(a.probes, "--probes") for x in p]
        return signer, from_bech32(a.target), [], flat
    ends = [hex32(x, "--evidence") for x in a.evidence.split(",") if x]
    if not ends:
        raise UsageError(
            "--evidence: give the end state hash your re-execution reached for each challenged "
            "segment"
        )
    return signer, from_bech32(a.target), ends, None


def cmd_round_verdict(a: argparse.Namespace) -> int:

    signer, target, reached, probes = _vote_args(a)
    evidence = compute_evidence(reached) if probes is None else compute_probe_evidence(probes)
    return broadcast(
        a,
        a.from_key,
        [
            build_verdict(
                signer,
                a.job_id,
                a.round,
                target,
                a.valid,
                a.quality,
                evidence,
                blind=probes is not None,
                unavailable=a.unavailable,
                panel=PANELS[a.panel],
            )
        ],
    )


def cmd_round_reveal_vote(a: argparse.Namespace) -> int:
    signer, target, reached, probes = _vote_args(a)
    return broadcast(
        a,
        a.from_key,
        [
            build_reveal_vote(
                signer,
                a.job_id,
                a.round,
                target,
                a.valid,
                a.quality,
                reached,
                probes=probes,
                unavailable=a.unavailable,
                panel=PANELS[a.panel],
            )
        ],
    )


def cmd_round_open_end(a: argparse.Namespace) -> int:
    """MsgOpenEnd for each given segment (tolerance mode, vote-reveal window)."""
    trace = read_trace(a.trace_file)
    probes = read_probes(a.probe_file)
    base = _round_base(a)
    segs = _segments(a.segment)
    msgs = [
        build_open_end(
            a.job_id,
            a.round,
            sg,
            trace,
            probes,
            a.end_location,
            provider=_signer_address(a),
            base_model=base,
        )
        for sg in segs
    ]
    return broadcast(a, a.from_key, msgs)


def cmd_round_decline(a: argparse.Namespace) -> int:
    return broadcast(a, a.from_key, [build_decline_round(a.job_id, a.round)])


def cmd_round_attest(a: argparse.Namespace) -> int:
    return broadcast(
        a, a.from_key, [build_attest(a.job_id, a.round, hex32(a.model_hash, "MODEL_HASH"))]
    )


# ----------------------------------------------------------------------------- queries


# what to run when a query names something the chain does not have (the app's "X not found")
_LISTS = {
    "job": "loconet query jobs",
    "round": "loconet query rounds JOB_ID",
    "provider": "loconet query providers",
}


def _next_step(log: str) -> str:
    what = log.split(" ", 1)[0]
    if log.endswith(" not found") and what in _LISTS:
        return f"; list the {what}s there are with `{_LISTS[what]}` (and check --node and --height)"
    return ""


def _query(
    a: argparse.Namespace,
    path: str,
    rederive: Callable[[dict[bytes, bytes | None]], Any] | None = None,
) -> Any:
    """Run an abci_query; with --prove, verify every proof against the next header's app hash and
    re-derive the answer from the proven bytes (it must equal what the node said)."""

    if getattr(a, "legacy_page_from", None) is not None:
        raise UsageError(
            f"--from is the signing key of tx commands; the page offset is --offset: "
            f"write --offset {a.legacy_page_from}"
        )
    prove = bool(getattr(a, "prove", False))
    with Client(a.node) as c:
        qr = c.abci_query(path, height=getattr(a, "height", 0) or 0, prove=prove)
        if qr.code != 0:
            raise UsageError(f"query {path} failed (code {qr.code}): {qr.log}{_next_step(qr.log)}")
        data = safejson.loads(qr.value)
        if prove:
            if rederive is None:
                raise UsageError("--prove is not available for this query")
            try:
                trust = trust_of(getattr(a, "home", None))
                root = verify_answer(
                    c,
                    qr,
                    data,
                    rederive,
                    asked=getattr(a, "height", 0) or 0,
                    chain_id=expected_chain_id(getattr(a, "home", None)),
                    trust=trust,
                )
            except ProofInvalid as e:
                raise UsageError(f"proof check failed: {e}: do not trust this node") from None
            return {
                "height": qr.height,
                "result": data,
                "proof_verified": True,
                "app_hash": root.hex().upper(),
                "validator_set": "genesis" if trust is not None else "node",
            }
    return {"height": qr.height, "result": data}


def _proven_one(
    key: bytes, decode: Callable[[bytes], Any], to_json: Callable[[Any], Any]
) -> Callable[[dict[bytes, bytes | None]], Any]:
    """Re-derive a one-record answer from the proven value of exactly ``key``."""

    def f(proven: dict[bytes, bytes | None]) -> Any:
        try:
            raw = proven_record(proven, key)
        except ProofInvalid as e:
            raise UsageError(f"proof check failed: {e}: do not trust this node") from None
        if raw is None:
            raise UsageError("the proof shows the record does not exist")
        return to_json(decode(raw))

    return f


def _emit(a: argparse.Namespace, res: dict[str, Any], text: str) -> int:
    if res.get("proof_verified"):
        text += (
            f"\nproof: verified against app hash {res['app_hash']} (header {res['height'] + 1})"
            f"\nsigners: {signers_note(res['validator_set'])}"
        )
    out(a, res, text)
    return 0


def _proven_sla(address: str) -> Callable[[dict[bytes, bytes | None]], Any]:
    """Re-derive ``/provider/{addr}/sla`` from its proven value (absent = no duty yet: zeros)."""

    def f(proven: dict[bytes, bytes | None]) -> Any:
        addr = from_bech32(address)
        try:  # exactly this provider's key: another's SLA, or an unrelated absence, verified too
            raw = proven_record(proven, sla_key(addr))
        except ProofInvalid as e:
            raise UsageError(f"proof check failed: {e}: do not trust this node") from None
        return sla_to_json(addr, sla.Sla() if raw is None else sla.decode_sla(raw))

    return f


def cmd_query_provider(a: argparse.Namespace) -> int:

    key = provider_key(from_bech32(a.address)) if a.prove else b""
    res = _query(
        a,
        f"/provider/{a.address}",
        _proven_one(key, lambda b: decode_msg(providers_pb2.Provider, b), provider_to_json),
    )
    res["result"]["sla"] = _query(a, f"/provider/{a.address}/sla", _proven_sla(a.address))["result"]
    text = market_render.provider_text(res["result"], res["height"])
    return _emit(a, res, text)


def cmd_query_providers(a: argparse.Namespace) -> int:
    q = f"/providers?from={a.start}&limit={a.limit}" + (f"&status={a.status}" if a.status else "")
    res = _query(a, q)
    return _emit(a, res, market_render.providers_table(res))


def cmd_query_job(a: argparse.Namespace) -> int:

    res = _query(
        a,
        f"/job/{a.job_id}",
        _proven_one(job_key(a.job_id), lambda b: decode_msg(jobs_pb2.Job, b), job_to_json),
    )
    text = market_render.job_text(res["result"], res["height"])
    return _emit(a, res, text)


def cmd_query_jobs(a: argparse.Namespace) -> int:
    q = (
        f"/jobs?from={a.start}&limit={a.limit}"
        + (f"&owner={a.owner}" if a.owner else "")
        + (f"&status={a.status}" if a.status else "")
    )
    res = _query(a, q)
    return _emit(a, res, market_render.jobs_table(res))


def cmd_query_round(a: argparse.Namespace) -> int:

    res = _query(
        a,
        f"/round/{a.job_id}/{a.round}",
        _proven_one(
            round_key(a.job_id, a.round), lambda b: decode_msg(jobs_pb2.Round, b), round_to_json
        ),
    )
    return _emit(a, res, market_render.round_table(res["result"]) + f"\nheight: {res['height']}")


def cmd_query_rounds(a: argparse.Namespace) -> int:

    def rederive(proven: dict[bytes, bytes | None]) -> Any:
        try:  # each of this job's rounds under its own key (not another job's)
            recs = proven_records(
                proven,
                lambda b: decode_msg(jobs_pb2.Round, b),
                lambda r: round_key(a.job_id, r.round) if r.job_id == a.job_id else b"",
            )
        except ProofInvalid as e:
            raise UsageError(f"proof check failed: {e}: do not trust this node") from None
        return {"rounds": [round_to_json(r) for r in recs], "total": total[0]}

    total = [0]
    res0 = _query(
        argparse.Namespace(**{**vars(a), "prove": False}),
        f"/rounds/{a.job_id}?from={a.start}&limit={a.limit}",
    )
    total[0] = res0["result"]["total"]
    res = (
        _query(a, f"/rounds/{a.job_id}?from={a.start}&limit={a.limit}", rederive)
        if a.prove
        else res0
    )
    return _emit(a, res, market_render.rounds_table(res))


def cmd_query_market_params(a: argparse.Namespace) -> int:
    def rederive(proven: dict[bytes, bytes | None]) -> Any:
        pk, jk = PROVIDERS_PARAMS_KEY, JOBS_PARAMS_KEY
        pv, jv = proven.get(pk), proven.get(jk)
        if pv is None or jv is None or set(proven) != {pk, jk}:
            raise UsageError("proof does not cover exactly the two params keys")
        return {
            "providers": providers_params_to_json(decode_msg(providers_pb2.ProvidersParams, pv)),
            "jobs": jobs_params_to_json(decode_msg(jobs_pb2.JobsParams, jv)),
        }

    res = _query(a, "/market_params", rederive)
    text = market_render.market_params_text(res["result"])
    return _emit(a, res, text)


# ----------------------------------------------------------------------------- parser table


def A(*names: str, **kw: Any) -> tuple[tuple[str, ...], dict[str, Any]]:
    """One argument: the names and keywords of ``ArgumentParser.add_argument``."""
    return names, kw


JOB_ID = A("job_id", type=U64, metavar="JOB_ID")
ROUND = A("round", type=U64, metavar="ROUND")
# now --offset
LIST_FLAGS = (
    A("--offset", dest="start", type=U64, default=0, help="skip this many entries (paging)"),
    A("--limit", type=U64, default=100),
    A("--from", dest="legacy_page_from", default=None, help=argparse.SUPPRESS),
)
PANELS = {"first": 0, "appeal": 1, "final": 2}
VOTE_ARGS = (
    JOB_ID,
    ROUND,
    A("target", metavar="TARGET"),
    A("--valid", action="store_true"),
    A("--invalid", action="store_true"),
    A(
        "--unavailable",
        action="store_true",
        help="you could not fetch the target's revealed states (counted invalid; if the work is"
        " accepted it costs what silence costs, never a wrong vote's slash:"
        " docs/threat-model.md *Unavailable votes*); no --evidence/--probes",
    ),
    A(
        "--panel",
        choices=tuple(PANELS),
        default="first",
        help="the panel you vote in on this target (default first); it is in the vote's salt:"
        " give the same at verdict and reveal-vote",
    ),
    A("--quality", type=U32, default=0, help="0..10000"),
    A(
        "--evidence",
        help="exact mode: HEX,HEX,...: the end state hash your re-execution of each challenged"
        " segment reached, in segment order (the vote commits to incentives.compute_evidence of"
        " them; reveal-vote opens them: a valid vote's must be the committed ends, which only"
        " re-execution yields)",
    ),
    A(
        "--probes",
        help="tolerance mode (instead of --evidence): JSON file, one list of 32 integers per"
        " challenged segment in segment order, the probe (trainer.probe.compute_probe) of the end"
        " your re-execution reached; verdict commits a blind vote on them, reveal-vote opens it"
        " (--valid/--invalid and --quality are given then)",
    ),
)


@dataclass(frozen=True, slots=True)
class Command:
    group: str  # "tx provider", "tx job", "tx round" or "query"
    name: str
    help: str
    example: str
    func: Callable[[argparse.Namespace], int]
    args: tuple[tuple[tuple[str, ...], dict[str, Any]], ...] = ()
    # "tx": --from --home --fee --node -o; "query": --height --prove --node -o; "list": no --prove
    flags: str = "tx"


COMMANDS: tuple[Command, ...] = (
    # ---- tx provider
    Command(
        "tx provider",
        "register",
        "register as a GPU provider, bonding BOND",
        "loconet tx provider register --from alice --bond 2000loco --gpu H100:8:81920 "
        "--throughput 50000 --region eu-west --endpoint http://10.0.0.1:26680 --home ~/.loconet",
        cmd_provider_register,
        (
            A("--bond", required=True, help="e.g. 2000loco (>= min_provider_stake)"),
            A(
                "--gpu",
                action="append",
                help="MODEL:COUNT:MEMORY_MIB (repeatable; default: what torch sees, "
                "e.g. H100:8:81920 or cpu:16:131072)",
            ),
            A(
                "--throughput",
                type=U64,
                required=True,
                help="claimed tokens/s (a warning when above a quick estimate for this machine)",
            ),
            A("--region", required=True),
            A("--endpoint", required=True, help="blob endpoint http(s) URL"),
            A("--skip-hardware-check", action="store_true", help=argparse.SUPPRESS),
        ),
    ),
    Command(
        "tx provider",
        "update",
        "change hardware, throughput, region, endpoint or top up the bond",
        "loconet tx provider update --from alice --add-bond 100loco --home ~/.loconet",
        cmd_provider_update,
        (
            A("--add-bond"),
            A("--gpu", action="append"),
            A("--throughput", type=U64, default=0),
            A("--region", default=""),
            A("--endpoint", default=""),
        ),
    ),
    Command(
        "tx provider",
        "exit",
        "leave: the bond unbonds over unbonding_blocks (still slashable)",
        "loconet tx provider exit --from alice --home ~/.loconet",
        cmd_provider_exit,
    ),
    # ---- tx job
    Command(
        "tx job",
        "create",
        "create a training job, escrowing rounds x (reward + verifier reward)",
        "loconet tx job create --from owner --rounds 3 --reward-per-round 10loco "
        "--verifier-reward 1loco --data corpus.txt --init-seed 0 --blob-source "
        "http://10.0.0.1:26680 --inner-steps 8 --trace-interval 2 --compression topk:0.01+int4 "
        "--participants 2 --shards 4 --tokens-per-step 1024 --windows 4,2,3,2 --challenge-bps "
        "10000 --verifiers 1 --segments 4 --home ~/.loconet",
        cmd_job_create,
        (
            A(
                "--spec",
                help="JSON file with the job (fields as in `query job -o json` spec, plus rounds "
                "and rewards); flags override it",
            ),
            A("--rounds", type=U32, help="required"),
            A("--reward-per-round", help="required: e.g. 10loco"),
            A("--verifier-reward"),
            A("--initial-model", help="64-hex model hash (or --init-seed / --init-model)"),
            A("--dataset-id", help="64-hex sha256 of the data (or --data)"),
            A(
                "--data",
                metavar="FILE",
                help="the training data: its sha256 is the dataset id; stored pinned in "
                "HOME/blobs for providers to fetch",
            ),
            A(
                "--init-seed",
                type=U64,
                metavar="N",
                help="initial model from seed N (trainer.portable_init: the "
                "same bytes on every machine), stored in HOME/blobs",
            ),
            A(
                "--init-model",
                metavar="FILE",
                help="initial model file (trainer canonical model bytes, the job's "
                "--model shape), stored in HOME/blobs",
            ),
            A(
                "--blob-source",
                action="append",
                metavar="URL",
                help="blob server URL where providers fetch the data and model (repeatable, at "
                "most 8)",
            ),
            A(
                "--blob-dir",
                metavar="DIR",
                help="the blob store to put them in, the one --blob-source serves "
                "(default HOME/blobs; a provider worker's is DATA_DIR/blobs)",
            ),
            A("--inner-steps", type=U32, help="required: H"),
            A("--trace-interval", type=U32, help="required: k"),
            A(
                "--compression",
                default=None,
                help="compression policy the trainer runs, e.g. topk:0.01+int4 or "
                f"chunk:64/4096+int2 (default {DEFAULT_COMPRESSION}; grammar in "
                "abci_app/jobs/policy.py; dense is uncompressed float32); "
                "trainer spellings such as int8 are written canonically (dense+int8) before "
                "signing",
            ),
            A(
                "--compression-param",
                action="append",
                help="reserved: no policy takes parameters yet, the chain refuses any (write them "
                "in --compression)",
            ),
            A("--participants", type=U32, help="required: providers drawn per round"),
            A("--shards", type=U32, help="required: data shards"),
            A("--tokens-per-step", type=U64, help="required: tokens per inner step"),
            A(
                "--compute-per-round",
                type=_compute_arg,
                help="expected training time of one round (e.g. 30s, 5m): the windows are sized "
                "from it and the chain's measured block time with 3x slack (default: estimated "
                "from the model and tokens per round)",
            ),
            A(
                "--windows",
                help="COMMIT,REVEAL,VERDICT,ATTEST in blocks (default: from --compute-per-round)",
            ),
            A("--model", help="LAYERS,HEADS,D_MODEL,CONTEXT,VOCAB (default 2,2,64,64,256)"),
            A("--min-reputation", type=U32),
            A("--min-stake"),
            A(
                "--challenge-bps",
                type=U32,
                help=f"commitments challenged, basis points (default {DEFAULT_CHALLENGE_BPS})",
            ),
            A(
                "--verifiers",
                type=U32,
                help=f"verifiers per challenge (default {DEFAULT_VERIFIERS_PER_CHALLENGE}); "
                "proving fraud needs >= "
                "min_fraud_verifiers (3)",
            ),
            A(
                "--segments",
                type=U32,
                help=f"trace segments re-executed per challenge (default "
                f"{DEFAULT_SEGMENTS_PER_CHALLENGE}; see `query job` audit for the catch rate it "
                "buys; a warning names the fix when the verifiers' expected share of compute is "
                "> 5 %% or the round's verification bytes pass half of the 100x traffic budget)",
            ),
            A(
                "--determinism",
                choices=("exact", "tolerance"),
                help="exact: identical state bytes, verifiers on --stack only; tolerance "
                "(default): every state part within --tolerance-ppm",
            ),
            A(
                "--tolerance-ppm",
                type=U32,
                help="tolerance mode: relative distance x 10^6 (default 1000)",
            ),
            A(
                "--stack",
                help="exact mode: the stack it holds on (python -c 'from trainer.determinism "
                "import stack_id; print(stack_id())')",
            ),
        ),
    ),
    Command(
        "tx job",
        "cancel",
        "cancel a job: no new rounds; unspent escrow refunded when the rounds in flight are final",
        "loconet tx job cancel 1 --from owner --home ~/.loconet",
        cmd_job_cancel,
        (JOB_ID,),
    ),
    # ---- tx round
    Command(
        "tx round",
        "submit-update",
        "commit to this round's update (commit window); both roots are bound to the signer: leaf "
        "0 = binding_leaf(update|trace, signer, job, round, base) (abci_app/merkle.py), proven "
        "on chain",
        "loconet tx round submit-update 1 0 --from alice --base-model HEX --payload-file "
        "update.bin --trace-file trace.json --tokens 8192 --loss-before 5500 --loss-after 5200 "
        "--blob http://10.0.0.1:26680/blob/HEX --home ~/.loconet",
        cmd_round_submit,
        (
            JOB_ID,
            ROUND,
            A("--base-model", required=True),
            A(
                "--payload-file",
                help="the compressed update payload: bound update root, its leaf-0 proof and "
                "the size computed here",
            ),
            A(
                "--update-root",
                help="expert: a bound update root (leaf 0 = binding_leaf(b'update', ...)); "
                "needs --update-proof and --payload-size",
            ),
            A(
                "--update-proof",
                help="expert: HEX,HEX,... sibling hashes of leaf 0 under --update-root",
            ),
            A("--payload-size", type=U64, help="bytes (taken from --payload-file when given)"),
            A(
                "--trace-file",
                help="JSON list of hex state hashes (bound root and leaf-0 proof computed here)",
            ),
            A("--trace-root", help="expert: a bound trace root; needs --trace-proof"),
            A(
                "--trace-proof",
                help="expert: HEX,HEX,... sibling hashes of leaf 0 under --trace-root",
            ),
            A("--tokens", type=U64, required=True),
            A("--loss-before", type=U64, required=True, help="milli-nats"),
            A("--loss-after", type=U64, required=True, help="milli-nats"),
            A("--blob", required=True, help="http(s) URL of the payload"),
            A(
                "--probe-file",
                help="tolerance-mode job (required there): JSON list of the H/k + 1 trace"
                " entries' probes, 32 integers each (trainer.probe.trace_probes); the bound probe"
                " root and its leaf-0 proof are computed here",
            ),
        ),
    ),
    Command(
        "tx round",
        "reveal",
        "reveal the challenged trace segments (one message each, one tx) with Merkle proofs in "
        "the signer's bound trace (reveal window)",
        "loconet tx round reveal 1 0 --from alice --segment 2,5 --trace-file trace.json "
        "--start-location URL --home ~/.loconet",
        cmd_round_reveal,
        (
            JOB_ID,
            ROUND,
            A(
                "--segment",
                required=True,
                help="the challenged segments, comma-separated (all of them: the trace list"
                " masks the end of each, opened by its Merkle leaf hash only)",
            ),
            A("--trace-file", required=True),
            A("--base-model", help="the round's base model (default: asked from --node)"),
            A("--start-location", required=True),
            A(
                "--end-location",
                help="ignored (kept for old scripts): the ends stay secret until the votes are"
                " committed; a tolerance-mode job opens them with `tx round open-end`",
            ),
            A("--exact", action="store_true", help="ignored (kept for old scripts): both modes"),
            A(
                "--panel",
                type=int,
                default=0,
                help="1 / 2: open the fresh segments drawn for the appeal / final panel"
                " (challenge.appeal_segments / final_segments, in that panel's voting window;"
                " not opening them is a missed reveal); 0 (default): the challenged segments",
            ),
            A(
                "--judged",
                help="with --panel 1 or 2: every segment that panel judges, comma-separated"
                " (the challenged ones and the fresh ones so far): a fresh segment right after"
                " one of them opens its start by its leaf hash only",
            ),
        ),
    ),
    Command(
        "tx round",
        "open-end",
        "tolerance mode: open the end of each opened segment and its committed probe (vote-reveal"
        " window, after the first panel committed its votes; not opening them is a missed"
        " reveal)",
        "loconet tx round open-end 1 0 --from alice --segment 2,5 --trace-file trace.json "
        "--probe-file probes.json --end-location http://10.0.0.1:26680/e --home ~/.loconet",
        cmd_round_open_end,
        (
            JOB_ID,
            ROUND,
            A("--segment", required=True, help="the opened segments, comma-separated"),
            A("--trace-file", required=True),
            A(
                "--probe-file",
                required=True,
                help="the probes committed with submit-update (--probe-file there)",
            ),
            A("--base-model", help="the round's base model (default: asked from --node)"),
            A("--end-location", required=True, help="http(s) URL where the end states are served"),
        ),
    ),
    Command(
        "tx round",
        "verdict",
        "commit a secret vote on a challenged segment (verdict window; appeal or final window for"
        " the appeal or final panel);"
        " open it with reveal-vote and the same arguments in the next window",
        "loconet tx round verdict 1 0 loco1target... --valid --quality 8000 --evidence HEX "
        "--from bob --home ~/.loconet",
        cmd_round_verdict,
        VOTE_ARGS,
    ),
    Command(
        "tx round",
        "reveal-vote",
        "open the vote committed with verdict (vote-reveal, appeal-reveal or final-reveal window)",
        "loconet tx round reveal-vote 1 0 loco1target... --valid --quality 8000 --evidence HEX "
        "--from bob --home ~/.loconet",
        cmd_round_reveal_vote,
        VOTE_ARGS,
    ),
    Command(
        "tx round",
        "decline",
        "refuse a round you were drawn in, before committing (commit window, by commit_deadline"
        " - 1): outcome declined, no slash, no reputation change; after the deadline the round"
        " ends missed_commit",
        "loconet tx round decline 1 0 --from alice --home ~/.loconet",
        cmd_round_decline,
        (JOB_ID, ROUND),
    ),
    Command(
        "tx round",
        "attest",
        "attest the aggregated model hash (attest window)",
        "loconet tx round attest 1 0 HEX --from alice --home ~/.loconet",
        cmd_round_attest,
        (JOB_ID, ROUND, A("model_hash", metavar="MODEL_HASH")),
    ),
    # ---- query
    Command(
        "query",
        "provider",
        "a provider's bond, status, reputation and hardware",
        "loconet query provider loco1... --prove -o json",
        cmd_query_provider,
        (A("address", metavar="ADDR"),),
        flags="query",
    ),
    Command(
        "query",
        "providers",
        "list providers",
        "loconet query providers --status active",
        cmd_query_providers,
        (A("--status", choices=["active", "jailed", "exiting"]), *LIST_FLAGS),
        flags="list",
    ),
    Command(
        "query",
        "job",
        "a job: spec, escrow, progress",
        "loconet query job 1 --prove",
        cmd_query_job,
        (JOB_ID,),
        flags="query",
    ),
    Command(
        "query",
        "jobs",
        "list jobs",
        "loconet query jobs --owner loco1... -o json",
        cmd_query_jobs,
        (
            A("--owner"),
            A("--status", choices=["active", "cancelling", "cancelled", "completed"]),
            *LIST_FLAGS,
        ),
        flags="list",
    ),
    Command(
        "query",
        "round",
        "one round: phase, participants and shards, commitments, challenges, verdicts, "
        "attested model, payouts, slashes",
        "loconet query round 1 0 --prove",
        cmd_query_round,
        (JOB_ID, ROUND),
        flags="query",
    ),
    Command(
        "query",
        "rounds",
        "a job's rounds",
        "loconet query rounds 1 --offset 0 --limit 20",
        cmd_query_rounds,
        (JOB_ID, *LIST_FLAGS),
        flags="query",
    ),
    Command(
        "query",
        "market-params",
        "providers and jobs params (abci path /market_params)",
        "loconet query market-params -o json",
        cmd_query_market_params,
        flags="query",
    ),
)

GROUP_HELP = {
    "provider": ("GPU provider transactions", "provider_cmd"),
    "job": ("training job transactions", "job_cmd"),
    "round": ("round duties of providers and verifiers", "round_cmd"),
}


def _common_flags(p: argparse.ArgumentParser, kind: str) -> None:
    if kind == "tx":
        p.add_argument(
            "--from", dest="from_key", required=True, metavar="KEY", help="keyring key that signs"
        )
        add_tx_flags(p)
        return
    p.add_argument(
        "--height", type=HEIGHT, default=0, help="state after this block (default latest)"
    )
    if kind == "query":
        p.add_argument(
            "--prove",
            action="store_true",
            help="verify a Merkle proof against the next block header's app hash",
        )
    add_read_flags(p)


def register(root: Any, tx: Any, query: Any) -> None:
    groups: dict[str, Any] = {"query": query}
    for c in COMMANDS:
        if c.group not in groups:
            name = c.group.split()[1]
            help_, dest = GROUP_HELP[name]
            groups[c.group] = tx.add_parser(name, help=help_).add_subparsers(
                dest=dest, required=True, metavar="CMD"
            )
        p = add_command(groups[c.group], c.name, c.help, c.example, c.func)
        for names, kw in c.args:
            p.add_argument(*names, **kw)
        _common_flags(p, c.flags)
