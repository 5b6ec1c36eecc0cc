"""`loconet init --abci-address tcp://[::1]:P` was accepted (and written into cometbft's
proxy_app), but `loconet start` then failed: "cannot listen on tcp://[::1]:P (ABCI): Name or
service not known" (the URL's brackets were passed to the resolver as the host). Issue #28
review."""

from __future__ import annotations

import asyncio
import socket
from unittest import mock

import pytest

from abci_app.server import ABCIServer


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback here")
def test_abci_address_with_a_bracketed_ipv6_host_listens() -> None:
    async def go() -> None:
        server = ABCIServer(mock.MagicMock(), "tcp://[::1]:0")
        await server.start()
        try:
            port = server.bound_port()
            _, writer = await asyncio.open_connection("::1", port)
            writer.close()
        finally:
            await server.stop()

    asyncio.run(asyncio.wait_for(go(), 30))
