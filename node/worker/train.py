"""The train-and-commit duty: drawn in a round's commit window, the worker checks it can do the
round (else MsgDeclineRound, free before the deadline), trains H steps on its shard in the
background, stores the payload and the trace states, and sends MsgSubmitUpdate with the roots
bound to it."""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from abci_app.jobs.errors import ErrDuplicate
from node.client.market_msgs import build_bound_submit, build_decline_round
from node.client.rpc import TxRejected
from node.metrics import worker_metrics
from node.worker import ml
from node.worker.context import WorkerContext
from node.worker.records import Job, Participant, Round
from trainer.commit import Binding
from trainer.probe import trace_probes

log = logging.getLogger("loconet.worker")

POISON_SCALE = 10.0
# a drawn round whose inputs (base model, dataset) failed to fetch this many times is declined
# (while the commit window is open: declining is free, a missed commit is slashed)
INPUT_TRIES = 3
DUPLICATE = (ErrDuplicate.codespace, ErrDuplicate.code)  # the chain already has this duty done


class InputsUnavailable(Exception):
    """A round's base model or dataset could not be fetched (or not with its hash)."""


def record_training(steps: int, seconds: float, loss: float, job: int = 0, rn: int = 0) -> None:
    """Prometheus figures of one round's training: the round's mean step time (observed once per
    step, so the histogram's count is the number of inner steps), its last loss and, by job, the
    round, its steps and wall time."""
    m = worker_metrics()
    for _ in range(max(steps, 0)):
        m.step(loss, seconds / max(steps, 1), job)
    m.round_trained(job, rn, steps, seconds)


class TrainDuty:
    """Train and commit (module docstring); one round trains at a time, on its own thread."""

    def __init__(self, ctx: WorkerContext) -> None:
        self.ctx = ctx
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="train")
        self.training: tuple[tuple[int, int], Future[Any]] | None = None
        # (job, round) -> how many times fetching the round's inputs failed
        self.input_failures: dict[tuple[int, int], int] = {}
        self.policy: dict[int, Any] = {}  # job -> its compression chooser

    # ------------------------------------------------------------------------- feasibility

    def infeasible(self, job: Job, r: Round, height: int) -> str | None:
        """Why this worker cannot do round ``r`` by the job's own terms (None: it can), checked
        before it trains (issue 31: a job must never cost an honest provider its bond): the
        training would not fit its device's memory (``ml.training_memory_bytes``), or at its
        measured speed on this job (its last round's seconds per step) the H steps would not end
        before the commit window closes at its measured block time."""
        ctx = self.ctx
        plan = ctx._plans[r.job_id]
        have = ml.available_memory_bytes(ctx.device)
        if ctx.cfg.pipeline > 1:  # the island's stages each hold their share (issue 35)
            why = self._island_too_big(plan, have)
            return why if why is not None else self._too_slow(plan, r, height)
        need = ml.training_memory_bytes(plan)
        if need > have:
            return (
                f"training needs ~{need >> 20} MiB, the {ctx.device} has {have >> 20} MiB available"
            )
        return self._too_slow(plan, r, height)

    def _island_too_big(self, plan: ml.JobPlan, have: int) -> str | None:
        """Why the island of --procs x --pipeline processes does not fit (None: it does)."""
        procs, stages = self.ctx.cfg.procs, self.ctx.cfg.pipeline
        try:
            m = ml.check_island_plan(plan, procs, stages, self.ctx.cfg.microbatches)
        except ml.JobError as e:
            return str(e)
        per, total = ml.island_memory_bytes(plan, procs, stages, m)
        if self.ctx.device == "cuda" and per > have:
            return (
                f"the largest of the island's {stages} stages needs ~{per >> 20} MiB, a GPU "
                f"has {have >> 20} MiB"
            )
        if self.ctx.device != "cuda" and total > have:
            return (
                f"the island's {procs * stages} processes need ~{total >> 20} MiB together, "
                f"the cpu has {have >> 20} MiB available"
            )
        return None

    def _too_slow(self, plan: ml.JobPlan, r: Round, height: int) -> str | None:
        """Why the H steps would not end before the commit window closes, at this worker's
        measured speed on the job (None: they would, or no speed is measured yet)."""
        step_s, block_s = self.ctx._step_s.get(r.job_id), self.ctx.block_s()
        if step_s is not None and block_s is not None:
            eta = step_s * plan.H
            left = (r.window("commit_deadline") - 2 - height) * block_s
            if eta > left:
                return (
                    f"at its measured {step_s * 1000:.1f} ms/step the {plan.H} steps take "
                    f"~{eta:.0f} s; the commit window has ~{max(left, 0):.0f} s left"
                )
        return None

    # ------------------------------------------------------------------------- commit

    def do_commit(self, job: Job, r: Round, me: Participant, height: int) -> None:
        jid, rn = r.job_id, r.round
        prog = self.ctx.progress.round(jid, rn)
        if prog.get("submitted"):
            return  # landed; the chain shows it on a later block
        # a tx sent now lands in block height+1 at the earliest, and the chain takes commitments
        # up to commit_deadline - 1 (block D's seed draws the challenges: jobs README)
        if height + 1 >= r.window("commit_deadline"):
            log.warning(
                "round %s: commit window (last block %d) closed (height %d)",
                r.key,
                r.window("commit_deadline") - 1,
                height,
            )
            return
        if (
            prog.get("payload")
            and prog.get("trace")
            and all(self.ctx.store.has(h) for h in prog["trace"])
        ):
            return self._submit(r, prog)  # made before a restart: send the same work
        if self.training is not None:
            return self._collect(r, height)
        behaviour = self.ctx.cfg.behaviour
        why = self.infeasible(job, r, height) if behaviour == "honest" else None
        if why is not None:
            log.warning("round %s: declining: %s", r.key, why)
            return self.do_decline(r, height)
        if behaviour == "random-root":
            plan = self.ctx._plans[jid]
            work = ml.random_round(plan)
            if plan.tolerance is not None:  # garbage probes too: it never trained
                work.probes = ml.random_probes(len(work.states))
            self._store_work(jid, rn, work)
            return self._submit(r, self.ctx.progress.round(jid, rn))
        task = _Training(self, job, r, me)
        self.training = ((jid, rn), self.pool.submit(task.run))

    def _collect(self, r: Round, height: int) -> None:
        """The training in flight: this round's, once done, is stored and submitted (a failure
        raises into the duty's retry; inputs that failed INPUT_TRIES times: declined); another
        round's, done, is dropped (its own duty has passed)."""
        assert self.training is not None
        key, fut = self.training
        if key != (r.job_id, r.round):
            if fut.done():
                self.training = None
            return  # busy with an older round; this one waits for the next block
        if not fut.done():
            return
        self.training = None
        try:
            work = fut.result()  # raises the training error into _duty's retry
        except InputsUnavailable as e:
            k = (r.job_id, r.round)
            n = self.input_failures[k] = self.input_failures.get(k, 0) + 1
            if n < INPUT_TRIES:
                raise
            log.warning("round %s: declining: inputs unavailable %d times: %s", r.key, n, e)
            return self.do_decline(r, height)
        self._store_work(r.job_id, r.round, work)
        return self._submit(r, self.ctx.progress.round(r.job_id, r.round))

    def _store_work(self, jid: int, rn: int, work: Any) -> None:
        store, rk = self.ctx.store, f"{jid}/{rn}"
        payload_hash = store.put_bytes(work.payload, tier="hot", round_key=rk)
        trace = [store.put_bytes(s, tier="temp", round_key=rk) for s in work.states]
        assert trace == [t.hex() for t in work.trace]
        # the round's starting carry only: the trace list is stored when revealing, masked
        # (do_reveal); the list in clear would name every end a panel's evidence is made of
        store.put_bytes(ml.fresh_carry_bytes(), tier="temp", round_key=rk)
        self.ctx.progress.update(
            jid,
            rn,
            payload=payload_hash,
            trace=trace,
            tokens=work.tokens,
            loss_before=work.loss_before,
            loss_after=work.loss_after,
            probes=work.probes,
        )

    def _submit(self, r: Round, prog: dict[str, Any]) -> None:
        ctx, jid, rn = self.ctx, r.job_id, r.round
        payload = ctx.store.read(prog["payload"])
        msg = build_bound_submit(
            jid,
            rn,
            provider=ctx.me_bytes,
            base_model=bytes.fromhex(r.base_model_hash),
            payload=bytes(payload),
            trace=[bytes.fromhex(h) for h in prog["trace"]],
            tokens=int(prog["tokens"]),
            loss_before=int(prog["loss_before"]),
            loss_after=int(prog["loss_after"]),
            blob=ctx._loc(prog["payload"]),
            probes=prog.get("probes") if ctx._plans[jid].tolerance is not None else None,
        )
        try:
            res = ctx._send(msg)
        except TxRejected as e:
            if (e.codespace, e.code) == DUPLICATE:
                ctx.progress.update(jid, rn, submitted="duplicate")
            raise
        ctx.progress.update(jid, rn, submitted=res["txhash"])
        ctx.account("committed", time.time())
        ctx.stats.submitted += 1
        worker_metrics().round_done(True)
        log.info(
            "round %s: update submitted at height %d (%s)",
            r.key,
            res["height"],
            ctx.cfg.behaviour,
        )

    def do_decline(self, r: Round, height: int) -> None:
        """MsgDeclineRound: drawn, not committed, and not able to do the round (the job pins
        another stack): outcome ``declined``, no slash, the slot stays in the escrow. Like a
        commitment it must land by commit_deadline - 1; later the round ends missed_commit."""
        if height + 1 >= r.window("commit_deadline"):
            return
        res = self.ctx._send(build_decline_round(r.job_id, r.round))
        self.ctx.progress.update(r.job_id, r.round, declined=res["txhash"])
        log.info("round %s: declined at height %d", r.key, res["height"])


class _Training:
    """One round's training, run on the training thread: fetch the inputs, train H steps on the
    assigned shard (an island with --procs/--pipeline), the probes in tolerance mode."""

    def __init__(self, duty: TrainDuty, job: Job, r: Round, me: Participant) -> None:
        ctx = duty.ctx
        self.ctx, self.job, self.r = ctx, job, r
        self.plan = ctx._plans[r.job_id]
        self.spec = self.plan.shard_spec(r.round, ctx.me, me.shard)
        self.chooser = duty.policy.setdefault(r.job_id, self.plan.compression())
        self.poison = POISON_SCALE if ctx.cfg.behaviour == "poison" else 1.0

    def run(self) -> Any:
        ctx, r, plan, spec = self.ctx, self.r, self.plan, self.spec
        ctx._here.key = r.key
        log.info(
            "round %s: training %d steps on shard %d from base %s",
            r.key,
            plan.H,
            spec.shard,
            r.base_model_hash[:12],
        )
        t0, wall0 = time.perf_counter(), time.time()
        try:
            base = ctx._base(self.job, r.base_model_hash)
            corpus = ctx._corpus(self.job)
        except Exception as e:  # noqa: BLE001 (no source has them, or not these bytes)
            raise InputsUnavailable(f"{e.__class__.__name__}: {e}") from e
        t1 = time.perf_counter()
        work = self._train(base, corpus)
        ctx.stats.trained_s += time.perf_counter() - t0
        ctx.account("train_s", time.perf_counter() - t1)
        ctx._step_s[r.job_id] = (time.perf_counter() - t1) / max(1, plan.H)
        ctx.span("train", wall0 + (t1 - t0), time.time())
        record_training(plan.H, time.perf_counter() - t1, work.loss_after / 1000, r.job_id, r.round)
        log.info(
            "round %s: trained %d steps on shard %d in %.1fs, loss %.3f -> %.3f, payload %d B",
            r.key,
            plan.H,
            spec.shard,
            time.perf_counter() - t0,
            work.loss_before / 1000,
            work.loss_after / 1000,
            len(work.payload),
        )
        return work

    def _train(self, base: bytes, corpus: Any) -> Any:
        ctx, r, plan = self.ctx, self.r, self.plan
        shapes = {n: tuple(p.shape) for n, p in ml.load_model(base, plan.model).named_parameters()}
        codec = self.chooser.choose(r.round, shapes)
        binding = Binding(ctx.me_bytes, r.job_id, r.round, bytes.fromhex(r.base_model_hash))
        island = ctx.cfg.procs > 1 or ctx.cfg.pipeline > 1
        work = ml.train_round(
            plan,
            base,
            corpus,
            self.spec,
            binding,
            codec,
            device=ctx.device,
            poison=self.poison,
            procs=ctx.cfg.procs,
            corpus_path=ctx.store.path(plan.dataset_id) if island else None,
            pipeline=ctx.cfg.pipeline,
            microbatches=ctx.cfg.microbatches,
        )
        if plan.tolerance is not None:  # every state's probe, committed with the roots
            work.probes = trace_probes(work.states)
        return work
