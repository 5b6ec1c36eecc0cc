"""ABCI 2.0 socket server for CometBFT v0.38.

Framing (v0.38, ``abci/types/messages.go``): every Request/Response is a protobuf message
preceded by its length as an unsigned varint (v0.34 used a zigzag *signed* varint; this server
speaks v0.38 only). CometBFT opens four connections (consensus, mempool, query, snapshot) and
pipelines requests on each; this server answers every request on a connection in order and
writes buffered responses out when it sees a Flush (which it always answers) or when the
buffer grows large. All four connections share one Application; handlers run one at a time on
the event loop, so they never interleave. A connection lets the others run every YIELD_EVERY
requests, so CometBFT's consensus connection (PrepareProposal, FinalizeBlock, ...) never waits
behind a flood of pipelined CheckTx or a recheck of the whole mempool: at most a few hundred of
them (``tests/chain/test_abci_socket.py``, a PrepareProposal during 3,000 CheckTx).

Who may speak ABCI. A role is bound to the connections cometbft opened, not to whichever
connection spoke first: the server is given a *gate* that admits or refuses each connection as
it is accepted, before a byte of it is read. A refused connection is closed with one WARNING line
(``ABCI connection refused: ...``; past 5 a minute, one line a minute counts the rest); it
never reaches the Application, claims no role and never stops the node.

=================== ======================================================================
gate                admits
=================== ======================================================================
``CometbftOnly``    ``loconet start``: only the connections of the cometbft process this node
                    started (its pid, set once it runs), or of a process it started (a
                    ``$LOCONET_COMETBFT`` wrapper that does not ``exec``). Unix socket: the
                    peer's pid from ``SO_PEERCRED``. TCP: the peer socket's inode, found in
                    ``/proc/net/tcp{,6}`` by its address pair, must be an open fd of
                    ``/proc/<cometbft pid>/fd``. Everything else is refused, whoever runs it.
                    Linux only: without ``SO_PEERCRED`` and /proc, ``start`` uses ``OneClient``.
``OneClient``       ``loconet abci`` (cometbft started elsewhere, so its pid is unknown): the
                    connections of one client at a time, at most the four cometbft opens. The
                    client is the peer's process when it can be found (``SO_PEERCRED``; for
                    loopback TCP the process among those this user may inspect that holds the
                    peer socket), else the peer's host. A connection from another client, or a
                    fifth one, is refused until all of the client's connections close (a
                    restarted cometbft reconnects normally). Its limit: a process that connects
                    *before* cometbft holds the slot, and cometbft's connections are refused
                    (cometbft then fails to start, visibly, instead of a running node stopping).
``None``            (tests, benchmarks) any connection.
=================== ======================================================================

Within the admitted connections every connection gets its role from the first method it sends
(``echo``/``flush`` are allowed everywhere and decide nothing). CometBFT's socket client treats
a ResponseException as fatal (it stops the client and the node exits), so nothing a peer can
send through RPC may ever be answered with one:

=========== ============================================================== ==================
role        methods                                                        live connections
=========== ============================================================== ==================
query       info, query                                                    any number
mempool     check_tx                                                       one
consensus   init_chain, prepare/process_proposal, extend_vote,             one
            verify_vote_extension, finalize_block, commit
snapshot    list/offer_snapshot, load/apply_snapshot_chunk                 one
=========== ============================================================== ==================

A method outside the connection's role, or a role already held by another live connection
(a fifth connection sending Commit, say), is refused: that connection gets a ResponseException
and is closed, and nothing reaches the Application. The role is released when its connection
closes, so a restarted cometbft reconnects normally.

Bad bytes never reach a traceback: a frame that is not a valid ``Request`` (e.g. a Query whose
path is not UTF-8, which protobuf refuses to parse) is answered on the query and mempool paths
with an ordinary error response (``query`` code 3, ``tx`` code 2) found from the wire; any other
undecodable frame, a bad length prefix or a frame over the size limit closes only that
connection, with one warning line. A handler that raises on the query or mempool path is
answered with an error response too (``query``/``loconet`` code 4), never an exception.

A handler that raises on the consensus path (InitChain, FinalizeBlock, Commit) means the state
machine cannot go on safely: the server answers with ResponseException, logs the error and stops
with exit status 1 (a halted node restarts from its last commit).

The default listen address of a node is a Unix socket in its home (directory mode 0700), so
only the node's own user can open an ABCI connection; TCP is used only when configured. The
socket's folder must be private (``private_socket_dir``): created 0700 when missing, and the
server refuses to start when it is a symbolic link or not a folder, belongs to another user, or
is open to the group or others (a home path too long for a socket puts it in
``/tmp/loconet-UID/``, which another user could have made first).

Stopping the server closes the connections still open and lets their handlers end; a handler
cancelled at shutdown ends quietly (no ``CancelledError`` traceback).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import stat
import struct
import sys
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from google.protobuf.message import DecodeError

from abci_app.encoding import encode_uvarint
from abci_app.errors import GenesisError
from abci_app.pb import abci

log = logging.getLogger("loconet.abci")

# the largest request is InitChain, whose app_state is the genesis: a million bank balances is
# 71 MB of JSON (benchmarks/RESULTS.md, P1 with a large genesis); 96 MiB carries ~1.35M
MAX_MESSAGE_BYTES = 96 * 1024 * 1024
FATAL = frozenset({"init_chain", "finalize_block", "commit"})

# method -> role (module docstring); echo and flush belong to every role
ROLE_OF = {
    "info": "query", "query": "query",
    "check_tx": "mempool",
    "init_chain": "consensus", "prepare_proposal": "consensus", "process_proposal": "consensus",
    "extend_vote": "consensus", "verify_vote_extension": "consensus",
    "finalize_block": "consensus", "commit": "consensus",
    "list_snapshots": "snapshot", "offer_snapshot": "snapshot",
    "load_snapshot_chunk": "snapshot", "apply_snapshot_chunk": "snapshot",
}  # fmt: skip
EXCLUSIVE_ROLES = frozenset({"mempool", "consensus", "snapshot"})
YIELD_EVERY = 64  # requests answered before the connection lets the others run

# stable codes of the error responses the server itself produces (querying.py lists codes 1-2)
CODE_QUERY_UNDECODABLE = 3  # codespace "query": the request frame is not a valid RequestQuery
CODE_INTERNAL = 4  # codespace "query" / "loconet": the handler raised; the node goes on
CODE_TX_UNDECODABLE = 2  # codespace "tx": same code as ErrTxDecode


def _error_response(kind: str, code: int, log_msg: str) -> abci.Response | None:
    """An ordinary (non-exception) error response for the paths a peer can reach over RPC."""
    if kind == "query":
        return abci.Response(query=abci.ResponseQuery(code=code, codespace="query", log=log_msg))
    if kind == "check_tx":
        space = "tx" if code == CODE_TX_UNDECODABLE else "loconet"
        return abci.Response(check_tx=abci.ResponseCheckTx(code=code, codespace=space, log=log_msg))
    return None


def request_kind_from_wire(raw: bytes) -> str | None:
    """The oneof field a Request frame sets, read from the wire without decoding it (protobuf
    refuses a whole frame when one string inside is not UTF-8). None when the bytes are not a
    sequence of well-formed top-level fields. The last oneof field wins, as in protobuf."""
    fields = abci.Request.DESCRIPTOR.fields_by_number
    pos, kind = 0, None
    try:
        while pos < len(raw):
            r = decode_uvarint(raw, pos)
            if r is None:
                return None
            tag, pos = r
            number, wire = tag >> 3, tag & 7
            if wire == 0:
                r = decode_uvarint(raw, pos)
                if r is None:
                    return None
                pos = r[1]
            elif wire == 2:
                r = decode_uvarint(raw, pos)
                if r is None or r[1] + r[0] > len(raw):
                    return None
                pos = r[1] + r[0]
                if number in fields:
                    kind = fields[number].name
            elif wire in (1, 5):
                pos += 8 if wire == 1 else 4
                if pos > len(raw):
                    return None
            else:
                return None
    except FramingError:
        return None
    return kind


class FramingError(Exception):
    pass


def decode_uvarint(buf: bytes | bytearray, pos: int) -> tuple[int, int] | None:
    """Returns (value, new position) or None when the buffer ends inside the varint."""
    shift = result = 0
    while pos < len(buf):
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise FramingError("varint longer than 10 bytes")
    return None


def frame(msg: Any) -> bytes:
    data = msg.SerializeToString()
    return encode_uvarint(len(data)) + data


class FrameReader:
    """Splits a byte stream into length-prefixed messages."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        out, pos = [], 0
        while True:
            r = decode_uvarint(self._buf, pos)
            if r is None:
                break
            n, start = r
            if n > MAX_MESSAGE_BYTES:
                raise FramingError(f"message of {n} bytes exceeds the {MAX_MESSAGE_BYTES} limit")
            if start + n > len(self._buf):
                break
            out.append(bytes(self._buf[start : start + n]))
            pos = start + n
        del self._buf[:pos]
        return out


# Request oneof name -> (Application method, Response oneof name)
def _dispatch_table(app: Any) -> dict[str, Callable[[Any], Any]]:
    names = [
        "info",
        "init_chain",
        "query",
        "check_tx",
        "commit",
        "list_snapshots",
        "offer_snapshot",
        "load_snapshot_chunk",
        "apply_snapshot_chunk",
        "prepare_proposal",
        "process_proposal",
        "extend_vote",
        "verify_vote_extension",
        "finalize_block",
    ]
    return {n: getattr(app, n) for n in names}


async def _close_gracefully(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Sends what is buffered, then half-closes and discards what the peer still sends (briefly),
    so that the peer reads our last answer instead of a connection reset."""
    await writer.drain()
    if writer.can_write_eof():
        writer.write_eof()
    try:
        async with asyncio.timeout(2):
            while await reader.read(1 << 16):
                pass
    except (TimeoutError, ConnectionError):
        pass


class SocketDirError(Exception):
    """The folder of the ABCI Unix socket is not private to this user; the message names the fix."""


def private_socket_dir(path: str) -> None:
    """Make sure ``path``, the folder of a Unix socket, is this user's alone: created with mode
    0700 when missing; SocketDirError when it is a symbolic link or not a folder, belongs to
    another user, or is open to the group or others (another user could then replace or reach
    the socket)."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except FileExistsError:  # a file, or a dangling symlink, in the way: said below
        pass
    except OSError as e:
        raise SocketDirError(f"cannot create the ABCI socket folder {path}: {e.strerror}") from None
    st = os.lstat(path)
    mode = stat.S_IMODE(st.st_mode)
    problem = fix = ""
    if stat.S_ISLNK(st.st_mode):
        problem, fix = "is a symbolic link", f"remove the link (`rm {path}`) and start again"
    elif not stat.S_ISDIR(st.st_mode):
        problem, fix = "is not a folder", f"move it away (`mv {path} {path}.bad`) and start again"
    elif st.st_uid != os.geteuid():
        problem = f"belongs to another user (uid {st.st_uid})"
        fix = (
            "use a home whose path is shorter (its socket is then HOME/data/abci.sock) or set "
            "abci_address in HOME/config/app.toml to a socket in a folder of yours"
        )
    elif mode & 0o077:
        problem, fix = f"is open to other users (mode {mode:04o})", f"`chmod 700 {path}`"
    if problem:
        raise SocketDirError(
            f"the ABCI socket folder {path} {problem}: another user could reach or replace the "
            f"node's ABCI socket; {fix}"
        )


# --- who may open an ABCI connection (module docstring, *Who may speak ABCI*) ----------------


def unix_peer(sock: Any) -> tuple[int, int] | None:
    """(pid, uid) of the process at the other end of a Unix socket (Linux ``SO_PEERCRED``), or
    None where the platform cannot say."""
    opt = getattr(socket, "SO_PEERCRED", None)
    if opt is None:
        return None
    try:
        pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, opt, 12))
    except OSError:
        return None
    return (pid, uid) if pid > 0 else None


def _hex_words(packed: bytes) -> str:
    """An address as /proc/net/tcp{,6} prints it: each 32-bit word in host byte order, %08X."""
    return "".join(
        f"{int.from_bytes(packed[i : i + 4], sys.byteorder):08X}" for i in range(0, len(packed), 4)
    )


def _proc_net_forms(ip: str) -> set[str]:
    """The forms ``ip`` may take in /proc/net/tcp (IPv4) and /proc/net/tcp6 (IPv6, and IPv4 as
    ``::ffff:a.b.c.d`` on a dual-stack socket)."""
    ip = ip.split("%", 1)[0]
    mapped = b"\0" * 10 + b"\xff\xff"
    try:
        v4 = socket.inet_pton(socket.AF_INET, ip)
        return {_hex_words(v4), _hex_words(mapped + v4)}
    except OSError:
        pass
    try:
        v6 = socket.inet_pton(socket.AF_INET6, ip)
    except OSError:
        return set()
    forms = {_hex_words(v6)}
    if v6.startswith(mapped):
        forms.add(_hex_words(v6[12:]))
    return forms


def tcp_peer_inode(sock: Any) -> int | None:
    """The inode of the socket at the other end of a local TCP connection: the row of
    /proc/net/tcp{,6} whose local address is our peer's and whose remote address is ours. None
    when there is none (a remote peer, or it closed already)."""
    try:
        ours, theirs = sock.getsockname(), sock.getpeername()
    except OSError:
        return None
    local = {f"{h}:{theirs[1]:04X}" for h in _proc_net_forms(theirs[0])}
    remote = {f"{h}:{ours[1]:04X}" for h in _proc_net_forms(ours[0])}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                for line in f:
                    fields = line.split()
                    if len(fields) > 9 and fields[1] in local and fields[2] in remote:
                        inode = int(fields[9])
                        return inode or None
        except (OSError, ValueError):
            continue
    return None


def holds_socket(pid: int, inode: int) -> bool:
    """Whether process ``pid`` has socket ``inode`` open (one of its /proc/PID/fd links)."""
    fd_dir, target = f"/proc/{pid}/fd", f"socket:[{inode}]"
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"{fd_dir}/{fd}") == target:
                return True
        except OSError:
            continue
    return False


def peer_pid(sock: Any, candidates: Iterable[int] | None = None) -> int | None:
    """The process at the other end of a local connection: ``SO_PEERCRED`` on a Unix socket; for
    TCP the one of ``candidates`` (default: every process this user may inspect) holding the
    peer socket. None when it cannot be found."""
    if sock.family == socket.AF_UNIX:
        peer = unix_peer(sock)
        return None if peer is None else peer[0]
    inode = tcp_peer_inode(sock)
    if inode is None:
        return None
    if candidates is None:
        try:
            candidates = [int(p) for p in os.listdir("/proc") if p.isdigit()]
        except OSError:
            return None
    for pid in candidates:
        if holds_socket(pid, inode):
            return pid
    return None


def describe_peer(sock: Any) -> str:
    """Who is at the other end, for a log line."""
    try:
        if sock.family == socket.AF_UNIX:
            peer = unix_peer(sock)
            return "a Unix peer" if peer is None else f"pid {peer[0]} (uid {peer[1]})"
        host, port = sock.getpeername()[:2]
        return f"{host}:{port}"
    except OSError:
        return "a peer that left"


class Gate(Protocol):
    """Admits or refuses each ABCI connection as it is accepted (module docstring)."""

    def admit(self, conn: object, sock: Any) -> str | None:
        """None to admit ``conn`` (the socket ``sock``), else why it is refused."""
        ...

    def release(self, conn: object) -> None:
        """``conn``, once admitted, has closed."""
        ...


def _parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        return int(stat.rsplit(")", 1)[1].split()[1])  # pid (comm) state ppid: comm may hold ")"
    except (OSError, ValueError, IndexError):
        return None


def _children(pid: int) -> list[int] | None:
    """The children of ``pid`` from /proc/PID/task/*/children (a few small reads), or None when
    the kernel does not provide those files."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []  # gone
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            continue
    return out


def descendants(pid: int) -> list[int]:
    """The processes ``pid`` started, and theirs (empty when it started none): from the task
    children files when the kernel has them (cheap: a refused connection costs a few reads),
    else from every /proc/PID/stat."""
    children: dict[int, list[int]] = {}
    first = _children(pid)
    if first is not None:
        out: list[int] = []
        todo = list(first)
        while todo and len(out) < 4096:
            p = todo.pop()
            out.append(p)
            todo += _children(p) or []
        return out
    try:
        entries = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []
    for p in entries:
        parent = _parent_of(p)
        if parent is not None:
            children.setdefault(parent, []).append(p)
    out = []
    todo = list(children.get(pid, []))
    while todo and len(out) < 4096:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


class CometbftOnly:
    """``loconet start``: only the connections of the cometbft process with pid ``pid`` (None
    until the node has started it: every connection is refused until then), or of a process
    it started (``$LOCONET_COMETBFT`` may be a wrapper script that runs cometbft without
    ``exec``)."""

    def __init__(self, pid: int | None = None) -> None:
        self.pid = pid

    def admit(self, conn: object, sock: Any) -> str | None:
        if self.pid is None:
            return f"cometbft is not started yet; {describe_peer(sock)} is not cometbft"
        peer = peer_pid(sock, [self.pid])
        if peer == self.pid:
            return None
        if sock.family == socket.AF_UNIX:
            ancestor, hops = peer, 0
            while ancestor is not None and ancestor > 1 and hops < 64:
                ancestor, hops = _parent_of(ancestor), hops + 1
                if ancestor == self.pid:
                    return None
        else:
            kids = descendants(self.pid)  # only when cometbft itself does not hold the socket
            if kids and peer_pid(sock, kids) is not None:
                return None
        return (
            f"{describe_peer(sock)} is not the node's cometbft (pid {self.pid}); only its "
            "connections may speak ABCI"
        )

    def release(self, conn: object) -> None:
        pass


class OneClient:
    """``loconet abci`` (cometbft started elsewhere): the connections of one client at a time,
    at most ``LIMIT`` (the four cometbft opens); the client is the peer's process when it can be
    found, else the peer's host."""

    LIMIT = 4

    def __init__(self) -> None:
        self.live: dict[object, str] = {}  # admitted connection -> its client

    @staticmethod
    def client_of(sock: Any) -> str:
        pid = peer_pid(sock) if sock.family == socket.AF_UNIX or _is_loopback(sock) else None
        if pid is not None:
            return f"pid {pid}"
        if sock.family == socket.AF_UNIX:
            return "a Unix peer"
        try:
            return f"host {sock.getpeername()[0]}"
        except OSError:
            return "a peer that left"

    def admit(self, conn: object, sock: Any) -> str | None:
        if len(self.live) >= self.LIMIT:  # checked first: refusing costs no /proc scan
            return (
                f"{len(self.live)} ABCI connections are open already (cometbft opens "
                f"{self.LIMIT}); {describe_peer(sock)} must wait until they close"
            )
        who = self.client_of(sock)
        holders = set(self.live.values())
        if holders and who not in holders:
            return (
                f"the ABCI connections belong to {holders.pop()}; {who} must wait until they close"
            )
        self.live[conn] = who
        return None

    def release(self, conn: object) -> None:
        self.live.pop(conn, None)


def _is_loopback(sock: Any) -> bool:
    try:
        host = sock.getpeername()[0].split("%", 1)[0]
    except OSError:
        return False
    return host == "::1" or host.startswith(("127.", "::ffff:127."))


class RefusalLog:
    """One WARNING line per refused connection, at most ``BURST`` lines a ``WINDOW_S`` window;
    past that, one line when the window ends says how many more were refused (a local
    connect loop would otherwise flood the log; every refusal is still counted)."""

    BURST = 5
    WINDOW_S = 60

    def __init__(self) -> None:
        self.total = 0
        self._window_start: int | None = None  # whole seconds of the event loop's clock
        self._in_window = 0
        self._suppressed = 0

    def note(self, why: str, now: int) -> None:
        self.total += 1
        if self._window_start is None or now - self._window_start >= self.WINDOW_S:
            if self._suppressed:
                log.warning(
                    "ABCI connection refused %d more time(s) in the last %d s (not logged "
                    "one by one)",
                    self._suppressed,
                    now - (self._window_start or 0),
                )
            self._window_start, self._in_window, self._suppressed = now, 0, 0
        if self._in_window < self.BURST:
            self._in_window += 1
            log.warning("ABCI connection refused: %s", why)
        else:
            self._suppressed += 1


class _Conn:
    """One client connection: its role, fixed by the first role-bearing method it sends."""

    __slots__ = ("role",)

    def __init__(self) -> None:
        self.role: str | None = None


class ABCIServer:
    def __init__(
        self, app: Any, address: str = "tcp://127.0.0.1:26658", gate: Gate | None = None
    ) -> None:
        self.app = app
        self.address = address
        self.gate = gate  # who may connect (module docstring); None: anyone
        self._handlers = _dispatch_table(app)
        self._server: asyncio.AbstractServer | None = None
        self.fatal_error: BaseException | None = None
        self.connections = 0
        self._roles: dict[str, _Conn] = {}  # exclusive role -> the live connection holding it
        self._live: dict[_Conn, asyncio.StreamWriter] = {}  # closed by stop()
        self._tasks: set[asyncio.Task[Any]] = set()  # their handlers, awaited by stop()
        self._refusals = RefusalLog()  # gate refusals, logged with a bound

    def handle_request(self, req: abci.Request) -> abci.Response:
        kind = req.WhichOneof("value")
        if kind == "echo":
            return abci.Response(echo=abci.ResponseEcho(message=req.echo.message))
        if kind == "flush":
            return abci.Response(flush=abci.ResponseFlush())
        if kind not in self._handlers:
            return abci.Response(
                exception=abci.ResponseException(error=f"unknown request {kind!r}")
            )
        try:
            resp = self._handlers[kind](getattr(req, kind))
        except Exception as e:
            if isinstance(e, GenesisError):  # the message names the field: no traceback
                log.error("ABCI %s failed: %s", kind, e)
            else:
                log.exception("ABCI %s failed", kind)
            soft = _error_response(kind, CODE_INTERNAL, f"internal error in {kind}: {e}")
            if soft is not None:
                return soft
            if kind in FATAL:
                self.fatal_error = e
            return abci.Response(exception=abci.ResponseException(error=f"{kind}: {e}"))
        out = abci.Response()
        getattr(out, kind).CopyFrom(resp)
        return out

    def _decode(self, raw: bytes) -> tuple[abci.Request | None, abci.Response | None]:
        """(request, None) for a valid frame; (None, an error response) for a frame protobuf
        refuses on a path that must answer normally; (None, None) when the frame is garbage."""
        try:
            return abci.Request.FromString(raw), None
        except DecodeError:
            kind = request_kind_from_wire(raw)
            if kind == "query":
                msg = "query request could not be decoded: the path must be valid UTF-8"
                return None, _error_response(kind, CODE_QUERY_UNDECODABLE, msg)
            if kind == "check_tx":
                msg = "CheckTx request could not be decoded"
                return None, _error_response(kind, CODE_TX_UNDECODABLE, msg)
            return None, None

    def _claim(self, conn: _Conn, kind: str) -> str | None:
        """Checks `kind` against the connection's role, taking a role on first use. Returns
        None when allowed, else why it is refused."""
        role = ROLE_OF.get(kind)
        if role is None:  # echo, flush, or a method this server does not know
            return None
        if conn.role is None:
            holder = self._roles.get(role)
            if holder is not None and holder is not conn:
                return f"{kind} refused: another connection already holds the {role} role"
            conn.role = role
            if role in EXCLUSIVE_ROLES:
                self._roles[role] = conn
            return None
        if conn.role != role:
            return f"{kind} refused on the {conn.role} connection (it belongs to {role})"
        return None

    async def _serve_conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Conn()
        if self.gate is not None:
            sock = writer.get_extra_info("socket")
            refused = self.gate.admit(conn, sock) if sock is not None else "no socket to identify"
            if refused is not None:
                self._refusals.note(refused, int(asyncio.get_running_loop().time()))
                writer.close()
                return
        self.connections += 1
        self._live[conn] = writer
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        frames = FrameReader()
        try:
            while True:
                data = await reader.read(1 << 16)
                if not data:
                    break
                # answer everything that arrived in this read, then write once: one syscall per
                # batch of pipelined requests instead of one per response
                out = bytearray()
                flush = False
                decoded = [self._decode(raw) for raw in frames.feed(data)]
                if conn.role in (None, "mempool") and hasattr(self.app, "preverify"):
                    txs = [
                        r.check_tx.tx
                        for r, _ in decoded
                        if r is not None and r.HasField("check_tx")
                    ]
                    if len(txs) > 1:
                        self.app.preverify(txs)
                for i, (req, answer) in enumerate(decoded):
                    if i and i % YIELD_EVERY == 0:
                        # a 64 KiB read holds hundreds of pipelined CheckTx: let the consensus
                        # connection's FinalizeBlock/PrepareProposal run between chunks of them
                        # (handlers never interleave mid-call; per-connection order is kept)
                        await asyncio.sleep(0)
                    if req is None:
                        if answer is None:
                            raise FramingError("a frame that is not an ABCI request")
                        out += frame(answer)
                        continue
                    kind = req.WhichOneof("value")
                    refused = self._claim(conn, kind or "")
                    if refused is not None:
                        log.warning("ABCI connection refused: %s", refused)
                        out += frame(abci.Response(exception=abci.ResponseException(error=refused)))
                        writer.write(out)
                        await _close_gracefully(reader, writer)
                        return
                    out += frame(self.handle_request(req))
                    flush = flush or kind == "flush"
                    if self.fatal_error is not None:
                        writer.write(out)
                        await writer.drain()
                        self._halt()
                        return
                if out:
                    writer.write(out)
                if flush or writer.transport.get_write_buffer_size() > 1 << 20:
                    await writer.drain()
        except (ConnectionResetError, BrokenPipeError, FramingError) as e:
            log.warning("ABCI connection closed: %s", e)
        except asyncio.CancelledError:
            # the loop is shutting down with this connection open (a client that never closed):
            # end quietly; re-raising made asyncio's stream callback log a CancelledError
            # traceback (the handler is asyncio's own task: nothing awaits its cancellation)
            log.debug("ABCI connection handler cancelled at shutdown")
        finally:
            self.connections -= 1
            self._live.pop(conn, None)
            if task is not None:
                self._tasks.discard(task)
            if self.gate is not None:
                self.gate.release(conn)
            if conn.role is not None and self._roles.get(conn.role) is conn:
                del self._roles[conn.role]
            writer.close()

    def _halt(self) -> None:
        log.critical("state machine halted: %s", self.fatal_error)
        if self._server is not None:
            self._server.close()

    async def start(self) -> None:
        if self.address.startswith("unix://"):
            path = self.address[len("unix://") :]
            private_socket_dir(os.path.dirname(os.path.abspath(path)))
            if os.path.lexists(path):
                os.unlink(path)
            self._server = await asyncio.start_unix_server(self._serve_conn, path=path)
            os.chmod(path, 0o600)
        else:
            hostport = self.address.removeprefix("tcp://")
            host, _, port = hostport.rpartition(":")
            # tcp://[::1]:P: the brackets are the URL's, not the host's ("Name or service not
            # known" at start, after init had accepted the address)
            self._server = await asyncio.start_server(
                self._serve_conn, host=host.strip("[]") or "127.0.0.1", port=int(port)
            )

    async def serve_forever(self) -> None:
        if self._server is None:
            await self.start()
        assert self._server is not None
        try:
            await self._server.serve_forever()
        except asyncio.CancelledError:
            pass

    def bound_port(self) -> int:
        assert self._server is not None
        sockets: list[Any] = list(getattr(self._server, "sockets", []))
        return int(sockets[0].getsockname()[1])

    async def stop(self) -> None:
        """Stop listening, close the connections still open and let their handlers end (a
        client that never closes is no reason to wait: 2 s at most)."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for writer in list(self._live.values()):
            writer.close()
        tasks = [t for t in self._tasks if t is not asyncio.current_task()]
        if tasks:
            await asyncio.wait(tasks, timeout=2)
