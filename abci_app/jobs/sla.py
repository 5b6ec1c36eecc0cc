"""SLA figures per provider: integer counters the round steps update (``0x56 | len | addr``).

Each provider's record counts the duties the round machine gave it and whether it kept them,
plus what it earned and lost in rounds. The round steps of ``rounds.py`` call one ``record_*``
each, after their own rules ran, so the figures read the round exactly as it was decided::

    process_round_open    record_drawn            rounds_drawn
    process_challenge     record_commit_deadline  commits_due, committed_on_time, challenged
                                                  (duty: commit)
    process_reveal_end    record_reveal_deadline  reveals_due, revealed (duty: reveal), except
                                                  the tolerance-mode reveals whose ends are due:
    process_vote_reveal_end record_ends_deadline  their reveal duty, kept only if every end was
                                                  opened (MsgOpenEnd; else missed_reveal)
    process_finalize      record_speeds           speed_samples, last_tokens_per_sec
                          record_finalized        verdicts_accepted / verdicts_against,
                                                  attests_due / attested (duty: attest the quorum),
                                                  verifier_assigned / verifier_voted (duty: vote),
                                                  earned_*, slashed

Uptime: the last ``WINDOW`` (64) duties a provider had, kept (1) or missed (0), newest in the
lowest bit of ``window_bits``; ``window_len`` of them are real (fewer for a new provider).
``compute_uptime_bps`` = kept x 10000 // window_len. Work per step is one read and one write per
participant or verifier of the round (both capped by params); iteration in the round's address
order. Integers only; the record outlives an exit (a provider's history stays queryable).

Value: the fields below in this order, each a big-endian u64 (``encode_sla``; a record of the
first 19, written before the speed fields, reads them as 0; a value of any other length is
corruption)."""

from __future__ import annotations

from dataclasses import astuple, dataclass, fields

from abci_app.encoding import MAX_U64, prefix_end
from abci_app.errors import InvariantBroken
from abci_app.jobs.keys import SLA_PREFIX, parse_sla_key, sla_key
from abci_app.pb import jobs_pb2
from abci_app.store import CacheKV, KVReader

WINDOW = 64
BPS = 10_000


@dataclass(slots=True)
class Sla:
    rounds_drawn: int = 0
    commits_due: int = 0  # commit deadlines passed while drawn
    committed_on_time: int = 0
    challenged: int = 0
    reveals_due: int = 0  # reveal deadlines passed while challenged
    revealed: int = 0
    verdicts_accepted: int = 0  # a revealed challenge decided accepted
    verdicts_against: int = 0  # ... decided fraud or rejected
    attests_due: int = 0  # rounds finalized with its update accepted
    attested: int = 0  # ... in which it sent an attestation (any hash: a peer may stall the quorum)
    verifier_assigned: int = 0  # verifier seats on revealed challenges, counted at the finalize
    verifier_voted: int = 0
    earned_participant: int = 0  # uloco
    earned_verifier: int = 0
    earned_bounty: int = 0
    slashed: int = 0  # uloco slashed in rounds
    window_bits: int = 0
    window_len: int = 0
    last_duty_height: int = 0
    speed_samples: int = 0  # accepted commitments measured (rounds.process_measured_speed)
    last_tokens_per_sec: int = 0  # the latest one's tokens/s (open block to commit block)


N_FIELDS = len(fields(Sla))
# records written before the two speed fields (19 counters) read with both at 0
N_FIELDS_V1 = 19


def encode_sla(s: Sla) -> bytes:
    return b"".join(v.to_bytes(8, "big") for v in astuple(s))


def decode_sla(raw: bytes) -> Sla:
    if len(raw) == 8 * N_FIELDS_V1:
        raw += bytes(8 * (N_FIELDS - N_FIELDS_V1))
    if len(raw) != 8 * N_FIELDS:
        raise InvariantBroken(f"SLA record of {len(raw)} bytes, expected {8 * N_FIELDS}")
    return Sla(*(int.from_bytes(raw[i : i + 8], "big") for i in range(0, len(raw), 8)))


def get_sla(store: KVReader, address: bytes) -> Sla:
    raw = store.get(sla_key(address))
    return Sla() if raw is None else decode_sla(raw)


def iterate_sla(store: KVReader) -> list[tuple[bytes, Sla]]:
    return [
        (parse_sla_key(k), decode_sla(v))
        for k, v in store.iterate(SLA_PREFIX, prefix_end(SLA_PREFIX))
    ]


def compute_uptime_bps(s: Sla) -> int:
    """Kept duties among the last ``window_len`` (<= WINDOW), in basis points; 10000 with no duty
    yet."""
    if s.window_len == 0:
        return BPS
    return (s.window_bits & ((1 << s.window_len) - 1)).bit_count() * BPS // s.window_len


def process_duty(s: Sla, kept: bool, height: int) -> None:
    """One more duty in the window: shift in 1 (kept) or 0 (missed); the oldest falls out after
    WINDOW."""
    s.window_bits = ((s.window_bits << 1) | int(kept)) & ((1 << WINDOW) - 1)
    s.window_len = min(s.window_len + 1, WINDOW)
    s.last_duty_height = height


class _Batch:
    """Records of one step, read once, written once in address order (the writes of a step are
    then independent of the order the step touched them in)."""

    def __init__(self, store: CacheKV, height: int) -> None:
        self.store, self.height, self.recs = store, height, dict[bytes, Sla]()

    def __getitem__(self, addr: bytes) -> Sla:
        if addr not in self.recs:
            self.recs[addr] = get_sla(self.store, addr)
        return self.recs[addr]

    def add(self, addr: bytes, name: str, n: int = 1) -> None:
        s = self[addr]
        setattr(s, name, min(getattr(s, name) + n, MAX_U64))

    def duty(self, addr: bytes, kept: bool) -> None:
        process_duty(self[addr], kept, self.height)

    def write(self) -> None:
        for addr in sorted(self.recs):
            self.store.set(sla_key(addr), encode_sla(self.recs[addr]))


def record_drawn(store: CacheKV, r: jobs_pb2.Round, height: int) -> None:
    b = _Batch(store, height)
    for p in r.participants:
        b.add(p.address, "rounds_drawn")
    b.write()


def record_commit_deadline(store: CacheKV, r: jobs_pb2.Round, height: int) -> None:
    """After the challenge draw: a participant without a commitment missed its commit duty."""
    b = _Batch(store, height)
    for p in r.participants:
        kept = p.outcome != jobs_pb2.OUTCOME_MISSED_COMMIT
        b.add(p.address, "commits_due")
        b.add(p.address, "committed_on_time", int(kept))
        b.add(p.address, "challenged", int(p.challenged))
        b.duty(p.address, kept)
    b.write()


def _record_reveal(b: _Batch, p: jobs_pb2.Participant) -> None:
    kept = p.outcome != jobs_pb2.OUTCOME_MISSED_REVEAL
    b.add(p.address, "reveals_due")
    b.add(p.address, "revealed", int(kept))
    b.duty(p.address, kept)


def record_reveal_deadline(
    store: CacheKV, r: jobs_pb2.Round, height: int, ends_due: frozenset[bytes] = frozenset()
) -> None:
    """After the reveal window: a challenged participant marked missed_reveal missed its duty.
    ``ends_due``: participants whose reveal is not complete yet (tolerance mode: the ends are
    opened in the vote-reveal window); their duty is recorded by ``record_ends_deadline``."""
    b = _Batch(store, height)
    for p in r.participants:
        if p.challenged and p.address not in ends_due:
            _record_reveal(b, p)
    b.write()


def record_ends_deadline(
    store: CacheKV, r: jobs_pb2.Round, height: int, ends_due: frozenset[bytes]
) -> None:
    """After the vote-reveal window: the reveal duty of the participants in ``ends_due`` (the
    ones ``record_reveal_deadline`` left out), kept only if the outcome is not missed_reveal: a
    provider that revealed its segments but never opened its ends is a missed reveal in its SLA
    figures too."""
    b = _Batch(store, height)
    for p in r.participants:
        if p.address in ends_due:
            _record_reveal(b, p)
    b.write()


def record_finalized(store: CacheKV, r: jobs_pb2.Round, height: int) -> None:
    """At the finalize, after payouts and penalties: verdicts on revealed challenges, the attest
    duty of accepted participants (kept when it attested in the window, whatever the quorum:
    the figure is its own conduct), verifier seats on revealed challenges (voted = kept, but an
    unavailable vote on work the verdict accepted is not), and the round's payouts and slashes
    by address."""
    b = _Batch(store, height)
    for p in r.participants:
        revealed = p.challenged and p.outcome != jobs_pb2.OUTCOME_MISSED_REVEAL
        if revealed and p.outcome == jobs_pb2.OUTCOME_ACCEPTED:
            b.add(p.address, "verdicts_accepted")
        elif revealed and p.outcome in (jobs_pb2.OUTCOME_FRAUD, jobs_pb2.OUTCOME_REJECTED):
            b.add(p.address, "verdicts_against")
        if p.outcome == jobs_pb2.OUTCOME_ACCEPTED:
            kept = bool(p.attested_hash)
            b.add(p.address, "attests_due")
            b.add(p.address, "attested", int(kept))
            b.duty(p.address, kept)
        if revealed:
            for v in p.verifiers:
                # an unavailable vote kept the duty unless the verdict refuted it (accepted: it
                # is slashed as silence, docs/threat-model.md *Unavailable votes*)
                kept = v.voted and not (v.unavailable and p.outcome == jobs_pb2.OUTCOME_ACCEPTED)
                b.add(v.address, "verifier_assigned")
                b.add(v.address, "verifier_voted", int(kept))
                b.duty(v.address, kept)
    kinds = {
        "participant": "earned_participant",
        "verifier": "earned_verifier",
        "bounty": "earned_bounty",
    }
    for pay in r.payouts:
        if pay.kind in kinds:
            b.add(pay.address, kinds[pay.kind], pay.amount)
    for sl in r.slashes:
        b.add(sl.address, "slashed", sl.amount)
    b.write()


def record_speeds(store: CacheKV, samples: list[tuple[bytes, int]], height: int) -> None:
    """At the finalize: each accepted commitment's speed sample (tokens/s), by address."""
    b = _Batch(store, height)
    for addr, tokens_per_sec in samples:
        b.add(addr, "speed_samples")
        b[addr].last_tokens_per_sec = min(tokens_per_sec, MAX_U64)
    b.write()


def check_invariants(store: KVReader) -> None:
    """Every count of kept duties is at most the count of those duties; the window is consistent."""
    for addr, s in iterate_sla(store):
        pairs = [
            ("committed_on_time", "commits_due"),
            ("commits_due", "rounds_drawn"),
            ("challenged", "commits_due"),
            ("revealed", "reveals_due"),
            ("reveals_due", "challenged"),
            ("attested", "attests_due"),
            ("verifier_voted", "verifier_assigned"),
            ("speed_samples", "attests_due"),  # both count accepted updates at the finalize
        ]
        for kept, due in pairs:
            if getattr(s, kept) > getattr(s, due):
                raise InvariantBroken(
                    f"SLA of {addr.hex()}: {kept} {getattr(s, kept)} > {due} {getattr(s, due)}"
                )
        if s.window_len > WINDOW or s.window_bits >> s.window_len:
            raise InvariantBroken(
                f"SLA of {addr.hex()}: window of {s.window_len} duties holds bits beyond it"
            )
