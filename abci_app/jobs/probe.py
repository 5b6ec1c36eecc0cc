"""Tolerance-mode probes: integer evidence only re-execution yields (docs/threat-model.md *Evidence
only re-execution yields*). Pure integers and bytes; the float side (how a state's probe is
computed) is ``trainer.probe``, and the chain never recomputes it: it compares integers.

A probe is ``PROBE_DIM`` signed integers: a seeded count-sketch of a trace entry's parameter
displacement from the entry before it, scaled by ``2^PROBE_SCALE_BITS`` and rounded
(``trainer.probe.compute_probe``). The provider commits to the probe of every trace entry before
any challenge exists (``MsgSubmitUpdate.probe_root``: leaf 0 = ``binding_leaf(b"probe", ...)``,
then ``encode_probe`` of entry i as leaf i + 1; entry 0's probe is all zeros), reveals the
challenged ends as leaf hashes only, and opens their probes (``MsgOpenEnd``) after the first panel
committed its votes. A verifier's vote commits to the probes of the states its re-execution
reached (``compute_probe_evidence``); when the panel's window closes the chain checks, per opened
segment, ``is_probe_within``: ``|claimed - reached|_1 x 10^6 <= probe_ppm x |claimed|_1 +
PROBE_FLOOR x PROBE_DIM x 10^6`` with ``probe_ppm = min(PROBE_TOLERANCE_MULT x tolerance_ppm,
PROBE_MAX_PPM)``.

Why those bounds (benchmarks/probe_tolerance.py, the real trainer on CPU, RESULTS.md
*Tolerance-mode probes*): an honest re-execution on another numerical path (2 threads, float64
steps) reached a probe ratio of at most 7.1e-4 (tiny model, k = 8; 4.4e-5 at k = 1), i.e. up to
about 0.7 of the default 1,000 ppm tolerance, which the verifier's full-state check covers with
its ulp floor; the probe check is there to catch a verifier that did not re-execute, whose best
guesses from public data (the previous step's probe, even scaled by an oracle) were off by at
least 0.149 (zeros: 1.0). So the probe bound is 10x the job's tolerance (1 % by default: 14x the
largest honest ratio seen), capped at 10 % (1.5x under the best lazy guess seen).

    encode_probe            the leaf data of one probe (8-byte signed big-endian integers)
    check_probe             PROBE_DIM integers, each within the signed 63-bit range
    compute_probe_evidence  the digest a tolerance-mode vote's evidence must be
    is_probe_within         a reached probe agrees with the committed one (integers only)
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

PROBE_DIM = 32  # integers per probe (README: the L1 ratio concentrates within ~±35 % at 32)
PROBE_SCALE_BITS = 32  # a probe unit is 2^-32 of a parameter unit (trainer.probe)
# absolute slack per component, in probe units (2^12 = 9.5e-7 of a parameter unit): rounding
# noise of a segment that barely moves; far below a real step's sketch (README, measured)
PROBE_FLOOR = 1 << 12
PROBE_LIMIT = 1 << 62  # |component| bound: sums of two stay inside a signed 64-bit integer
PROBE_BYTES = 8 * PROBE_DIM
PROBE_EVIDENCE_DOMAIN = b"loconet/probe-evidence/v1"
PPM = 1_000_000
PROBE_TOLERANCE_MULT = 10  # the probe check's bound, in units of the job's tolerance_ppm
PROBE_MAX_PPM = 100_000  # ... and never looser than 10 % (a lazy guess is >= 15 % off, README)


def check_probe(probe: Sequence[int]) -> str:
    """'' when ``probe`` is PROBE_DIM integers with |x| < 2^62, else why not."""
    if len(probe) != PROBE_DIM:
        return f"a probe is {PROBE_DIM} integers, got {len(probe)}"
    if any(not -PROBE_LIMIT < x < PROBE_LIMIT for x in probe):
        return "probe components must be within (-2^62, 2^62)"
    return ""


def encode_probe(probe: Sequence[int]) -> bytes:
    """The leaf data of one probe: PROBE_DIM 8-byte signed big-endian integers. Raises
    ``ValueError`` when ``check_probe`` refuses it."""
    why = check_probe(probe)
    if why:
        raise ValueError(why)
    return b"".join(int(x).to_bytes(8, "big", signed=True) for x in probe)


def compute_probe_evidence(probes: Sequence[int]) -> bytes:
    """sha256(PROBE_EVIDENCE_DOMAIN | each integer as 8 bytes signed big-endian): the evidence a
    tolerance-mode vote commits to, over the probes of every opened segment (segment order,
    PROBE_DIM each). Components out of range are clamped to ±(2^62 - 1) for hashing only (the
    opening refuses them)."""
    lim = PROBE_LIMIT - 1
    return hashlib.sha256(
        PROBE_EVIDENCE_DOMAIN
        + b"".join(max(-lim, min(lim, int(x))).to_bytes(8, "big", signed=True) for x in probes)
    ).digest()


def compute_probe_distance(claimed: Sequence[int], reached: Sequence[int]) -> tuple[int, int]:
    """(|claimed - reached|_1, |claimed|_1)."""
    return (
        sum(abs(a - b) for a, b in zip(claimed, reached, strict=True)),
        sum(abs(a) for a in claimed),
    )


def compute_probe_ppm(tolerance_ppm: int) -> int:
    """The probe check's bound for a job: min(PROBE_TOLERANCE_MULT x tolerance_ppm,
    PROBE_MAX_PPM)."""
    return min(PROBE_TOLERANCE_MULT * tolerance_ppm, PROBE_MAX_PPM)


def is_probe_within(claimed: Sequence[int], reached: Sequence[int], tolerance_ppm: int) -> bool:
    """The reached probe agrees with the provider's committed one: ``|claimed - reached|_1 x 10^6
    <= compute_probe_ppm(tolerance_ppm) x |claimed|_1 + PROBE_FLOOR x PROBE_DIM x 10^6``. The
    ratio of L1 norms of a count-sketch estimates the relative L2 distance of the displacements
    (the verifier's full-state param distance: measured 0.75-0.85 of it), so the bound follows
    the job's ``tolerance_ppm``, with room for honest noise (module docstring)."""
    if len(claimed) != PROBE_DIM or len(reached) != PROBE_DIM:
        return False
    diff, norm = compute_probe_distance(claimed, reached)
    return diff * PPM <= compute_probe_ppm(tolerance_ppm) * norm + PROBE_FLOOR * PROBE_DIM * PPM


def split_probes(flat: Sequence[int]) -> list[list[int]]:
    """A flat list of probes (PROBE_DIM each) as one list per probe."""
    return [list(flat[i : i + PROBE_DIM]) for i in range(0, len(flat), PROBE_DIM)]
