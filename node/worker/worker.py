"""The provider/verifier worker behind ``loconet provider run``.

One loop, woken by every new block (node/worker/follow.py), reads the active jobs' open rounds
from the chain and does what the round's phase asks of this provider::

    commit   drawn, no commitment yet  -> fetch base model + dataset by hash, train H steps on the
                                          assigned shard (background thread), store payload and
                                          trace states as blobs, MsgSubmitUpdate (roots bound to us)
    reveal   challenged, not revealed  -> MsgRevealSegment (states served from our blob store; the
                                          ends as leaf hashes only)
    verdict  assigned verifier         -> fetch the revealed states, re-execute k steps, MsgVerdict
                                          (tolerance mode: a blind vote on the probes reached)
    vote_reveal challenged (tolerance) -> MsgOpenEnd: the ends and their committed probes
             assigned verifier         -> MsgRevealVote (tolerance mode: once the ends are open,
                                          judged against the re-executed states)
    attest   our update accepted       -> fetch every accepted update, aggregate, store the model,
                                          MsgAttestModel
    final    -                         -> temp blobs of the round released, attested model pinned;
                                          the store's gc deletes temp blobs released more than
                                          its margin ago (also every GC_EVERY_S)

An exact-mode job pinned to a stack other than the worker's (ml.same_stack: torch version,
device class, dtype, TF32 on CUDA) is not re-executable bitwise here: the worker declines the
rounds it is drawn in (MsgDeclineRound, before committing: no slash) and casts no vote for it
(a verifier cannot decline), logging it once per job.

Failures are local: a duty that fails (peer blob bad or missing, node down, tx refused) is
logged and retried with backoff on a later block; nothing a peer or the chain sends can stop the
loop. Progress (node/worker/progress.py) makes ``kill -9`` + restart resume without redoing or
double-sending; the chain itself refuses a second commitment (ErrDuplicate).

Layout: this module is the loop (``ProviderWorker``: follow the chain, read each active job's
rounds, parse them once into typed records (records.py), collect and run the duties due); the
duties are one module each over the shared context (context.py): train.py (train and commit,
decline), reveal.py (reveal, fresh segments, open ends), judge.py (judge = fetch -> verify ->
vote, commit and open votes), attest.py (aggregate and attest). ``ProviderWorker`` keeps one
method per duty (``do_commit``, ``judge``, ...) that hands the records to the duty: its entry
points also take the chain's JSON as such (tests and benchmarks feed them round JSON).

Behaviours (``--behaviour``, for tests and demos only): ``random-root`` commits to random
bytes without training, ``withhold`` never reveals, ``lazy-verifier`` votes VALID without
re-executing, ``poison`` trains honestly but scales its update by POISON_SCALE.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import urlsplit

import torch

from abci_app.jobs.errors import ErrCannotDecline, ErrDuplicate, ErrWrongPhase
from node.blobs import serve_blobs
from node.client.rpc import NodeUnreachable, RpcError, TxRejected
from node.metrics import worker_metrics
from node.worker import ml
from node.worker.attest import AttestDuty
from node.worker.context import WorkerConfig, WorkerContext, WorkerError
from node.worker.duties import DutyQueue
from node.worker.follow import ChainFollower
from node.worker.judge import JudgeDuty
from node.worker.records import PANEL_OF, Job, Participant, Round, Vote, as_participant
from node.worker.reveal import RevealDuty
from node.worker.traffic import CountingFollower
from node.worker.train import TrainDuty
from node.worker.upkeep import Upkeep
from trainer.determinism import set_determinism

__all__ = ["BEHAVIOURS", "ProviderWorker", "WorkerConfig", "WorkerError"]

log = logging.getLogger("loconet.worker")

BEHAVIOURS = ("honest", "random-root", "withhold", "lazy-verifier", "poison")
# a duty whose window ends within records.DUE_BLOCKS blocks is tried again at least every
# DUE_RETRY_S, whatever its backoff: a retry scheduled past a short window turned one transient
# error into a missed reveal (slashed as fraud) or a silent verifier (slashed for liveness)
DUE_RETRY_S = 0.5
# the blob store's gc (temp blobs past their round's finalization + temp_margin_s, stale temp
# files, eviction down to the quota) runs when a round is finalized and at most this often
# besides, so the last rounds' trace states go too once no round finalizes any more
GC_EVERY_S = 60.0
BLOCK_TIME_SPAN = 20  # blocks the worker's block-time estimate spans
# stats.json is written at every finalize and at least this often besides (a job's last round is
# never seen finalized by a worker that follows active jobs only)
STATS_EVERY_S = 15.0
DUPLICATE = (ErrDuplicate.codespace, ErrDuplicate.code)  # the chain already has this duty done
WRONG_PHASE = (ErrWrongPhase.codespace, ErrWrongPhase.code)  # too late (or too early) for it
CANNOT_DECLINE = (ErrCannotDecline.codespace, ErrCannotDecline.code)  # committed or declined
# a pass's collected duty: (deadline, order, name, fn, due, heavy, round key)
Todo = tuple[int, int, str, Callable[[], None], bool, bool, str | None]
JSON = Mapping[str, Any]


def _one_torch_thread() -> None:
    """A duty thread re-executes with one torch thread (bitwise as trained, trainer/README), so a
    verification takes one core beside the training thread's, never all of them."""
    torch.set_num_threads(1)


@dataclass
class _Backoff:
    failures: int = 0
    next_try: float = 0.0
    last_try: float = 0.0


class ProviderWorker(WorkerContext):
    """The loop over the chain's rounds and the duties' entry points (module docstring)."""

    def __init__(self, cfg: WorkerConfig) -> None:
        if cfg.behaviour not in BEHAVIOURS:
            raise WorkerError(
                f"unknown --behaviour {cfg.behaviour!r}: choose one of {', '.join(BEHAVIOURS)}"
            )
        super().__init__(cfg)
        self.follower: ChainFollower | None = None
        self.stop_event = threading.Event()
        self.trains = TrainDuty(self)
        self.reveals = RevealDuty(self)
        self.judges = JudgeDuty(self)
        self.attests = AttestDuty(self)
        self.upkeep = Upkeep(self)
        # verification and aggregation: their own thread(s), never the loop's (duties.py)
        self._duties = DutyQueue(cfg.duty_threads, on_start=_one_torch_thread)
        # the duties a pass collects (``tick``); None outside a pass: ``_duty`` runs at once
        self._todo: list[Todo] | None = None
        self._backoff: dict[str, _Backoff] = {}
        self._bad_jobs: set[int] = set()  # jobs not to follow at all (malformed answers)
        # jobs this worker cannot train (ml.JobPlan refused them): job -> why; it declines
        self._unfit: dict[int, str] = {}
        self._foreign: set[int] = set()  # exact-mode jobs pinned to another stack (logged once)
        self._cursor: dict[int, int] = {}
        self._last_stats = time.monotonic()  # of the last periodic stats.json

    @property
    def _training(self) -> Any:
        """The round in training and its future (train.py), None when none is."""
        return self.trains.training

    @property
    def _pool(self) -> Any:
        return self.trains.pool

    @property
    def _probes(self) -> dict[tuple[int, int, str], list[int]]:
        return self.judges.probes

    # ------------------------------------------------------------------------- start / stop

    def preflight(self) -> dict[str, Any]:
        """The provider must be registered and active, its hardware present; returns its record."""
        try:
            p = self.nodes.query_json(f"/provider/{self.me}")
        except NodeUnreachable as e:
            raise WorkerError(str(e)) from None
        except RpcError as e:
            raise WorkerError(
                f"{self.me} ({self.cfg.key}) is not a registered provider ({e}): run "
                f"`loconet tx provider register --from {self.cfg.key} ...` first"
            ) from None
        if p["status"] != "active":
            raise WorkerError(
                f"provider {self.me} is {p['status']}, not active: it would never be drawn"
            )
        if self.cfg.check_hardware:
            why = ml.check_hardware(p["hardware"])
            if why is not None:
                raise WorkerError(why)
        self.endpoint = str(p["endpoint"]).rstrip("/")
        return dict(p)

    def _listen(self) -> tuple[str, int]:
        if self.cfg.listen:
            host, _, port = self.cfg.listen.rpartition(":")
            if not (port.isascii() and port.isdigit() and 0 < int(port[:6]) < 65536):
                raise WorkerError(
                    f"--listen {self.cfg.listen!r}: write HOST:PORT, e.g. 0.0.0.0:26680"
                )
            return host or "0.0.0.0", int(port)
        u = urlsplit(self.endpoint)
        host = "127.0.0.1" if u.hostname in ("127.0.0.1", "localhost") else "0.0.0.0"
        return host, u.port or 26680

    def start(self) -> None:
        # training and re-execution: bitwise reproducible (trainer/README)
        set_determinism(0, threads=1)
        self.preflight()
        host, port = self._listen()
        self.server = serve_blobs(
            self.store, host, port, classify=self._classify, round_of=self._serving_round
        )
        follower = CountingFollower(self.cfg.nodes, self._on_events)
        follower.traffic = self.traffic
        self.follower = follower.start()
        if self.cfg.metrics_listen:
            try:
                # blob bytes in/out already counted there
                worker_metrics().serve(self.cfg.metrics_listen)
            except OSError as e:
                raise WorkerError(
                    f"cannot serve metrics on {self.cfg.metrics_listen}: {e.strerror}; "
                    "pick another --metrics-listen"
                ) from None
            log.info("worker metrics on http://%s/metrics", self.cfg.metrics_listen)
        log.info(
            "worker %s (%s, %s) serving blobs on %s:%d, endpoint %s, device %s, stack %s",
            self.cfg.key,
            self.me,
            self.cfg.behaviour,
            host,
            port,
            self.endpoint,
            self.device,
            self.stack,
        )

    def stop(self) -> None:
        self.stop_event.set()
        if self.follower is not None:
            self.follower.stop()
        self.trains.pool.shutdown(wait=False, cancel_futures=True)
        self._duties.stop()
        if self.server is not None:
            self.server.stop_thread()
        self.nodes.close()

    def run(self) -> int:
        """Until ``stop_event``: on every block (or every poll_s), do the duties due."""
        self.start()
        try:
            seen = 0
            while not self.stop_event.is_set():
                assert self.follower is not None
                self.follower.wait_block(seen, self.cfg.poll_s)
                try:
                    seen = self.tick()
                except Exception as e:  # never die on the chain's or a peer's answer  # noqa: BLE001
                    self.stats.failures += 1
                    log.warning("tick failed: %s: %s", e.__class__.__name__, e)
                    time.sleep(0.5)
        finally:
            self.stop()
        return 0

    def _on_events(self, height: int, events: list[dict[str, Any]]) -> None:
        for ev in events:  # the app's events of the block (round.opened, challenge.issued, ...)
            t = str(ev.get("type", ""))
            self.stats.events[t] = self.stats.events.get(t, 0) + 1
            log.debug("block %d: %s", height, t)

    # ------------------------------------------------------------------------- one pass

    def tick(self) -> int:
        height = self.nodes.call(lambda c: c.latest_height())
        if not self._heights or height > self._heights[-1][0]:
            self._heights = [*self._heights[-(BLOCK_TIME_SPAN - 1) :], (height, time.monotonic())]
        self._todo = []
        try:
            self._scan(height)
        finally:
            todo, self._todo = self._todo or [], None
            self._run_collected(todo)
        if time.monotonic() - self.upkeep.last_gc >= GC_EVERY_S:
            self.gc()
        if time.monotonic() - self._last_stats >= STATS_EVERY_S:
            self._last_stats = time.monotonic()
            self.write_stats()
        return height

    def _run_collected(self, todo: list[Todo]) -> None:
        """A pass's duties, nearest window end first (a reveal due in 3 blocks before a vote due
        in 30); the heavy ones only queued (duties.py)."""
        for deadline, _, name, fn, due, heavy, key in sorted(todo, key=lambda d: d[:2]):
            self._here.key = key
            self._run_duty(name, fn, due=due, heavy=heavy, deadline=deadline)

    def _scan(self, height: int) -> None:
        """Read the chain's jobs and rounds and collect the duties due (``_duty``)."""
        jobs: list[dict[str, Any]] = []
        for status in ("active", "cancelling"):
            jobs += self.nodes.query_json(f"/jobs?status={status}&limit=100")["jobs"]
        for job in sorted(jobs, key=lambda j: j["id"]):
            if self.cfg.jobs and job["id"] not in self.cfg.jobs or job["id"] in self._bad_jobs:
                continue
            try:  # one job's failure must not starve the jobs after it
                self._job(job, height)
            except Exception as e:  # noqa: BLE001 (the chain's or a peer's answer: next job)
                self.stats.failures += 1
                log.warning("job %s: %s: %s", job.get("id"), e.__class__.__name__, e)

    def _job(self, job: JSON, height: int) -> None:
        """One job's unfinished rounds, read from the chain and parsed into records here."""
        jid = int(job["id"])
        if jid not in self._plans:
            try:
                self._plans[jid] = ml.JobPlan.from_job(dict(job))
            except (ml.JobError, RuntimeError, KeyError, TypeError, ValueError) as e:
                # not a job this worker can train: it declines every round it is drawn in
                # (declining before the commit deadline is free; silence is a missed commit)
                log.warning("job %d: %s: declining the rounds it draws this worker in", jid, e)
                self._unfit[jid] = str(e)
        j = Job.from_json(job)
        start = self._cursor.get(jid, 0)
        res = self.nodes.query_json(f"/rounds/{jid}?from={start}&limit=16")
        for raw in res["rounds"]:
            r = Round.from_json(raw)
            if jid in self._unfit:
                self._decline_if_drawn(r, height, self._unfit[jid])
            else:
                self._round(j, r, height)
            if r.phase == "finalized" and r.round == self._cursor.get(jid, 0):
                self._cursor[jid] = r.round + 1
                self.progress.forget_before(jid, r.round - 4)

    def _decline_if_drawn(self, r: Round, height: int, why: str) -> None:
        """A round of a job this worker cannot do: decline it if drawn and not done yet."""
        me = r.participant(self.me)
        self._here.key = r.key
        if (
            r.phase == "commit"
            and me is not None
            and me.commitment is None
            and me.outcome != "declined"
        ):
            log.info("round %s: declining: %s", r.key, why)
            self._duty(
                f"decline/{r.key}", lambda: self.do_decline(r, height), deadline=r.phase_end()
            )

    def _foreign_stack(self, jid: int) -> bool:
        """An exact-mode job pinned to a stack other than ours (ml.same_stack): our re-execution
        would not be bitwise that of an honest provider on its stack, so we neither train nor
        verify for it (an honest round voted INVALID would be slashed as a wrong vote). Logged
        once per job."""
        plan = self._plans[jid]
        if plan.tolerance is not None or not plan.stack or ml.same_stack(plan.stack, self.stack):
            return False
        if jid not in self._foreign:
            self._foreign.add(jid)
            log.warning(
                "job %d: exact mode pinned to stack %s, this worker runs %s: it neither trains "
                "nor verifies for this job (declines the rounds it is drawn in)",
                jid,
                plan.stack,
                self.stack,
            )
        return True

    def _round(self, job: Job | JSON, r: Round | JSON, height: int) -> None:
        """Collect the duties round ``r``'s phase asks of this worker (module docstring)."""
        job, r = Job.of(job), Round.of(r)
        foreign = self._foreign_stack(r.job_id)
        self._here.key = r.key
        self.timing.setdefault(r.key, {}).setdefault("seen", time.time())
        me = r.participant(self.me)
        if me is not None:
            self._provider_duties(job, r, me, height, foreign)
        if r.phase in PANEL_OF:  # a panel commits its secret votes, or opens them
            self._panel_duties(job, r, height, foreign)
        elif r.phase == "finalized":
            self.on_finalized(r)

    def _provider_duties(
        self, job: Job, r: Round, me: Participant, height: int, foreign: bool
    ) -> None:
        """What the round asks of this worker as a participant: commit (or decline), reveal,
        open the fresh segments or the ends, attest."""
        due, end, ch, k = r.is_due(height), r.phase_end(), me.challenge, r.key
        open_panel = {"vote_reveal": 0, "appeal_reveal": 1, "final_reveal": 2}.get(r.phase)
        tolerance = self._plans[r.job_id].tolerance is not None
        if (
            open_panel is not None
            and ch
            and ch.reveal
            and tolerance
            and ch.ends_to_open(open_panel)
        ):
            open_end = partial(self.do_open_end, job, r, me)
            self._duty(f"open-end/{k}/{open_panel}", open_end, due=due, deadline=end)
        fresh_panel = {"appeal": 1, "final": 2}.get(r.phase)
        withhold = self.cfg.behaviour == "withhold"
        if (
            fresh_panel is not None
            and ch is not None
            and me.outcome != "missed_reveal"
            and ch.fresh_unopened(fresh_panel)
            and not withhold
        ):
            fresh = partial(self.do_reveal_fresh, job, r, me, fresh_panel)
            self._duty(f"reveal-fresh/{k}/{fresh_panel}", fresh, due=due, deadline=end)
        if r.phase == "commit" and me.commitment is None:
            if not foreign:
                commit = partial(self.do_commit, job, r, me, height)
                self._duty(f"commit/{k}", commit, due=due, deadline=end)
            elif me.outcome != "declined":  # before committing: no slash (jobs README)
                self._duty(f"decline/{k}", lambda: self.do_decline(r, height), deadline=end)
        elif r.phase == "reveal" and ch is not None and ch.reveal is None and not withhold:
            self._duty(f"reveal/{k}", lambda: self.do_reveal(job, r, me), due=due, deadline=end)
        elif r.phase == "attest" and me.outcome == "accepted" and not me.attested_hash:
            attest = partial(self.do_attest, job, r, height)
            # fetch and aggregate the accepted updates: beside training, never in the loop
            self._duty(f"attest/{k}", attest, due=due, deadline=end, heavy=True)

    def _panel_duties(self, job: Job, r: Round, height: int, foreign: bool) -> None:
        """What the acting panel asks of this worker as a verifier: judge and commit a vote, or
        open it."""
        panel, opening = PANEL_OF[r.phase]
        due, end = r.is_due(height), r.phase_end()
        for t in r.participants:
            ch = t.challenge
            if ch is None or ch.reveal is None:
                continue
            mine = ch.seats_of(self.me, panel)
            if opening and any(v.committed and not v.voted for v in mine):
                open_vote = partial(self.do_open_vote, job, r, t, height)
                self._duty(f"open-vote/{r.key}/{t.address}", open_vote, due=due, deadline=end)
            elif (
                not opening
                and not foreign  # a verifier cannot decline: it lets the vote go
                and any(not v.committed and not v.voted for v in mine)
                and not ch.fresh_unopened(panel)  # a later panel judges its fresh ones too
            ):
                self._duty(
                    f"verify/{r.key}/{t.address}/{panel}",
                    partial(self.do_verify, job, r, t, height),
                    due=due,
                    deadline=end,
                    heavy=True,  # fetch and re-execute: beside training, never in the loop
                )

    def _duty(
        self,
        name: str,
        fn: Callable[[], None],
        *,
        due: bool = False,
        deadline: int = 0,
        heavy: bool = False,
    ) -> None:
        """Collect a duty for this pass; ``tick`` runs them nearest ``deadline`` (the height its
        window ends) first. ``heavy`` (a re-execution, an aggregation): queued on the duty
        threads (duties.py) so that it never delays the loop, training or a nearer duty."""
        if self._todo is None:
            self._run_duty(name, fn, due=due, heavy=heavy, deadline=deadline)
            return
        key = getattr(self._here, "key", None)
        self._todo.append((deadline, len(self._todo), name, fn, due, heavy, key))

    def _run_duty(
        self, name: str, fn: Callable[[], None], *, due: bool, heavy: bool, deadline: int
    ) -> None:
        """Run ``fn`` unless its backoff says wait; ``due`` (its window is about to close): wait at
        most DUE_RETRY_S since the last try, so no retry is scheduled past the window."""
        b = self._backoff.setdefault(name, _Backoff())
        now = time.monotonic()
        wait_until = min(b.next_try, b.last_try + DUE_RETRY_S) if due else b.next_try
        if now < wait_until or self._duties.busy(name):
            return
        if heavy:
            key = getattr(self._here, "key", None)

            def run() -> None:
                self._here.key = key
                self._attempt(name, fn, b)

            self._duties.submit(name, deadline, run)
            return
        self._attempt(name, fn, b)

    def _attempt(self, name: str, fn: Callable[[], None], b: _Backoff) -> None:
        b.last_try = time.monotonic()
        try:
            fn()
            b.failures = 0
        except TxRejected as e:
            if (e.codespace, e.code) in (DUPLICATE, WRONG_PHASE, CANNOT_DECLINE):
                log.info("%s: chain says %s; nothing more to do", name, e.log)
                b.next_try = float("inf")
                return
            self._failed(name, b, e)
        except Exception as e:  # noqa: BLE001 (a peer's bad blob, a node down, a duty's bug: retry)
            self._failed(name, b, e)

    def _failed(self, name: str, b: _Backoff, e: Exception) -> None:
        self.stats.failures += 1
        b.failures += 1
        b.next_try = time.monotonic() + min(0.5 * 2**b.failures, 10.0)
        log.warning("%s failed (%d): %s: %s", name, b.failures, e.__class__.__name__, e)

    # ------------------------------------------------------------------------- the duties
    # Each takes the records (or the chain's JSON, parsed here) and hands them to its module.

    def infeasible(self, job: Job | JSON, r: Round | JSON, height: int) -> str | None:
        return self.trains.infeasible(Job.of(job), Round.of(r), height)

    def do_commit(
        self, job: Job | JSON, r: Round | JSON, me: Participant | JSON, height: int
    ) -> None:
        self.trains.do_commit(Job.of(job), Round.of(r), as_participant(me), height)

    def do_decline(self, r: Round | JSON, height: int) -> None:
        self.trains.do_decline(Round.of(r), height)

    def do_reveal(self, job: Job | JSON, r: Round | JSON, me: Participant | JSON) -> None:
        self.reveals.do_reveal(Round.of(r), as_participant(me))

    def do_reveal_fresh(
        self, job: Job | JSON, r: Round | JSON, me: Participant | JSON, panel: int
    ) -> None:
        self.reveals.do_reveal_fresh(Round.of(r), as_participant(me), panel)

    def do_open_end(self, job: Job | JSON, r: Round | JSON, me: Participant | JSON) -> None:
        self.reveals.do_open_end(Round.of(r), as_participant(me))

    def judge(
        self, job: Job | JSON, r: Round | JSON, t: Participant | JSON, height: int
    ) -> Vote | None:
        return self.judges.judge(Job.of(job), Round.of(r), as_participant(t), height)

    def judge_opened_ends(
        self,
        job: Job | JSON,
        r: Round | JSON,
        t: Participant | JSON,
        v: dict[str, Any],
        height: int,
    ) -> tuple[bool, str] | None:
        return self.judges.judge_opened_ends(Job.of(job), Round.of(r), as_participant(t), v, height)

    def do_verify(
        self, job: Job | JSON, r: Round | JSON, t: Participant | JSON, height: int
    ) -> None:
        self.judges.do_verify(Job.of(job), Round.of(r), as_participant(t), height)

    def do_open_vote(
        self, job: Job | JSON, r: Round | JSON, t: Participant | JSON, height: int
    ) -> None:
        self.judges.do_open_vote(Job.of(job), Round.of(r), as_participant(t), height)

    def aggregate_round(
        self, job: Job | JSON, r: Round | JSON
    ) -> tuple[bytes, list[str], list[str]]:
        return self.attests.aggregate_round(Job.of(job), Round.of(r))

    def do_attest(self, job: Job | JSON, r: Round | JSON, height: int) -> None:
        self.attests.do_attest(Job.of(job), Round.of(r))

    # ------------------------------------------------------------------------- upkeep

    def on_finalized(self, r: Round | JSON) -> None:
        self.upkeep.on_finalized(Round.of(r))

    def gc(self) -> None:
        self.upkeep.gc()

    def write_stats(self) -> None:
        self.upkeep.write_stats()
