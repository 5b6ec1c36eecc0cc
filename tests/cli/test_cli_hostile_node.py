"""A --node that answers JSON-RPC with the wrong shapes (red-team regression): `status`, `query
...` raised KeyError/TypeError/ValueError tracebacks from wherever they indexed the answer. Now
abci_query's parser raises RpcError, and any other misshapen answer is one line saying the node
did not answer like a loconet node (exit 1; JSON with -o json). A real HTTP server plays it."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator

import pytest
from clikit import run

ADDR = "loco12mhfny5zvckr4qgzg5swup48v43cua8hc7llry"
BODIES = {
    "result is a string": b'{"jsonrpc": "2.0", "id": 1, "result": "x"}',
    "result is null": b'{"jsonrpc": "2.0", "id": 1, "result": null}',
    "result is empty": b'{"jsonrpc": "2.0", "id": 1, "result": {}}',
    "bad response fields": b'{"jsonrpc": "2.0", "id": 1, "result": {"response": {"code": "x", "value": "!!", "height": "h"}}}',
}


@pytest.fixture(scope="module")
def node() -> Iterator[tuple[str, type]]:
    class H(http.server.BaseHTTPRequestHandler):
        body = b""

        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(H.body)))
            self.end_headers()
            self.wfile.write(H.body)

        def log_message(self, *a: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", H
    srv.shutdown()


@pytest.mark.parametrize("what", list(BODIES))
def test_invalid_node_answers_are_one_line(node: tuple[str, type], what: str) -> None:
    url, handler = node
    handler.body = BODIES[what]
    for args in (("status",), ("query", "account", ADDR), ("query", "block", "5")):
        r = run(*args, "--node", url)
        assert r.returncode == 1 and "Traceback" not in r.stderr, (what, args, r.stderr[-500:])
        assert r.stderr.startswith("error:") and len(r.stderr.strip().splitlines()) == 1, r.stderr
    j = run("query", "jobs", "--node", url, "-o", "json")
    assert j.returncode == 1 and "error" in json.loads(j.stdout)
