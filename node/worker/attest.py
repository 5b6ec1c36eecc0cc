"""The aggregate-and-attest duty: a provider whose update was accepted fetches every accepted
update, aggregates them into the round's new model (ml.aggregate_payloads: screened,
norm-clipped mean, one outer Nesterov step), stores and pins it, and sends MsgAttestModel."""

from __future__ import annotations

import logging
import time

from abci_app.codec.address import from_bech32
from node.client.market_msgs import build_attest
from node.worker import ml
from node.worker.context import WorkerContext
from node.worker.records import Job, Round

log = logging.getLogger("loconet.worker")


class AttestDuty:
    """Aggregate the accepted updates and attest the model (module docstring)."""

    def __init__(self, ctx: WorkerContext) -> None:
        self.ctx = ctx

    def aggregate_round(self, job: Job, r: Round) -> tuple[bytes, list[str], list[str]]:
        """(new model bytes, included, excluded) for a round in attest phase: every accepted
        update whose bytes match its commitment, screened, norm-clipped and averaged, one outer
        Nesterov step from the round's base model with the momentum the base carries
        (ml.aggregate_payloads). BlobError when an update or the base is unavailable."""
        ctx = self.ctx
        plan = ctx._plans[r.job_id]
        payloads: dict[str, bytes | None] = {}
        for p in r.participants:
            if p.outcome == "accepted":
                payloads[from_bech32(p.address).hex()] = ctx._payload(r, p, r.key)
        base = ctx._base(job, r.base_model_hash)
        corpus = ctx._corpus(job)
        out, excluded = ml.aggregate_payloads(plan, base, payloads, corpus)
        for who, why in sorted(excluded.items()):
            log.info("round %s: update of %s left out of the aggregate: %s", r.key, who, why)
        return out.model, out.kept, sorted(excluded)

    def do_attest(self, job: Job, r: Round) -> None:
        ctx, jid, rn = self.ctx, r.job_id, r.round
        prog = ctx.progress.round(jid, rn)
        model_hash = prog.get("aggregated")
        if not (model_hash and ctx.store.has(model_hash) and "excluded" in prog):
            t0, wall0 = time.perf_counter(), time.time()
            new, included, excluded = self.aggregate_round(job, r)
            ctx.account("aggregate_s", time.perf_counter() - t0)
            ctx.span("aggregate", wall0, time.time())
            model_hash = ctx.store.put_bytes(new, tier="cold")
            ctx.store.pin(model_hash)
            ctx.progress.update(jid, rn, aggregated=model_hash, excluded=list(excluded))
            log.info(
                "round %s: aggregated %d update(s) (%d left out) -> model %s",
                r.key,
                len(included),
                len(excluded),
                model_hash[:12],
            )
        excluded_hex = ctx.progress.round(jid, rn).get("excluded") or []
        res = ctx._send(
            build_attest(
                jid, rn, bytes.fromhex(model_hash), [bytes.fromhex(a) for a in excluded_hex]
            )
        )
        ctx.progress.update(jid, rn, attested=res["txhash"])
        ctx.account("attested", time.time())
        ctx.stats.attested += 1
        log.info("round %s: attested %s at height %d", r.key, model_hash[:12], res["height"])
