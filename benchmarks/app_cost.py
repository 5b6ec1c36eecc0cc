"""CPU µs per tx of each ABCI step on one app, no network: what every node of a testnet pays for
each signed transfer. A block of --txs transfers from --accounts accounts goes through the steps
a validator runs: the ABCI frame decode/encode of its CheckTx (``server``), signature
verification (``verify``, once per node: the cache by tx bytes serves the rest), CheckTx,
ProcessProposal, FinalizeBlock, Commit, then CometBFT's recheck, on the new state, of the next
--txs transfers of the same accounts, checked before the block and still in the mempool after it
(they all pass again). CPU time (``time.process_time``), best of
--repeat, so the figures barely move with the machine's load.

``--socket``: also the whole mempool path as a node runs it: the ABCI server (``ABCIServer`` on
a Unix socket, in a child process, with the node's verify threads) answering the same CheckTx
requests pipelined on one connection as CometBFT sends them, first seen (signatures verified)
and again as rechecks after the block; the child's CPU from /proc, per tx.

    .venv/bin/python benchmarks/app_cost.py --txs 2000 --accounts 200 --repeat 5 --socket
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from abci_app.codec.tx import SignatureCache, decode_tx  # noqa: E402
from abci_app.pb import abci  # noqa: E402
from abci_app.server import ABCIServer, FrameReader, frame  # noqa: E402
from tests.kits.chainkit import Chain, new_chain, send_msg  # noqa: E402

RECHECK = abci.CheckTxType.Value("RECHECK")


def _transfers(c: Chain, args: argparse.Namespace) -> tuple[list[bytes], list[bytes]]:
    """--txs transfers round-robin over the accounts (the block), and the next --txs."""
    n, k = args.txs, args.accounts
    txs = [c.tx(c.keys[i % k], [send_msg(bytes(20), 1)], seq=i // k) for i in range(2 * n)]
    return txs[:n], txs[n:]


def _check_frame(tx: bytes) -> bytes:
    return frame(abci.Request(check_tx=abci.RequestCheckTx(tx=tx)))


def _cpu_seconds(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def _serve(path: str, accounts: int) -> None:
    """Child: a fresh chain (the same as the parent's: fixed keys and genesis) behind a server."""
    c = new_chain(n_keys=accounts)
    c.app.check_invariants = False
    asyncio.run(_serve_app(path, c.app))


async def _serve_app(path: str, app: object) -> None:
    server = ABCIServer(app, f"unix://{path}")
    await server.serve_forever()


def _exchange(sock: socket.socket, wire: bytes, n: int) -> list[abci.Response]:
    """Send ``wire`` (n pipelined requests and a Flush) and read the n + 1 answers."""
    sock.sendall(wire + frame(abci.Request(flush=abci.RequestFlush())))
    reader, out = FrameReader(), list[abci.Response]()
    while len(out) < n + 1:
        data = sock.recv(1 << 16)
        if not data:
            raise SystemExit("the server closed the connection")
        out += [abci.Response.FromString(raw) for raw in reader.feed(data)]
    return out[:n]


def socket_cost(args: argparse.Namespace) -> dict[str, float]:
    """CPU µs per tx of the server process: CheckTx (first seen), then recheck of the same txs
    after they were committed in a block on the consensus connection."""
    c = new_chain(n_keys=args.accounts)
    txs, later = _transfers(c, args)
    path = os.path.join(tempfile.mkdtemp(prefix="app-cost-"), "abci.sock")
    child = multiprocessing.get_context("fork").Process(
        target=_serve, args=(path, args.accounts), daemon=True
    )
    child.start()
    pid = child.pid
    assert pid is not None
    try:
        while not os.path.exists(path):
            time.sleep(0.05)
        mem, cons = socket.socket(socket.AF_UNIX), socket.socket(socket.AF_UNIX)
        mem.connect(path)
        cons.connect(path)
        check = b"".join(_check_frame(t) for t in txs)
        t0 = _cpu_seconds(pid)
        answers = _exchange(mem, check, len(txs))
        t1 = _cpu_seconds(pid)
        answers += _exchange(mem, b"".join(_check_frame(t) for t in later), len(later))
        if any(a.check_tx.code for a in answers):
            raise SystemExit(f"CheckTx refused a tx: {answers[0]}")
        block = c.request(txs)
        _exchange(cons, frame(abci.Request(finalize_block=block)), 1)
        _exchange(cons, frame(abci.Request(commit=abci.RequestCommit())), 1)
        re = abci.RequestCheckTx
        wire = b"".join(frame(abci.Request(check_tx=re(tx=t, type=RECHECK))) for t in later)
        t2 = _cpu_seconds(pid)
        if any(a.check_tx.code for a in _exchange(mem, wire, len(later))):
            raise SystemExit("a recheck failed")
        t3 = _cpu_seconds(pid)
    finally:
        child.kill()
        child.join()
    return {
        "socket: check_tx incl. verify": (t1 - t0) / len(txs) * 1e6,
        "socket: recheck": (t3 - t2) / len(txs) * 1e6,
    }


def in_process(
    args: argparse.Namespace, timed: Callable[[str, Callable[[], object]], None]
) -> None:
    """One round of the steps on a fresh chain, each timed by ``timed(name, step)``."""
    c = new_chain(n_keys=args.accounts)
    c.app.check_invariants = False
    app = c.app
    txs, later = _transfers(c, args)
    wire = b"".join(_check_frame(t) for t in txs)
    server = ABCIServer(app)

    def serve() -> None:
        out = bytearray()
        for raw in FrameReader().feed(wire):
            req, _ = server._decode(raw)
            assert req is not None
            out += frame(abci.Response(check_tx=abci.ResponseCheckTx(code=0)))

    timed("server (frames in/out)", serve)
    app.sigs = SignatureCache()

    def verify() -> None:
        for t in txs:
            app.sigs.verify(decode_tx(t))

    timed("verify (once per node)", verify)

    def check() -> None:
        for t in txs:
            assert app.check_tx(abci.RequestCheckTx(tx=t)).code == 0

    timed("check_tx", check)
    for t in later:  # in the mempool behind the block's txs
        assert app.check_tx(abci.RequestCheckTx(tx=t)).code == 0
    pp = abci.RequestProcessProposal(txs=txs, height=app.store.height + 1)
    timed("process_proposal", lambda: app.process_proposal(pp))
    req = c.request(txs)
    resp: list[abci.ResponseFinalizeBlock] = []
    timed("finalize_block", lambda: resp.append(app.finalize_block(req)))
    assert all(r.code == 0 for r in resp[-1].tx_results)
    timed("commit", lambda: app.commit(abci.RequestCommit()))

    def recheck() -> None:
        for t in later:
            assert app.check_tx(abci.RequestCheckTx(tx=t, type=RECHECK)).code == 0

    timed("recheck", recheck)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--txs", type=int, default=2000)
    ap.add_argument("--accounts", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--socket", action="store_true", help="also the server path over a socket")
    args = ap.parse_args()
    best: dict[str, float] = {}

    def timed(name: str, fn: Callable[[], object]) -> None:
        t0 = time.process_time()
        fn()
        us = (time.process_time() - t0) / args.txs * 1e6
        best[name] = min(best.get(name, float("inf")), us)

    for _ in range(args.repeat):
        in_process(args, timed)
    total = sum(v for k, v in best.items() if k != "recheck")
    if args.socket:
        for _ in range(args.repeat):
            for k, v in socket_cost(args).items():
                best[k] = min(best.get(k, float("inf")), v)
    print(
        f"app CPU µs per tx, block of {args.txs} transfers from {args.accounts} accounts, best of "
        f"{args.repeat}, load average {os.getloadavg()[0]:.1f}:"
    )
    for k, v in best.items():
        print(f"  {k:30s} {v:7.1f}")
    print(f"  {'in process, without recheck':30s} {total:7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
