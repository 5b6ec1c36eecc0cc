"""jobs params (genesis ``jobs.params``; query ``/market_params``)."""

from __future__ import annotations

from typing import Any

from abci_app.encoding import decode_msg, encode_msg
from abci_app.jobs.keys import PARAMS_KEY
from abci_app.pb import jobs_pb2
from abci_app.store import CacheKV, KVReader

# The longest a round lives after its open, in windows: commit C, reveal R, the first panel's
# two vote windows (V: hashes, V: openings), the appeal panel's two, the final panel's two, then
# attest A. providers.unbonding_blocks must exceed this many max_window_blocks (jobs genesis), so a
# provider that exits right after it is drawn (the earliest it can) is still bonded when the
# round's finalize slashes it (docs/threat-model.md *Why cheating does not pay*, 10).
ROUND_MAX_WINDOWS = 9

DEFAULTS: dict[str, int] = {
    "max_participants": 32,
    "max_rounds": 100_000,
    "max_window_blocks": 200,
    "max_verifiers": 7,
    "min_challenge_bps": 500,  # at least 5 % of commitments are re-executed
    "max_payload_bytes": 1 << 36,
    "slash_fraction_liveness_bps": 100,  # 1 % of bond + unbonding for a missed commit or reveal
    "slash_fraction_fraud_bps": 5_000,  # 50 % for proven fraud
    # 20 % of a fraud slash to the verifiers that proved it; the rest is burned
    "fraud_bounty_bps": 2_000,
    "unverified_quality": 5_000,
    "reputation_gain_bps": 1_000,
    "reputation_loss_missed_commit_bps": 1_000,
    "reputation_loss_verifier_bps": 500,
    "max_trace_entries": 4_097,
    "min_fraud_verifiers": 3,  # invalid voters (holding 2/3 of the stake) needed to slash for fraud
    # incentives (docs/threat-model.md "Why cheating does not pay")
    # a disputed verdict goes to a fresh panel of this many; its verdict is final
    "appeal_verifiers": 7,
    "slash_fraction_wrong_vote_bps": 1_000,  # 10 % for a revealed vote against the final verdict
    "job_creation_fee": 1_000_000,  # 1 LOCO burned per job: junk jobs are not free
    "min_slot_reward": 100_000,  # 0.1 LOCO per round slot at least
    "max_shards": 4_096,  # bounds the shard shuffle at a round's open
    # a job nobody takes is cancelled (refunded, fee kept) after this many blocks
    "max_wait_blocks": 1_000,
    "wait_retry_blocks": 10,  # a waiting job retries its draw every 10 blocks, not every block
    # bond >= 2 x slot / (challenge rate x fraud slash): cheating loses on average
    "collateral_margin_bps": 20_000,
    # a round paying >= 0.1 LOCO earns a full reputation gain, less earns less
    "reputation_value_unit": 100_000,
    # floor of JobSpec.segments_per_challenge (docs/threat-model.md "Enough segments")
    "min_segments_per_challenge": 1,
    # a challenge is audited with this probability (drawn at the commit deadline, after the
    # commitment): its first panel gets audit_verifiers more seats, so holding the
    # verifiers_per_challenge seats is never safe (README "Panel audits")
    "audit_bps": 4_000,
    # an audit's seats (one honest seat breaks a covering coalition's unanimity; each seat is one
    # more re-execution)
    "audit_verifiers": 1,
    # 1: a round's draw leaves verifiers_per_challenge providers outside it to judge its
    # challenges (rounds.compute_draw_size); 0 or 1
    "reserve_verifiers": 1,
    # a mean block gap above this (ns, header times) between a round's open and a commitment is a
    # chain stall, not a slow provider: that commitment gives no measured-speed sample
    # (capacity.is_chain_live). 30 s: 5x CometBFT's default block time, 30x the testnet's
    "max_block_gap_ns": 30 * 10**9,
}
BPS_FIELDS = (
    "min_challenge_bps",
    "slash_fraction_liveness_bps",
    "slash_fraction_fraud_bps",
    "fraud_bounty_bps",
    "unverified_quality",
    "reputation_gain_bps",
    "reputation_loss_missed_commit_bps",
    "reputation_loss_verifier_bps",
    "slash_fraction_wrong_vote_bps",
    "audit_bps",
)


def params_from_json(d: dict[str, Any]) -> jobs_pb2.JobsParams:
    unknown = set(d) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"jobs.params: unknown keys {sorted(unknown)}")
    vals: dict[str, int] = {}
    for k, default in DEFAULTS.items():
        v = d.get(k, default)
        if isinstance(v, bool) or not isinstance(v, (int, str)) or not str(v).isdigit():
            raise ValueError(f"jobs.params.{k}: must be a non-negative integer, got {v!r}")
        vals[k] = int(v)
    for k in BPS_FIELDS:
        if vals[k] > 10_000:
            raise ValueError(f"jobs.params.{k}: basis points must be <= 10000")
    for k in (
        "max_participants",
        "max_rounds",
        "max_window_blocks",
        "max_verifiers",
        "max_payload_bytes",
        "max_shards",
        "wait_retry_blocks",
        "reputation_value_unit",
        "max_block_gap_ns",
    ):
        if vals[k] == 0:
            raise ValueError(f"jobs.params.{k}: must be > 0")
    if vals["max_trace_entries"] < 2:
        raise ValueError("jobs.params.max_trace_entries: must be >= 2")
    if not 1 <= vals["min_segments_per_challenge"] <= vals["max_trace_entries"]:
        raise ValueError("jobs.params.min_segments_per_challenge: must be 1..max_trace_entries")
    if not 1 <= vals["min_fraud_verifiers"] <= vals["max_verifiers"]:
        raise ValueError(
            "jobs.params.min_fraud_verifiers: must be 1..max_verifiers (else fraud could never "
            "be proven)"
        )
    if not 1 <= vals["appeal_verifiers"] <= vals["max_verifiers"]:
        raise ValueError("jobs.params.appeal_verifiers: must be 1..max_verifiers")
    if not 1 <= vals["audit_verifiers"] <= vals["max_verifiers"]:
        raise ValueError("jobs.params.audit_verifiers: must be 1..max_verifiers")
    if vals["reserve_verifiers"] > 1:
        raise ValueError("jobs.params.reserve_verifiers: must be 0 or 1")
    if vals["max_shards"] < vals["max_participants"]:
        raise ValueError(
            "jobs.params.max_shards: must be >= max_participants (shards are distinct within a "
            "round)"
        )
    return jobs_pb2.JobsParams(**vals)


def params_to_json(p: jobs_pb2.JobsParams) -> dict[str, int]:
    return {k: int(getattr(p, k)) for k in DEFAULTS}


def get_params(store: KVReader) -> jobs_pb2.JobsParams:
    raw = store.get(PARAMS_KEY)
    if raw is None:
        return params_from_json({})
    return decode_msg(jobs_pb2.JobsParams, raw)


def set_params(store: CacheKV, p: jobs_pb2.JobsParams) -> None:
    store.set(PARAMS_KEY, encode_msg(p))
