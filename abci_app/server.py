"""ABCI 2.0 socket server for CometBFT v0.38.

Framing (v0.38, ``abci/types/messages.go``): every Request/Response is a protobuf message
preceded by its length as an unsigned varint (v0.34 used a zigzag *signed* varint; this server
speaks v0.38 only). CometBFT opens four connections (consensus, mempool, query, snapshot) and
pipelines requests on each; this server answers every request on a connection in order and
writes buffered responses out when it sees a Flush (which it always answers) or when the
buffer grows large. All four connections share one Application; handlers run one at a time on
the event loop, so they never interleave.

A handler that raises on the consensus path (InitChain, FinalizeBlock, Commit) means the
state machine cannot go on safely: the server answers with ResponseException, logs the
error and stops with exit status 1 (a halted node restarts from its last commit). Errors in
CheckTx and Query are answered as ResponseException and the server keeps going.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import Any

from abci_app.encoding import encode_uvarint
from abci_app.pb import abci

log = logging.getLogger("loconet.abci")

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
FATAL = frozenset({"init_chain", "finalize_block", "commit"})


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
        "info", "init_chain", "query", "check_tx", "commit", "list_snapshots", "offer_snapshot",
        "load_snapshot_chunk", "apply_snapshot_chunk", "prepare_proposal", "process_proposal",
        "extend_vote", "verify_vote_extension", "finalize_block",
    ]
    return {n: getattr(app, n) for n in names}


class ABCIServer:
    def __init__(self, app: Any, address: str = "tcp://127.0.0.1:26658") -> None:
        self.app = app
        self.address = address
        self._handlers = _dispatch_table(app)
        self._server: asyncio.AbstractServer | None = None
        self.fatal_error: BaseException | None = None
        self.connections = 0

    def handle_request(self, req: abci.Request) -> abci.Response:
        kind = req.WhichOneof("value")
        if kind == "echo":
            return abci.Response(echo=abci.ResponseEcho(message=req.echo.message))
        if kind == "flush":
            return abci.Response(flush=abci.ResponseFlush())
        if kind not in self._handlers:
            return abci.Response(exception=abci.ResponseException(error=f"unknown request {kind!r}"))
        try:
            resp = self._handlers[kind](getattr(req, kind))
        except Exception as e:
            log.exception("ABCI %s failed", kind)
            if kind in FATAL:
                self.fatal_error = e
            return abci.Response(exception=abci.ResponseException(error=f"{kind}: {e}"))
        out = abci.Response()
        getattr(out, kind).CopyFrom(resp)
        return out

    async def _serve_conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
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
                reqs = [abci.Request.FromString(raw) for raw in frames.feed(data)]
                txs = [r.check_tx.tx for r in reqs if r.WhichOneof("value") == "check_tx"]
                if len(txs) > 1 and hasattr(self.app, "preverify"):
                    self.app.preverify(txs)
                for req in reqs:
                    out += frame(self.handle_request(req))
                    flush = flush or req.WhichOneof("value") == "flush"
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
        finally:
            self.connections -= 1
            writer.close()

    def _halt(self) -> None:
        log.critical("state machine halted: %s", self.fatal_error)
        if self._server is not None:
            self._server.close()

    async def start(self) -> None:
        if self.address.startswith("unix://"):
            path = self.address[len("unix://") :]
            if os.path.exists(path):
                os.unlink(path)
            self._server = await asyncio.start_unix_server(self._serve_conn, path=path)
        else:
            hostport = self.address.removeprefix("tcp://")
            host, _, port = hostport.rpartition(":")
            self._server = await asyncio.start_server(self._serve_conn, host=host or "127.0.0.1", port=int(port))

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
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
