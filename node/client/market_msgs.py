"""Compute-market messages as a library: build, sign and broadcast the txs of providers, job
owners and verifiers. ``loconet tx provider|job|round`` (node/cli/market.py) and the provider
worker (node/worker/) call the same functions, so both sign identical messages.

Builders take plain values and return a ``tx_pb2.Msg``; bad input raises ``UsageError`` naming
the fix. Bound commitments (leaf 0 = the signer's binding leaf) are laid out by
``abci_app.merkle`` (``bound_update_leaves`` / ``bound_trace_leaves`` / ``entry_leaf``) and
nowhere else. ``send_tx`` signs with the account's current sequence and waits for the block.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from abci_app.codec.address import to_bech32
from abci_app.codec.tx import build_tx
from abci_app.jobs.audit import compute_verifier_compute_bps
from abci_app.jobs.incentives import (
    UNAVAILABLE_EVIDENCE,
    compute_blind_vote_hash,
    compute_evidence,
    compute_masked_entries,
    compute_vote_hash,
    is_run_start,
    mask_trace,
)
from abci_app.jobs.msgs import _MIN_BLOCKS
from abci_app.jobs.params import DEFAULTS
from abci_app.jobs.probe import compute_probe_evidence, encode_probe
from abci_app.merkle import (
    BINDING_INDEX,
    binding_leaf,
    bound_trace_leaves,
    bound_update_leaves,
    entry_leaf,
    hash_leaf,
    merkle_proof,
    merkle_root,
)
from abci_app.pb import enum_names, jobs_pb2, providers_pb2, tx_pb2
from node import safejson
from node.client.fees import DEFAULT_MAX_FEE, auth_params, auto_fee, refuse_above_cap
from node.client.inputs import read_input_file
from node.client.light import parse_time
from node.client.rpc import TxRejected
from node.errors import UsageError
from trainer.netmodel import allreduce_step_bytes, reveal_bytes_per_round

__all__ = [
    "build_attest",
    "build_bound_submit",
    "build_cancel_job",
    "build_create_job",
    "build_exit_provider",
    "build_register_provider",
    "build_reveal_from_trace",
    "build_reveal_vote",
    "build_submit_update",
    "build_update_provider",
    "build_verdict",
    "expected_verifier_compute_bps",
    "hex32",
    "job_audit_warning",
    "parse_gpu",
    "read_trace",
    "send_tx",
    "vote_salt",
]


def hex32(text: str, what: str) -> bytes:
    """64 hex characters (optionally 0x-prefixed) -> 32 bytes."""
    try:
        raw = bytes.fromhex(text.strip().removeprefix("0x"))
    except ValueError:
        raw = b""
    if len(raw) != 32:
        raise UsageError(f"{what} must be 64 hex characters (a sha256), got {text!r}")
    return raw


def parse_gpu(text: str) -> Any:
    """``H100:8:81920`` -> GpuSpec(model, count, memory MiB)."""

    parts = text.rsplit(":", 2)
    if len(parts) != 3 or not all(
        p.isascii() and p.isdigit() and len(p) <= 10 and int(p) < 2**32 for p in parts[1:]
    ):  # ASCII: isdigit() alone takes '٨'; COUNT and MEMORY_MIB are uint32 on chain
        raise UsageError(f"bad --gpu {text!r}: write MODEL:COUNT:MEMORY_MIB, e.g. H100:8:81920")
    return providers_pb2.GpuSpec(model=parts[0], count=int(parts[1]), memory_mib=int(parts[2]))


# ----------------------------------------------------------------------------- providers


def build_register_provider(
    bond: int,
    gpus: Sequence[str],
    throughput: int,
    region: str,
    endpoint: str,
    *,
    min_slot_reward: int = 0,
) -> Any:
    """``min_slot_reward`` > 0 sets the opt-in policy: drawn only for jobs paying at least that
    per slot (0: no policy, every job)."""

    msg = providers_pb2.MsgRegisterProvider(
        bond=bond,
        hardware=[parse_gpu(g) for g in gpus],
        throughput_tokens_per_sec=throughput,
        region=region,
        endpoint=endpoint,
    )
    if min_slot_reward:
        msg.policy.min_slot_reward = min_slot_reward
    return tx_pb2.Msg(register_provider=msg)


def build_update_provider(
    add_bond: int = 0,
    gpus: Sequence[str] = (),
    throughput: int = 0,
    region: str = "",
    endpoint: str = "",
) -> Any:
    return tx_pb2.Msg(
        update_provider=providers_pb2.MsgUpdateProvider(
            add_bond=add_bond,
            hardware=[parse_gpu(g) for g in gpus],
            throughput_tokens_per_sec=throughput,
            region=region,
            endpoint=endpoint,
        )
    )


def build_exit_provider() -> Any:
    return tx_pb2.Msg(exit_provider=providers_pb2.MsgExitProvider())


# ----------------------------------------------------------------------------- jobs

# the job defaults ``tx job create`` asks for and ``build_create_job`` fills in
# (docs/threat-model.md "Enough segments"): 5 % of commitments challenged (the chain's floor,
# min_challenge_bps), one segment re-executed per challenge, one first-panel verifier. What stops
# a rational cheater is its expected loss, which the chain's collateral rule
# (incentives.compute_required_bond) keeps >= collateral_margin (2x) its gain at any challenge
# rate; a higher rate buys the owner certainty and costs bytes: each verifier of a challenge
# fetches two trainer states (12 B/param each), so at 100 % with 15 segments the verification
# alone weighed as much as the fp32 AllReduce the design exists to avoid (issue 29)
DEFAULT_CHALLENGE_BPS = 500
DEFAULT_COMPRESSION = "dense+int8"  # the payload codec tx job create asks for (cli_market.py)
DEFAULT_SEGMENTS_PER_CHALLENGE = 1
DEFAULT_VERIFIERS_PER_CHALLENGE = 1
# what a job's challenge settings must not cost: the verifiers' expected re-executed steps, panel
# audits included, <= 5 % of the provider's; the verification bytes of a round (served and
# fetched, trainer/netmodel.py) <= half of the whole-round budget, 1/100 of per-step fp32 ring
# AllReduce for the same steps (the other half is for the payloads and model downloads)
VERIFIER_SHARE_TARGET_BPS = 500
TRAFFIC_TARGET = 100  # whole-round traffic >= 100x below per-step fp32 ring AllReduce
VERIFICATION_SHARE_OF_BUDGET = 0.5
# the fixed work a verifier pays per opened segment besides its k steps, in provider steps: load
# the start into its workspace, encode and hash the reached state, its probe, the opened-end
# judgement (and per challenge the start, payload and trace-root checks and the quality score).
# Measured on the benchmark's tiny and small models, the worst case (their step is cheapest next
# to a decode of their state): about one step per segment, all of it included (benchmarks/
# RESULTS.md "Verifier compute with the shortcuts on the run path": tiny k = 1 at n = 480
# measured 7.8-8.6 %, this model says 8.4 %; at n = 960 3.7-3.8 %, the model 4.2 %)
FIXED_STEPS_PER_SEGMENT = 1
# and per challenge, whatever its segments: build the fresh start, check the trace root,
# re-compress the payload, the quality score of a valid vote. At one segment a challenge this
# dominates (benchmarks/RESULTS.md "Verification at the shipped defaults, on the network's path":
# 0.035-0.110 % measured at n = 480 where the per-segment term alone said 0.018-0.029 %); 8 is the
# upper end of the 5-8 steps measured, so the estimate stays an upper one
FIXED_STEPS_PER_CHALLENGE = 8


def _audits(audit_bps: int | None, audit_verifiers: int | None) -> tuple[int, int]:
    """The panel audits' rate and seats: the given ones, else the chain's defaults."""

    return (
        DEFAULTS["audit_bps"] if audit_bps is None else audit_bps,
        DEFAULTS["audit_verifiers"] if audit_verifiers is None else audit_verifiers,
    )


def expected_verifier_compute_bps(
    n: int,
    s: int,
    challenge_bps: int,
    verifiers: int = DEFAULT_VERIFIERS_PER_CHALLENGE,
    *,
    audit_bps: int | None = None,
    audit_verifiers: int | None = None,
) -> int:
    """Expected steps re-executed by all of a job's verifiers per provider step, in basis points,
    for an honest provider: one verifier's share (``audit.compute_verifier_compute_bps``:
    c·min(s, n)/n) times the first panel's ``verifiers`` plus the panel audit's
    ``audit_bps``/10⁴ × ``audit_verifiers`` (a challenge is audited with that probability: its first
    panel gets that many more seats; the chain's defaults when not given: 4000 bps, 1).
    """

    a, av = _audits(audit_bps, audit_verifiers)
    one = compute_verifier_compute_bps(n, s, challenge_bps)
    return one * (verifiers * 10_000 + a * av) // 10_000


def expected_verifier_work_bps(
    n: int,
    s: int,
    challenge_bps: int,
    k: int,
    verifiers: int = DEFAULT_VERIFIERS_PER_CHALLENGE,
    *,
    audit_bps: int | None = None,
    audit_verifiers: int | None = None,
) -> int:
    """``expected_verifier_compute_bps`` (the re-executed steps) plus the fixed work: of each
    opened segment, ``FIXED_STEPS_PER_SEGMENT`` steps on top of its ``k``, and of each challenge
    ``FIXED_STEPS_PER_CHALLENGE`` steps, for each of its expected verifiers. The verifiers'
    expected compute per provider step (H = n·k of them a round), in basis points, as measured on
    small models (an upper estimate for larger ones, whose steps dwarf the fixed work)."""

    steps = expected_verifier_compute_bps(
        n, s, challenge_bps, verifiers, audit_bps=audit_bps, audit_verifiers=audit_verifiers
    )
    a, av = _audits(audit_bps, audit_verifiers)
    # challenge_bps x (verifiers + a/10^4 x av) x F / H, in basis points
    per_challenge = (
        challenge_bps
        * (verifiers * 10_000 + a * av)
        * FIXED_STEPS_PER_CHALLENGE
        // (10_000 * n * k)
    )
    return steps * (k + FIXED_STEPS_PER_SEGMENT) // k + per_challenge


def verification_traffic_share(
    H: int,
    n: int,
    s: int,
    challenge_bps: int,
    participants: int,
    verifiers: int = DEFAULT_VERIFIERS_PER_CHALLENGE,
    *,
    audit_bps: int | None = None,
    audit_verifiers: int | None = None,
) -> float | None:
    """A round's expected verification bytes per participant (its reveals served and, on
    average, as many fetched as a verifier: trainer/netmodel.py) over per-step fp32 ring
    AllReduce for the same H steps, sent and received. Independent of the model size: both are
    bytes per parameter (the trace list's 32 B an entry left out). None for one participant
    (no AllReduce to compare with)."""

    if participants < 2:
        return None
    a, av = _audits(audit_bps, audit_verifiers)
    reveal = reveal_bytes_per_round(
        1.0,
        challenge_bps=challenge_bps,
        segments=min(s, n),
        verifiers=verifiers,
        audit_bps=a,
        audit_verifiers=av,
    )
    return 2 * reveal / (2 * H * allreduce_step_bytes(1.0, participants, 4))


def job_audit_warning(
    d: dict[str, Any], *, audit_bps: int | None = None, audit_verifiers: int | None = None
) -> str | None:
    """One line when a job dict (``build_create_job``'s) misses the targets above, naming the
    settings that would meet them; None when it meets them (or has no whole number of
    segments, which the chain refuses anyway). Compute: ``expected_verifier_work_bps`` (the
    re-executed steps and the fixed work per segment); bytes: ``verification_traffic_share``."""
    try:
        H, k = int(d["inner_steps"]), int(d["trace_interval"])
        s = int(d.get("segments_per_challenge", DEFAULT_SEGMENTS_PER_CHALLENGE))
        c = int(d.get("challenge_bps", DEFAULT_CHALLENGE_BPS))
        v = int(d.get("verifiers_per_challenge", DEFAULT_VERIFIERS_PER_CHALLENGE))
        p = int(d.get("participants_per_round", 0))
    except (KeyError, TypeError, ValueError):
        return None
    if k <= 0 or H <= 0 or H % k or s <= 0 or v <= 0 or not 0 < c <= 10_000:
        return None
    n = H // k
    kw: dict[str, Any] = {"audit_bps": audit_bps, "audit_verifiers": audit_verifiers}
    budget = VERIFICATION_SHARE_OF_BUDGET / TRAFFIC_TARGET

    def share(s_: int, c_: int) -> int:
        return expected_verifier_work_bps(n, s_, c_, k, v, **kw)

    def traffic(s_: int, c_: int) -> float:
        return verification_traffic_share(H, n, s_, c_, p, v, **kw) or 0.0

    problems = []
    if share(s, c) > VERIFIER_SHARE_TARGET_BPS:
        problems.append(
            f"its verifiers' expected compute is {share(s, c) / 100:.2f} % of the provider's "
            f"(> {VERIFIER_SHARE_TARGET_BPS / 100:g} %, panel audits and the fixed work per "
            "segment included)"
        )
    if traffic(s, c) > budget:
        problems.append(
            f"its verification moves 1/{1 / traffic(s, c):.0f} of what per-step fp32 AllReduce "
            f"would (> 1/{1 / budget:.0f}: the round cannot stay {TRAFFIC_TARGET}x below it)"
        )
    if not problems:
        return None
    return (
        f"warning: H/k = {n} segments, --segments {s}, --challenge-bps {c}, --verifiers {v}: "
        + " and ".join(problems)
        + f"; fix: {_audit_fix(n, k, s, c, share, traffic, budget)} "
        '(docs/threat-model.md "Enough segments")'
    )


def _audit_fix(
    n: int, k: int, s: int, c: int, share: Callable, traffic: Callable, budget: float
) -> str:
    """The nearest settings that meet both targets: fewer segments, then a lower challenge rate
    (down to the chain's floor), then a longer trace (more steps per round)."""

    def ok(s_: int, c_: int) -> bool:
        return share(s_, c_) <= VERIFIER_SHARE_TARGET_BPS and traffic(s_, c_) <= budget

    for s_ in range(min(s, n), 0, -1):
        if ok(s_, c):
            return f"--segments {s_}"
    floor = DEFAULTS["min_challenge_bps"]
    for c_ in range(c, floor - 1, -100):
        if ok(1, c_):
            return f"--segments 1 --challenge-bps {c_}" if s != 1 else f"--challenge-bps {c_}"
    return (
        f"--segments 1 --challenge-bps {floor} and more steps per round (--inner-steps): both "
        "shares fall as 1/H"
    )


# -- windows sized from the job (abci_app/jobs/README.md "Windows") -----------------------------

# Every window is an upper bound: a phase whose messages are all in ends early (jobs README "Early
# close"), so generous windows cost nothing when everyone is on time. They are what a slow but
# honest machine gets before it is counted as absent:
WINDOW_SLACK = 3  # a provider (or verifier) 3x slower than the stated compute still makes it
COMMIT_FIXED_S = 30  # fetch the base model and the shard, store the trace, send the commitment
REVEAL_S = 15  # build the openings and send them (no compute)
VERIFY_FIXED_S = 30  # fetch the opened states, trace list and payload; check them; send the vote
ATTEST_S = 30  # fetch the accepted updates, aggregate them, attest the model
DEFAULT_BLOCK_S = 1.0  # cometbft's default timeout_commit, when the chain cannot be asked
BLOCK_TIME_SPAN = 50  # blocks the block time is measured over


def _blocks(seconds: float, block_s: float) -> int:
    return max(1, math.ceil(seconds / block_s - 1e-9))  # 30 / 0.3 is 100.00000000000001


def compute_windows(
    compute_s: float,
    block_s: float,
    *,
    inner_steps: int,
    trace_interval: int,
    segments: int,
) -> dict[str, int]:
    """{commit, reveal, verdict, attest} in blocks for a job whose round trains ``compute_s``
    seconds, on a chain making a block every ``block_s`` seconds: the commit window holds
    WINDOW_SLACK x the compute plus its fixed work (and the deadline block, which takes no
    commitment); a verdict window WINDOW_SLACK x a verifier's re-execution (``segments`` of
    ``trace_interval`` steps out of ``inner_steps``) plus its fetches; reveal and attest their
    fixed work. Each at least the chain's floor (jobs README "Windows"), at most
    params.max_window_blocks (``cap_windows`` says when that cuts one)."""

    h, k = max(1, inner_steps), max(1, trace_interval)
    seg = min(max(1, segments), max(1, h // k))
    verify_s = compute_s * seg * k / h
    w = {
        "commit": _blocks(WINDOW_SLACK * compute_s + COMMIT_FIXED_S, block_s) + 1,
        "reveal": _blocks(REVEAL_S, block_s),
        "verdict": _blocks(WINDOW_SLACK * verify_s + VERIFY_FIXED_S, block_s),
        "attest": _blocks(ATTEST_S, block_s),
    }
    return {n: max(v, _MIN_BLOCKS[f"{n}_blocks"]) for n, v in w.items()}


def cap_windows(w: dict[str, int], max_blocks: int) -> tuple[dict[str, int], list[str]]:
    """``w`` with every window cut to ``max_blocks`` (params.max_window_blocks), and the names
    of the ones cut."""
    cut = sorted(n for n, v in w.items() if v > max_blocks)
    return {n: min(v, max_blocks) for n, v in w.items()}, cut


def estimate_compute_s(d: dict[str, Any], flops_per_s: float) -> float:
    """A round's training time when the owner states none: 6 x parameters x tokens per round
    (forward and backward) at ``flops_per_s``."""
    m = d["model"]
    dm, layers, vocab, ctx = m["d_model"], m["n_layers"], m["vocab_size"], m["context_len"]
    params = layers * 12 * dm * dm + vocab * dm + ctx * dm
    tokens = int(d["tokens_per_step"]) * int(d["inner_steps"])
    return 6 * params * tokens / flops_per_s


def measure_block_time(client: Any, span: int = BLOCK_TIME_SPAN) -> float | None:
    """The chain's mean block interval over its last ``span`` blocks, in seconds (None: fewer
    than 3 blocks, or the node cannot say)."""

    try:
        top = client.latest_height()
        if top < 3:
            return None
        low = max(1, top - span)

        def at(height: int) -> float:
            sec, nanos = parse_time(client.block(height)["block"]["header"]["time"])
            return sec + nanos / 1e9

        dt = at(top) - at(low)
    except Exception:  # noqa: BLE001 (a node that cannot answer: the caller says so)
        return None
    return dt / (top - low) if dt > 0 else None


def _int(name: str, v: Any) -> int:
    """A whole number from a job spec: an int (not a bool) or ASCII decimal digits. A float was
    truncated (10.99 -> 10, the owner signed other numbers than the file held), 1e999 was an
    OverflowError traceback and "١٢" (non-ASCII digits) was read as 12."""
    if isinstance(v, str) and v.isascii() and v.removeprefix("-").isdigit():
        return int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise UsageError(f"job spec {name} must be a whole number, got {v!r}"[:300])
    return v


def _obj(name: str, v: Any) -> dict[str, Any]:
    if not isinstance(v, dict) or not all(isinstance(k, str) for k in v):
        raise UsageError(f"job spec {name} must be a JSON object, got {v!r}"[:300])
    return v


def build_create_job(d: dict[str, Any]) -> Any:
    """From a dict shaped like ``/job`` JSON's ``spec`` plus ``rounds``, ``reward_per_round`` and
    ``verifier_reward_per_round`` (hashes hex, windows as {commit, reveal, verdict, attest};
    ``blob_sources``, ``initial_model_bytes`` and ``dataset_bytes`` optional:
    node/client/job_inputs.py)."""

    try:
        if not isinstance(d, dict):
            raise UsageError(f"a job spec is a JSON object, got {type(d).__name__}")
        w = _obj("windows", d["windows"])
        spec = jobs_pb2.JobSpec(
            model=jobs_pb2.ModelConfig(
                **{k: _int(f"model.{k}", v) for k, v in _obj("model", d["model"]).items()}
            ),
            initial_model_hash=hex32(d["initial_model_hash"], "initial_model_hash"),
            dataset_id=hex32(d["dataset_id"], "dataset_id"),
            inner_steps=_int("inner_steps", d["inner_steps"]),
            trace_interval=_int("trace_interval", d["trace_interval"]),
            compression_policy=str(d["compression_policy"]),
            compression_params=[
                jobs_pb2.CompressionParam(key=k, value=_int(f"compression_params.{k}", v))
                for k, v in sorted(
                    _obj("compression_params", d.get("compression_params", {})).items()
                )
            ],
            participants_per_round=_int("participants_per_round", d["participants_per_round"]),
            num_shards=_int("num_shards", d["num_shards"]),
            tokens_per_step=_int("tokens_per_step", d["tokens_per_step"]),
            commit_blocks=_int("windows.commit", w["commit"]),
            reveal_blocks=_int("windows.reveal", w["reveal"]),
            verdict_blocks=_int("windows.verdict", w["verdict"]),
            attest_blocks=_int("windows.attest", w["attest"]),
            min_reputation=_int("min_reputation", d.get("min_reputation", 0)),
            min_stake=_int("min_stake", d.get("min_stake", 0)),
            challenge_bps=_int("challenge_bps", d["challenge_bps"]),
            verifiers_per_challenge=_int("verifiers_per_challenge", d["verifiers_per_challenge"]),
            blob_sources=[str(u) for u in d.get("blob_sources", ())],
            initial_model_bytes=_int("initial_model_bytes", d.get("initial_model_bytes", 0)),
            dataset_bytes=_int("dataset_bytes", d.get("dataset_bytes", 0)),
            segments_per_challenge=_int(
                "segments_per_challenge",
                d.get("segments_per_challenge", DEFAULT_SEGMENTS_PER_CHALLENGE),
            ),
            determinism_mode=_determinism_mode(str(d.get("determinism_mode", "tolerance"))),
            tolerance_ppm=_int("tolerance_ppm", d.get("tolerance_ppm", 0)),
            stack=str(d.get("stack", "")),
            compute_s_per_round=_int("compute_s_per_round", d.get("compute_s_per_round", 0)),
        )
        return tx_pb2.Msg(
            create_job=jobs_pb2.MsgCreateJob(
                spec=spec,
                rounds=_int("rounds", d["rounds"]),
                reward_per_round=_int("reward_per_round", d["reward_per_round"]),
                verifier_reward_per_round=_int(
                    "verifier_reward_per_round", d.get("verifier_reward_per_round", 0)
                ),
            )
        )
    except KeyError as e:
        raise UsageError(f"job spec is missing {e.args[0]!r}") from None
    except (TypeError, ValueError) as e:
        raise UsageError(f"bad job spec: {e}") from None


def _determinism_mode(name: str) -> int:
    names = enum_names(jobs_pb2.DeterminismMode)
    if name not in names or name == "unspecified":
        raise UsageError(f"determinism_mode must be exact or tolerance, got {name!r}")
    return names.index(name)


def build_cancel_job(job_id: int) -> Any:
    return tx_pb2.Msg(cancel_job=jobs_pb2.MsgCancelJob(job_id=job_id))


# ----------------------------------------------------------------------------- round duties


def build_submit_update(
    job_id: int,
    round_: int,
    *,
    base_model: bytes,
    update_root: bytes,
    payload_size: int,
    trace_root: bytes,
    tokens: int,
    loss_before: int,
    loss_after: int,
    blob: str,
    update_binding_proof: Sequence[bytes] = (),
    trace_binding_proof: Sequence[bytes] = (),
    probe_root: bytes = b"",
    probe_binding_proof: Sequence[bytes] = (),
) -> Any:
    return tx_pb2.Msg(
        submit_update=jobs_pb2.MsgSubmitUpdate(
            job_id=job_id,
            round=round_,
            base_model_hash=base_model,
            update_root=update_root,
            payload_size=payload_size,
            trace_root=trace_root,
            tokens_processed=tokens,
            loss_before_mnats=loss_before,
            loss_after_mnats=loss_after,
            blob_location=blob,
            update_binding_proof=list(update_binding_proof),
            trace_binding_proof=list(trace_binding_proof),
            probe_root=probe_root,
            probe_binding_proof=list(probe_binding_proof),
        )
    )


def bound_update_commitment(
    provider: bytes, job_id: int, round_: int, base_model: bytes, payload: bytes
) -> tuple[bytes, list[bytes]]:
    """The update root of ``payload`` bound to ``provider`` (abci_app.merkle layout: leaf 0 =
    binding_leaf) and the proof of its binding leaf: what MsgSubmitUpdate commits to. The one
    builder of a commitment (the worker, ``tx round submit``, the kits)."""
    leaves = bound_update_leaves(provider, job_id, round_, base_model, payload)
    return merkle_root(leaves), merkle_proof(leaves, BINDING_INDEX)


def bound_trace_commitment(
    provider: bytes, job_id: int, round_: int, base_model: bytes, trace: Sequence[bytes]
) -> tuple[bytes, list[bytes]]:
    """The trace root of the state hashes ``trace`` bound to ``provider``, and the proof of its
    binding leaf (a trace entry that is not a 32-byte hash is a UsageError)."""
    try:
        leaves = bound_trace_leaves(provider, job_id, round_, base_model, trace)
    except ValueError as e:
        raise UsageError(str(e)) from None
    return merkle_root(leaves), merkle_proof(leaves, BINDING_INDEX)


def build_bound_submit(
    job_id: int,
    round_: int,
    *,
    provider: bytes,
    base_model: bytes,
    payload: bytes,
    trace: Sequence[bytes],
    tokens: int,
    loss_before: int,
    loss_after: int,
    blob: str,
    probes: Sequence[Sequence[int]] | None = None,
) -> Any:
    """MsgSubmitUpdate with both roots bound to ``provider`` (``bound_update_commitment``,
    ``bound_trace_commitment``). ``probes`` (a tolerance-mode job: trainer.probe.trace_probes of
    the states, one per trace entry): with the bound probe root and its binding proof."""
    update_root, update_proof = bound_update_commitment(
        provider, job_id, round_, base_model, payload
    )
    trace_root, trace_proof = bound_trace_commitment(provider, job_id, round_, base_model, trace)
    return build_submit_update(
        job_id,
        round_,
        base_model=base_model,
        update_root=update_root,
        payload_size=len(payload),
        trace_root=trace_root,
        tokens=tokens,
        loss_before=loss_before,
        loss_after=loss_after,
        blob=blob,
        update_binding_proof=update_proof,
        trace_binding_proof=trace_proof,
        **probe_fields(job_id, round_, provider, base_model, probes),
    )


def _probe_leaves(
    job_id: int, round_: int, provider: bytes, base_model: bytes, probes: Sequence[Sequence[int]]
) -> list[bytes]:
    try:
        return [binding_leaf(b"probe", provider, job_id, round_, base_model)] + [
            encode_probe(p) for p in probes
        ]
    except ValueError as e:
        raise UsageError(f"probes: {e}") from None


def probe_fields(
    job_id: int,
    round_: int,
    provider: bytes,
    base_model: bytes,
    probes: Sequence[Sequence[int]] | None,
) -> dict[str, Any]:
    if probes is None:
        return {}
    pl = _probe_leaves(job_id, round_, provider, base_model, probes)
    return {"probe_root": merkle_root(pl), "probe_binding_proof": merkle_proof(pl, BINDING_INDEX)}


def build_open_end(
    job_id: int,
    round_: int,
    segment: int,
    trace: Sequence[bytes],
    probes: Sequence[Sequence[int]],
    end_location: str,
    *,
    provider: bytes,
    base_model: bytes,
) -> Any:
    """MsgOpenEnd (tolerance mode, vote-reveal window): the end of ``segment`` (trace entry
    ``segment + 1``), where it is served, and its committed probe with its proof under the probe
    root ``build_bound_submit`` committed."""

    if not 0 <= segment < len(trace) - 1 or len(probes) != len(trace):
        raise UsageError(f"segment {segment} is outside the trace, or probes do not match it")
    pl = _probe_leaves(job_id, round_, provider, base_model, probes)
    return tx_pb2.Msg(
        open_end=jobs_pb2.MsgOpenEnd(
            job_id=job_id,
            round=round_,
            segment=segment,
            end_state_hash=trace[segment + 1],
            end_location=end_location,
            probe=list(probes[segment + 1]),
            probe_proof=merkle_proof(pl, entry_leaf(segment + 1)),
        )
    )


def build_reveal_from_trace(
    job_id: int,
    round_: int,
    segment: int,
    trace: Sequence[bytes],
    start_location: str,
    end_location: str,
    *,
    provider: bytes,
    base_model: bytes,
    with_list: bool = True,
    exact: bool = False,
    segments: Sequence[int] = (),
    panel: int = 0,
    judged: Sequence[int] = (),
) -> Any:
    """Reveal trace entries ``segment`` and ``segment+1`` with their Merkle proofs in the
    provider's bound trace (leaves ``entry_leaf(segment)`` and ``entry_leaf(segment + 1)``),
    and the trace list's hash (sha256 of the concatenated state hashes: the blob a verifier
    fetches) with the list itself (``with_list``; required in the participant's first opening,
    where the chain proves it against the trace root; later openings may leave it out).
    The end is opened by its leaf hash only (``hash_leaf(state hash)``, both modes; ``exact`` is
    ignored), its state hash and location stay secret until the votes are committed
    (tolerance mode: ``build_open_end`` opens them then), and the list holds the secret ends of
    all the challenged ``segments`` as their leaf hashes (incentives.mask_trace;
    docs/threat-model.md *Evidence only re-execution yields*); ``end_location`` is
    ignored. A segment whose predecessor is challenged too opens its start by its leaf hash
    as well (``start_leaf_hash``; no start hash, ``start_location`` ignored): only the start
    of each run of adjacent challenged segments is public (incentives.is_run_start).
    The list masks every entry but 0, H/k and the runs' starts (incentives.compute_masked_entries
    of the first panel's ``segments``): a segment drawn fresh for a later panel has an end
    nobody saw. ``panel`` > 0: a fresh segment drawn for the appeal (1) or final (2) panel at
    escalation, opened in that panel's voting window, the list named by its hash only (the first
    opening proved it); ``judged``, every segment that panel judges (the first panel's and the
    fresh ones), decides whether it starts a run."""

    if not 0 <= segment < len(trace) - 1:
        raise UsageError(f"segment {segment} is outside the trace's {len(trace) - 1} segments")
    segs = list(segments) or [segment]
    hidden = compute_masked_entries(segs, len(trace) - 1)
    trace_list = b"".join(mask_trace(list(trace), hidden))
    leaves = bound_trace_leaves(provider, job_id, round_, base_model, trace)
    end = trace[segment + 1]
    run_start = is_run_start(segment, list(judged) or segs)
    return tx_pb2.Msg(
        reveal_segment=jobs_pb2.MsgRevealSegment(
            job_id=job_id,
            round=round_,
            segment=segment,
            start_state_hash=trace[segment] if run_start else b"",
            end_state_hash=b"",
            start_proof=merkle_proof(leaves, entry_leaf(segment)),
            end_proof=merkle_proof(leaves, entry_leaf(segment + 1)),
            start_location=start_location if run_start else "",
            end_location="",
            trace_list_hash=hashlib.sha256(trace_list).digest(),
            trace_list=trace_list if with_list and not panel else b"",
            end_leaf_hash=hash_leaf(end),
            start_leaf_hash=b"" if run_start else hash_leaf(trace[segment]),
            panel=panel,
        )
    )


def vote_salt(signer: Any, job_id: int, round_: int, target: bytes, panel: int = 0) -> bytes:
    """The salt of a secret vote, derived from the voter's key (an ed25519 signature is
    deterministic): ``verdict`` and ``reveal-vote`` compute the same one, nobody else can.
    ``panel`` (0 first, 1 appeal, 2 final) is in it: a verifier seated on the same target in two
    panels opens its first vote (and salt) before it commits the later one, whose hash would
    otherwise be guessable from that salt (an unavailable vote's, byte for byte)."""

    sig = signer.sign(
        b"loconet/vote-salt/v1"
        + job_id.to_bytes(8, "big")
        + round_.to_bytes(8, "big")
        + target
        + (bytes((panel,)) if panel else b"")
    )
    return hashlib.sha256(sig).digest()


def build_verdict(
    signer: Any,
    job_id: int,
    round_: int,
    target: bytes,
    valid: bool,
    quality: int,
    evidence: bytes,
    *,
    blind: bool = False,
    unavailable: bool = False,
    panel: int = 0,
) -> Any:
    """MsgVerdict: the hash of the vote (abci_app.jobs.incentives.compute_vote_hash);
    ``blind`` (tolerance mode): of the evidence and salt only (compute_blind_vote_hash: valid and
    quality are given when it is opened). ``unavailable`` (either mode): the vote that the
    revealed states could not be fetched (valid, quality and evidence are then ignored: it
    commits to invalid, 0 and incentives.UNAVAILABLE_EVIDENCE). ``panel``: the voter's panel on
    this target (0 first, 1 appeal, 2 final), in the salt (``vote_salt``)."""

    salt = vote_salt(signer, job_id, round_, target, panel)
    if blind and not unavailable:
        h = compute_blind_vote_hash(job_id, round_, target, signer.address, evidence, salt)
    else:
        valid = valid and not unavailable
        h = compute_vote_hash(
            job_id,
            round_,
            target,
            signer.address,
            valid,
            quality if valid else 0,
            UNAVAILABLE_EVIDENCE if unavailable else evidence,
            salt,
            unavailable,
        )
    return tx_pb2.Msg(
        verdict=jobs_pb2.MsgVerdict(job_id=job_id, round=round_, target=target, vote_hash=h)
    )


def build_reveal_vote(
    signer: Any,
    job_id: int,
    round_: int,
    target: bytes,
    valid: bool,
    quality: int,
    reached: Sequence[bytes],
    probes: Sequence[int] | None = None,
    *,
    unavailable: bool = False,
    panel: int = 0,
) -> Any:
    """MsgRevealVote opening what ``build_verdict`` committed with the same arguments: the end
    states the re-execution reached (one per opened segment, segment order) and their digest
    ``compute_evidence(reached)``, the ``evidence`` the vote hash committed to. ``probes``
    (tolerance mode, a blind vote): the flat probes of the reached states instead, evidence
    ``compute_probe_evidence(probes)``. ``unavailable``: opens an unavailable vote (invalid,
    quality 0, nothing reached, no probes, evidence incentives.UNAVAILABLE_EVIDENCE)."""

    tolerance = probes is not None and not unavailable
    valid = valid and not unavailable
    if unavailable:
        evidence = UNAVAILABLE_EVIDENCE
    elif tolerance:
        evidence = compute_probe_evidence(list(probes or []))
    else:
        evidence = compute_evidence(list(reached))
    return tx_pb2.Msg(
        reveal_vote=jobs_pb2.MsgRevealVote(
            job_id=job_id,
            round=round_,
            target=target,
            valid=valid,
            quality=quality if valid else 0,
            evidence=evidence,
            salt=vote_salt(signer, job_id, round_, target, panel),
            reached=[] if tolerance or unavailable else list(reached),
            probes=list(probes or []) if tolerance else [],
            unavailable=unavailable,
        )
    )


def build_decline_round(job_id: int, round_: int) -> Any:
    """MsgDeclineRound: a drawn provider that has not committed refuses the round (outcome
    ``declined``, no slash, no reputation change; its slot stays in the job's escrow). It must
    land by commit_deadline - 1 (block D's seed draws the challenges), so send it by D - 2."""

    return tx_pb2.Msg(decline_round=jobs_pb2.MsgDeclineRound(job_id=job_id, round=round_))


def build_attest(
    job_id: int, round_: int, model_hash: bytes, excluded: list[bytes] | None = None
) -> Any:
    """MsgAttestModel: the aggregate's hash and the accepted participants (20-byte addresses)
    whose updates it screened out, ascending."""

    return tx_pb2.Msg(
        attest_model=jobs_pb2.MsgAttestModel(
            job_id=job_id,
            round=round_,
            model_hash=model_hash,
            excluded=sorted(set(excluded or ())),
        )
    )


def read_trace(path: str) -> list[bytes]:
    """A trace file: JSON list of the 64-hex state hashes (steps 0, k, ..., H)."""
    try:  # read_input_file: a FIFO or /dev/zero is a UsageError, not a hang
        items = json.loads(read_input_file(path, "trace file"))
    except (OSError, ValueError, RecursionError) as e:  # RecursionError: [[[[... (a traceback)
        raise UsageError(f"cannot read trace file {path}: {e}") from None
    if not isinstance(items, list) or len(items) < 2:
        raise UsageError(f"{path}: a trace is a JSON list of at least 2 hex state hashes")
    return [hex32(str(x), f"{path} entry") for x in items]


# ----------------------------------------------------------------------------- sign and send

WRONG_SEQUENCE = ("tx", 6)  # abci_app.errors.ErrWrongSequence


def account_sequence(client: Any, address: str) -> int:
    acc = safejson.loads(client.abci_query(f"/account/{address}").value or b"{}")
    return int(acc.get("sequence", 0))


def send_tx(
    client: Any,
    signer: Any,
    msgs: list[Any],
    *,
    fee: int | None = None,
    fee_floor: int = 0,
    wait: bool = True,
    sequence_retries: int = 3,
    timeout: float = 30.0,
    on_broadcast: Callable[[str], None] | None = None,
    max_fee: int = DEFAULT_MAX_FEE,
) -> dict[str, Any]:
    """Sign ``msgs`` with the account's current sequence, broadcast_tx_sync and (``wait``) wait
    for the block. A tx refused for a wrong sequence (another tx of this account landed in
    between) is re-signed with the fresh sequence, up to ``sequence_retries`` times; any other
    rejection raises ``node.client.rpc.TxRejected``. While waiting, a tx that left the mempool
    without a block (dropped or evicted: ``Client.wait_for_tx``) is broadcast again, and re-signed
    if
    its sequence was taken meanwhile. ``on_broadcast(txhash)`` is called once CheckTx passed.
    Returns {"txhash", "height", "tx"} (height 0 if not waited; "tx" = the signed bytes, for
    ``wait_for_tx(..., resubmit=[tx])`` when the caller waits itself). ``fee=None`` (the
    default) pays the chain's exact minimum for the signed bytes (node/client/fees.py); an explicit
    fee is sent as it is (the chain refuses it below the minimum, code tx/13). ``fee_floor``
    (with ``fee=None``) pays at least that much, and the exact minimum when that is higher: what a
    worker needs, whose txs must never be refused for their fee (a refused reveal is slashed).
    An auto fee above ``max_fee`` (10 LOCO; the floor if higher) is refused unsigned
    (UsageError): the node's auth params decide it, and a hostile node could ask the balance."""

    url = getattr(client, "url", "?")
    chain_id = client.status()["node_info"]["network"]
    address = to_bech32(signer.address)
    params = auth_params(client) if fee is None else None
    for attempt in range(sequence_retries + 1):

        def build(f: int, seq: int = account_sequence(client, address)) -> bytes:
            return build_tx(signer, chain_id=chain_id, msgs=msgs, sequence=seq, fee=f)

        if params is not None:
            auto, raw = auto_fee(params, len(msgs), build, floor=fee_floor)
            # the floor is the caller's own choice: never refused for it
            refuse_above_cap(auto, max(max_fee, fee_floor), url, params, len(raw), len(msgs))
        else:
            raw = build(fee or 0)
        try:
            tx_hash = client.broadcast_tx_sync(raw)
            if on_broadcast is not None:
                on_broadcast(tx_hash)
            if not wait:
                return {"txhash": tx_hash, "height": 0, "tx": raw}
            res = client.wait_for_tx(tx_hash, timeout=timeout, resubmit=[raw])
            return {"txhash": tx_hash, "height": int(res["height"]), "tx": raw}
        except TxRejected as e:
            if (e.codespace, e.code) != WRONG_SEQUENCE or attempt == sequence_retries:
                raise
            time.sleep(0.3 * (attempt + 1))
    raise AssertionError("unreachable")  # pragma: no cover
