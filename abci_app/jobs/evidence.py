"""A later panel's evidence on its fresh segments (issue 31, 5; docs/threat-model.md *Fresh
segments for the later panels*, *Invalid votes carry evidence too*): which opened votes show no
re-execution.

A later panel (appeal, final) commits after the earlier panels' votes are open, so a seat can
copy their verdict. A copied *valid* vote fails on the panel's fresh segments (ends never public:
exact mode, ``MsgRevealVote`` refuses it; tolerance mode, ``rounds.apply_probe_checks`` counts it
invalid). A copied *invalid* vote used to pass: an invalid vote only has to differ somewhere. So
when the panel's window closes, every opened vote's evidence on each fresh segment is compared
with what the panel's opened stake settled for that segment:

- *settled honest*: a strict majority of the opened stake's evidence matches the provider's
  committed end (exact: ``hash_leaf(reached) ==`` the leaf; tolerance: the probe within the
  bound of the provider's opened probe). Then every opened vote, valid or invalid, must match:
  the end is the provider's honest one, and only re-executing the segment yields it;
- *settled divergent*: no majority matches (the provider faked that end), and some invalid
  vote agrees with a strict majority of the opened invalid votes' stake on the end reached
  (exact: the same state, byte for byte, as every honest re-execution reaches; tolerance: each
  probe within the bound of the other, as honest re-executions are, 5.7x under it at worst).
  Then each invalid vote must agree with a strict majority of that stake. With no such majority
  nobody is checked on that segment, and an honest voter of the majority always has its
  majority: a cheater and a colluding voter naming another end cannot mark the honest invalid
  voters unless they hold more than half of the invalid stake.

A vote that fails is *unevidenced*: ``rounds`` judges it as silence (unpaid, the liveness slash)
unless the verdict slashes it as a wrong vote, which costs more. Stake, not seats: a panel is
weighed by stake everywhere, and splitting a stake into Sybils gains no weight here either.
Integers and hashes only (deterministic). Cost: one leaf hash or probe comparison per vote and
fresh segment, and on a divergent segment one comparison per pair of invalid votes (a final
panel of at most 64: 4,096 per segment, 32 integers each in tolerance mode)."""

from __future__ import annotations

from abci_app.jobs.incentives import compute_panel_reveals
from abci_app.jobs.probe import PROBE_DIM, is_probe_within
from abci_app.merkle import hash_leaf
from abci_app.pb import jobs_pb2

# why a vote is unevidenced on a segment (the ``reason`` of event ``vote.unevidenced``)
SETTLED_HONEST = "settled_honest"
SETTLED_DIVERGENT = "settled_divergent"


def compute_checked_votes(
    p: jobs_pb2.Participant, panel: int, exact: bool, n_fresh: int
) -> list[jobs_pb2.VerifierAssignment]:
    """``panel``'s opened votes that carry evidence (not unavailable: nothing reached). Exact
    mode: an invalid vote stores its fresh reached states (``VerifierAssignment.reached``); one
    without them was opened before the rule existed and is left alone."""
    out = []
    for v in p.verifiers:
        if v.panel != panel or not v.voted or v.unavailable:
            continue
        if exact and not v.valid and len(v.reached) != n_fresh:
            continue
        out.append(v)
    return out


def is_fresh_match(
    v: jobs_pb2.VerifierAssignment,
    o: jobs_pb2.Reveal,
    at: int,
    nth_fresh: int,
    exact: bool,
    tolerance_ppm: int,
) -> bool:
    """Does ``v``'s evidence on fresh opening ``o`` match the provider's committed end? Exact:
    a valid vote's reached states were all checked against the leaves when it was opened; an
    invalid vote's ``reached[nth_fresh]`` must hash to the leaf. Tolerance: the vote's probe at
    position ``at`` of the panel's judged segments within the bound of the opened probe."""
    if exact:
        if v.valid:
            return True
        leaf = o.end_leaf_hash or hash_leaf(o.end_state_hash)
        return hash_leaf(v.reached[nth_fresh]) == leaf
    probe = _fresh_probe(v, at)
    return len(probe) == PROBE_DIM and is_probe_within(list(o.end_probe), probe, tolerance_ppm)


def _fresh_probe(v: jobs_pb2.VerifierAssignment, at: int) -> list[int]:
    return list(v.probes[at * PROBE_DIM : (at + 1) * PROBE_DIM])


def is_agreeing(
    a: jobs_pb2.VerifierAssignment,
    b: jobs_pb2.VerifierAssignment,
    at: int,
    nth_fresh: int,
    exact: bool,
    tolerance_ppm: int,
) -> bool:
    """Do two invalid votes reach the same end on a fresh segment? Exact: the same state, byte
    for byte. Tolerance: each probe within the bound of the other (both ways: the bound is
    relative to the first argument's norm)."""
    if exact:
        return bytes(a.reached[nth_fresh]) == bytes(b.reached[nth_fresh])
    pa, pb = _fresh_probe(a, at), _fresh_probe(b, at)
    return is_probe_within(pa, pb, tolerance_ppm) and is_probe_within(pb, pa, tolerance_ppm)


def compute_divergent_outliers(
    invalid: list[jobs_pb2.VerifierAssignment],
    at: int,
    nth_fresh: int,
    exact: bool,
    tolerance_ppm: int,
) -> list[jobs_pb2.VerifierAssignment]:
    """On a fresh segment no stake majority matches the provider on: the invalid votes whose
    agreeing invalid stake (``is_agreeing``, themselves included) is not a strict majority of
    the invalid stake, when some vote's is; none when no vote's is (no majority reached one end:
    nobody is checked, so a minority can never mark the others)."""
    total = sum(v.stake for v in invalid)
    support = [
        sum(w.stake for w in invalid if is_agreeing(v, w, at, nth_fresh, exact, tolerance_ppm))
        for v in invalid
    ]
    if not any(2 * s > total for s in support):
        return []
    return [v for v, s in zip(invalid, support, strict=True) if 2 * s <= total]


def compute_unevidenced(
    p: jobs_pb2.Participant, panel: int, exact: bool, tolerance_ppm: int
) -> list[tuple[bytes, int, str]]:
    """(verifier, segment, reason) of each of ``panel``'s opened votes whose evidence fails on a
    fresh segment (the first one it fails on, segments ascending; verifiers in record order)."""
    judged = compute_panel_reveals(p, panel)
    fresh = [(at, o) for at, o in enumerate(judged) if o.panel == panel]
    votes = compute_checked_votes(p, panel, exact, len(fresh))
    total = sum(v.stake for v in votes)
    failed: dict[bytes, tuple[int, str]] = {}
    for nth, (at, o) in enumerate(fresh):
        match = {v.address: is_fresh_match(v, o, at, nth, exact, tolerance_ppm) for v in votes}
        if 2 * sum(v.stake for v in votes if match[v.address]) > total:
            for v in votes:
                if not match[v.address]:
                    failed.setdefault(v.address, (o.segment, SETTLED_HONEST))
            continue
        invalid = [v for v in votes if not v.valid]
        for v in compute_divergent_outliers(invalid, at, nth, exact, tolerance_ppm):
            failed.setdefault(v.address, (o.segment, SETTLED_DIVERGENT))
    return [(v.address, *failed[v.address]) for v in votes if v.address in failed]
