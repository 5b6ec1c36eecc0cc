"""A --node that answers JSON-RPC with the wrong shapes (red-team regression): `status`, `query
...` raised KeyError/TypeError/ValueError tracebacks from wherever they indexed the answer. Now
abci_query's parser raises RpcError, and any other misshapen answer is one line saying the node
did not answer like a loconet node (exit 1; JSON with -o json). A real HTTP server plays it."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from typing import ClassVar

import pytest

from tests.kits.clikit import run

ADDR = "loco12mhfny5zvckr4qgzg5swup48v43cua8hc7llry"
BODIES = {
    "result is a string": b'{"jsonrpc": "2.0", "id": 1, "result": "x"}',
    "result is null": b'{"jsonrpc": "2.0", "id": 1, "result": null}',
    "result is empty": b'{"jsonrpc": "2.0", "id": 1, "result": {}}',
    "bad response fields": b'{"jsonrpc": "2.0", "id": 1, "result": {"response": {"code": "x", '
    b'"value": "!!", "height": "h"}}}',
}


class HostileNode(http.server.BaseHTTPRequestHandler):
    """Answers every RPC with ``body`` (set by the test)."""

    body: ClassVar[bytes] = b""

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(HostileNode.body)))
        self.end_headers()
        self.wfile.write(HostileNode.body)

    def log_message(self, *a: object) -> None:
        pass


@pytest.fixture(scope="module")
def node() -> Iterator[tuple[str, type[HostileNode]]]:
    H = HostileNode
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", H
    srv.shutdown()


@pytest.mark.parametrize("what", list(BODIES))
def test_invalid_node_answers_are_one_line(node: tuple[str, type[HostileNode]], what: str) -> None:
    url, handler = node
    handler.body = BODIES[what]
    for args in (("status",), ("query", "account", ADDR), ("query", "block", "5")):
        r = run(*args, "--node", url)
        assert r.returncode == 1 and "Traceback" not in r.stderr, (what, args, r.stderr[-500:])
        assert r.stderr.startswith("error:") and len(r.stderr.strip().splitlines()) == 1, r.stderr
    j = run("query", "jobs", "--node", url, "-o", "json")
    assert j.returncode == 1 and "error" in json.loads(j.stdout)


class GreedyNode(http.server.BaseHTTPRequestHandler):
    """A node that looks like loconet-local but whose /params/auth asks 10^9 uloco per byte,
    and that records every tx broadcast to it."""

    broadcast: ClassVar[list[str]] = []

    def do_POST(self) -> None:  # noqa: N802
        import base64

        req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        method, params = req["method"], req.get("params", {})
        if method == "status":
            result: object = {"node_info": {"network": "loconet-local"}}
        elif method == "abci_query" and params.get("path") == "/params/auth":
            value = json.dumps({"min_fee_per_byte": 10**9, "min_fee_per_msg": 1000}).encode()
            result = {"response": {"code": 0, "value": base64.b64encode(value).decode()}}
        elif method == "abci_query":
            value = json.dumps({"address": ADDR, "balance": 10**15, "sequence": 0}).encode()
            result = {"response": {"code": 0, "value": base64.b64encode(value).decode()}}
        else:
            GreedyNode.broadcast.append(method)
            result = {"code": 0, "hash": "00" * 32}
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "result": result}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a: object) -> None:
        pass


def test_invalid_node_asking_a_huge_auto_fee_gets_nothing_signed(tmp_path) -> None:
    """--fee auto pays what the node's auth params ask: a hostile --node asking 10^9 uloco per
    byte made the CLI sign (and hand it) a tx paying ~200,000 LOCO in fees. Above --max-fee
    (default 10 LOCO) it refuses before signing; --max-fee raises the cap."""
    home = tmp_path / "home"
    assert run("init", "--home", str(home)).returncode == 0
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), GreedyNode)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        send = ("tx", "bank", "send", ADDR, "1loco", "--from", "validator", "--home", str(home))
        r = run(*send, "--node", url, "-o", "json")
        assert r.returncode == 1, r.stdout + r.stderr
        err = json.loads(r.stdout)["error"]
        assert "above the cap of 10000000 uloco" in err and "asks a fee of" in err, err
        assert GreedyNode.broadcast == []
        r = run(*send, "--node", url, "--max-fee", "1000000loco", "--dry-run")
        assert "asks a fee" not in r.stderr  # a cap the user raised is honoured
    finally:
        srv.shutdown()


def test_invalid_node_asking_a_huge_fee_gets_no_worker_tx() -> None:
    """The same drain through node.client.market_msgs.send_tx (the provider worker, the testnet
    tools): refused unsigned above max_fee."""
    from abci_app.codec.tx import Ed25519Signer
    from node.client.market_msgs import build_cancel_job, send_tx
    from node.client.rpc import Client
    from node.errors import UsageError

    GreedyNode.broadcast.clear()
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), GreedyNode)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with Client(f"http://127.0.0.1:{srv.server_address[1]}") as c:
            with pytest.raises(UsageError, match="above the cap of 10000000 uloco"):
                send_tx(c, Ed25519Signer.generate(), [build_cancel_job(1)])
        assert GreedyNode.broadcast == []
    finally:
        srv.shutdown()


@pytest.mark.parametrize("value", [b"[" * 100_000, b'{"a":' * 100_000])
def test_invalid_deeply_nested_query_value_is_one_line(
    node: tuple[str, type[HostileNode]], value: bytes
) -> None:
    """The RPC envelope was parsed with safejson, but the abci_query value inside it with
    json.loads: a node answering ``[[[[…`` 10^5 deep gave a RecursionError traceback from every
    query. Values are parsed with safejson (nesting bounded) and the error is one line."""
    import base64

    url, handler = node
    v = base64.b64encode(value).decode()
    handler.body = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "result": {"response": {"code": 0, "value": v}}}
    ).encode()
    for args in (("query", "jobs"), ("query", "account", ADDR), ("query", "validators")):
        r = run(*args, "--node", url)
        assert r.returncode == 1 and "Traceback" not in r.stderr, (args, r.stderr[-500:])
        assert r.stderr.startswith("error:") and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "nested deeper" in r.stderr, r.stderr


@pytest.mark.parametrize(
    "result", [{}, {"node_info": {"network": "loconet-local"}}, {"blocks": "x", "total_count": "1"}]
)
def test_invalid_block_search_answer_is_not_nothing_paid(
    node: tuple[str, type[HostileNode]], result: dict[str, object]
) -> None:
    """`query rewards` read a block_search answer without "blocks" as no blocks: a node answering
    anything at all (here {} or a status) printed "nothing paid yet" with exit 0."""
    url, handler = node
    handler.body = json.dumps({"jsonrpc": "2.0", "id": 1, "result": result}).encode()
    r = run("query", "rewards", ADDR, "--node", url)
    assert r.returncode == 1 and "nothing paid" not in r.stdout, (r.stdout, r.stderr)
    assert r.stderr.startswith("error:") and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_invalid_non_utf8_query_value_blames_the_node(node: tuple[str, type[HostileNode]]) -> None:
    """A query value that is not UTF-8 was reported as "a file given to this command is not
    UTF-8 text": no file was given; the error names the node's answer."""
    import base64

    url, handler = node
    v = base64.b64encode(b"\xff\xfe{}").decode()
    handler.body = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "result": {"response": {"code": 0, "value": v}}}
    ).encode()
    for args in (("query", "jobs"), ("query", "account", ADDR)):
        r = run(*args, "--node", url)
        assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "file" not in r.stderr and "node's answer" in r.stderr, r.stderr
