"""The logger given to our aiohttp servers (blob server, explorer).

aiohttp logs every request it cannot parse (a non-UTF-8 or malformed URL, a header past 8 KiB, a
bad method, a lying Content-Length) with a full traceback on ``aiohttp.server`` (``ERROR``, or
``DEBUG`` for garbage on a fresh connection), and every client that closes or resets its
connection while a handler writes (``ConnectionResetError``) as an ``ERROR`` traceback too: any
outsider could fill a node's log with ten-line tracebacks, one per bad request or early close,
and bury real errors. Such a request is the peer's doing, already answered (400) or moot (the
peer left): it is logged here as one line, at INFO (or below, where aiohttp chose below). A
failure inside our own handlers (a real bug) still logs its traceback.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from aiohttp.http_exceptions import HttpProcessingError

log = logging.getLogger("loconet.http")

# a client that went away: reset, closed mid-response, or a pipe broken under a write
CLIENT_GONE = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


def _exception(exc_info: Any) -> BaseException | None:
    if exc_info is True:
        return sys.exc_info()[1]
    if isinstance(exc_info, tuple):
        return exc_info[1] if len(exc_info) > 1 else None
    return exc_info if isinstance(exc_info, BaseException) else None


def one_line(e: BaseException) -> str:
    """``ClassName: message`` on one line, at most 200 characters of message."""
    return f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"


class ClientErrorLog(logging.LoggerAdapter):
    """``logger=`` for aiohttp's RequestHandler: a client's unparsable request, or a client that
    left mid-request, is one line without traceback; anything else is passed through unchanged."""

    def log(self, level: int, msg: object, *args: Any, exc_info: Any = None, **kw: Any) -> None:
        e = _exception(exc_info)
        peer = args[0] if args and isinstance(msg, str) and "%s" in msg else "?"
        if isinstance(e, HttpProcessingError):
            detail = " ".join(str(e.message).split())[:200]
            self.logger.log(
                min(level, logging.INFO), "bad request from %s: %s %s", peer, e.code, detail
            )
            return
        if isinstance(e, CLIENT_GONE):
            self.logger.log(
                min(level, logging.INFO), "client %s went away mid-request (%s)", peer, one_line(e)
            )
            return
        self.logger.log(level, msg, *args, exc_info=exc_info, **kw)


def client_error_log() -> ClientErrorLog:
    return ClientErrorLog(log, {})
