"""Per-tx cost of the node's FinalizeBlock metrics (node/metrics.py MeteredApplication).

A block of --txs transfer results (two events each, as a MsgSend has) is counted the way
``MeteredApplication.finalize_block`` counts it now (codes and event types aggregated, one
labelled increment each) and the way it did before (a labelled increment and an attribute dict
per tx and per event). Prints µs per tx for each, best of --repeat. Every node of a testnet
pays this per tx on the consensus path.

    .venv/bin/python benchmarks/metrics_cost.py --txs 2000 --repeat 7
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from prometheus_client import CollectorRegistry

from abci_app.app import Application
from abci_app.context import event
from abci_app.pb import abci
from node.metrics import MeteredApplication, NodeMetrics


def per_tx_before(m: NodeMetrics, res: abci.ResponseFinalizeBlock) -> None:
    """The loop before aggregation (kept here only to measure it)."""
    for r in res.tx_results:
        m.txs.labels("block", r.codespace, str(r.code)).inc()
        for e in r.events:
            m.events.labels(e.type).inc()
            {a.key: a.value for a in e.attributes}  # noqa: B018 (built per event before)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--txs", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    res = abci.ResponseFinalizeBlock(
        tx_results=[
            abci.ExecTxResult(
                code=0,
                events=[
                    event("tx", signer="loco1" + "q" * 38, fee=1, acc_seq="x/1"),
                    event("transfer", sender="a", recipient="b", amount=1),
                ],
            )
            for _ in range(args.txs)
        ]
    )
    m = NodeMetrics(CollectorRegistry())

    class Fake(MeteredApplication):
        def __init__(self) -> None:  # only the metrics, no store
            self.metrics = m

    app = Fake()
    base = Application.finalize_block
    best = {"before": float("inf"), "now": float("inf")}
    for _ in range(args.repeat):
        t = time.perf_counter()
        per_tx_before(m, res)
        best["before"] = min(best["before"], time.perf_counter() - t)
        # the app's own FinalizeBlock replaced by its result: only the metrics' cost is timed
        Application.finalize_block = lambda self, req: res  # type: ignore[method-assign]
        try:
            t = time.perf_counter()
            app.finalize_block(None)
            best["now"] = min(best["now"], time.perf_counter() - t)
        finally:
            Application.finalize_block = base  # type: ignore[method-assign]
    print(
        f"FinalizeBlock metrics, {args.txs} txs, best of {args.repeat}, load average "
        f"{os.getloadavg()[0]:.1f}: before {best['before'] / args.txs * 1e6:.1f} µs/tx, now "
        f"{best['now'] / args.txs * 1e6:.1f} µs/tx"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
