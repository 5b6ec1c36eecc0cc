"""Test kit for the blob exchange: misbehaving peers (each a real HTTP server on loopback that
lies in one way) and small helpers. Fixtures using it are in tests/blobs/conftest.py."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import Awaitable, Callable

from aiohttp import web


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class LoopThread:
    """An event loop in a daemon thread, to run test peers next to synchronous clients."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Awaitable[object]) -> object:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)  # type: ignore[arg-type]

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Peers:
    """Start aiohttp peers with a custom /blob/{h} handler, or raw TCP peers that write bytes."""

    def __init__(self) -> None:
        self.lt = LoopThread()
        self.runners: list[web.AppRunner] = []
        self.servers: list[asyncio.base_events.Server] = []

    def http(self, handler: Handler) -> str:
        async def start() -> str:
            app = web.Application()
            app.router.add_get("/blob/{h}", handler)
            runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.2)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.runners.append(runner)
            return f"http://127.0.0.1:{runner.addresses[0][1]}"

        return str(self.lt.run(start()))

    def raw(self, response: bytes) -> str:
        """A peer that answers any request with exactly ``response`` and closes the connection."""

        async def start() -> str:
            async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                await reader.readuntil(b"\r\n\r\n")
                writer.write(response)
                await writer.drain()
                writer.close()

            server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
            self.servers.append(server)
            return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"

        return str(self.lt.run(start()))

    def close(self) -> None:
        async def stop() -> None:
            for r in self.runners:
                await r.cleanup()
            for s in self.servers:
                s.close()
                await s.wait_closed()

        self.lt.run(stop())
        self.lt.close()
