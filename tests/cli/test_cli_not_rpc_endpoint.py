"""A --node on a port that is not CometBFT's RPC (the app's /metrics, 26661) was "status: node
answered HTTP 405 with non-JSON body": it now says it is not an RPC endpoint and names the fix
(new-user review regression)."""

from __future__ import annotations

import httpx
import pytest

from node.client.rpc import Client, RpcError


def test_invalid_node_that_is_not_an_rpc_endpoint_names_the_fix() -> None:
    # e.g. --node http://127.0.0.1:26661 (the app's /metrics) answers 405 text/plain
    transport = httpx.MockTransport(lambda req: httpx.Response(405, text="Method Not Allowed"))
    with Client("http://127.0.0.1:26661", transport=transport) as c, pytest.raises(RpcError) as e:
        c.status()
    msg = str(e.value)
    assert "not a CometBFT RPC endpoint; check --node" in msg and "26657" in msg, msg
