"""Re-execution of a run of adjacent opened segments (issue 11; abci_app/jobs/README.md
*Evidence only re-execution yields*).

The chain's reveal opens only the start of each run of adjacent challenged segments
(``abci_app.jobs.incentives.is_run_start``): every other start is the previous segment's secret
end, opened as a Merkle leaf hash. So a verifier re-executes each run through from the run's
start, the state its own re-execution reached being the next segment's start, and every end of
the run is evidence only that re-execution yields.

``verify_run(ctx, start_state, ends, *, expected_start_hash=None)``
    One ``trainer.verify.Verdict`` per segment of the run: after an invalid one the run goes on
    from the verifier's own reached state, so every end the vote names is one it re-executed
    (a later panel's evidence; stops early only when a segment cannot be re-run at all).
    ``ends[i]`` = ``(end_leaf, claimed_end_state)`` of the run's i-th segment: a secret end
    (``claimed_end_state`` None) is judged as ``verify_segment`` judges one (exact mode: the
    re-executed state's hash must have the opened leaf hash; tolerance mode: the verdict carries
    the probe of the re-executed end and its bytes, judged once MsgOpenEnd opens it); a public
    end (entry H/k, served for the payload check) is judged against its bytes
    (``trainer.verify.judge_end``, with the metadata checked first; in tolerance mode only as
    the run's first end, else like a secret one). The model and optimizer stay loaded across
    the run: the provider trained through the same states.

``shift_state(reexec, own_start, their_start)``
    Tolerance mode, a segment that is not a run's start: the verifier's re-execution started from
    its own reached state, which is within tolerance of the provider's but not identical, so
    comparing its end with the provider's would add the previous segments' drift to this one's.
    The verifier judges the segment's displacement instead: its re-executed end moved onto the
    provider's opened start, ``reexec + (their_start - own_start)`` per state part (float64, cast
    back), metadata the re-execution's (``worker.judge_opened_ends`` passes it to
    ``trainer.verify.verify_opened_end`` with the provider's start).
"""

from __future__ import annotations

import hashlib

from trainer.commit import KIND_STATE, Payload, PayloadError, decode, decode_meta, encode
from trainer.determinism import set_determinism
from trainer.probe import compute_probe
from trainer.verify import (
    STATE_PARTS,
    Verdict,
    VerifyContext,
    _check_run_start,
    _invalid,
    _judge_secret_leaf,
    _load_into_workspace,
    _reexecuted,
    _remember_probe,
    _rerun,
    judge_end,
)


def verify_run(
    ctx: VerifyContext,
    start_state: bytes,
    ends: list[tuple[bytes | None, bytes | None]],
    *,
    expected_start_hash: bytes | None = None,
) -> list[Verdict]:
    """Re-run the run's segments (``ctx.k`` steps each) one after the other from ``start_state``
    (the run's opened start) and judge each end (module docstring). Never raises on bad input:
    a bad segment gets an invalid verdict and the run goes on from the state the re-execution
    reached (an invalid vote names the verifier's real end of every segment, not a padding);
    only a start that does not load or a segment that cannot be re-run ends it."""
    k = ctx.k
    if not isinstance(k, int) or k <= 0:
        return [_invalid(f"segment length k must be a positive int, got {k!r}")]
    if not ends:
        return []
    start_hash = hashlib.sha256(start_state).digest()
    if expected_start_hash is not None and start_hash != expected_start_hash:
        return [_invalid("start state does not match the committed trace entry")]
    try:
        sm = decode_meta(start_state, expected_kind=KIND_STATE)
        ps = decode(start_state, expected_kind=KIND_STATE)
    except PayloadError as exc:
        return [_invalid(f"malformed start state: {exc}")]
    bad = _check_run_start(ctx, sm, ps)
    if bad is not None:
        return [bad]
    if ctx.deterministic:
        set_determinism(0, threads=1)
    try:
        ls = _load_into_workspace(ctx, ps)
    except (PayloadError, ValueError) as exc:
        return [_invalid(f"start state does not load: {exc}")]
    out: list[Verdict] = []
    prev: Payload = ps  # the decoded start of the segment being judged (the verifier's own)
    prev_hash = start_hash  # its sha256
    step = sm["inner_step"]  # checked: an int >= 0
    for i, (leaf, claimed) in enumerate(ends):
        try:
            _rerun(ctx, ls, step)
        except ValueError as exc:
            out.append(_invalid(f"cannot re-run segment {i} of the run: {exc}"))
            return out
        step += k
        # the reached state's bytes and a Payload over the live tensors (no decode of the bytes
        # just encoded: trainer.verify._reexecuted); read before the next segment trains them
        reexec, live = _reexecuted(ls, step)
        rh = hashlib.sha256(reexec).digest()
        v = _judge_run_end(ctx.tolerance, i, leaf, claimed, prev, reexec, rh, live)
        if ctx.tolerance is not None:
            v.probe = compute_probe(prev, live)
            v.reexecuted_state = reexec
            # kept for verify_opened_end: an opened end byte for byte this re-execution, from
            # this very start, checks its opened probe against this one instead of recomputing
            _remember_probe(prev_hash, rh, v.probe)
        out.append(v)
        if i + 1 < len(ends) and (ctx.tolerance is not None or ends[i + 1][1] is not None):
            # the run goes on and its next segment reads this state as its start (its probe, or
            # a served end judged against it): a copy, since the live tensors train on
            prev, prev_hash = decode(reexec, expected_kind=KIND_STATE), rh
    return out


def _judge_run_end(
    tolerance: float | None,
    i: int,
    leaf: bytes | None,
    claimed: bytes | None,
    prev: Payload,
    reexec: bytes,
    rh: bytes,
    live: Payload,
) -> Verdict:
    """The verdict on the run's ``i``-th end (``leaf``, ``claimed``: see ``verify_run``) reached
    as ``reexec`` (sha256 ``rh``, Payload ``live``) from the decoded start ``prev``."""
    if claimed is not None and (tolerance is None or i == 0):
        # a public end (entry H/k): judged against its bytes (tolerance mode: only from the
        # provider's own start; later in a run the verifier's start has drifted, and the end
        # is judged once MsgOpenEnd opens the start too, as the secret ones)
        return _judge_public_end(prev, reexec, claimed, tolerance, rh, live)
    if tolerance is not None:
        return Verdict(
            True,
            0.0,
            "re-executed; the end is judged once it is opened (tolerance mode)",
            rh.hex(),
        )
    if leaf is None:
        return _invalid("a secret end state (no claimed bytes) needs its opened leaf hash")
    return _judge_secret_leaf(rh, leaf)


def _judge_public_end(
    start: Payload,
    reexec: bytes,
    claimed: bytes,
    tolerance: float | None,
    reexec_hash: bytes | None = None,
    reexec_payload: Payload | None = None,
) -> Verdict:
    """A served end (entry H/k) against the re-execution: the same metadata, then
    ``judge_end`` (identical bytes in exact mode; within tolerance otherwise); the
    re-execution's hash and Payload when the caller has them."""
    try:
        cm = decode_meta(claimed, expected_kind=KIND_STATE)
        rm = decode_meta(reexec, expected_kind=KIND_STATE)
    except PayloadError as exc:
        return _invalid(f"malformed claimed end state: {exc}")
    if cm != rm:
        diff = sorted(x for x in set(cm) | set(rm) if cm.get(x) != rm.get(x))
        return _invalid(f"claimed end state's metadata differs from the re-execution's: {diff}")
    return judge_end(
        start, reexec, claimed, tolerance, reexec_hash=reexec_hash, reexec_payload=reexec_payload
    )


def shift_state(reexec: bytes, own_start: bytes, their_start: bytes) -> bytes:
    """``reexec + (their_start - own_start)`` for every tensor part of ``STATE_PARTS`` (in
    float64, cast back to each part's dtype), the metadata and every other part ``reexec``'s:
    the verifier's re-executed displacement applied to the provider's start (module docstring).
    PayloadError when the three states do not have the same tensors."""
    pr = decode(reexec, expected_kind=KIND_STATE)
    po = decode(own_start, expected_kind=KIND_STATE)
    pt = decode(their_start, expected_kind=KIND_STATE)
    for name, e in pr.entries.items():
        a, b = po.entries.get(name), pt.entries.get(name)
        if a is None or b is None:
            raise PayloadError(f"tensor {name} is missing from a start state")
        for part in STATE_PARTS:
            x = e.parts.get(part)
            if x is None:
                continue
            ya, yb = a.parts.get(part), b.parts.get(part)
            if ya is None or yb is None or ya.shape != x.shape or yb.shape != x.shape:
                raise PayloadError(f"{name}.{part} differs in shape between the states")
            shifted = x.double() + (yb.double() - ya.double())
            e.parts[part] = shifted.to(x.dtype)
    return encode(pr)
