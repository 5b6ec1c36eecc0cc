"""jobs queries: ``/job/{id}``, ``/jobs?owner=&from=&limit=``, ``/round/{job}/{round}``,
``/rounds/{job}?from=&limit=`` (``/market_params`` spans two modules: abci_app/modules.py).
All take ``height`` and ``prove=true`` (the app adds the proofs of the returned keys). JSON:
addresses bech32, hashes lower-case hex, amounts integers (uloco). ``round_to_json`` is also what a
client runs over a proven value. ``/provider/{addr}/sla`` (``query_provider_sla``) is wired in
abci_app/modules.py: the path is the providers module's, the figures are recorded here (sla.py)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from abci_app.codec.address import from_bech32, to_bech32
from abci_app.jobs import keeper, sla
from abci_app.jobs.audit import compute_catch_bps, compute_verifier_compute_bps
from abci_app.jobs.keys import job_key, round_key, sla_key
from abci_app.pb import enum_name, enum_names, jobs_pb2
from abci_app.querying import QueryError, int_param, parse_u64, to_json
from abci_app.store import KVReader

MAX_LIMIT = 100


_u64 = parse_u64
JOB_STATUSES = enum_names(jobs_pb2.JobStatus)[1:]  # every status but UNSPECIFIED (0)


def job_to_json(j: jobs_pb2.Job) -> dict[str, Any]:
    s = j.spec
    return {
        "id": j.id,
        "owner": to_bech32(j.owner),
        "status": enum_name(jobs_pb2.JobStatus, j.status),
        "rounds": j.rounds,
        "reward_per_round": j.reward_per_round,
        "verifier_reward_per_round": j.verifier_reward_per_round,
        "escrow": j.escrow,
        "escrow_funded": j.escrow_funded,
        "paid_total": j.paid_total,
        "refunded": j.refunded,
        "rounds_opened": j.rounds_opened,
        "rounds_finalized": j.rounds_finalized,
        "next_open_height": j.next_open_height,
        "current_model_hash": j.current_model_hash.hex(),
        "created_height": j.created_height,
        "cancel_height": j.cancel_height,
        "spec": {
            "model": {
                f: getattr(s.model, f)
                for f in ("n_layers", "n_heads", "d_model", "context_len", "vocab_size")
            },
            "initial_model_hash": s.initial_model_hash.hex(),
            "dataset_id": s.dataset_id.hex(),
            "inner_steps": s.inner_steps,
            "trace_interval": s.trace_interval,
            "compression_policy": s.compression_policy,
            "compression_params": {p.key: p.value for p in s.compression_params},
            "participants_per_round": s.participants_per_round,
            "num_shards": s.num_shards,
            "tokens_per_step": s.tokens_per_step,
            "windows": {
                "commit": s.commit_blocks,
                "reveal": s.reveal_blocks,
                "verdict": s.verdict_blocks,
                "attest": s.attest_blocks,
            },
            "min_reputation": s.min_reputation,
            "min_stake": s.min_stake,
            "challenge_bps": s.challenge_bps,
            "verifiers_per_challenge": s.verifiers_per_challenge,
            "blob_sources": list(s.blob_sources),
            "initial_model_bytes": s.initial_model_bytes,
            "dataset_bytes": s.dataset_bytes,
            "segments_per_challenge": s.segments_per_challenge,
            "determinism_mode": enum_name(jobs_pb2.DeterminismMode, s.determinism_mode),
            "tolerance_ppm": s.tolerance_ppm,
            "stack": s.stack,
            "compute_s_per_round": s.compute_s_per_round,
        },
        "audit": audit_json(s),
    }


def audit_json(s: jobs_pb2.JobSpec) -> dict[str, Any]:
    """What the job's challenge settings buy (abci_app/jobs/audit.py): the probability of
    catching a provider that fakes 1 / 10 / 50 % of its steps, in one round and within three,
    and one verifier's re-executed steps per provider step (all in basis points)."""
    n = (
        s.inner_steps // s.trace_interval
        if s.trace_interval and s.inner_steps % s.trace_interval == 0
        else 0
    )
    if n == 0:
        return {}
    out: dict[str, Any] = {
        "segments": n,
        "verifier_compute_bps": compute_verifier_compute_bps(
            n, s.segments_per_challenge, s.challenge_bps
        ),
    }
    for f in (100, 1_000, 5_000):
        out[f"catch_bps_fake_{f}_bps"] = {
            "1_round": compute_catch_bps(n, s.segments_per_challenge, s.challenge_bps, f, 1),
            "3_rounds": compute_catch_bps(n, s.segments_per_challenge, s.challenge_bps, f, 3),
        }
    return out


def _participant_json(p: jobs_pb2.Participant) -> dict[str, Any]:
    out: dict[str, Any] = {
        "address": to_bech32(p.address),
        "stake": p.stake,
        "reputation": p.reputation,
        "shard": p.shard,
        "outcome": enum_name(jobs_pb2.Outcome, p.outcome),
        "quality": p.quality,
        "reward": p.reward,
        "slashed": p.slashed,
        "reputation_delta": p.reputation_delta,
        "attested_hash": p.attested_hash.hex(),
        "escalated": p.escalated,
        "final_tier": p.final_tier,
        "audited": p.audited,
        "commitment": None,
        "challenge": None,
    }
    if p.HasField("commitment"):
        out["commitment"] = _commitment_json(p.commitment)
    if p.challenged:
        out["challenge"] = _challenge_json(p)
    return out


def _commitment_json(c: jobs_pb2.Commitment) -> dict[str, Any]:
    return {
        "base_model_hash": c.base_model_hash.hex(),
        "update_root": c.update_root.hex(),
        "payload_size": c.payload_size,
        "trace_root": c.trace_root.hex(),
        "tokens_processed": c.tokens_processed,
        "loss_before_mnats": c.loss_before_mnats,
        "loss_after_mnats": c.loss_after_mnats,
        "blob_location": c.blob_location,
        "height": c.height,
        "time_ns": c.time_ns,
        "probe_root": c.probe_root.hex(),
    }


def _challenge_json(p: jobs_pb2.Participant) -> dict[str, Any]:
    """A challenged participant's segments, openings, verifiers and completed reveal."""
    return {
        "segment": p.segment,
        "segments": list(p.segments),
        "appeal_segments": list(p.appeal_segments),
        "final_segments": list(p.final_segments),
        "opened": [o.segment for o in p.reveals],
        "reveals": [_reveal_json(o) for o in p.reveals],
        "verifiers": [_verifier_json(v) for v in p.verifiers],
        "reveal": None
        if not p.HasField("reveal")
        else {
            "start_state_hash": p.reveal.start_state_hash.hex(),
            "end_state_hash": p.reveal.end_state_hash.hex(),
            "start_location": p.reveal.start_location,
            "end_location": p.reveal.end_location,
            "trace_list_hash": p.reveal.trace_list_hash.hex(),
            "height": p.reveal.height,
        },
    }


def _reveal_json(o: jobs_pb2.Reveal) -> dict[str, Any]:
    return {
        "segment": o.segment,
        "start_state_hash": o.start_state_hash.hex(),
        "end_state_hash": o.end_state_hash.hex(),
        "start_location": o.start_location,
        "end_location": o.end_location,
        "trace_list_hash": o.trace_list_hash.hex(),
        "end_leaf_hash": o.end_leaf_hash.hex(),
        "start_leaf_hash": o.start_leaf_hash.hex(),
        "height": o.height,
        "end_probe": list(o.end_probe),
        "end_opened_height": o.end_opened_height,
        "panel": o.panel,
    }


def _verifier_json(v: jobs_pb2.VerifierAssignment) -> dict[str, Any]:
    return {
        "address": to_bech32(v.address),
        "stake": v.stake,
        "panel": v.panel,
        "committed": bool(v.vote_hash),
        "voted": v.voted,
        "valid": v.valid,
        "quality": v.quality,
        "evidence": v.evidence.hex(),
        "height": v.height,
        "slashed": v.slashed,
        "probes": list(v.probes),
        "probe_mismatch": v.probe_mismatch,
        "unavailable": v.unavailable,
        "unevidenced": v.unevidenced,
    }


def round_to_json(r: jobs_pb2.Round) -> dict[str, Any]:
    return {
        "job_id": r.job_id,
        "round": r.round,
        "phase": enum_name(jobs_pb2.Phase, r.phase),
        "open_time_ns": r.open_time_ns,
        "windows": {
            "open_height": r.open_height,
            "commit_deadline": r.commit_deadline,
            "reveal_end": r.reveal_end,
            "verdict_end": r.verdict_end,
            "vote_reveal_end": r.vote_reveal_end,
            "appeal_end": r.appeal_end,
            "appeal_reveal_end": r.appeal_reveal_end,
            "final_end": r.final_end,
            "final_reveal_end": r.final_reveal_end,
            "attest_end": r.attest_end,
        },
        "draw_seed": r.draw_seed.hex(),
        "challenge_seed": r.challenge_seed.hex(),
        "base_model_hash": r.base_model_hash.hex(),
        "participants": [_participant_json(p) for p in r.participants],
        "attested_model_hash": r.attested_model_hash.hex(),
        "attest_stake": r.attest_stake,
        "reward_paid": r.reward_paid,
        "verifier_paid": r.verifier_paid,
        "returned_to_escrow": r.returned_to_escrow,
        "payouts": [
            {"address": to_bech32(p.address), "amount": p.amount, "kind": p.kind} for p in r.payouts
        ],
        "slashes": [
            {
                "address": to_bech32(s.address),
                "amount": s.amount,
                "reason": s.reason,
                "burned": s.burned,
            }
            for s in r.slashes
        ],
        "finalized_height": r.finalized_height,
    }


def query_job(
    reader: KVReader, args: list[str], params: dict[str, str]
) -> tuple[bytes, list[bytes]]:
    """/job/{id}"""
    if len(args) != 1:
        raise QueryError("usage: /job/{id}")
    jid = _u64(args[0], "job id")
    j = keeper.get_job(reader, jid)
    if j is None:
        raise QueryError(f"job {jid} not found")
    return to_json(job_to_json(j)), [job_key(jid)]


def query_jobs(
    reader: KVReader, args: list[str], params: dict[str, str]
) -> tuple[bytes, list[bytes]]:
    """/jobs?owner=loco1...&status=active&from=0&limit=100 -> {"jobs": [...], "total": n}"""
    if args:
        raise QueryError("usage: /jobs?owner=loco1...&status=active&from=N&limit=N")
    owner = from_bech32(params["owner"]) if params.get("owner") else None
    status = params.get("status", "")
    if status and status not in JOB_STATUSES:
        raise QueryError(f"status must be one of {', '.join(JOB_STATUSES)}; got {status[:40]!r}")
    start = int_param(params, "from", 0)
    limit = int_param(params, "limit", MAX_LIMIT, MAX_LIMIT)
    all_ = [
        j
        for j in keeper.iterate_jobs(reader)
        if (owner is None or j.owner == owner)
        and (not status or enum_name(jobs_pb2.JobStatus, j.status) == status)
    ]
    page = all_[start : start + limit]
    return to_json({"jobs": [job_to_json(j) for j in page], "total": len(all_)}), [
        job_key(j.id) for j in page
    ]


def query_round(
    reader: KVReader, args: list[str], params: dict[str, str]
) -> tuple[bytes, list[bytes]]:
    """/round/{job}/{round}"""
    if len(args) != 2:
        raise QueryError("usage: /round/{job}/{round}")
    jid, rn = _u64(args[0], "job id"), _u64(args[1], "round")
    r = keeper.get_round(reader, jid, rn)
    if r is None:
        raise QueryError(f"round {jid}/{rn} not found")
    return to_json(round_to_json(r)), [round_key(jid, rn)]


def query_rounds(
    reader: KVReader, args: list[str], params: dict[str, str]
) -> tuple[bytes, list[bytes]]:
    """/rounds/{job}?from=0&limit=100 -> {"rounds": [...], "total": rounds opened}"""
    if len(args) != 1:
        raise QueryError("usage: /rounds/{job}?from=N&limit=N")
    jid = _u64(args[0], "job id")
    j = keeper.get_job(reader, jid)
    if j is None:
        raise QueryError(f"job {jid} not found")
    start = int_param(params, "from", 0, 1 << 63)
    limit = int_param(params, "limit", MAX_LIMIT, MAX_LIMIT)
    page: list[Any] = []
    for r in keeper.iterate_rounds(reader, jid, start):
        if len(page) >= limit:
            break
        page.append(r)
    return to_json({"rounds": [round_to_json(r) for r in page], "total": j.rounds_opened}), [
        round_key(jid, r.round) for r in page
    ]


def sla_to_json(address: bytes, s: sla.Sla) -> dict[str, Any]:
    """The SLA record with its derived figures (integers: rates in basis points of what was due)."""

    def rate(kept: int, due: int) -> int | None:
        return None if due == 0 else kept * sla.BPS // due

    out: dict[str, Any] = {"address": to_bech32(address)}
    out.update({f.name: getattr(s, f.name) for f in fields(s) if f.name != "window_bits"})
    out["window_bits"] = (
        format(s.window_bits & ((1 << s.window_len) - 1), f"0{s.window_len}b")
        if s.window_len
        else ""
    )
    out["window_size"] = sla.WINDOW
    out["uptime_bps"] = sla.compute_uptime_bps(s)
    out["commit_rate_bps"] = rate(s.committed_on_time, s.commits_due)
    out["reveal_rate_bps"] = rate(s.revealed, s.reveals_due)
    out["verifier_duty_bps"] = rate(s.verifier_voted, s.verifier_assigned)
    out["earned_total"] = s.earned_participant + s.earned_verifier + s.earned_bounty
    return out


def query_provider_sla(
    reader: KVReader, args: list[str], params: dict[str, str]
) -> tuple[bytes, list[bytes]]:
    """/provider/{loco1...}/sla -> SLA figures (all zero for an address that never had a duty;
    the proof then shows the record's absence)."""
    if len(args) != 1:
        raise QueryError("usage: /provider/{loco1...}/sla")
    addr = from_bech32(args[0])
    return to_json(sla_to_json(addr, sla.get_sla(reader, addr))), [sla_key(addr)]


QUERIES = {
    "job": query_job,
    "jobs": query_jobs,
    "round": query_round,
    "rounds": query_rounds,
}
