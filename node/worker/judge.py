"""The judge duty: assigned to a challenge's acting panel, the verifier judges the target's
opened segments, fetch -> verify -> vote, commits the vote's hash (MsgVerdict) and opens it in
the next window (MsgRevealVote; tolerance mode: once the provider opened its ends, judged
against the re-executed states).

``judge`` = ``_fetch`` (the served trace list, each run's start, entry H/k, the carry, the
committed payload and the base model) -> ``_verify`` (ml.verify_round: start, payload and every
opened segment re-executed) -> ``_vote`` (the Vote: valid with the ends and the quality, or
invalid with the end each segment's re-execution reached)."""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from abci_app.codec.address import from_bech32
from abci_app.jobs.incentives import (
    UNAVAILABLE_EVIDENCE,
    compute_evidence,
    compute_hidden_entries,
    compute_masked_entries,
)
from abci_app.jobs.msgs import MIN_SEALED_VOTE_REVEAL_BLOCKS
from abci_app.jobs.probe import PROBE_DIM, compute_probe_evidence, is_probe_within
from abci_app.merkle import hash_leaf
from node.blobs import BlobError
from node.client.market_msgs import build_reveal_vote, build_verdict
from node.worker import ml
from node.worker.context import WorkerContext
from node.worker.records import Challenge, Job, Opening, Participant, Round, Vote
from trainer.carry import EMPTY_CARRY_HASH
from trainer.commit import KIND_STATE, Binding, PayloadError, decode_meta
from trainer.verify import ChallengeVerdict, verify_opened_end
from trainer.verify_run import shift_state

log = logging.getLogger("loconet.worker")

# a verifier votes unavailable when the revealed states still cannot be fetched this many blocks
# before the end of the window its panel commits in (the vote must still land in the window);
# until then it keeps trying: a provider whose worker crashed and restarts in the window is verified
VOTE_UNAVAILABLE_MARGIN_BLOCKS = 2


@dataclass
class _Served:
    """What the verifier fetched for one challenge (``JudgeDuty._fetch``)."""

    trace: list[bytes]  # the served trace list (the secret entries as their leaf hashes)
    states: dict[int, bytes]  # each run's start, entry H/k, any public end
    hidden: dict[int, bytes]  # the secret entries -> their committed leaf hash
    carry: bytes
    payload: bytes | None
    base: bytes


def _openings(ch: Challenge, panel: int) -> list[Opening]:
    """The segments ``panel`` judges: a later panel's fresh ones and every earlier panel's."""
    if ch.panel_openings(panel):
        return ch.panel_openings(panel)
    assert ch.reveal is not None
    return [replace(ch.reveal, segment=ch.segment)]


def _leaves(openings: Sequence[Opening]) -> list[bytes]:
    """The committed leaf hash of each opened end: opened as such (exact mode) or by its hash."""
    return [
        bytes.fromhex(o.end_leaf_hash)
        if o.end_leaf_hash
        else hash_leaf(bytes.fromhex(o.end_state_hash))
        for o in openings
    ]


def invalid_vote(why: str, reached: Sequence[bytes | None], leaves: Sequence[bytes]) -> Vote:
    """An INVALID vote naming, for each opened segment, the end its re-execution reached; a
    segment not re-executed (None, or past the end of ``reached``) is padded with sha256(why).
    It never names every committed leaf (that would be the valid vote's evidence)."""
    pad = hashlib.sha256(why.encode()).digest()
    out = [x if x is not None else pad for x in list(reached)[: len(leaves)]]
    out += [pad] * (len(leaves) - len(out))
    if all(hash_leaf(x) == leaf for x, leaf in zip(out, leaves, strict=True)):
        out[-1] = hashlib.sha256(b"mismatch" + out[-1]).digest()  # never self-contradict
    return Vote(False, 0, tuple(out), why)


class JudgeDuty:
    """Judge, commit and open the votes of this worker's verifier seats (module docstring)."""

    def __init__(self, ctx: WorkerContext) -> None:
        self.ctx = ctx
        # tolerance mode: (job, round, target) -> the probes judge() reached, for do_verify
        self.probes: dict[tuple[int, int, str], list[int]] = {}
        self.fetch_failures: dict[str, int] = {}

    # ------------------------------------------------------------------------- commit a vote

    def do_verify(self, job: Job, r: Round, t: Participant, height: int) -> None:
        """Judge the target's opened segments and commit the vote's hash (MsgVerdict); the vote
        itself (valid, quality, evidence) is kept in progress.json to be opened next window."""
        ctx, jid, rn, target = self.ctx, r.job_id, r.round, t.address
        t0, wall0 = time.perf_counter(), time.time()
        vote = self.judge(job, r, t, height)
        ctx.account("verify_s", time.perf_counter() - t0)
        ctx.span("verify", wall0, time.time())
        if vote is None:
            return  # states not fetched yet: retried on a later block
        unavailable = vote.is_unavailable
        votes = dict(ctx.progress.round(jid, rn).get("votes", {}))
        votes[target] = vote.stored()
        probes = self.probes.pop((jid, rn, target), None)
        if probes is None and ctx._plans[jid].tolerance is not None and not unavailable:
            probes = self._no_probes(t, r.panel)  # nothing re-executed (an early refusal): a guess
        if unavailable:  # either mode: nothing reached, nothing to probe
            probes, evidence = None, UNAVAILABLE_EVIDENCE
        elif probes is not None:  # tolerance mode: a blind vote on the probes reached
            votes[target]["probes"] = probes
            evidence = compute_probe_evidence(probes)
        else:
            evidence = compute_evidence(list(vote.reached))
        ctx.progress.update(jid, rn, votes=votes)
        res = ctx._send(
            build_verdict(
                ctx.key.signer,
                jid,
                rn,
                from_bech32(target),
                vote.valid,
                vote.quality,
                evidence,
                blind=probes is not None,
                unavailable=unavailable,
                panel=r.panel,
            )
        )
        ctx.stats.votes += 1
        log.info(
            "round %s: vote on %s committed: %s quality %d (%s) at height %d",
            r.key,
            target,
            "UNAVAILABLE" if unavailable else "VALID" if vote.valid else "INVALID",
            vote.quality,
            vote.why,
            res["height"],
        )

    # ------------------------------------------------------------------------- open a vote

    def do_open_vote(self, job: Job, r: Round, t: Participant, height: int) -> None:
        """Open the committed vote (MsgRevealVote) with exactly what was hashed."""
        ctx, jid, rn, target = self.ctx, r.job_id, r.round, t.address
        v = ctx.progress.round(jid, rn).get("votes", {}).get(target)
        if (
            v is None
        ):  # the record was lost (restart): judge again, the same inputs give the same vote
            v = self._judge_again(job, r, t, height)
            if v is None:
                return
        unavailable = bool(v.get("unavailable"))  # then nothing else in the opening counts
        valid = bool(v["valid"]) and not unavailable
        lazy = ctx.cfg.behaviour == "lazy-verifier"  # checks nothing: the chain catches it
        if "probes" in v and valid and not lazy:  # tolerance mode: judge the opened ends first
            verdict = self.judge_opened_ends(job, r, t, v, height)
            if verdict is None:
                return  # the ends are not open yet: retried on a later block
            valid, why = verdict
            if not valid:
                log.info("round %s: %s: opened ends refuted: %s", r.key, target, why)
        res = ctx._send(
            build_reveal_vote(
                ctx.key.signer,
                jid,
                rn,
                from_bech32(target),
                valid,
                int(v["quality"]),
                [bytes.fromhex(x) for x in v["reached"]],
                probes=v.get("probes"),
                unavailable=unavailable,
                panel=r.panel,
            )
        )
        log.info(
            "round %s: vote on %s opened: %s at height %d",
            r.key,
            target,
            "UNAVAILABLE" if unavailable else "VALID" if valid else "INVALID",
            res["height"],
        )

    def _judge_again(
        self, job: Job, r: Round, t: Participant, height: int
    ) -> dict[str, Any] | None:
        """The stored vote judged once more (its record was lost in a restart); None while the
        blobs cannot be fetched yet."""
        vote = self.judge(job, r, t, height)
        if vote is None:
            return None
        v = vote.stored()
        probes = self.probes.pop((r.job_id, r.round, t.address), None)
        if probes is None and self.ctx._plans[r.job_id].tolerance is not None:
            probes = self._no_probes(t, r.panel)
        if probes is not None and not v["unavailable"]:
            v["probes"] = probes
        return v

    @staticmethod
    def _no_probes(t: Participant, panel: int = 0) -> list[int]:
        """All-zero probes, one per segment ``panel`` judges: the evidence of a vote that
        re-executed nothing (an invalid vote, or a lazy one: it cannot know the probes)."""
        n = len(t.challenge.panel_openings(panel)) if t.challenge is not None else 0
        return [0] * (PROBE_DIM * (n or 1))

    # ------------------------------------------------------------------------- opened ends

    def judge_opened_ends(
        self, job: Job, r: Round, t: Participant, v: dict[str, Any], height: int
    ) -> tuple[bool, str] | None:
        """Tolerance mode, once the provider opened its ends (MsgOpenEnd): each opened end must
        be the committed leaf, its probe within the chain's bound of ours, its state within the
        job's tolerance of our re-execution (trainer.verify.verify_opened_end). None while an
        end is not open yet (a later block), unless the window is closing: then valid on the
        probes alone (if the provider opens its ends in this last block, the chain compares our
        probes with its own, so a valid vote on faked work still counts invalid; if it never
        opens them, the challenge is a missed reveal and no vote is judged)."""
        assert t.challenge is not None
        openings = t.challenge.panel_openings(r.panel)  # the first panel's and later fresh ones
        closing = height + 1 >= _last_opening_height(job, r)
        if not openings or any(not o.end_opened_height for o in openings):
            return (
                (True, "the ends are not open: the probes speak for the vote") if closing else None
            )
        probes = [int(x) for x in v["probes"]]
        endpoint = self.ctx._endpoint_of(t.address)
        for i, o in enumerate(openings):
            why = self._judge_opened_end(job, r, t, v, openings, i, probes, endpoint, closing)
            if why is not None:
                return False, f"segment {o.segment}: {why}"
        return True, "opened ends within tolerance of the re-execution"

    def _judge_opened_end(
        self,
        job: Job,
        r: Round,
        t: Participant,
        v: dict[str, Any],
        openings: list[Opening],
        i: int,
        probes: list[int],
        endpoint: str,
        closing: bool,
    ) -> str | None:
        """Why the ``i``-th opened end is not the provider's work (None: it is)."""
        ctx, o = self.ctx, openings[i]
        plan = ctx._plans[r.job_id]
        mine = probes[i * PROBE_DIM : (i + 1) * PROBE_DIM]
        theirs = list(o.end_probe)
        if not is_probe_within(theirs, mine, job.tolerance_ppm):
            return "the opened probe is not ours"
        state = partial(
            ctx.fetch, tier="temp", round_key=r.key, max_bytes=ml.blob_cap(plan, ml.STATE_PARTS)
        )
        shifted = False
        try:
            claimed = state(o.end_state_hash, [o.end_location, endpoint])
            reexec = bytes(ctx.store.read(v["reached"][i]))
            if o.start_state_hash:  # a run's start
                start = state(o.start_state_hash, [o.start_location, endpoint])
            else:  # the previous opened segment's end, opened too; we re-executed from
                # ours: judge the displacement, our end moved onto the provider's start
                p = openings[i - 1]
                if i == 0 or p.segment != o.segment - 1:
                    return "no opened start"
                start = state(p.end_state_hash, [p.end_location, endpoint])
                own = bytes(ctx.store.read(v["reached"][i - 1]))
                reexec, shifted = shift_state(reexec, own, start), True
        except PayloadError as e:  # not a state of the model (the end before was judged)
            return f"opened states do not match: {e}"
        except (BlobError, KeyError, OSError) as e:
            if not closing:
                raise
            return f"opened end unavailable: {e}"
        judge_end = partial(
            verify_opened_end,
            start,
            tolerance=float(plan.tolerance or 0.0),
            end_leaf=bytes.fromhex(o.end_leaf_hash),
            claimed_probe=theirs,
            tolerance_ppm=job.tolerance_ppm,
        )
        sv = judge_end(reexec, claimed)
        if not sv.valid and shifted:
            # our re-execution of this segment started from our own state, so our moved end
            # still carries some of the previous segments' drift (benchmarks/probe_runs.py):
            # re-execute it once more from the provider's opened start, the single-segment
            # check, which decides
            spec = plan.shard_spec(r.round, t.address, t.shard)
            fresh = ml.reexecute_segment(
                plan, spec, start, corpus=ctx._corpus(job), device=ctx.device
            )
            if fresh is not None:
                sv = judge_end(fresh, claimed)
        return None if sv.valid else sv.reason

    # ------------------------------------------------------------------------- judge

    def judge(self, job: Job, r: Round, t: Participant, height: int) -> Vote | None:
        """The Vote on the target's commitment: VALID only if the full check passes
        (ml.verify_round: the served trace list gives the committed trace root, entry 0 is the
        pinned fresh start, which the verifier builds from the round's base model and public
        metadata and never fetches, the committed payload is compress(θ_base − θ_H + e_prev) of
        entry H/k, every opened segment re-executes in the job's determinism mode). ``reached``
        = the end state hash of each opened segment (segment order): in exact mode the
        re-executed one, checked against the opened leaf hash (the end itself is secret: only
        re-execution yields it), in tolerance mode the revealed one the re-execution is within
        tolerance of; when invalid, the end each segment's re-execution reached (every segment
        is re-executed, even past a failure: a later panel's evidence), a padding only for one
        that could not be. The vote commits to abci_app.jobs.incentives.compute_evidence
        (reached). None while the blobs cannot be fetched (until VOTE_UNAVAILABLE_MARGIN_BLOCKS
        before the panel's window ends); then an UNAVAILABLE vote (``Vote.unavailable_vote``:
        invalid with nothing reached; docs/threat-model.md *Unavailable votes*): it convicts a
        provider that serves nobody, and costs this verifier at most the liveness slash if the
        provider served the others (framing). fetch -> verify -> vote."""
        assert t.challenge is not None
        openings = _openings(t.challenge, r.panel)
        leaves = _leaves(openings)
        if self.ctx.cfg.behaviour == "lazy-verifier":
            return _lazy_vote(openings)
        named = {o.trace_list_hash for o in openings}
        if len(named) != 1 or len(next(iter(named))) != 64:  # the chain refuses such a reveal
            why = (
                "the reveal commits no single trace list (trace_list_hash): entries 0 and H/k "
                "cannot be checked"
            )
            return invalid_vote(why, [hashlib.sha256(b"no trace list").digest()], leaves)
        try:
            served = _fetch(self.ctx, job, r, t, openings, leaves, next(iter(named)).lower())
        except BlobError as e:
            return self._unavailable(r, t, height, e)
        except (ValueError, PayloadError) as e:  # a trace list or end state not what it must be
            why = f"served trace is malformed: {e}"
            return invalid_vote(why, [hashlib.sha256(str(e).encode()).digest()], leaves)
        try:
            v = self._verify(job, r, t, openings, served)
        except (ValueError, KeyError, IndexError, PayloadError) as e:
            # verify_challenge should not raise; never vote valid on it
            why = f"verification failed: {e}"
            return invalid_vote(why, [hashlib.sha256(str(e).encode()).digest()], leaves)
        return self._vote(job, r, t, openings, leaves, served, v)

    def _unavailable(self, r: Round, t: Participant, height: int, e: BlobError) -> Vote:
        """The revealed blobs did not come: raise (retried on a later block) until
        VOTE_UNAVAILABLE_MARGIN_BLOCKS before the window this panel commits in ends, then the
        UNAVAILABLE vote."""
        key = f"{r.key}/{t.address}"
        nf = self.fetch_failures[key] = self.fetch_failures.get(key, 0) + 1
        end = {"appeal": r.window("appeal_end"), "final": r.window("final_end")}.get(r.phase)
        last_chance = height >= (end or r.window("verdict_end")) - VOTE_UNAVAILABLE_MARGIN_BLOCKS
        if not last_chance:
            raise e
        return Vote.unavailable_vote(f"revealed blobs unavailable ({nf} tries): {e}")

    def _verify(
        self, job: Job, r: Round, t: Participant, openings: list[Opening], served: _Served
    ) -> ChallengeVerdict:
        """ml.verify_round on what was served: start, payload, every opened segment."""
        ctx = self.ctx
        plan = ctx._plans[r.job_id]
        c = t.commitment
        assert c is not None
        binding = Binding(
            from_bech32(t.address), r.job_id, r.round, bytes.fromhex(r.base_model_hash)
        )
        return ml.verify_round(
            plan,
            plan.shard_spec(r.round, t.address, t.shard),
            segments=[o.segment for o in openings],
            trace=served.trace,
            states=served.states,
            carry=served.carry,
            payload=served.payload,
            trace_root=bytes.fromhex(c.trace_root),
            update_root=bytes.fromhex(c.update_root),
            binding=binding,
            corpus=ctx._corpus(job),
            device=ctx.device,
            base_params_hash=ml.params_hash(served.base),
            hidden=served.hidden,
            base=served.base,  # entry 0 is built from it (a fresh start), not fetched
        )

    def _vote(
        self,
        job: Job,
        r: Round,
        t: Participant,
        openings: list[Opening],
        leaves: list[bytes],
        served: _Served,
        v: ChallengeVerdict,
    ) -> Vote:
        """The vote on the verdict: invalid with the end each segment's re-execution reached,
        or valid with the ends and the update's quality. Tolerance mode: the probes of the
        re-executed ends are kept for the blind vote, and the re-executed states to judge the
        ends once they are opened (MsgOpenEnd)."""
        ctx = self.ctx
        plan = ctx._plans[r.job_id]
        sv_of = [v.segments.get(o.segment) for o in openings]
        reached = [
            None
            if sv is None
            else bytes.fromhex(sv.reexecuted_hash)
            if len(sv.reexecuted_hash) == 64
            else hashlib.sha256(sv.reason.encode()).digest()
            for sv in sv_of
        ]
        if plan.tolerance is not None and v.segments:
            flat: list[int] = []
            for sv in sv_of:
                ok = sv is not None and len(sv.probe) == PROBE_DIM
                flat.extend(sv.probe if sv is not None and ok else [0] * PROBE_DIM)
                if sv is not None and sv.reexecuted_state:
                    ctx.store.put_bytes(sv.reexecuted_state, tier="temp", round_key=r.key)
            self.probes[(r.job_id, r.round, t.address)] = flat
        if not v.valid:
            return invalid_vote(v.reason, reached, leaves)
        # valid: each end is the committed one, re-executed (exact) or the revealed one the
        # re-execution is within tolerance of
        ends = tuple(
            bytes.fromhex(o.end_state_hash or v.segments[o.segment].reexecuted_hash)
            for o in openings
        )
        q = 1
        try:
            if served.payload is not None:
                q = ml.quality(plan, served.base, served.payload, ctx._corpus(job))
        except Exception as e:  # noqa: BLE001 (a peer's or the chain's answer must never stop the worker)
            log.info("quality of %s: payload not scored (%s); valid at quality 1", t.address, e)
        return Vote(True, q, ends, v.reason)


def _fetch(
    ctx: WorkerContext,
    job: Job,
    r: Round,
    t: Participant,
    openings: list[Opening],
    leaves: list[bytes],
    list_hash: str,
) -> _Served:
    """Fetch what the provider serves for the challenge, each limited to what it can be (a
    peer sending more is refused while the body streams: the trace list's size is exact, a
    state's a cap of the model). The ends the provider keeps secret (it serves their leaf
    hashes only) and with them every start but a run's are never fetched (the verifier
    re-executes each run through: ml.verify_round); ``judge``'s first step. BlobError: not
    fetched (yet); ValueError or PayloadError: not what the chain committed."""
    rk = r.key
    assert t.challenge is not None
    plan = ctx._plans[r.job_id]
    endpoint = ctx._endpoint_of(t.address)
    n = plan.H // plan.k
    state = partial(
        ctx.fetch, tier="temp", round_key=rk, max_bytes=ml.blob_cap(plan, ml.STATE_PARTS)
    )
    segs = [o.segment for o in openings]
    leaved = any(o.end_leaf_hash for o in openings)  # the chain opened the ends as leaves
    hidden: dict[int, bytes] = {}
    if leaved:
        secret = compute_hidden_entries(segs, n)
        hidden = {
            o.segment + 1: leaf
            for o, leaf in zip(openings, leaves, strict=True)
            if o.segment + 1 in secret
        }
    ctx._kinds[list_hash] = "trace_list"  # traffic counters: no header says so
    listed = ctx.fetch(
        list_hash, [endpoint], tier="temp", round_key=rk, max_bytes=ml.trace_list_size(plan)
    )
    if hashlib.sha256(listed).hexdigest() != list_hash:  # the blob client checks it too
        raise ValueError("the served trace list is not the one committed on chain")
    trace = ml.parse_trace_list(listed)
    # the list holds every entry but 0, H/k and the first panel's run starts as its leaf
    # hash (incentives.compute_masked_entries); a later panel's run start is opened on chain
    # (proven against the trace root): put it in the clear, the rest stays secret
    if len(trace) == n + 1 and leaved:
        for i in compute_masked_entries(t.challenge.first_segments, n):
            hidden.setdefault(i, bytes(trace[i]))
        for o in openings:  # a run's start: opened in the clear
            if o.start_state_hash:
                hidden.pop(o.segment, None)
                trace[o.segment] = bytes.fromhex(o.start_state_hash)
    states: dict[int, bytes] = {}
    for o in openings:
        s = o.segment
        # a run's start (any other is the secret end before it); entry 0 is never fetched:
        # every round starts fresh, so ml.verify_round builds it from the base
        if s not in hidden and s != 0:
            states[s] = state(o.start_state_hash, [o.start_location, endpoint])
        if s + 1 in hidden or s + 1 in states:
            continue
        if o.end_state_hash:
            states[s + 1] = state(o.end_state_hash, [o.end_location, endpoint])
        elif len(trace) == n + 1 and s + 1 == n:  # exact mode: entry H/k is public
            states[s + 1] = state(trace[n].hex(), [endpoint])
    if len(trace) == n + 1 and n not in states:  # the payload check's θ_H
        states[n] = state(trace[n].hex(), [endpoint])
    carry = _carry(ctx, plan, states.get(n), endpoint, rk)
    payload = ctx._payload(r, t, rk)
    base = ctx._base(job, r.base_model_hash)
    return _Served(trace, states, hidden, carry, payload, base)


def _carry(
    ctx: WorkerContext, plan: ml.JobPlan, last: bytes | None, endpoint: str, rk: str
) -> bytes:
    """The carry entry H/k names: the empty one (every round starts fresh), else fetched."""
    if last is not None:
        named = decode_meta(last, expected_kind=KIND_STATE).get("carry")
        if isinstance(named, str) and named != EMPTY_CARRY_HASH.hex():
            return ctx.fetch(
                named,
                [endpoint],
                tier="temp",
                round_key=rk,
                max_bytes=ml.blob_cap(plan, ml.CARRY_PARTS),
            )
    return ml.fresh_carry_bytes()


def _lazy_vote(openings: list[Opening]) -> Vote:
    """A lazy verifier's vote on public data only: refused (exact mode) or counted invalid and
    slashed (tolerance mode: its probes, all zero, are a guess)."""
    public = {o.segment: o.start_state_hash for o in openings}
    guess = tuple(  # only a run's start is public: never the end of an opened segment
        bytes.fromhex(o.end_state_hash or public.get(o.segment + 1) or "00" * 32) for o in openings
    )
    return Vote(True, ml.MAX_QUALITY, guess, "lazy: not re-executed")


def _last_opening_height(job: Job, r: Round) -> int:
    """The last block that takes the acting panel's opened ends: the first panel's is Vr - 1
    when the vote windows have >= 3 blocks (Vr's seed draws the audit: abci_app.jobs.msgs
    compute_last_opening_height), else Vr; a later panel opens until its own window's end (it
    seeds nothing)."""
    if r.panel:
        return r.window("appeal_reveal_end" if r.panel == 1 else "final_reveal_end")
    last = r.window("vote_reveal_end")
    return last - 1 if job.verdict_blocks >= MIN_SEALED_VOTE_REVEAL_BLOCKS else last
