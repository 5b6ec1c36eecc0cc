"""A later panel's evidence on its fresh segments (issue 31, 5; README *Fresh segments for the
later panels*, *Invalid votes carry evidence too*): which opened votes show no re-execution.

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
- *settled divergent* (exact mode only): no majority matches (the provider faked that end) and a
  strict majority of the opened invalid votes' stake names one same reached state; then every
  invalid vote must name it (exact re-execution is byte for byte: honest verifiers reach the same
  state). With no such majority nobody is checked on that segment, so a cheater and a colluding
  voter posting another state cannot mark the honest invalid voters unless they hold more than
  half of the invalid stake;
- tolerance mode compares no two verifiers' probes on a divergent segment (two honest
  re-executions differ within the bound of each other, not of a faked end): the bound left.

A vote that fails is *unevidenced*: ``rounds`` judges it as silence (unpaid, the liveness slash)
unless the verdict slashes it as a wrong vote, which costs more. Stake, not seats: a panel is
weighed by stake everywhere, and splitting a stake into Sybils gains no weight here either.
Integers and hashes only (deterministic)."""

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
    probe = list(v.probes[at * PROBE_DIM : (at + 1) * PROBE_DIM])
    return len(probe) == PROBE_DIM and is_probe_within(list(o.end_probe), probe, tolerance_ppm)


def _divergent_majority(votes: list[jobs_pb2.VerifierAssignment], nth_fresh: int) -> bytes:
    """Exact mode: the reached state a strict majority of the invalid ``votes``' stake names for
    the ``nth_fresh`` fresh segment, b"" when none has it."""
    stake: dict[bytes, int] = {}
    for v in votes:
        x = bytes(v.reached[nth_fresh])
        stake[x] = stake.get(x, 0) + v.stake
    total = sum(stake.values())
    for x, s in sorted(stake.items()):
        if 2 * s > total:
            return x
    return b""


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
        if not exact:
            continue  # tolerance: divergent probes are not compared between voters
        invalid = [v for v in votes if not v.valid]
        agreed = _divergent_majority(invalid, nth)
        for v in invalid:
            if agreed and bytes(v.reached[nth]) != agreed:
                failed.setdefault(v.address, (o.segment, SETTLED_DIVERGENT))
    return [(v.address, *failed[v.address]) for v in votes if v.address in failed]
