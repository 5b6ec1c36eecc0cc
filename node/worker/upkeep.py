"""The worker's upkeep: a finalized round's blobs released (the attested model pinned), the
blob store's gc, and DATA_DIR/stats.json (per-round seconds and bytes, the blob server's
counters, totals: benchmarks/round_overhead.py and benchmarks/traffic.py read it)."""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any

from node.worker.context import WorkerContext
from node.worker.records import Round

log = logging.getLogger("loconet.worker")


class Upkeep:
    """Release, gc and stats (module docstring)."""

    def __init__(self, ctx: WorkerContext) -> None:
        self.ctx = ctx
        self.last_gc = -float("inf")  # time.monotonic() of the blob store's last gc

    def on_finalized(self, r: Round) -> None:
        """A finalized round: its temp blobs released, the attested model pinned, the store's gc
        run, its outcome logged, stats.json written (once per round: progress ``final``)."""
        prog = self.ctx.progress.round(r.job_id, r.round)
        if prog.get("final"):
            return
        try:
            self.ctx.store.release_round(r.key)
            h = r.attested_model_hash
            if h and self.ctx.store.has(h):
                self.ctx.store.pin(h)
        except Exception as e:  # noqa: BLE001 (a peer's or the chain's answer must never stop the worker)
            log.warning("round %s: releasing blobs failed: %s", r.key, e)
        self.gc()  # earlier rounds' temp blobs whose margin has passed
        me = r.participant(self.ctx.me)
        if me is not None:
            log.info(
                "round %s finalized: %s, reward %d, slashed %d",
                r.key,
                me.outcome,
                me.reward,
                me.slashed,
            )
        self.ctx.account("finalized", time.time(), r.key)
        self.ctx.progress.update(r.job_id, r.round, final=True)
        self.write_stats()

    def gc(self) -> None:
        """The blob store's gc: the temp blobs (trace states) of rounds finalized more than the
        store's temp_margin_s ago are deleted; pinned (cold) and hot blobs stay (node/blobs)."""
        self.last_gc = time.monotonic()
        try:
            rep = self.ctx.store.gc()
        except Exception as e:  # noqa: BLE001 (a full or damaged disk must not stop the worker)
            log.warning("blob store gc failed: %s: %s", e.__class__.__name__, e)
            return
        if rep.expired or rep.evicted:
            log.info(
                "blob store gc: %d expired temp blob(s), %d evicted, %d B freed",
                len(rep.expired),
                len(rep.evicted),
                rep.freed_bytes,
            )

    def _rounds_with_served(self, server: dict[str, Any]) -> dict[str, dict[str, float]]:
        """``timing`` with what the blob server sent and read for each round added: its body
        bytes by kind and response heads to ``bytes_out.KIND``, the request heads it read to
        ``bytes_in.http`` (node/blobs/server.py attributes them to rounds). A copy: the server's
        counters are cumulative, ``timing``'s fetch counters additive."""
        rounds = {k: dict(v) for k, v in list(self.ctx.timing.items())}
        for rk, kinds in (server.get("sent_by_round") or {}).items():
            t = rounds.setdefault(rk or "-", {})
            for kind, n in kinds.items():
                t[f"bytes_out.{kind}"] = t.get(f"bytes_out.{kind}", 0) + n
        for rk, n in (server.get("received_by_round") or {}).items():
            t = rounds.setdefault(rk or "-", {})
            t["bytes_in.http"] = t.get("bytes_in.http", 0) + n
        return rounds

    def write_stats(self) -> None:
        """DATA_DIR/stats.json: per-round seconds and bytes, the blob server's counters, totals."""
        server = self.ctx.server
        served = server.stats.to_dict() if server is not None else {}
        out = {
            "rounds": self._rounds_with_served(served),
            "server": served,
            "totals": {k: v for k, v in vars(self.ctx.stats).items() if k != "events"},
            "traffic": self.ctx.traffic.to_dict(),
        }
        path = self.ctx.cfg.data_dir / "stats.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(out, sort_keys=True, indent=1))
        os.replace(tmp, path)
