"""CheckTx cost per tx on the app (no network): --txs signed transfers of --accounts accounts
checked as CometBFT's recheck after a block does, on the CheckTx state as the app builds it
now (``CacheKV(ReadCache(store))``: committed reads remembered until the next Commit) and as it
did before (``CacheKV(store)``: one SQLite query per read), interleaved, best of --repeat.
Signatures are verified before the clock (the node's verify threads and cache do that).

    .venv/bin/python benchmarks/recheck_cost.py --txs 2000 --accounts 200 --repeat 6
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from abci_app.codec.tx import decode_tx  # noqa: E402
from abci_app.pb import abci  # noqa: E402
from abci_app.store import CacheKV, ReadCache  # noqa: E402
from tests.kits.chainkit import new_chain, send_msg  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--txs", type=int, default=2000)
    ap.add_argument("--accounts", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=6)
    args = ap.parse_args()
    recheck = abci.CheckTxType.Value("RECHECK")
    c = new_chain(n_keys=args.accounts)
    c.app.check_invariants = False
    txs = [
        c.tx(c.keys[i % args.accounts], [send_msg(bytes(20), 1)], seq=i // args.accounts)
        for i in range(args.txs)
    ]
    for t in txs:
        c.app.sigs.verify(decode_tx(t))
    best = {"before": float("inf"), "now": float("inf")}
    for _ in range(args.repeat):
        for mode in ("before", "now"):
            c.app._check = CacheKV(c.store) if mode == "before" else CacheKV(ReadCache(c.store))
            c.app._check_block = None
            t0 = time.perf_counter()
            for x in txs:
                if c.app.check_tx(abci.RequestCheckTx(tx=x, type=recheck)).code != 0:
                    raise SystemExit("a tx failed its recheck")
            best[mode] = min(best[mode], (time.perf_counter() - t0) / len(txs))
    print(
        f"recheck of {args.txs} transfers ({args.accounts} accounts), best of {args.repeat}, load "
        f"average {os.getloadavg()[0]:.1f}: before {best['before'] * 1e6:.1f} µs/tx, now "
        f"{best['now'] * 1e6:.1f} µs/tx"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
