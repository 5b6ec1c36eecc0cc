"""``loconet start``: the ABCI server (in this process) and cometbft (a child) as one node.

Order: open the store, bind the ABCI port (a port in use fails here, before cometbft starts),
check cometbft's ports, start cometbft. Either side ending stops the other. SIGINT/SIGTERM:
cometbft gets SIGTERM (SIGKILL after 15 s), then the ABCI server closes and the store is
closed. ``kill -9`` of the process group loses nothing committed: the store persists only in
Commit, and on restart CometBFT replays what the app does not have.

Only cometbft's connections speak ABCI: the server's gate (``CometbftOnly``, abci_app/server.py)
admits only the connections of the cometbft process started here; any other local process that
connects to the ABCI socket or port is refused with one warning line and the node goes on.

cometbft dies with this process: it is started with ``PR_SET_PDEATHSIG`` = SIGKILL (Linux), so a
``kill -9`` of ``loconet start`` alone (not its group) does not leave an orphan cometbft holding
the node's ports and home. SIGKILL, not SIGTERM: the process that would escalate a SIGTERM that
cometbft does not act on (the 15 s above) is the one that just died, so SIGTERM could leave the
orphan running for good; a SIGKILL'd cometbft loses nothing (the same as ``kill -9`` of the
group, above). The signal fires when the *thread* that forked the child ends, not the process:
``Popen`` is called from the coroutine itself (``_start_cometbft``), on the event loop's thread
(the main thread under ``loconet start``), which lives as long as the node, never in a pool
thread (``to_thread``) that may end while cometbft runs.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from prometheus_client import CollectorRegistry

from abci_app.server import ABCIServer, CometbftOnly, Gate, OneClient, SocketDirError
from abci_app.store import MerkleStore, StoreError
from node.atomic import Held, hold
from node.local.config import AppConfig
from node.local.init import genesis_unfinished, unfinished_init_message
from node.paths import cometbft_binary
from node.ports import is_port_free

log = logging.getLogger("loconet.node")


class StartError(Exception):
    pass


def _port_of(addr: str) -> int:
    port = addr.rsplit(":", 1)[1]
    if not (port.isascii() and port.isdigit() and 0 < int(port[:6]) < 65536):
        raise ValueError(f"{addr!r} has no port 1..65535")
    return int(port)


def lock_home(home: Path) -> int:
    """Hold HOME/data/loconet.lock (flock, released when the process ends, kill -9 included) for
    this process's life; StartError naming the holder if another `loconet start` or `loconet
    abci` runs on the home. Two on one home opened one store twice, and the second unlinked the
    first's ABCI socket (abci_app/server.py) and bound its own in its place."""
    (home / "data").mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        return hold(home / "data" / "loconet.lock")
    except Held as e:
        raise StartError(
            f"another loconet node (pid {e.pid}) runs on {home}: stop it first (Ctrl-C, or "
            f"`kill {e.pid}`), or pick another --home"
        ) from None


# The cyclic GC's first generation is collected every GC_THRESHOLD[0] container allocations
# (CPython's default: 700). A block allocates hundreds of thousands (the store's tree update,
# each tx's decoded messages), nearly none of them in cycles, so at 700 the collector runs
# hundreds of times a block and re-traverses the block's live objects each time it promotes
# them: ~20 ms of a 1,000-key block at 1M keys (benchmarks/RESULTS.md, *GC threshold*).
GC_THRESHOLD = (50_000, 20, 20)


def tune_gc() -> None:
    """Set the node process's GC thresholds (``GC_THRESHOLD``). Garbage cycles are collected as
    before, only in larger batches; results do not depend on it (nothing on the hash path
    observes the collector)."""
    gc.set_threshold(*GC_THRESHOLD)


def open_store(home: Path, keep_recent: int) -> MerkleStore:
    """HOME/data/app.db; StartError naming it and the way out when it cannot be opened (a file
    that is not SQLite, a folder: tracebacks before)."""
    path = home / "data" / "app.db"
    try:
        return MerkleStore(path, keep_recent=keep_recent)
    except (StoreError, sqlite3.DatabaseError) as e:
        raise StartError(
            f"cannot open the app's state {path} ({e}): if it is damaged, move it away (`mv "
            f"{path} {path}.bad`) and start again: cometbft replays its blocks into a new one"
        ) from None


def cometbft_failure(log_path: Path, start: int) -> str:
    """The reason cometbft gave for exiting, from what it logged since offset ``start`` (its
    ``ERROR: ...`` line, else its last error line), or "" when there is none."""
    try:
        with open(log_path, "rb") as f:
            size = f.seek(0, 2)
            f.seek(max(start, size - 65536))  # the tail only: a long run logged gigabytes
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        if line.startswith("ERROR:"):
            return line.removeprefix("ERROR:").strip()[:500]
    for line in reversed(lines):
        if line.startswith("E[") or "panic:" in line:
            return line.strip()[:500]
    return ""


def read_cometbft_config(home: Path) -> dict[str, str]:
    """The RPC and P2P listen addresses of HOME/config/config.toml; StartError naming the file
    when it is not TOML or lacks them (a traceback before)."""
    path = home / "config" / "config.toml"
    try:
        ctoml = tomllib.loads(path.read_text())
        addrs = {"rpc": str(ctoml["rpc"]["laddr"]), "p2p": str(ctoml["p2p"]["laddr"])}
        for a in addrs.values():
            _port_of(a)
    except OSError as e:
        raise StartError(f"cannot read {path}: {e.strerror}") from None
    except (
        tomllib.TOMLDecodeError,
        KeyError,
        TypeError,
        ValueError,
        IndexError,
        RecursionError,
    ) as e:
        raise StartError(
            f"{path} is not a usable cometbft config ({type(e).__name__}: {e}); [rpc] laddr and "
            "[p2p] laddr must be tcp://HOST:PORT: fix it, or compare with a fresh `loconet init`"
        ) from None
    return addrs


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGKILL when the thread that forked it ends
    (Linux ``prctl(PR_SET_PDEATHSIG)``), or None where there is no such call. libc's ``prctl``
    is looked up here, in the parent: the child only calls it (no import or allocation of note
    between fork and exec). A parent that died before the call is seen by ``getppid`` and the
    child kills itself."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1  # <linux/prctl.h>
    parent = os.getpid()
    sigkill = int(signal.SIGKILL)

    def preexec() -> None:
        prctl(pr_set_pdeathsig, sigkill, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), sigkill)

    return preexec


def abci_gate() -> Gate:
    """``CometbftOnly`` where the peer of a connection can be identified (Linux: SO_PEERCRED,
    /proc), else the ``OneClient`` rule of ``loconet abci``."""
    if sys.platform.startswith("linux") and os.path.isdir("/proc/self/fd"):
        return CometbftOnly()
    return OneClient()


def check_port_free(port: int, what: str) -> None:
    if not is_port_free(port):
        raise StartError(
            f"port {port} ({what}) is already in use: stop the process using it "
            f"(`ss -ltnp 'sport = :{port}'`) or change it in the node's config"
        )


async def run_node(home: Path, log_console: bool | None = None) -> int:
    """Run the node until a signal or either side stops. ``log_console``: also show cometbft's
    log on stdout (default: when stdout is a terminal); it is always in HOME/cometbft.log."""
    home = home.resolve()
    if not (home / "config" / "genesis.json").exists():
        raise StartError(f"{home} is not a loconet home: run `loconet init --home {home}` first")
    if genesis_unfinished(home / "config" / "genesis.json"):
        # the app halted at InitChain ("staking genesis bonds no validator"), which said not why
        raise StartError(unfinished_init_message(home))
    binary = cometbft_binary()
    cfg = AppConfig.load(home)
    laddr = read_cometbft_config(home)
    lock_fd = lock_home(home)
    tune_gc()
    try:
        return await _run_locked(home, binary, cfg, laddr, log_console)
    finally:
        os.close(lock_fd)


async def _run_locked(
    home: Path, binary: str, cfg: AppConfig, laddr: dict[str, str], log_console: bool | None
) -> int:
    for addr, what in ((laddr["rpc"], "cometbft RPC"), (laddr["p2p"], "cometbft P2P")):
        check_port_free(_port_of(addr), what)
    metrics_addr = cfg.metrics_listen(home)
    metrics = _app_metrics(home, metrics_addr)
    store = open_store(home, cfg.keep_recent)
    try:
        app = cfg.application(home, store, metrics=metrics)
    except ValueError as e:
        store.close()
        raise StartError(str(e)) from None
    gate = abci_gate()
    server = ABCIServer(app, cfg.abci_address, gate=gate)
    try:
        await server.start()
    except SocketDirError as e:
        store.close()
        raise StartError(str(e)) from None
    except OSError as e:
        store.close()
        raise StartError(
            f"cannot listen on {cfg.abci_address} (ABCI): {e.strerror}; is another node running?"
        ) from None
    log.info("ABCI server on %s (height %d)", cfg.abci_address, store.height)
    metrics_server = _serve_app_metrics(metrics, metrics_addr)
    # the log file lives as long as the child; both calls return at once (no need for a thread)
    logf = open(home / "cometbft.log", "ab")  # noqa: ASYNC230, SIM115
    log_start = logf.tell()
    # here, in the coroutine, on the event loop's thread (module docstring): never in a pool
    # thread, whose end would SIGKILL cometbft
    proc, pump = _start_cometbft(home, binary, cfg, gate, logf, log_console)
    print(
        f"node started: cometbft pid {proc.pid}, log {home / 'cometbft.log'}, RPC "
        f"{laddr['rpc']}"
        + (f", metrics http://{metrics_addr}/metrics" if metrics_server is not None else ""),
        flush=True,
    )
    rc = await _until_either_stops(home, proc, server, log_start)
    await server.stop()
    if app.snapshots is not None:
        # abandons a snapshot being written (its tmp folder is dropped at the next start): a stop
        # never waits for snapshots
        app.snapshots.close()
    store.close()
    if pump is not None:
        pump.join(5)
    logf.close()
    if metrics_server is not None:
        metrics_server.shutdown()
    print("node stopped", flush=True)
    return rc


def _app_metrics(home: Path, metrics_addr: str | None) -> Any:
    """The app's metrics (node/metrics.py) when app.toml turns them on and their port is free;
    None otherwise (a port in use is warned about: metrics are not worth refusing to run the
    node for). node.metrics imports the whole app: not at the top of this module, which
    ``loconet --help`` loads (node/cli/main.py)."""
    if not metrics_addr:
        return None
    from node.metrics import NodeMetrics, parse_listen  # lazy: imports abci_app.app (0.2 s)

    if is_port_free(parse_listen(metrics_addr)[1]):
        return NodeMetrics(CollectorRegistry())
    print(
        f"warning: app metrics off: {metrics_addr} is in use; set metrics_address in "
        f'{home / "config" / "app.toml"} ("" turns them off)',
        file=sys.stderr,
        flush=True,
    )
    return None


def _serve_app_metrics(metrics: Any, metrics_addr: str | None) -> Any:
    """The /metrics HTTP server (None without metrics, or when it cannot listen: a warning)."""
    if metrics is None or not metrics_addr:
        return None
    from node.metrics import serve as serve_metrics  # lazy: as in _app_metrics

    try:
        server, _ = serve_metrics(metrics.registry, metrics_addr)
    except OSError as e:
        print(
            f"warning: app metrics off: cannot listen on {metrics_addr} ({e.strerror})",
            file=sys.stderr,
            flush=True,
        )
        return None
    log.info("app metrics on http://%s/metrics", metrics_addr)
    return server


def _start_cometbft(
    home: Path,
    binary: str,
    cfg: AppConfig,
    gate: Gate,
    logf: IO[bytes],
    log_console: bool | None,
) -> tuple[subprocess.Popen[bytes], threading.Thread | None]:
    """Start cometbft (dying with this thread: ``die_with_parent``) with its log in ``logf``,
    and on the console too when ``log_console`` (default: stdout is a terminal) through a
    thread copying its lines; (the process, that thread or None). Call it on the event loop's
    thread (module docstring)."""
    echo = sys.stdout.isatty() if log_console is None else log_console
    proc = subprocess.Popen(
        [binary, "start", "--home", str(home), "--proxy_app", cfg.abci_address],
        stdout=subprocess.PIPE if echo else logf,
        stderr=subprocess.STDOUT,
        start_new_session=False,
        preexec_fn=die_with_parent(),  # noqa: PLW1509 (module docstring: on the main thread)
    )
    if isinstance(gate, CometbftOnly):
        gate.pid = proc.pid  # from now on its connections, and only those, are admitted
    if not echo:
        return proc, None

    def copy_lines() -> None:  # the log file and the console both get every line
        assert proc.stdout is not None
        for line in proc.stdout:
            logf.write(line)
            logf.flush()
            sys.stdout.buffer.write(line)
            sys.stdout.flush()

    pump = threading.Thread(target=copy_lines, name="cometbft-log", daemon=True)
    pump.start()
    return proc, pump


async def _until_either_stops(
    home: Path, proc: subprocess.Popen[bytes], server: ABCIServer, log_start: int
) -> int:
    """Wait for SIGINT/SIGTERM, cometbft's exit or the ABCI server's end; say why when it was
    not a signal, then stop cometbft (SIGTERM, SIGKILL after 15 s) and the server's loop. The
    node's exit status."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    serve = asyncio.create_task(server.serve_forever())
    comet = asyncio.create_task(asyncio.to_thread(proc.wait))
    stopper = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait({serve, comet, stopper}, return_when=asyncio.FIRST_COMPLETED)
    rc = 0
    if comet in done:
        rc = proc.returncode or 1
        why = cometbft_failure(home / "cometbft.log", log_start)
        print(
            f"cometbft exited with status {proc.returncode}"
            + (f": {why}" if why else "")
            + f"; see {home / 'cometbft.log'}",
            file=sys.stderr,
        )
    elif serve in done and server.fatal_error is not None:
        rc = 1
        print(f"state machine halted: {server.fatal_error}", file=sys.stderr)
    if proc.poll() is None:
        proc.terminate()
        try:
            await asyncio.wait_for(asyncio.to_thread(proc.wait), 15)
        except TimeoutError:
            proc.kill()
            proc.wait()
    serve.cancel()
    stopper.cancel()
    return rc
