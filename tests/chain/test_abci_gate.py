"""Who may open an ABCI connection (issue 28, items 3 and 6c; abci_app/server.py, *Who may speak
ABCI*): the gates against connections from other real processes, over both transports, and a
server stopped with a connection still open (no CancelledError traceback)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from abci_app.app import Application
from abci_app.pb import abci
from abci_app.server import ABCIServer, CometbftOnly, FrameReader, Gate, OneClient, frame
from abci_app.store import MerkleStore

ROOT = Path(__file__).resolve().parents[2]

# a separate process: connects, sends Echo + Flush, prints "answered" or "closed", then keeps
# its socket open until its stdin closes
PEER = r"""
import socket, sys
from abci_app.pb import abci
from abci_app.server import frame
addr = sys.argv[1]
if addr.startswith("unix://"):
    s = socket.socket(socket.AF_UNIX)
    s.connect(addr.removeprefix("unix://"))
else:
    host, port = addr.removeprefix("tcp://").rsplit(":", 1)
    s = socket.create_connection((host, int(port)))
try:
    s.sendall(frame(abci.Request(echo=abci.RequestEcho(message="hi")))
              + frame(abci.Request(flush=abci.RequestFlush())))
    s.settimeout(20)
    print("answered" if s.recv(65536) else "closed", flush=True)
except OSError:
    print("closed", flush=True)
sys.stdin.read()
"""


@contextlib.contextmanager
def serving(address: str, gate: Gate | None) -> Iterator[ABCIServer]:
    """An ABCIServer with ``gate`` on ``address``, its event loop in a thread."""
    store = MerkleStore(None)
    srv = ABCIServer(Application(store), address, gate=gate)
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    stop: list[asyncio.Event] = []

    async def main() -> None:
        stop.append(asyncio.Event())
        await srv.start()
        ready.set()
        serve = asyncio.create_task(srv.serve_forever())
        await stop[0].wait()
        serve.cancel()
        await srv.stop()

    t = threading.Thread(target=lambda: loop.run_until_complete(main()), daemon=True)
    t.start()
    assert ready.wait(10)
    try:
        yield srv
    finally:
        loop.call_soon_threadsafe(stop[0].set)
        t.join(10)
        loop.close()
        store.close()


def address_of(srv: ABCIServer, transport: str) -> str:
    return srv.address if transport == "unix" else f"tcp://127.0.0.1:{srv.bound_port()}"


def listen_address(tmp_path: Path, transport: str) -> str:
    return f"unix://{tmp_path}/s/abci.sock" if transport == "unix" else "tcp://127.0.0.1:0"


def connect(address: str) -> socket.socket:
    if address.startswith("unix://"):
        s = socket.socket(socket.AF_UNIX)
        s.connect(address.removeprefix("unix://"))
    else:
        host, port = address.removeprefix("tcp://").rsplit(":", 1)
        s = socket.create_connection((host, int(port)))
    s.settimeout(20)
    return s


def echo(s: socket.socket) -> str:
    """'answered' when the server answers an Echo on ``s``, 'closed' when it closed it."""
    try:
        s.sendall(
            frame(abci.Request(echo=abci.RequestEcho(message="hi")))
            + frame(abci.Request(flush=abci.RequestFlush()))
        )
        frames = FrameReader()
        got: list[bytes] = []
        while len(got) < 2:
            data = s.recv(65536)
            if not data:
                return "closed"
            got += frames.feed(data)
    except OSError:
        return "closed"
    assert abci.Response.FromString(got[0]).echo.message == "hi"
    return "answered"


class Peer:
    """A connection from another process (PEER)."""

    def __init__(self, address: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", PEER, address],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def outcome(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(10)
        self.proc.stdout.close()


def wait_until(cond, what: str, timeout: float = 10) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.mark.parametrize("transport", ["unix", "tcp"])
def test_extra_abci_connection_from_another_process_is_refused_by_the_cometbft_gate(
    tmp_path: Path, transport: str, caplog: pytest.LogCaptureFixture
) -> None:
    gate = CometbftOnly()
    with serving(listen_address(tmp_path, transport), gate) as srv:
        address = address_of(srv, transport)
        # before cometbft is started, nobody is admitted
        with connect(address) as s:
            assert echo(s) == "closed"
        friend = Peer(address)  # plays cometbft: its pid is the gate's
        gate.pid = friend.proc.pid
        try:
            assert friend.outcome() == "answered"
            intruder = Peer(address)  # another process, as the same user
            try:
                assert intruder.outcome() == "closed"
            finally:
                intruder.close()
            with connect(address) as s:  # this process is not cometbft either
                assert echo(s) == "closed"
        finally:
            friend.close()
    refused = [r for r in caplog.records if "ABCI connection refused" in r.getMessage()]
    assert len(refused) == 3 and all(r.levelno == logging.WARNING for r in refused)
    assert not [r for r in caplog.records if r.exc_info], "a refusal is one line, no traceback"


@pytest.mark.parametrize("transport", ["unix", "tcp"])
def test_connection_of_a_process_cometbft_started_is_admitted(
    tmp_path: Path, transport: str
) -> None:
    """``$LOCONET_COMETBFT`` may be a wrapper that runs cometbft as its child (no ``exec``)."""
    gate = CometbftOnly()
    with serving(listen_address(tmp_path, transport), gate) as srv:
        address = address_of(srv, transport)
        wrapper = subprocess.Popen(  # the shell stays: `; exit` keeps it from exec'ing python
            [
                "sh",
                "-c",
                'exec 3<&0; "$0" -c "$1" "$2" <&3; exit $?',
                sys.executable,
                PEER,
                address,
            ],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        gate.pid = wrapper.pid
        try:
            assert wrapper.stdout is not None
            assert wrapper.stdout.readline().strip() == "answered"
        finally:
            assert wrapper.stdin is not None and wrapper.stdout is not None
            wrapper.stdin.close()
            wrapper.wait(10)
            wrapper.stdout.close()


@pytest.mark.parametrize("transport", ["unix", "tcp"])
def test_extra_abci_connection_is_refused_by_the_standalone_gate(
    tmp_path: Path, transport: str
) -> None:
    """``loconet abci``: one client's connections at a time, at most four (what cometbft opens);
    the next client is admitted once they have all closed (a restarted cometbft)."""
    with serving(listen_address(tmp_path, transport), OneClient()) as srv:
        address = address_of(srv, transport)
        mine = [connect(address) for _ in range(4)]
        try:
            assert [echo(s) for s in mine] == ["answered"] * 4
            with connect(address) as fifth:
                assert echo(fifth) == "closed"
            mine.pop().close()
            wait_until(lambda: srv.connections == 3, "the closed connection to be released")
            other = Peer(address)  # another process while this one holds the connections
            try:
                assert other.outcome() == "closed"
            finally:
                other.close()
        finally:
            for s in mine:
                s.close()
        wait_until(lambda: srv.connections == 0, "every connection to be released")
        later = Peer(address)  # all closed: the next client is admitted
        try:
            assert later.outcome() == "answered"
        finally:
            later.close()


def test_stopping_with_an_extra_abci_connection_open_logs_no_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A client that never closes, open while the node stops: its handler used to be cancelled
    by the loop's shutdown and asyncio logged a CancelledError traceback."""
    store = MerkleStore(None)
    srv = ABCIServer(Application(store), f"unix://{tmp_path}/abci.sock")

    async def main() -> None:
        await srv.start()
        _, w = await asyncio.open_unix_connection(str(tmp_path / "abci.sock"))
        for _ in range(100):  # until the server runs its handler
            if srv.connections:
                break
            await asyncio.sleep(0.01)
        assert srv.connections == 1
        # the client stays open: asyncio.run cancels the handler, still waiting for a request,
        # when main returns
        assert not w.is_closing()

    with caplog.at_level(logging.DEBUG):
        asyncio.run(main())
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR], [
        r.getMessage() for r in caplog.records
    ]

    async def stopped() -> int:
        await srv.start()
        reader, _ = await asyncio.open_unix_connection(str(tmp_path / "abci.sock"))
        for _ in range(100):
            if srv.connections:
                break
            await asyncio.sleep(0.01)
        await srv.stop()  # closes the open connection and lets its handler end
        assert await asyncio.wait_for(reader.read(), 5) == b""
        return srv.connections

    caplog.clear()
    with caplog.at_level(logging.DEBUG):
        assert asyncio.run(stopped()) == 0
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    store.close()
