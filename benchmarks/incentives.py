"""Incentive simulation (issue 11): drive the real app in process, one row per strategy.

Every row runs the real ``abci_app`` state machine (tests/kits/chainkit.py: every block is
finalized, committed and every invariant checked) with a population of honest providers and one
strategist. Actors act through signed transactions only. Verification is modelled by an oracle
that stands in for re-execution: each commitment has a ground truth (which trace segments are
faked, whether the payload is poisoned) and an honest verifier votes ``invalid`` exactly when
the challenged segment is faked. Costs (not on chain) are a model:

    train cost   = TRAIN_BPS of the average slot value R/P per round trained (60 %)
    verify cost  = VERIFY_BPS of the train cost per verification re-executed (5 %, issue 10 target)

Profit of an actor = change of (balance + bond + unbonding) - its compute cost. A row reports
the strategist's expected profit per round of the job it plays in (``uloco``; negative = the
strategy loses money), the same for an honest provider in the same world, and how many honest
providers were slashed. Expected values at the job's challenge rate are computed from the two
branches measured on the chain (every commitment challenged / none challenged, via the genesis
param ``min_challenge_bps`` = 0 for the second), which is exact for strategies that act per
round, instead of waiting for a 5 % event.

    .venv/bin/python benchmarks/incentives.py [--rounds N] [--seeds S] [--only ROWS]
        [--results benchmarks/RESULTS.md]
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import platform
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from abci_app import beacon  # noqa: E402
from abci_app.app import Application, block_context, execute_block  # noqa: E402
from abci_app.bank import keeper as bank  # noqa: E402
from abci_app.codec.tx import SignatureCache  # noqa: E402
from abci_app.jobs import keeper as jobs_keeper  # noqa: E402
from abci_app.jobs.incentives import compute_panel_segments  # noqa: E402
from abci_app.jobs.params import DEFAULTS as JOBS_DEFAULTS  # noqa: E402
from abci_app.pb import abci, jobs_pb2  # noqa: E402
from abci_app.providers.params import DEFAULTS as PROVIDERS_DEFAULTS  # noqa: E402
from abci_app.store import MerkleStore  # noqa: E402
from tests.kits import chainkit  # noqa: E402
from tests.kits import marketkit as mk  # noqa: E402

LOCO = 1_000_000
R = 10 * LOCO  # reward per round
V = 1 * LOCO  # verifier reward per round
P = 4  # participants per round
H, K = 100, 1  # 100 trace segments: "fake f % of the steps" fakes f % of them
TRAIN_BPS = 6_000
VERIFY_BPS = 500
TRAIN_COST = R // P * TRAIN_BPS // 10_000
VERIFY_COST = TRAIN_COST * VERIFY_BPS // 10_000
WINDOWS = {"commit_blocks": 12, "reveal_blocks": 2, "verdict_blocks": 3, "attest_blocks": 2}
EXACT_JOB = dict(mk.EXACT)  # an exact-mode job (the ends of opened segments stay secret)


def job_kw(**kw: Any) -> dict[str, Any]:
    d: dict[str, Any] = dict(
        WINDOWS,
        participants_per_round=P,
        num_shards=P,
        inner_steps=H,
        trace_interval=K,
        verifiers_per_challenge=3,
        challenge_bps=500,
    )
    d.update(kw)
    return d


# -- the world ------------------------------------------------------------------------------------


# The rules the simulation measures are the chain's defaults, stated in the genesis rather than
# left to whatever a kit pins: tests/kits/chainkit.py's unit kits start reputations at 5,000 with
# no floor and reserve no verifiers (KIT_PROVIDERS_PARAMS, KIT_JOBS_PARAMS); a chain made any
# other way has probation (issue 31, 3) and reserved verifiers (issue 31, 10).
CHAIN_PROVIDERS_PARAMS: dict[str, int] = {
    k: PROVIDERS_DEFAULTS[k] for k in ("initial_reputation", "reputation_floor")
}
CHAIN_JOBS_PARAMS: dict[str, int] = {"reserve_verifiers": JOBS_DEFAULTS["reserve_verifiers"]}


def new_world(seed: int, n_keys: int, jobs_params: dict[str, Any] | None = None) -> mk.Market:
    """A chain (chainkit's genesis, one validator, every key funded) under the chain's default
    params (``CHAIN_PROVIDERS_PARAMS``, ``CHAIN_JOBS_PARAMS``: not the unit kits' pins) with
    ``jobs_params`` overrides; ``seed`` empty blocks shift every block hash (draws and challenges)
    so seeds give independent runs. Reserved verifiers: a round draws at most (providers outside
    the owner) - verifiers_per_challenge participants, so a world needs P + 3 providers for full
    P = 4 rounds (every row here has >= 7 unless its note says otherwise)."""
    keys = [chainkit.signer(i) for i in range(n_keys)]
    vals = [chainkit.signer(1000)]
    app = Application(MerkleStore(None, keep_recent=50), check_invariants=True)
    app.info(abci.RequestInfo())
    req = chainkit.genesis_request({k.address: 10**13 for k in keys}, [(vals[0], 10)])
    state = json.loads(req.app_state_bytes)
    state["providers"] = {"params": dict(CHAIN_PROVIDERS_PARAMS)}
    state["jobs"] = {"params": CHAIN_JOBS_PARAMS | (jobs_params or {})}
    req.app_state_bytes = json.dumps(state).encode()
    app.init_chain(req)
    c = chainkit.Chain(app, keys, vals)
    c.block([])
    m = mk.Market(c, keys[0], list(keys[1:]))
    for _ in range(seed):
        c.block([])
    return m


@dataclass
class Truth:
    """Ground truth of one commitment: faked segments, poisoned payload."""

    faked: frozenset[int] = frozenset()
    poisoned: bool = False

    def segment_ok(self, seg: int) -> bool:
        return seg not in self.faked and not self.poisoned


HONEST = Truth()


@dataclass
class Actor:
    """Default: an honest provider. Strategies override the hooks."""

    addr: bytes
    cost: int = 0

    def commit(self, w: World, job: int, r: jobs_pb2.Round) -> Truth | None:  # None: do not commit
        self.cost += TRAIN_COST
        return HONEST

    def reveal(self, w: World, job: int, r: jobs_pb2.Round, p: jobs_pb2.Participant) -> bool:
        return True

    def open_end(self, w: World, job: int, r: jobs_pb2.Round, p: jobs_pb2.Participant) -> bool:
        """Tolerance mode: open the ends and their committed probes after the votes."""
        return True

    def vote(
        self, w: World, job: int, r: jobs_pb2.Round, target: jobs_pb2.Participant
    ) -> tuple[bool, int] | None:
        # a later panel judges the first panel's segments and its own fresh ones
        # (docs/threat-model.md *Fresh segments for the later panels*): more re-execution, paid
        # for here
        judged = compute_panel_segments(target, mk.VOTE_PANEL[r.phase])
        self.cost += VERIFY_COST * len(judged) // max(len(target.segments), 1)
        truth = w.truth.get((job, r.round, target.address), HONEST)
        ok = all(truth.segment_ok(sg) for sg in judged)
        return (True, 8_000) if ok else (False, 0)

    def attest(self, w: World, job: int, r: jobs_pb2.Round) -> bytes | None:
        return mk.agg_hash(job, r.round)

    def extra(self, w: World) -> list[tuple[Any, Any]]:
        return []


@dataclass
class World:
    m: mk.Market
    actors: dict[bytes, Actor]
    jobs: list[int] = field(default_factory=list)
    truth: dict[tuple[int, int, bytes], Truth] = field(default_factory=dict)

    def provider(self, addr: bytes) -> Any:
        """The registered provider at ``addr`` (a providers_pb2.Provider; it must exist)."""
        p = self.m.provider(addr)
        assert p is not None, "not a registered provider"
        return p

    def wealth(self, addr: bytes) -> int:
        p = self.m.provider(addr)
        return bank.get_balance(self.m.store, addr) + (p.bond + p.unbonding if p else 0)

    def step(self) -> None:
        m = self.m
        txs: list[tuple[Any, Any]] = []
        for jid in self.jobs:
            for r in jobs_keeper.iterate_rounds(m.store, jid):
                txs.extend(self._round_txs(jid, r))
        for a in self.actors.values():
            txs.extend(a.extra(self))
        m.block(txs)

    def _round_txs(self, jid: int, r: jobs_pb2.Round) -> list[tuple[Any, Any]]:
        """The txs the actors send for round ``r`` of job ``jid`` in this block, by phase."""
        exact = self.m.job(jid).spec.determinism_mode == jobs_pb2.DETERMINISM_MODE_EXACT
        if r.phase == jobs_pb2.PHASE_COMMIT:
            return self._commit_txs(jid, r, exact)
        if r.phase == jobs_pb2.PHASE_REVEAL:
            return self._reveal_txs(jid, r, exact)
        if r.phase in mk.VOTE_PANEL:
            return self._vote_txs(jid, r, exact)
        if r.phase in mk.OPEN_PANEL:
            return self._open_txs(jid, r, exact)
        if r.phase == jobs_pb2.PHASE_ATTEST:
            return self._attest_txs(jid, r)
        return []

    def _commit_txs(self, jid: int, r: jobs_pb2.Round, exact: bool) -> list[tuple[Any, Any]]:
        """Each drawn actor commits (or not: its ground truth is then every segment faked)."""
        m, out = self.m, list[tuple[Any, Any]]()
        for p in r.participants:
            a = self.actors.get(p.address)
            if a and not p.HasField("commitment") and (jid, r.round, p.address) not in self.truth:
                t = a.commit(self, jid, r)
                self.truth[(jid, r.round, p.address)] = (
                    t if t is not None else Truth(frozenset(range(H)))
                )
                if t is not None:
                    out.append(
                        (
                            m.key(p.address),
                            mk.submit_msg(
                                p.address,
                                jid,
                                r.round,
                                r.base_model_hash,
                                n_entries=H // K + 1,
                                probe=not exact,
                            ),
                        )
                    )
        return out

    def _reveal_txs(self, jid: int, r: jobs_pb2.Round, exact: bool) -> list[tuple[Any, Any]]:
        """Each challenged actor opens its challenged segment, if it chooses to."""
        m, out = self.m, list[tuple[Any, Any]]()
        for p in r.participants:
            a = self.actors.get(p.address)
            if a and p.challenged and not p.HasField("reveal") and a.reveal(self, jid, r, p):
                out.append(
                    (
                        m.key(p.address),
                        mk.reveal_msg(
                            p.address,
                            jid,
                            r.round,
                            p.segment,
                            n_entries=H // K + 1,
                            base=r.base_model_hash,
                            exact=exact,
                            segments=list(p.segments),
                        ),
                    )
                )
        return out

    def _vote_txs(self, jid: int, r: jobs_pb2.Round, exact: bool) -> list[tuple[Any, Any]]:
        """A panel's voting window: a later panel's fresh segments are opened first (judged the
        next block), then each seated actor commits the vote it chooses (kept to open later)."""
        m, out = self.m, list[tuple[Any, Any]]()
        panel = mk.VOTE_PANEL[r.phase]
        for p in r.participants:
            if not (p.challenged and p.HasField("reveal")):
                continue
            fresh = mk.fresh_reveal_msgs(m, r, p, panel, exact)
            if fresh:
                a = self.actors.get(p.address)
                if a and a.reveal(self, jid, r, p):
                    out.extend((m.key(p.address), x) for x in fresh)
                continue
            for v in p.verifiers:
                a = self.actors.get(v.address)
                if a and v.panel == panel and not v.vote_hash:
                    choice = a.vote(self, jid, r, p)
                    if choice == mk.UNAVAILABLE:
                        commit, open_ = mk.unavailable_vote_msgs(r, p.address, v.address)
                    elif choice is not None:
                        commit, open_ = mk.vote_msgs(
                            r,
                            p.address,
                            v.address,
                            choice[0],
                            choice[1],
                            *choice[2:3],
                            tolerance=not exact,
                            panel=panel,
                        )
                    else:
                        continue
                    m.pending_votes[(jid, r.round, p.address, v.address)] = open_
                    out.append((m.key(v.address), commit))
        return out

    def _open_txs(self, jid: int, r: jobs_pb2.Round, exact: bool) -> list[tuple[Any, Any]]:
        """A panel's opening window: tolerance mode, the provider opens its ends; every committed
        vote is opened (a lazy vote's opening may be refused: it is then silent)."""
        m, out = self.m, list[tuple[Any, Any]]()
        panel = mk.OPEN_PANEL[r.phase]
        for p in r.participants:
            a = self.actors.get(p.address)
            if not exact and a and p.HasField("reveal") and a.open_end(self, jid, r, p):
                out.extend(
                    (
                        m.key(p.address),
                        mk.open_end_msg(
                            p.address,
                            jid,
                            r.round,
                            o.segment,
                            n_entries=H // K + 1,
                            base=r.base_model_hash,
                        ),
                    )
                    for o in p.reveals
                    if not o.end_opened_height and o.panel == panel
                )
            for v in p.verifiers:
                key = (jid, r.round, p.address, v.address)
                if v.vote_hash and not v.voted and key in m.pending_votes:
                    out.append((m.key(v.address), m.pending_votes.pop(key)))
        return out

    def _attest_txs(self, jid: int, r: jobs_pb2.Round) -> list[tuple[Any, Any]]:
        """Each accepted actor attests the hash it chooses."""
        m, out = self.m, list[tuple[Any, Any]]()
        for p in r.participants:
            a = self.actors.get(p.address)
            if a and p.outcome == jobs_pb2.OUTCOME_ACCEPTED and not p.attested_hash:
                hsh = a.attest(self, jid, r)
                if hsh is not None:
                    out.append((m.key(p.address), mk.attest_msg(jid, r.round, hsh)))
        return out

    def run(self, max_blocks: int = 100_000) -> None:
        for _ in range(max_blocks):
            if all(
                self.m.job(j).status
                in (jobs_pb2.JOB_STATUS_COMPLETED, jobs_pb2.JOB_STATUS_CANCELLED)
                for j in self.jobs
            ):
                return
            self.step()
        raise RuntimeError("jobs did not finish")


# -- strategies -----------------------------------------------------------------------------------


class Withholder(Actor):
    """Commits a random root (no training) and never reveals when challenged."""

    def commit(self, w, job, r):
        return Truth(frozenset(range(H)))

    def reveal(self, w, job, r, p):
        return False


class EndWithholder(Actor):
    """Tolerance mode: commits a random root (no training), reveals the challenged segments
    (their starts), then withholds the ends and their probes (MsgOpenEnd): a missed reveal."""

    def commit(self, w, job, r):
        return Truth(frozenset(range(H)))

    def open_end(self, w, job, r, p):
        return False


@dataclass
class Faker(Actor):
    """Trains (1 - f) of the steps. ``hit``: the branch where the challenged segment is one of
    the faked ones (True) or not (False); the challenged segment is uniform, so a challenge hits
    with probability f."""

    f_bps: int = 1_000
    hit: bool = True

    def commit(self, w, job, r):
        self.cost += TRAIN_COST * (10_000 - self.f_bps) // 10_000
        return Truth(frozenset(range(H))) if self.hit else HONEST


class Copier(Actor):
    """Re-wraps a peer's payload under its own binding leaf: no training. Caught on every
    challenge by issue 10's payload check (benchmarks/verification.py): modelled as every segment
    wrong."""

    def commit(self, w, job, r):
        return Truth(frozenset(range(H)))


class Poisoner(Actor):
    """Honest trace, poisoned payload: caught on every challenge by issue 10's payload check
    (benchmarks/verification.py)."""

    def commit(self, w, job, r):
        self.cost += TRAIN_COST
        return Truth(poisoned=True)


class FalseAccuser(Actor):
    """A coalition member (Sybil or whale): trains honestly, votes invalid on every honest
    target (to slash it and take the bounty) and never re-executes."""

    def vote(self, w, job, r, target):
        return (
            None
            if target.address in w.actors and isinstance(w.actors[target.address], FalseAccuser)
            else (False, 0)
        )


class UnavailableAccuser(FalseAccuser):
    """A coalition member that, instead of a false fraud claim, says "unavailable" on every honest
    target (docs/threat-model.md *Unavailable votes*: counted invalid, costs what silence costs when
    the work is accepted): cheaper per seat than a false invalid vote, and never re-executes."""

    def vote(self, w, job, r, target):
        claim = super().vote(w, job, r, target)
        return None if claim is None else mk.UNAVAILABLE


class SilentCoalition(FalseAccuser):
    """A coalition member that stays silent on every honest target (the griefing that was open
    before unavailable votes: silence escalates and is slashed the liveness fraction)."""

    def vote(self, w, job, r, target):
        return None


class AlwaysUnavailable(Actor):
    """A lazy verifier that never fetches nor re-executes and always votes "unavailable"."""

    def vote(self, w, job, r, target):
        return mk.UNAVAILABLE


class Coverer(Actor):
    """A coalition member that cheats and covers for the coalition: commits without training
    (every segment faked) and, as a verifier, votes valid at quality 9,000 on coalition members
    (it shares their states, so its valid vote opens in both modes) and honestly on the others.
    It wins when it holds every first-panel seat of a coalition cheater (a unanimous first panel
    stands), an audited challenge's extra seat (``audit_bps``) included."""

    def commit(self, w, job, r):
        return Truth(frozenset(range(H)))

    def vote(self, w, job, r, target):
        if isinstance(w.actors.get(target.address), Coverer):
            return (True, 9_000)
        return super().vote(w, job, r, target)


class Lazy(Actor):
    """Votes valid without re-executing: its evidence is public data only (in an exact-mode job
    the ends of the opened segments are secret, so the chain refuses to open that vote; in a
    tolerance-mode job it must commit probes before the provider opens its own: its guess, the
    public previous step's probe, is not within the bound, so the vote counts as invalid)."""

    def vote(self, w, job, r, target):
        return (True, 8_000, False)


class VoteCopier(Actor):
    """Waits for the last block of the voting window and copies the votes it can see (valid if
    none is visible: with secret votes it sees only hashes); never re-executes."""

    def vote(self, w, job, r, target):
        end = {
            jobs_pb2.PHASE_VERDICT: r.verdict_end,
            jobs_pb2.PHASE_APPEAL: r.appeal_end,
            jobs_pb2.PHASE_FINAL: r.final_end,
        }[r.phase]
        if w.m.height + 1 < end:
            return None
        seen = [
            (v.valid, v.quality) for v in target.verifiers if v.voted and v.address != self.addr
        ]
        if not seen:
            return (True, 8_000, False)
        valid = sum(1 for s in seen if s[0]) * 2 >= len(seen)
        return (True, max(q for ok, q in seen if ok), False) if valid else (False, 0)


class RivalGriefer(Actor):
    """As a verifier of a co-participant of the same round, scores it valid with quality 0."""

    def vote(self, w, job, r, target):
        if any(p.address == self.addr for p in r.participants):
            return (True, 0)
        return super().vote(w, job, r, target)


class Staller(Actor):
    """Trains honestly but never attests the aggregate."""

    def attest(self, w, job, r):
        return None


class SybilRivalScorer(Actor):
    """Issue 31, 4: one of a coalition's keys (all train honestly). Seated on the panel of a rival
    (a participant outside the coalition) in a round where another coalition key participates, it
    re-executes (a valid vote needs its evidence) and scores the rival valid at quality 1, to
    shrink the rival's share of the round's reward; otherwise it votes honestly."""

    def vote(self, w, job, r, target):
        coalition = {a for a, x in w.actors.items() if isinstance(x, SybilRivalScorer)}
        if target.address not in coalition and any(p.address in coalition for p in r.participants):
            self.cost += VERIFY_COST
            return (True, 1)
        return super().vote(w, job, r, target)


class SilentVerifier(Actor):
    """Issue 31, 11: trains honestly, commits no vote on any target it is seated for (griefing by
    silence: its targets' work is left undecided when nobody is left for an appeal panel)."""

    def vote(self, w, job, r, target):
        return None


class SilentSybilJudge(Actor):
    """Issue 31, 10: a copier's Sybil: trains honestly, silent on the coalition's copier (so that
    its challenged commitment meets no valid vote), honest on everyone else."""

    def vote(self, w, job, r, target):
        if isinstance(w.actors.get(target.address), Copier):
            return None
        return super().vote(w, job, r, target)


class LaterPanelCopier(Actor):
    """Issue 31, 5: re-executes in the first panel (nothing is open there to copy); seated in an
    appeal or final panel, it copies the earlier panels' opened votes and re-executes nothing:
    the stake-majority verdict, at the highest valid quality seen. The evidence it can copy
    covers the earlier panels' segments only; its panel's fresh segments (drawn at escalation,
    ends never public) it can only guess: its vote, valid or invalid, is modelled as a lazy one
    (exact mode: a valid one refused, silent; tolerance mode: its probes are a guess, a valid
    one counted invalid), and an invalid one fails on the fresh segments the panel's
    re-executing stake settled (``rounds.apply_evidence_checks``: unevidenced, judged as
    silence)."""

    def vote(self, w, job, r, target):
        panel = mk.VOTE_PANEL[r.phase]
        seen = [v for v in target.verifiers if v.voted and v.panel < panel and not v.unavailable]
        if panel == 0 or not seen:
            return super().vote(w, job, r, target)
        valid = sum(v.stake for v in seen if v.valid)
        if 2 * valid >= sum(v.stake for v in seen):
            return (True, max(v.quality for v in seen if v.valid), False)
        return (False, 0, False)


class FirstPanelAccuser(Actor):
    """Votes invalid on every target in the first panel (a false fraud claim on honest work,
    which escalates it), honest in the later panels."""

    def vote(self, w, job, r, target):
        if mk.VOTE_PANEL[r.phase] == 0:
            return (False, 0)
        return super().vote(w, job, r, target)


# -- running a row --------------------------------------------------------------------------------


@dataclass
class Row:
    name: str
    profit: int  # strategist, uloco per round, expected at the job's challenge rate
    excess: int  # profit - the same actor's profit had it played honestly in the same worlds
    honest_profit: int  # one honest provider of the same world, uloco per round
    honest_slashed: int  # honest providers slashed (count of slash events)
    note: str = ""


def play(
    seed: int,
    strategist: Callable[[bytes], Actor] | None,
    *,
    rounds: int,
    challenge_bps: int,
    n_honest: int = 7,
    strategist_bond: int = mk.BOND,
    extra_job: dict[str, Any] | None = None,
    n_strategist: int = 1,
    zero_min_challenge: bool = False,
    per_drawn: bool = False,
    others: tuple[Callable[[bytes], Actor], ...] = (),
    with_owner: bool = False,
    jobs_params: dict[str, Any] | None = None,
) -> tuple[float, float, int, World]:
    """One job of ``rounds`` rounds; returns (strategist profit per round, mean honest profit per
    round, honest slash events, world). ``per_drawn``: the strategist's profit per round it was
    drawn in (a participant strategy), else per round of the job. ``others``: more providers
    with these behaviours (neither strategist nor counted as honest); ``with_owner``: the job's
    owner is in the strategist's coalition (its wealth counts); ``jobs_params``: genesis jobs
    params overrides (e.g. ``audit_bps``)."""
    params = (
        ({"min_challenge_bps": 0} if zero_min_challenge else {})
        | JOBS_PARAMS_OVERRIDE
        | (jobs_params or {})
    )
    w = World(new_world(seed, 1 + n_honest + n_strategist + len(others), params or None), {})
    m = w.m
    honest = m.providers[:n_honest]
    strat = m.providers[n_honest : n_honest + n_strategist]
    rest = m.providers[n_honest + n_strategist : n_honest + n_strategist + len(others)]
    regs = [(k, mk.register_msg(mk.BOND)) for k in honest + rest] + [
        (k, mk.register_msg(strategist_bond)) for k in strat
    ]
    m.block(regs)
    for k in honest:
        w.actors[k.address] = Actor(k.address)
    for k, make in zip(rest, others, strict=True):
        w.actors[k.address] = make(k.address)
    for k in strat:
        w.actors[k.address] = strategist(k.address) if strategist else Actor(k.address)
    before = {a: w.wealth(a) for a in w.actors}
    owner_before = w.wealth(m.owner.address)
    kw = job_kw(challenge_bps=challenge_bps) | (extra_job or {})
    res = m.send(m.owner, mk.create_job_msg(rounds=rounds, reward=R, vreward=V, **kw))
    assert res.code == 0, res.log
    w.jobs.append(1)
    w.run()
    gain = {a: w.wealth(a) - before[a] - w.actors[a].cost for a in w.actors}
    drawn = sum(
        1
        for r in jobs_keeper.iterate_rounds(m.store, 1)
        for p in r.participants
        if p.address in {k.address for k in strat}
    )
    s_gain = sum(gain[k.address] for k in strat) + (
        w.wealth(m.owner.address) - owner_before if with_owner else 0
    )
    s_profit = s_gain / (max(drawn, 1) if per_drawn else rounds)
    h_profit = sum(gain[k.address] for k in honest) / max(len(honest), 1) / rounds
    slashed = sum(
        1
        for r in jobs_keeper.iterate_rounds(m.store, 1)
        for s in r.slashes
        if s.address in {k.address for k in honest}
    )
    return s_profit, h_profit, slashed, w


def expected_row(
    name: str,
    caught: Callable[[bytes], Actor],
    seeds: int,
    rounds: int,
    note: str = "",
    passing: Callable[[bytes], Actor] | None = None,
    q_bps: int = 10_000,
    **kw: Any,
) -> Row:
    """Expected profit per round the strategist is drawn in:
    E = p x (q x A + (1 - q) x B) + (1 - p) x C, p = the job's challenge rate (500 bps), q = the
    probability that a challenge catches the strategy, A = profit when every commitment is
    challenged and caught (``caught``), B = challenged but not caught (``passing``), C = never
    challenged (genesis ``min_challenge_bps`` 0). A, B and C are measured on the chain."""
    if name and not wanted(name):
        return Row(name, 0, 0, 0, 0, SKIPPED)
    p = job_kw()["challenge_bps"]
    passing = passing or caught
    acc = [0.0] * 6
    sl = 0
    for s in range(seeds):
        branches = (
            [(caught, 10_000, False)]
            + ([(passing, 10_000, False)] if q_bps < 10_000 else [])
            + [(passing, 0, True)]
        )
        out = []
        for who, ch, zero in branches:
            a, b, c, _ = play(
                s,
                who,
                rounds=rounds,
                challenge_bps=ch,
                zero_min_challenge=zero,
                per_drawn=True,
                **kw,
            )
            out.append((a, b))
            sl += c
        if q_bps == 10_000:
            out.insert(1, out[0])
        for i, (a, b) in enumerate(out):
            acc[2 * i] += a / seeds
            acc[2 * i + 1] += b / seeds
    A, hA, B, hB, C, hC = acc
    BRANCHES[name] = (A, B, C)
    prof = (p * (q_bps * A + (10_000 - q_bps) * B) / 10_000 + (10_000 - p) * C) / 10_000
    hon = (p * (q_bps * hA + (10_000 - q_bps) * hB) / 10_000 + (10_000 - p) * hC) / 10_000
    base = (
        _baseline(
            ("expected", seeds, rounds, repr(sorted(kw.items()))),
            lambda: expected_row("", Actor, seeds, rounds, **kw).profit,
        )
        if caught is not Actor
        else round(prof)
    )
    return Row(name, round(prof), round(prof) - base, round(hon), sl, note)


_BASE: dict[Any, int] = {}
ONLY: list[str] = []  # --only: the rows whose name contains one of these (all when empty)
SKIPPED = "skipped (--only)"


# rows another row is computed from: run them when that row is wanted
NEEDED_BY = {"honest": "seed grinder", "re-wrapped copy": "seed grinder"}


def wanted(name: str) -> bool:
    return (
        not ONLY
        or any(o.lower() in name.lower() for o in ONLY)
        or any(o.lower() in NEEDED_BY.get(name, "") for o in ONLY)
    )


BRANCHES: dict[
    str, tuple[float, float, float]
] = {}  # row -> (caught, challenged not caught, unchallenged)


def _baseline(key: Any, fn: Callable[[], int]) -> int:
    if key not in _BASE:
        _BASE[key] = fn()
    return _BASE[key]


def measured_row(
    name: str,
    strategist: Callable[[bytes], Actor],
    seeds: int,
    rounds: int,
    note: str = "",
    **kw: Any,
) -> Row:
    """Average over seeds at challenge_bps = 10000 (strategies that act as verifiers need
    challenges to act at all; their per-round profit is per challenged round)."""
    if name and not wanted(name):
        return Row(name, 0, 0, 0, 0, SKIPPED)
    s_tot = h_tot = 0.0
    sl = 0
    for s in range(seeds):
        a, b, c, _ = play(s, strategist, rounds=rounds, challenge_bps=10_000, **kw)
        s_tot, h_tot, sl = s_tot + a, h_tot + b, sl + c
    prof = round(s_tot / seeds)
    base = (
        _baseline(
            ("measured", seeds, rounds, repr(sorted(kw.items()))),
            lambda: measured_row("", Actor, seeds, rounds, **kw).profit,
        )
        if strategist is not Actor
        else prof
    )
    return Row(name, prof, prof - base, round(h_tot / seeds), sl, note)


AUDIT_BPS = JOBS_DEFAULTS["audit_bps"]  # the default jobs param (abci_app/jobs/params.py)
# --jobs-param KEY=VALUE: genesis jobs params for every row (e.g. another audit rate, to compare
# it on the same code); a row's own overrides still win
JOBS_PARAMS_OVERRIDE: dict[str, int] = {}


def audited_row(
    name: str,
    strategist: Callable[[bytes], Actor],
    seeds: int,
    rounds: int,
    note: str = "",
    **kw: Any,
) -> Row:
    """Expected profit per round of a first-panel coalition at the default audit rate a:
    E = (1 - a) x W + a x X, W = measured with ``audit_bps`` 0 (the job's first-panel seats
    alone), X = measured with ``audit_bps`` 10000 (every challenge audited: ``audit_verifiers``
    more first-panel seats), both on the chain over the same seeds at challenge_bps 10000 (the
    audit coin is independent of the rest: its own seed domain). The note gives W, the profit
    the audit takes away. "vs playing honest"
    compares E with the same keys playing honest, mixed the same way from the same two worlds
    (audit_bps 0 and 10000, same seeds): audits shift round timing and so the later draws, and a
    baseline measured at the default rate would differ from the mixture by that draw noise alone
    (±0.15 M a round at 3 seeds)."""
    if name and not wanted(name):
        return Row(name, 0, 0, 0, 0, SKIPPED)

    def measure(make: Callable[[bytes], Actor]) -> list[tuple[float, float, int]]:
        out = []
        for bps in (0, 10_000):
            s_tot = h_tot = 0.0
            sl = 0
            for s in range(seeds):
                a, b, c, _ = play(
                    s,
                    make,
                    rounds=rounds,
                    challenge_bps=10_000,
                    jobs_params={"audit_bps": bps},
                    **kw,
                )
                s_tot, h_tot, sl = s_tot + a / seeds, h_tot + b / seeds, sl + c
            out.append((s_tot, h_tot, sl))
        return out

    def mix(w: float, x: float) -> float:
        return ((10_000 - AUDIT_BPS) * w + AUDIT_BPS * x) / 10_000

    (w_s, w_h, w_sl), (x_s, x_h, x_sl) = measure(strategist)
    (hw_s, _, _), (hx_s, _, _) = measure(Actor)
    prof, hon, base = mix(w_s, x_s), mix(w_h, x_h), round(mix(hw_s, hx_s))
    note = (
        f"{note}; without audits {round(w_s):,}, always audited {round(x_s):,} (honest play: "
        f"{round(hw_s):,} and {round(hx_s):,})"
    )
    return Row(name, round(prof), round(prof) - base, round(hon), w_sl + x_sl, note)


# coalitions of 1/3 to 2/3 of the verifier stake (issue 31, 9: a limit the jobs README states)
ITEM_9 = " (issue 31 item 9)"


def rows(seeds: int, rounds: int, long_rounds: int = 1_000) -> list[Row]:
    """Every row, in the table's order (each only when ``--only`` wants it)."""
    out = provider_rows(seeds, rounds) + coalition_rows(seeds, rounds)
    out += verifier_rows(seeds, rounds)
    if wanted("seed grinder"):  # the honest and re-wrapped copy rows ran (NEEDED_BY)
        out.append(grinder_row(out, seeds, rounds))
    if wanted("honest only"):
        out.append(honest_long_row(long_rounds))
    if wanted("junk"):
        out.append(junk_row(seeds))
    if wanted(ROW_WASH):
        out.append(whitewash_row(seeds, rounds))
    if wanted(ROW_FARM):
        out.append(farmer_row(seeds, rounds))
    out.extend(issue31_rows(seeds, rounds))
    return [r for r in out if r.note != SKIPPED]


def provider_rows(seeds: int, rounds: int) -> list[Row]:
    """The providers' strategies: honest, withholding, faking, copying, poisoning."""
    out = [
        expected_row("honest", Actor, seeds, rounds),
        expected_row("random root + withhold", Withholder, seeds, rounds),
        expected_row(
            "random root + withhold the ends (tolerance mode)",
            EndWithholder,
            seeds,
            rounds,
            "reveals, then never opens the ends and probes (MsgOpenEnd): a missed reveal",
        ),
    ]
    for f in (100, 1_000, 5_000):
        out.append(
            expected_row(
                f"fake {f // 100} % of steps",
                functools.partial(Faker, f_bps=f, hit=True),
                seeds,
                rounds,
                passing=functools.partial(Faker, f_bps=f, hit=False),
                q_bps=f,
                note="a challenge (one uniform segment) catches it with probability f",
            )
        )
    out.append(
        expected_row(
            "re-wrapped copy",
            Copier,
            seeds,
            rounds,
            "caught when challenged: issue 10's payload check (Verification above)",
        )
    )
    out.append(
        expected_row(
            "poison",
            Poisoner,
            seeds,
            rounds,
            "caught when challenged: issue 10's payload check (Verification above)",
        )
    )
    return out


def coalition_rows(seeds: int, rounds: int) -> list[Row]:
    """Coalitions of verifier keys: false-accusing, silent, unavailable-claiming, covering."""
    out: list[Row] = []
    for share, n in ((10, 2), (33, 7), (45, 12), (50, 14)):
        bond = mk.BOND * 20 * share // (100 - share) // n
        out.append(
            measured_row(
                f"Sybil verifier coalition s={share} %{ITEM_9 if share >= 33 else ''}",
                FalseAccuser,
                seeds,
                rounds,
                f"{n} keys among 20 honest, false fraud claims on honest targets; every commitment"
                f" challenged; the final panel (all 20 + {n} providers) needs 2/3 of its stake",
                strategist_bond=max(bond, 1_000_000_000),
                n_strategist=n,
                n_honest=20,
            )
        )
    for share, n in ((10, 2), (33, 7), (50, 14)):
        bond = mk.BOND * 20 * share // (100 - share) // n
        out.append(
            measured_row(
                f"silent coalition s={share} %{ITEM_9 if share >= 33 else ''}",
                SilentCoalition,
                seeds,
                rounds,
                f"{n} keys among 20 honest, silent on every honest target (escalates, slashed the"
                " liveness fraction); every commitment challenged",
                strategist_bond=max(bond, 1_000_000_000),
                n_strategist=n,
                n_honest=20,
            )
        )
        out.append(
            measured_row(
                f"unavailable-claiming coalition s={share} %{ITEM_9 if share >= 33 else ''}",
                UnavailableAccuser,
                seeds,
                rounds,
                f"{n} keys among 20 honest, vote unavailable on every honest target (counted"
                " invalid, slashed as silence when accepted); every commitment challenged",
                strategist_bond=max(bond, 1_000_000_000),
                n_strategist=n,
                n_honest=20,
            )
        )
    for share, n in ((33, 7), (50, 14)):
        bond = mk.BOND * 20 * share // (100 - share) // n
        out.append(
            audited_row(
                f"first-panel coalition covering its cheaters s={share} %{ITEM_9}",
                Coverer,
                seeds,
                rounds,
                f"{n} keys among 20 honest, each cheats (no training) and votes valid on the"
                f" others; 1 first-panel seat, every commitment challenged; audited at"
                f" {AUDIT_BPS} bps",
                strategist_bond=max(bond, 1_000_000_000),
                n_strategist=n,
                n_honest=20,
                extra_job={"verifiers_per_challenge": 1},
            )
        )
    return out


def verifier_rows(seeds: int, rounds: int) -> list[Row]:
    """One verifier's strategies (a whale, the lazy, the copier, the griefers), the staller."""
    out: list[Row] = []
    out.append(
        measured_row(
            "whale verifier (50 % stake, 1 key)",
            FalseAccuser,
            seeds,
            rounds,
            "false fraud claims on honest targets; every commitment challenged",
            strategist_bond=mk.BOND * 20,
            n_honest=20,
        )
    )
    return out + lazy_rows(seeds, rounds) + griefer_rows(seeds, rounds)


def lazy_rows(seeds: int, rounds: int) -> list[Row]:
    """Verifiers that do not re-execute: always valid (both modes), always unavailable, the
    vote copier."""
    out: list[Row] = []
    cheater = (lambda a: Faker(a, f_bps=10_000, hit=True),)
    out.append(
        measured_row(
            "lazy verifier",
            Lazy,
            seeds,
            rounds,
            "always valid, never re-executes; 1 provider in 9 cheats; every commitment challenged"
            " (tolerance mode)",
            others=cheater,
        )
    )
    out.append(
        measured_row(
            "lazy verifier, no cheater around (exact mode)",
            Lazy,
            seeds,
            rounds,
            "the ends of the opened segments are secret: its valid vote cannot be opened, it is"
            " slashed as silent (docs/threat-model.md *Evidence only re-execution yields*)",
            extra_job=EXACT_JOB,
        )
    )
    out.append(
        measured_row(
            "lazy verifier, no cheater around (tolerance mode)",
            Lazy,
            seeds,
            rounds,
            "its probes are committed before the provider opens its own (probe root bound at"
            " commit): a guess, counted invalid, escalated, slashed as a wrong vote",
        )
    )
    out.append(
        measured_row(
            "lazy verifier, always unavailable",
            AlwaysUnavailable,
            seeds,
            rounds,
            "never fetches nor re-executes, votes unavailable on every target; 1 provider in 9"
            " cheats; every commitment challenged: paid nothing, slashed as silent on accepted"
            " work",
            others=cheater,
        )
    )
    out.append(
        measured_row(
            "vote copier",
            VoteCopier,
            seeds,
            rounds,
            "sees only hashes: votes valid; 1 provider in 9 cheats; every commitment challenged",
            others=cheater,
        )
    )
    return out


def griefer_rows(seeds: int, rounds: int) -> list[Row]:
    """Griefers: the rival scorer, the owner's Sybil, the attest staller."""
    out: list[Row] = []
    out.append(
        measured_row(
            "rival griefer",
            RivalGriefer,
            seeds,
            rounds,
            "quality 0 for co-participants it verifies: never drawn for them",
        )
    )
    out.append(
        measured_row(
            "owner Sybil (lone verifier)",
            FalseAccuser,
            seeds,
            rounds,
            "owner + its Sybil verifier voting every target invalid; coalition profit per round",
            extra_job={"verifiers_per_challenge": 1},
            with_owner=True,
        )
    )
    out.append(
        expected_row(
            "attest staller (> 1/3 of attesting stake)",
            Staller,
            seeds,
            rounds,
            "never attests",
            strategist_bond=mk.BOND * 3,
            extra_job={"participants_per_round": 2, "num_shards": 2},
        )
    )
    return out


def beacon_outcomes(n_vals: int) -> Callable[[int], list[bytes]]:
    """The beacons the proposer of block h can choose among (docs/threat-model.md *Seeds*):
    one per subset of the last commit's signers (``n_vals`` equal validators) holding more than
    2/3 of the power, each the block beacon over those validators' real VRF outputs for
    (chain id, h - 1) (abci_app/beacon.py). The first is the full set (an honest proposer)."""
    vals = [chainkit.signer(2000 + i) for i in range(n_vals)]

    def at(h: int) -> list[bytes]:
        alpha = beacon.alpha(chainkit.CHAIN_ID, h - 1)
        outs = [(v.address, beacon.output(beacon.prove(v.seed, alpha))) for v in vals]
        return [
            beacon.block_beacon(list(sub))
            for r in range(n_vals, 0, -1)
            if 3 * r > 2 * n_vals
            for sub in itertools.combinations(outs, r)
        ]

    return at


@dataclass
class GrindStats:
    blocks: int = 0  # commit-deadline blocks evaluated
    outcomes: int = 0  # distinct beacons over those blocks
    samples: int = 0  # (round, committed participant) pairs
    challenged: int = 0  # challenged under the honest proposer's beacon (all shares)
    trapped: int = 0  # challenged under every beacon the proposer could choose


class _Overlay:
    """A block's writes (execute_block) over the committed store: what the state would be."""

    def __init__(self, writes: dict[bytes, bytes | None], base: Any) -> None:
        self.writes, self.base = writes, base

    def get(self, key: bytes) -> bytes | None:
        return self.writes[key] if key in self.writes else self.base.get(key)

    def iterate(self, prefix: bytes) -> Any:
        raise NotImplementedError("point reads only (get_round)")


def _challenged(store: Any, rounds: list[int]) -> dict[tuple[int, bytes], bool]:
    """(round, participant) -> challenged, for the committed participants of job 1's rounds."""
    out = {}
    for rn in rounds:
        r = jobs_keeper.get_round(store, 1, rn)
        assert r is not None
        for p in r.participants:
            if p.HasField("commitment"):
                out[(rn, p.address)] = p.challenged
    return out


def grind_measure(seed: int, rounds: int, challenge_bps: int, n_vals: int = 4) -> GrindStats:
    """One job of honest providers on the real app. At every commit-deadline block D (where the
    challenges are drawn from D's seed), the block is executed (``execute_block``, nothing kept)
    once per beacon its proposer could choose, and each committed participant's challenge is read
    from the resulting state; then the honest block is committed. A proposer that is also a
    participant escapes its challenge when some choice leaves it unchallenged."""
    w = World(new_world(seed, 1 + 8), {})
    m, c = w.m, w.m.chain
    m.block([(k, mk.register_msg(mk.BOND)) for k in m.providers[:8]])
    for k in m.providers[:8]:
        w.actors[k.address] = Actor(k.address)
    kw = job_kw(challenge_bps=challenge_bps)
    assert m.send(m.owner, mk.create_job_msg(rounds=rounds, reward=R, vreward=V, **kw)).code == 0
    w.jobs.append(1)
    st, outcomes, commit_block = GrindStats(), beacon_outcomes(n_vals), c.block

    def block(raws: list[bytes]) -> abci.ResponseFinalizeBlock:
        h = c.store.height + 1
        due = [
            r.round
            for r in jobs_keeper.iterate_rounds(c.store, 1)
            if r.phase == jobs_pb2.PHASE_COMMIT and r.commit_deadline == h
        ]
        if not due:
            return commit_block(raws)
        blk = block_context(c.request(raws), c.app.chain_id)
        seen: list[dict[tuple[int, bytes], bool]] = []
        cands = outcomes(h)
        st.blocks, st.outcomes = st.blocks + 1, st.outcomes + len(set(cands))
        for b in [b"", *cands]:  # b"": the chain's own seed (block hash), to check the replay
            res = execute_block(c.store, replace(blk, beacon=b), raws, SignatureCache())
            seen.append(_challenged(_Overlay(res.writes, c.store), due))
        resp = commit_block(raws)
        actual = _challenged(c.store, due)
        assert actual == seen[0], "the replayed block disagrees with the committed one"
        for key in actual:
            st.samples += 1
            st.challenged += seen[1][key]
            st.trapped += all(s[key] for s in seen[1:])
        return resp

    c.block = block  # type: ignore[method-assign,assignment]
    w.run()
    return st


def grinder_row(
    rows_so_far: list[Row], seeds: int, rounds: int, n_vals: int = 4, check_bps: int = 5_000
) -> Row:
    """Seed grinder after the validators' beacon: a re-wrapping copier that is also one of
    ``n_vals`` equal validators proposes the commit-deadline block D with probability
    v = 1/n_vals; then it picks, among the beacons it can still choose (the > 2/3 subsets of the
    shares), one that leaves it unchallenged if there is one: escaping with the rate e measured
    on the chain (``grind_measure``). Otherwise it is challenged at the job's rate p. From the
    copier's branches measured on the chain (A caught, C unchallenged):
    E = v x (e x C + (1 - e) x A) + (1 - v) x (p x A + (1 - p) x C)."""
    A, _, C = BRANCHES["re-wrapped copy"]
    p = job_kw()["challenge_bps"]
    tot, chk = GrindStats(), GrindStats()
    for s in range(seeds):
        for acc, bps in ((tot, p), (chk, check_bps)):
            g = grind_measure(s, rounds, bps, n_vals)
            for f in ("blocks", "outcomes", "samples", "challenged", "trapped"):
                setattr(acc, f, getattr(acc, f) + getattr(g, f))
    e = 1 - tot.trapped / max(tot.samples, 1)
    v = 1 / n_vals
    grind = e * C + (1 - e) * A
    ev = v * grind + (1 - v) * (p * A + (10_000 - p) * C) / 10_000
    honest = next(r for r in rows_so_far if r.name == "honest").profit
    q = check_bps / 10_000
    # the power share at which grinding breaks even: v x grind + (1 - v) x plain = 0
    plain = (p * A + (10_000 - p) * C) / 10_000
    v_even = -plain / (grind - plain) if grind > plain else 1.0
    return Row(
        f"seed grinder (1 of {n_vals} equal validators, proposes D 1/{n_vals} of the time)",
        round(ev),
        round(ev) - honest,
        0,
        0,
        f"bounded, not removed: {tot.outcomes / max(tot.blocks, 1):.0f} beacons to choose from"
        f" per block; escapes {100 * e:.1f} % of its challenges when it proposes D at"
        f" {p} bps ({tot.samples} commitments; at {check_bps} bps:"
        f" {100 * (1 - chk.trapped / max(chk.samples, 1)):.1f} % measured,"
        f" {100 * (1 - q ** n_vals_outcomes(n_vals)):.1f} % = 1 - p^G); loses because the"
        f" collateral outweighs what it wins when it proposes; it would break even at"
        f" {100 * v_even:.0f} % of the proposals",
    )


def n_vals_outcomes(n_vals: int) -> int:
    """G: the number of subsets of ``n_vals`` equal validators with more than 2/3 of the power."""
    return sum(math.comb(n_vals, r) for r in range(1, n_vals + 1) if 3 * r > 2 * n_vals)


def honest_long_row(rounds: int) -> Row:
    """Only honest providers, default challenge rate, one long job: nobody may ever be slashed."""
    a, b, c, w = play(0, None, rounds=rounds, challenge_bps=500, n_strategist=0)
    return Row(
        f"honest only, {rounds:,} rounds at 500 bps",
        round(b),
        0,
        round(b),
        c,
        "no honest provider slashed" if c == 0 else "HONEST PROVIDERS SLASHED",
    )


def junk_row(seeds: int, jobs: int = 5) -> Row:
    """A spammer creates ``jobs`` one-round jobs at the minimum slot reward; honest providers'
    policy asks a slot worth their train cost, so nobody is drawn; the jobs wait, retrying every
    wait_retry_blocks, and are cancelled after max_wait_blocks. Profit per junk job."""
    tot = 0.0
    slashed = 0
    for s in range(seeds):
        w = World(new_world(s, 9), {})
        m = w.m
        pol = mk.providers_pb2.JobPolicy(min_slot_reward=TRAIN_COST)
        m.block([(k, mk.register_msg(mk.BOND)) for k in m.providers[:7]])
        m.block([(k, mk.update_msg(policy=pol)) for k in m.providers[:7]])
        spammer = m.providers[7]
        before = w.wealth(spammer.address)
        m.block([(spammer, mk.create_job_msg(rounds=1, reward=P * 100_000, vreward=0, **job_kw()))])
        for _ in range(1, jobs):
            m.send(spammer, mk.create_job_msg(rounds=1, reward=P * 100_000, vreward=0, **job_kw()))
        m.until(m.height + 1_005)
        assert all(m.job(j).status == jobs_pb2.JOB_STATUS_CANCELLED for j in range(1, jobs + 1))
        tot += (w.wealth(spammer.address) - before) / jobs
        slashed += sum(1 for k in m.providers[:7] if w.provider(k.address).bond != mk.BOND)
    return Row(
        "junk-job spammer",
        round(tot / seeds),
        round(tot / seeds),
        0,
        slashed,
        "per junk job (1 LOCO fee burned); honest policy min_slot_reward = train cost: "
        "nobody works",
    )


def whitewash_row(seeds: int, rounds: int) -> Row:
    """Issue 31, 3 (whitewashing under probation): a provider exits and registers the same key
    again; its reputation does not reset, and it earns nothing while unbonding (2,000 blocks).
    Profit per job round vs staying registered and working honestly. The note gives what a fresh
    key starts at against the floor no record falls below short of fraud, and what the honest
    providers' records reached over the job."""

    def run(whitewash: bool, seed: int) -> tuple[float, int, float]:
        w = World(new_world(seed, 10), {})
        m = w.m
        m.block([(k, mk.register_msg(mk.BOND)) for k in m.providers[:8]])
        for k in m.providers[:8]:
            w.actors[k.address] = Actor(k.address)
        ww = m.providers[7]
        before = w.wealth(ww.address)
        if whitewash:
            m.send(ww, mk.exit_msg())
        assert (
            m.send(m.owner, mk.create_job_msg(rounds=rounds, reward=R, vreward=V, **job_kw())).code
            == 0
        )
        w.jobs.append(1)
        w.run()
        fresh = m.providers[8]
        assert m.send(fresh, mk.register_msg(mk.BOND)).code == 0
        reps = [w.provider(k.address).reputation for k in m.providers[:7]]
        return (
            (w.wealth(ww.address) - before - w.actors[ww.address].cost) / rounds,
            w.provider(fresh.address).reputation,
            sum(reps) / len(reps),
        )

    stays = [run(False, s) for s in range(seeds)]
    leaves = [run(True, s) for s in range(seeds)]
    stay = sum(x[0] for x in stays) / seeds
    leave = sum(x[0] for x in leaves) / seeds
    fresh = {x[1] for x in stays + leaves}
    established = sum(x[2] for x in stays) / seeds
    return Row(
        ROW_WASH,
        round(leave),
        round(leave - stay),
        round(stay),
        0,
        f"exit + register the same key: keeps min(last, initial), no income while unbonding; a"
        f" fresh key starts at {'/'.join(f'{x:,}' for x in sorted(fresh))} = the floor"
        f" {CHAIN_PROVIDERS_PARAMS['reputation_floor']:,} no record falls below short of fraud;"
        f" the honest providers' records reached {established:,.0f} over the job",
    )


def farmer_row(seeds: int, rounds: int) -> Row:
    """Issue 31, 3 (buying reputation): a Sybil owner pays its own provider (min_stake excludes
    everyone else) the minimum slot to farm reputation; verifiers are drawn from everyone. Coalition
    profit per round (fee, verifier pay, real training) and reputation gained per LOCO spent; the
    note compares the same job open to every provider (the farmer drawn against competition, the
    owner's money going to whoever is drawn)."""

    def run(seed: int, filtered: bool) -> tuple[float, int]:
        w = World(new_world(seed, 10), {})
        m = w.m
        m.block(
            [(k, mk.register_msg(mk.BOND)) for k in m.providers[:7]]
            + [(m.providers[7], mk.register_msg(2 * mk.BOND))]
        )
        for k in m.providers[:8]:
            w.actors[k.address] = Actor(k.address)
        farmer = m.providers[7]
        before = w.wealth(farmer.address) + w.wealth(m.owner.address)
        rep0 = w.provider(farmer.address).reputation
        extra = {"min_stake": 2 * mk.BOND} if filtered else {}
        assert (
            m.send(
                m.owner,
                mk.create_job_msg(
                    rounds=rounds,
                    reward=100_000,
                    vreward=100_000,
                    **job_kw(participants_per_round=1, num_shards=1, **extra),
                ),
            ).code
            == 0
        )
        w.jobs.append(1)
        w.run()
        gain = (
            w.wealth(farmer.address)
            + w.wealth(m.owner.address)
            - before
            - w.actors[farmer.address].cost
        )
        return gain, w.provider(farmer.address).reputation - rep0

    def per_loco(runs: list[tuple[float, int]]) -> tuple[float, float, float]:
        spent = -sum(g for g, _ in runs) / LOCO
        rep = sum(r for _, r in runs)
        return spent / len(runs), rep / len(runs), rep / spent if spent > 0 else math.inf

    filt = [run(s, True) for s in range(seeds)]
    opened = [run(s, False) for s in range(seeds)]
    f_spent, f_rep, f_rate = per_loco(filt)
    o_spent, o_rep, o_rate = per_loco(opened)
    prof = -f_spent * LOCO / rounds
    return Row(
        ROW_FARM,
        round(prof),
        round(prof),
        0,
        0,
        f"min_stake leaves only the farmer: never contested; +{f_rep:.0f} reputation over"
        f" {rounds} rounds for {f_spent:.2f} LOCO spent = {f_rate:.1f} reputation per LOCO;"
        f" the same job open to all (contested draws): +{o_rep:.0f} for {o_spent:.2f} LOCO ="
        f" {o_rate:.1f} per LOCO",
    )


# -- issue 31 (third pass): one row per item ------------------------------------------------------

ROW_RIVAL = "Sybil verifier scoring its rival low (issue 31 item 4)"
ROW_LATER = "vote copier in later panels, disputes over honest work (issue 31 item 5)"
ROW_LATER_CHEAT = "vote copier in later panels, disputes over a cheat (issue 31 item 5)"
ROW_STALL = "attest staller, the honest co-attester (issue 31 item 6)"
ROW_SMALL_H = "small market of 2 honest providers (issue 31 item 10)"
ROW_SMALL_C = "small market: copier whose only judge is its silent Sybil (issue 31 item 10)"
ROW_GRIEF = "silent griefer in a small market (issue 31 item 11)"
ROW_FARM = "reputation farmer, self-paid filtered job (issue 31 item 3)"
ROW_WASH = "whitewasher under probation (issue 31 item 3)"


def _honest_slashes(w: World, honest: set[bytes]) -> int:
    """Slash events of ``honest`` providers in job 1: as participants (``Round.slashes``) and on
    verifier seats (``VerifierAssignment.slashed``)."""
    n = 0
    for r in jobs_keeper.iterate_rounds(w.m.store, 1):
        n += sum(1 for x in r.slashes if x.address in honest)
        n += sum(
            1 for p in r.participants for v in p.verifiers if v.address in honest and v.slashed
        )
    return n


def _silent_acceptances(w: World) -> int:
    """Challenged commitments of job 1 accepted without one valid opened vote (issue 31, 10:
    silence is never acceptance; always 0)."""
    return sum(
        1
        for r in jobs_keeper.iterate_rounds(w.m.store, 1)
        for p in r.participants
        if p.challenged
        and p.outcome == jobs_pb2.OUTCOME_ACCEPTED
        and not any(v.voted and v.valid for v in p.verifiers)
    )


SILENT_ACCEPTED: list[int] = []  # _silent_acceptances of every world the issue-31 rows ran


def _play31(seed: int, strategist: Callable[[bytes], Actor] | None, **kw: Any) -> Any:
    """``play`` and the honest providers' slash events, seats included; records the world's
    silent acceptances."""
    a, b, _, w = play(seed, strategist, **kw)
    SILENT_ACCEPTED.append(_silent_acceptances(w))
    honest = {k.address for k in w.m.providers[: kw.get("n_honest", 7)]}
    return a, b, _honest_slashes(w, honest), w


def rival_scorer_row(seeds: int, rounds: int) -> Row:
    """Issue 31, 4: two coalition keys among 7 honest providers, every commitment challenged, one
    seat per panel (the seat alone sets the quality); a coalition key seated on a rival's panel
    while the other participates scores the rival quality 1. Coalition profit per job round
    against the same keys playing honest in the same worlds."""
    kw: dict[str, Any] = dict(
        rounds=rounds,
        challenge_bps=10_000,
        n_strategist=2,
        extra_job={"verifiers_per_challenge": 1},
    )
    prof = base = hon = 0.0
    sl = scored = 0
    rival_pay: list[int] = []
    own_pay: list[int] = []
    for s in range(seeds):
        a, b, c, w = _play31(s, SybilRivalScorer, **kw)
        a0, _, c0, _ = _play31(s, Actor, **kw)
        prof, base, hon, sl = prof + a / seeds, base + a0 / seeds, hon + b / seeds, sl + c + c0
        coal = {k for k, x in w.actors.items() if isinstance(x, SybilRivalScorer)}
        for r in jobs_keeper.iterate_rounds(w.m.store, 1):
            low = [
                p
                for p in r.participants
                if p.address not in coal and any(v.address in coal and v.voted for v in p.verifiers)
            ]
            if low and any(p.address in coal for p in r.participants):
                scored += len(low)
                rival_pay.extend(p.reward for p in low)
                own_pay.extend(p.reward for p in r.participants if p.address in coal)
    avg = lambda xs: sum(xs) / len(xs) if xs else 0.0  # noqa: E731
    return Row(
        ROW_RIVAL,
        round(prof),
        round(prof - base),
        round(hon),
        sl,
        f"2 coalition keys among 7 honest, 1 seat per panel, every commitment challenged;"
        f" {scored} rivals scored quality 1 while a coalition key shared their round: paid"
        f" {avg(rival_pay):,.0f} a slot against the coalition participant's {avg(own_pay):,.0f}"
        f" in those rounds (pay weight = tokens x reputation, not the panel's score)",
    )


def staller_row(seeds: int, rounds: int) -> Row:
    """Issue 31, 6: a staller with 3 bonds (3/4 of a two-participant round's attesting stake
    when it is drawn with an honest provider) trains honestly and never attests: those rounds
    reach no quorum. The strategist's profit per round it was drawn in, against the same key
    playing honest; the honest column is the honest co-attester's profit per round it shared
    with the staller (its slot pay - train cost), and the note its reputation change there."""
    kw: dict[str, Any] = dict(
        rounds=rounds,
        challenge_bps=job_kw()["challenge_bps"],
        per_drawn=True,
        strategist_bond=3 * mk.BOND,
        extra_job={"participants_per_round": 2, "num_shards": 2},
    )
    prof = base = 0.0
    sl = shared = quorumless = rep_delta = 0
    pay: list[int] = []
    staller_rep: list[int] = []
    for s in range(seeds):
        a, _, c, w = _play31(s, Staller, **kw)
        a0, _, c0, _ = _play31(s, Actor, **kw)
        prof, base, sl = prof + a / seeds, base + a0 / seeds, sl + c + c0
        st = next(k for k, x in w.actors.items() if isinstance(x, Staller))
        staller_rep.append(w.provider(st).reputation)
        for r in jobs_keeper.iterate_rounds(w.m.store, 1):
            if not any(p.address == st for p in r.participants):
                continue
            for p in r.participants:
                if p.address != st and p.outcome == jobs_pb2.OUTCOME_ACCEPTED:
                    shared += 1
                    quorumless += not r.attested_model_hash
                    pay.append(p.reward)
                    rep_delta += p.reputation_delta
    co = sum(pay) / max(len(pay), 1) - TRAIN_COST
    return Row(
        ROW_STALL,
        round(prof),
        round(prof - base),
        round(co),
        sl,
        f"staller holds 3/4 of the attesting stake when drawn; {shared} accepted honest"
        f" co-attester slots with it, {quorumless} without a quorum: paid"
        f" {sum(pay) / max(len(pay), 1):,.0f} a slot (slot R/2 = {R // 2:,}), reputation change"
        f" {rep_delta:+d} in total; the staller ends at reputation"
        f" {'/'.join(map(str, staller_rep))} (the floor: a missed attest costs it its slot only)",
    )


def _pair(first: Callable[[bytes], Actor], second: Callable[[bytes], Actor]) -> Any:
    """A strategist factory for two keys: ``first`` for the first key asked, ``second`` after."""
    made: list[bytes] = []

    def make(addr: bytes) -> Actor:
        made.append(addr)
        return (first if len(made) == 1 else second)(addr)

    return make


def small_market_rows(seeds: int, rounds: int) -> list[Row]:
    """Issue 31, 10, in a 2-provider market (P = 4 asked, 3 verifiers per challenge): reservation
    draws 1 participant and leaves the other to judge it. (a) Both honest: profit per round at
    every commitment challenged and at the job's rate, against the same market without
    reservation (``reserve_verifiers`` 0: both drawn, nobody to judge a challenge, which then ends
    undecided). (b) A copier whose only judge is its own silent Sybil: the coalition's profit per
    job round against both keys playing honest; its challenged copies are never accepted."""
    out: list[Row] = []
    honest = {}
    sl = 0
    for label, bps, jp in (
        ("all", 10_000, None),
        ("job", job_kw()["challenge_bps"], None),
        ("noreserve", 10_000, {"reserve_verifiers": 0}),
    ):
        tot = 0.0
        drawn = 0
        for s in range(seeds):
            _, b, c, w = _play31(
                s,
                None,
                rounds=rounds,
                challenge_bps=bps,
                n_honest=2,
                n_strategist=0,
                jobs_params=jp,
            )
            tot, sl = tot + b / seeds, sl + (c if jp is None else 0)
            drawn += sum(len(r.participants) for r in jobs_keeper.iterate_rounds(w.m.store, 1))
        honest[label] = (tot, drawn / (seeds * rounds))
    (h_all, d_all), (h_job, _), (h_off, d_off) = honest["all"], honest["job"], honest["noreserve"]
    if wanted(ROW_SMALL_H):
        out.append(
            Row(
                ROW_SMALL_H,
                round(h_all),
                0,
                round(h_all),
                sl,
                f"every commitment challenged: {d_all:.0f} drawn a round, the other judges it;"
                f" at {job_kw()['challenge_bps']} bps {h_job:,.0f} a round; without reservation"
                f" ({d_off:.0f} drawn, nobody to judge: undecided) {h_off:,.0f} a round",
            )
        )
    if wanted(ROW_SMALL_C):
        kw: dict[str, Any] = dict(rounds=rounds, challenge_bps=10_000, n_honest=0, n_strategist=2)
        prof = base = 0.0
        copies = undecided = 0
        for s in range(seeds):
            a, _, _, w = _play31(s, _pair(Copier, SilentSybilJudge), **kw)
            a0, _, _, _ = _play31(s, Actor, **kw)
            prof, base = prof + a / seeds, base + a0 / seeds
            cp = next(k for k, x in w.actors.items() if isinstance(x, Copier))
            for r in jobs_keeper.iterate_rounds(w.m.store, 1):
                for p in r.participants:
                    if p.address == cp and p.challenged:
                        copies += 1
                        undecided += p.outcome == jobs_pb2.OUTCOME_UNDECIDED
        out.append(
            Row(
                ROW_SMALL_C,
                round(prof),
                round(prof - base),
                round(h_all),
                0,
                f"2 providers, both the coalition's; every commitment challenged: {copies} copies"
                f" challenged, {undecided} undecided, 0 accepted (coalition profit per job round;"
                f" honest column: the 2-honest market)",
            )
        )
    return out


def silent_griefer_row(seeds: int, rounds: int) -> Row:
    """Issue 31, 11: 3 providers (a griefer and 2 honest), 2 participants and 1 seat per
    challenge: nobody is left for an appeal panel. The griefer trains honestly and stays silent on
    every target it judges. Its loss per job round against honest play, and the honest providers'
    loss against the same world played honest, every commitment challenged."""
    kw: dict[str, Any] = dict(
        rounds=rounds,
        challenge_bps=10_000,
        n_honest=2,
        extra_job={"participants_per_round": 2, "num_shards": 2, "verifiers_per_challenge": 1},
    )
    prof = base = hon = hon0 = 0.0
    sl = undecided = seats = 0
    seat_slash: list[int] = []
    for s in range(seeds):
        a, b, c, w = _play31(s, SilentVerifier, **kw)
        a0, b0, c0, _ = _play31(s, Actor, **kw)
        prof, base = prof + a / seeds, base + a0 / seeds
        hon, hon0, sl = hon + b / seeds, hon0 + b0 / seeds, sl + c + c0
        g = next(k for k, x in w.actors.items() if isinstance(x, SilentVerifier))
        for r in jobs_keeper.iterate_rounds(w.m.store, 1):
            for p in r.participants:
                for v in p.verifiers:
                    if v.address == g:
                        seats += 1
                        undecided += p.outcome == jobs_pb2.OUTCOME_UNDECIDED
                        seat_slash.append(v.slashed)
    g_loss, h_loss = base - prof, hon0 - hon
    return Row(
        ROW_GRIEF,
        round(prof),
        round(prof - base),
        round(hon),
        sl,
        f"3 providers, P = 2, 1 seat, every commitment challenged: {seats} silent seats,"
        f" {undecided} left undecided, slashed {sum(seat_slash) / max(len(seat_slash), 1):,.0f} a"
        f" seat (at least the slot R/2 + 1 = {R // 2 + 1:,}, and the 1 % liveness slash of its"
        f" bond); per job round the griefer loses {g_loss:,.0f}, each honest"
        f" provider {h_loss:,.0f} ({2 * h_loss:,.0f} both) against the same world played honest",
    )


def later_copier_row(seeds: int, rounds: int, cheat: bool = False) -> Row:
    """Issue 31, 5: a verifier that re-executes in the first panel and, in the appeal and final
    panels, copies the earlier panels' opened votes. Every commitment challenged. Disputes come
    from a provider that falsely accuses every target in the first panel (honest work: the
    copier copies acceptances), or (``cheat``) from 1 provider in 9 that cheats (the copier
    copies convictions). Its profit per job round against the same key verifying honestly."""
    other = (
        (lambda a: Faker(a, f_bps=10_000, hit=True)) if cheat else (lambda a: FirstPanelAccuser(a))
    )
    kw: dict[str, Any] = dict(rounds=rounds, challenge_bps=10_000, others=(other,))
    prof = base = hon = 0.0
    sl = later = copied_valid = 0
    for s in range(seeds):
        a, b, c, w = _play31(s, LaterPanelCopier, **kw)
        a0, _, c0, _ = _play31(s, Actor, **kw)
        prof, base, hon, sl = prof + a / seeds, base + a0 / seeds, hon + b / seeds, sl + c + c0
        cp = next(k for k, x in w.actors.items() if isinstance(x, LaterPanelCopier))
        seats = [
            (p, v)
            for r in jobs_keeper.iterate_rounds(w.m.store, 1)
            for p in r.participants
            for v in p.verifiers
            if v.address == cp and v.panel > 0
        ]
        later += len(seats)
        copied_valid += sum(1 for p, v in seats if p.outcome == jobs_pb2.OUTCOME_ACCEPTED)
    what = (
        "1 provider in 9 cheats: the copier copies convictions, and cannot name the fresh"
        " segments' ends either (its invalid vote is unevidenced: unpaid, the liveness slash)"
        if cheat
        else "1 provider in 9 falsely accuses every target in the first panel: the copier copies"
        " acceptances, and cannot name the fresh segments' ends (exact: silent; tolerance: its"
        " guessed probes count invalid)"
    )
    return Row(
        ROW_LATER_CHEAT if cheat else ROW_LATER,
        round(prof),
        round(prof - base),
        round(hon),
        sl,
        f"re-executes in the first panel, copies the earlier panels' opened votes in the appeal"
        f" and final panels; {what}: {later} later seats over {seeds} x {rounds} rounds"
        f" ({copied_valid} on work finally accepted), re-executing costs {VERIFY_COST:,} per"
        f" first-panel segment set",
    )


def issue31_rows(seeds: int, rounds: int) -> list[Row]:
    """One row per issue-31 item measured here (items 3, 4, 5, 6, 10, 11; 9 is the coalition
    rows above), each only when ``--only`` wants it."""
    out: list[Row] = []
    if wanted(ROW_RIVAL):
        out.append(rival_scorer_row(seeds, rounds))
    if wanted(ROW_LATER):
        out.append(later_copier_row(seeds, rounds))
    if wanted(ROW_LATER_CHEAT):
        out.append(later_copier_row(seeds, rounds, cheat=True))
    if wanted(ROW_STALL):
        out.append(staller_row(seeds, rounds))
    if wanted(ROW_SMALL_H) or wanted(ROW_SMALL_C):
        out.extend(small_market_rows(seeds, rounds))
    if wanted(ROW_GRIEF):
        out.append(silent_griefer_row(seeds, rounds))
    return out


def table(rs: list[Row]) -> str:
    lines = [
        "| strategy | strategist profit / round | vs playing honest | honest provider profit / "
        "round | honest slashes | note |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for r in rs:
        lines.append(
            f"| {r.name} | {r.profit:,} | **{r.excess:,}** | {r.honest_profit:,} | "
            f"{r.honest_slashed} | {r.note} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=20, help="rounds per job (default 20)")
    ap.add_argument("--seeds", type=int, default=3, help="independent runs per row (default 3)")
    ap.add_argument(
        "--long-rounds", type=int, default=1_000, help="rounds of the all-honest run (default 1000)"
    )
    ap.add_argument("--results", type=Path, help="append the table to this RESULTS.md")
    ap.add_argument("--label", default="", help="heading suffix in RESULTS.md")
    ap.add_argument(
        "--only",
        default="",
        help="comma-separated substrings: run only the rows whose name contains one"
        " (e.g. --only lazy,coalition)",
    )
    ap.add_argument(
        "--jobs-param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="genesis jobs param for every row (repeatable; e.g. --jobs-param audit_bps=500"
        " --jobs-param audit_verifiers=2)",
    )
    a = ap.parse_args()
    global AUDIT_BPS
    for kv in a.jobs_param:
        key, _, val = kv.partition("=")
        if key not in JOBS_DEFAULTS or not val.isdigit():
            ap.error(f"--jobs-param {kv!r}: want KEY=INTEGER with KEY one of the jobs params")
        JOBS_PARAMS_OVERRIDE[key] = int(val)
    AUDIT_BPS = JOBS_PARAMS_OVERRIDE.get("audit_bps", AUDIT_BPS)
    ONLY.extend(x.strip() for x in a.only.split(",") if x.strip())
    t0 = time.time()
    rs = rows(a.seeds, a.rounds, a.long_rounds)
    md = table(rs)
    dt = time.time() - t0
    print(md)
    if SILENT_ACCEPTED:
        print(
            f"\nissue 31 rows: {sum(SILENT_ACCEPTED)} challenged commitments accepted without a"
            f" valid vote, over {len(SILENT_ACCEPTED)} worlds"
        )
    print(f"\n{dt:.0f} s")
    if a.results:
        head = (
            f"\n### incentives {a.label} ({time.strftime('%Y-%m-%d')}, {platform.machine()}, "
            f"Python {platform.python_version()})\n\nCommand: `.venv/bin/python "
            f"benchmarks/incentives.py --rounds {a.rounds} "
            f"--seeds {a.seeds} --long-rounds {a.long_rounds}"
            + (f" --only {shlex.quote(a.only)}" if a.only else "")
            + "".join(f" --jobs-param {kv}" for kv in a.jobs_param)
            + f"` ({dt:.0f} s). R = {R:,} uloco/round, V = {V:,}, P = {P}, 3 verifiers, "
            f"challenge 500 bps, bonds {mk.BOND:,}; train cost {TRAIN_COST:,}/slot, verify cost "
            f"{VERIFY_COST:,}.\n\n"
        )
        with a.results.open("a") as f:
            f.write(head + md + "\n")


if __name__ == "__main__":
    main()
