"""--node without a port: a bare host (or tcp://host) is a CometBFT node, so it gets the RPC
port 26657 instead of going to port 80 and failing as "connection refused"; an explicit
http(s):// URL keeps its scheme's port (a node behind a reverse proxy); an empty port is named."""

import pytest

from node.client.rpc import NodeUnreachable, normalize_url


@pytest.mark.parametrize(
    ("given", "want"),
    [
        ("127.0.0.1", "http://127.0.0.1:26657"),
        ("tcp://node1", "http://node1:26657"),
        ("tcp://node1/", "http://node1:26657"),
        ("[::1]", "http://[::1]:26657"),
        ("localhost:36657", "http://localhost:36657"),
        ("tcp://10.0.0.2:26657", "http://10.0.0.2:26657"),
        ("http://rpc.example.org", "http://rpc.example.org"),
        ("https://rpc.example.org/cometbft", "https://rpc.example.org/cometbft"),
    ],
)
def test_a_bare_host_gets_the_rpc_port(given: str, want: str) -> None:
    assert normalize_url(given) == want


@pytest.mark.parametrize("given", ["127.0.0.1:", "http://h:", "tcp://h:"])
def test_an_empty_port_is_named(given: str) -> None:
    with pytest.raises(NodeUnreachable) as e:
        normalize_url(given)
    assert e.value.reason == "protocol"
    assert "port (empty)" in str(e.value)
