"""The logger given to our aiohttp servers (blob server, explorer).

aiohttp logs every request it cannot parse (a non-UTF-8 or malformed URL, a header past 8 KiB, a
bad method, a lying Content-Length) as ``ERROR`` with a full traceback on ``aiohttp.server``: any
outsider could fill a node's log with ten-line tracebacks, one per bad request, and bury real
errors. Such a request is the peer's mistake, already answered with a 400: it is logged here as
one INFO line. A failure inside our own handlers (a real bug) still logs its traceback.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp.http_exceptions import HttpProcessingError

log = logging.getLogger("loconet.http")


class ClientErrorLog(logging.LoggerAdapter):
    """``logger=`` for aiohttp's RequestHandler: a client's unparsable request is one INFO line
    (no traceback); anything else is passed through unchanged."""

    def exception(self, msg: object, *args: Any, exc_info: Any = True, **kw: Any) -> None:
        if isinstance(exc_info, HttpProcessingError):
            detail = " ".join(str(exc_info.message).split())[:200]
            peer = args[0] if args else "?"
            self.logger.info("bad request from %s: %s %s", peer, exc_info.code, detail)
            return
        self.logger.error(msg, *args, exc_info=exc_info, **kw)


def client_error_log() -> ClientErrorLog:
    return ClientErrorLog(log, {})
