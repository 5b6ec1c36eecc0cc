"""The reveal duty: challenged, the provider opens the drawn segments (MsgRevealSegment; the
ends as leaf hashes only), the fresh segments drawn for a later panel in that panel's window,
and in tolerance mode the ends with their committed probes once the votes are committed
(MsgOpenEnd). States are served from its own blob store."""

from __future__ import annotations

import logging

from abci_app.jobs.incentives import compute_masked_entries, mask_trace
from node.client.market_msgs import build_open_end, build_reveal_from_trace
from node.worker import ml
from node.worker.context import WorkerContext
from node.worker.records import Challenge, Participant, Round

log = logging.getLogger("loconet.worker")

# MsgOpenEnd per tx (each ~1 KB at most: a 32-integer probe, its proof, a URL): well inside a tx
OPEN_ENDS_PER_TX = 32


class RevealDuty:
    """Open what the chain asks this provider to open (module docstring)."""

    def __init__(self, ctx: WorkerContext) -> None:
        self.ctx = ctx

    def _trace(self, r: Round, what: str) -> list[str]:
        trace = self.ctx.progress.round(r.job_id, r.round).get("trace")
        if not trace:
            raise RuntimeError(what)
        return list(trace)

    def _store_trace_list(self, jid: int, rn: int, trace: list[bytes]) -> str:
        """Store what a verifier needs beyond the opened segments: the trace list (every state's
        hash, so entries 0 and H/k can be fetched and proven against the trace root) and the
        round's starting carry bytes (empty: every network round starts fresh). Returns the
        trace list's hash, which the reveal commits on chain (``trace_list_hash``)."""
        store, rk = self.ctx.store, f"{jid}/{rn}"
        store.put_bytes(ml.fresh_carry_bytes(), tier="temp", round_key=rk)
        h = store.put_bytes(ml.trace_list_bytes(list(trace)), tier="temp", round_key=rk)
        self.ctx._kinds[h] = "trace_list"  # no header says so: the server's classify asks here
        return h

    def do_reveal(self, r: Round, me: Participant) -> None:
        """Open every challenged segment not opened yet (one MsgRevealSegment each, one tx)."""
        ctx, jid, rn = self.ctx, r.job_id, r.round
        trace = self._trace(
            r, "no trace recorded for this round (lost before the restart?): cannot reveal"
        )
        ch = me.challenge
        assert ch is not None
        segs = ch.first_segments
        todo = [s for s in segs if s not in ch.opened]
        hashes = [bytes.fromhex(h) for h in trace]
        # both modes: the ends of the opened segments stay secret until the votes are committed
        # (only their leaf hashes are opened, and the list masks them: incentives.mask_trace):
        # only re-execution yields them (exact mode) or their probes (tolerance mode, opened
        # later by do_open_end), a verifier's evidence
        # (docs/threat-model.md *Evidence only re-execution yields*)
        # every entry but 0, H/k and the runs' starts: a later panel's fresh segment must have
        # an end nobody saw (incentives.compute_masked_entries)
        served = mask_trace(hashes, compute_masked_entries(segs, len(hashes) - 1))
        self._store_trace_list(jid, rn, served)  # idempotent: the blob is content-addressed
        # the first opening carries the trace list (the chain proves its hash against the trace
        # root); later ones name its hash only
        first = not ch.opened
        msgs = [
            build_reveal_from_trace(
                jid,
                rn,
                s,
                hashes,
                ctx._loc(trace[s]),
                "",
                provider=ctx.me_bytes,
                base_model=bytes.fromhex(r.base_model_hash),
                with_list=first and i == 0,
                segments=segs,
            )
            for i, s in enumerate(todo)
        ]
        if not msgs:
            return
        res = ctx._send(*msgs)
        ctx.progress.update(jid, rn, revealed=res["txhash"])
        ctx.stats.revealed += 1
        log.info("round %s: revealed segment(s) %s at height %d", r.key, todo, res["height"])

    def do_reveal_fresh(self, r: Round, me: Participant, panel: int) -> None:
        """Escalated: open the fresh segments the chain drew for the appeal (1) or final (2)
        panel (MsgRevealSegment with that panel, one tx), in that panel's voting window; the
        ends stay secret as for the first panel's. Not opening them is a missed reveal."""
        ctx = self.ctx
        trace = self._trace(r, "no trace recorded for this round: cannot open the fresh segments")
        ch = me.challenge
        assert ch is not None
        todo = ch.fresh_unopened(panel)
        if not todo:
            return
        hashes = [bytes.fromhex(h) for h in trace]
        segs = ch.first_segments
        msgs = [
            build_reveal_from_trace(
                r.job_id,
                r.round,
                s,
                hashes,
                ctx._loc(trace[s]),
                "",
                provider=ctx.me_bytes,
                base_model=bytes.fromhex(r.base_model_hash),
                with_list=False,
                segments=segs,
                panel=panel,
                judged=_judged(ch, segs, panel),
            )
            for s in todo
        ]
        res = ctx._send(*msgs)
        log.info(
            "round %s: opened the fresh segment(s) %s of panel %d at height %d",
            r.key,
            todo,
            panel,
            res["height"],
        )

    def do_open_end(self, r: Round, me: Participant) -> None:
        """Tolerance mode, vote-reveal window: open the end of every opened segment (its state,
        served from our store, and its probe committed with the roots: MsgOpenEnd, one tx). Not
        opening them is a missed reveal (punished as fraud)."""
        ctx = self.ctx
        prog = ctx.progress.round(r.job_id, r.round)
        trace, probes = prog.get("trace"), prog.get("probes")
        if not trace or not probes:
            raise RuntimeError("no trace or probes recorded for this round: cannot open the ends")
        panel = {"appeal_reveal": 1, "final_reveal": 2}.get(r.phase, 0)
        assert me.challenge is not None
        todo = me.challenge.ends_to_open(panel)  # each panel's ends open in its own window
        msgs = [
            build_open_end(
                r.job_id,
                r.round,
                s,
                [bytes.fromhex(h) for h in trace],
                probes,
                ctx._loc(trace[s + 1]),
                provider=ctx.me_bytes,
                base_model=bytes.fromhex(r.base_model_hash),
            )
            for s in todo
        ]
        for i in range(0, len(msgs), OPEN_ENDS_PER_TX):  # ~1 KB each: several txs for many
            res = ctx._send(*msgs[i : i + OPEN_ENDS_PER_TX])
            log.info(
                "round %s: opened the end(s) of %s at height %d",
                r.key,
                todo[i : i + OPEN_ENDS_PER_TX],
                res["height"],
            )


def _judged(ch: Challenge, segs: list[int], panel: int) -> list[int]:
    """The segments ``panel`` judges: the first panel's and each panel's fresh ones up to it."""
    return sorted({*segs, *ch.fresh(1), *(ch.fresh(2) if panel == 2 else [])})
