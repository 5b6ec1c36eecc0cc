"""A small client for CometBFT's JSON-RPC (httpx).

    RpcError
    ├── NodeUnreachable   the node does not answer; ``reason`` says how: "refused" (nothing
    │                     listens there), "timeout", "dns" (the host name does not resolve),
    │                     "network" (no route) or "protocol" (not an http(s)/tcp URL)
    └── TxRejected        CheckTx or FinalizeBlock rejected a tx (code, codespace, log)

``normalize_url`` accepts what CometBFT and ``loconet start`` print (``tcp://127.0.0.1:26657``)
and a bare ``HOST:PORT`` as well as ``http(s)://``.
"""

from __future__ import annotations

import base64
import errno
import re
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Self

import httpx

from node import safejson

DEFAULT_NODE = "http://127.0.0.1:26657"
RESUBMIT_AFTER_S = (
    5.0  # wait_for_tx: rebroadcast a tx not in a block this long after its submission (~5 blocks)
)
MAX_RESPONSE_BYTES = 256 << 20  # a block of CometBFT's largest size (100 MiB) in base64 JSON fits


class RpcError(Exception):
    pass


class NodeUnreachable(RpcError):
    def __init__(self, message: str, reason: str = "refused") -> None:
        super().__init__(message)
        self.reason = reason


def normalize_url(url: str) -> str:
    """``tcp://H:P`` -> ``http://H:P``; ``H:P`` -> ``http://H:P``; http(s) kept. A bare ``H``
    or ``tcp://H`` gets CometBFT's RPC port, 26657. Anything else raises
    NodeUnreachable(reason="protocol") naming the accepted forms."""
    u = url.strip().rstrip("/")
    bare = u.startswith("tcp://") or "://" not in u
    if u.startswith("tcp://"):
        u = "http://" + u.removeprefix("tcp://")
    elif "://" not in u:
        u = "http://" + u
    if bare:
        # ``127.0.0.1`` or ``tcp://node1`` names a CometBFT node, not a web server: without a
        # port it went to port 80 and failed as "connection refused". Give it the RPC port
        # (26657). An explicit http(s):// URL keeps its scheme's port (a reverse proxy).
        rest = u.split("://", 1)[1]
        host, sep, path = rest.partition("/")
        if host and not re.fullmatch(r"[^/?#]*:\d*", host):
            u = f"http://{host}:26657" + (sep + path if sep else "")
    scheme = u.split("://", 1)[0]
    if scheme not in ("http", "https") or not u.split("://", 1)[1]:
        raise NodeUnreachable(
            f"--node {url!r}: write http://HOST:PORT, tcp://HOST:PORT or HOST:PORT "
            "(e.g. http://127.0.0.1:26657)",
            "protocol",
        )
    # a port past 65535 (or 0) reached connect() and was reported as "connection refused ...
    # nothing listens" (or an OverflowError): say what is wrong with it instead
    port = re.fullmatch(r"[^/?#]*:(\d*)", u.split("://", 1)[1].split("/", 1)[0])
    if port and not (port[1] and 1 <= int(port[1]) <= 65535):
        raise NodeUnreachable(
            f"--node {url!r}: port {port[1] or '(empty)'} is not a TCP port (1..65535); write "
            "http://HOST:PORT "
            "(e.g. http://127.0.0.1:26657)",
            "protocol",
        )
    return u


def explain_transport_error(url: str, e: BaseException) -> NodeUnreachable:
    """One sentence on what failed when connecting to ``url`` (refused, timeout, DNS, no route)."""
    chain: list[BaseException] = []
    cur: BaseException | None = e
    while cur is not None and cur not in chain:
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    host = url.split("://", 1)[-1].split("/", 1)[0]
    if any(isinstance(c, socket.gaierror) for c in chain) or "Name or service not known" in str(e):
        return NodeUnreachable(
            f"cannot resolve the host of {url}: {host.rsplit(':', 1)[0]!r} is not a known "
            "name; check --node (or `node` in the client config)",
            "dns",
        )
    if isinstance(e, httpx.TimeoutException):
        what = "connecting" if isinstance(e, httpx.ConnectTimeout) else "waiting for an answer"
        return NodeUnreachable(
            f"timed out {what} to {url}: the node is overloaded, still starting, or a "
            "firewall drops the packets; retry, or check the address",
            "timeout",
        )
    if any(isinstance(c, ConnectionRefusedError) for c in chain) or "Connection refused" in str(e):
        return NodeUnreachable(
            f"connection refused by {host}: nothing listens on {url}; start the node "
            "(`loconet start --home HOME`) or pass the right --node",
            "refused",
        )
    if any(
        isinstance(c, OSError) and c.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH) for c in chain
    ):
        return NodeUnreachable(
            f"no route to {host} ({url}): check the address and the network", "network"
        )
    return NodeUnreachable(
        f"cannot reach the node at {url} ({e.__class__.__name__}: {e}); check --node", "network"
    )


class TxRejected(RpcError):
    def __init__(self, code: int, codespace: str, log: str, stage: str) -> None:
        super().__init__(f"tx rejected in {stage} with code {codespace}/{code}: {log}")
        self.code, self.codespace, self.log, self.stage = code, codespace, log, stage


@dataclass(frozen=True, slots=True)
class QueryResult:
    code: int
    log: str
    height: int
    value: bytes
    proof_ops: list[dict[str, Any]]


class Client:
    answers = 0  # JSON-RPC answers received by this process (any client)

    def __init__(
        self,
        url: str = DEFAULT_NODE,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = normalize_url(url)
        self.resubmitted = 0  # txs broadcast again by wait_for_tx (they had left the mempool)
        try:
            self._http = httpx.Client(base_url=self.url, timeout=timeout, transport=transport)
        except httpx.InvalidURL as e:  # http://[::1, HOST:abc: a one-line error, not a traceback
            raise NodeUnreachable(
                f"--node {url!r} is not a valid URL ({e}): write http://HOST:PORT, tcp://HOST:PORT "
                "or HOST:PORT (e.g. http://127.0.0.1:26657)",
                "protocol",
            ) from None

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, method: str, **params: Any) -> Any:
        """The ``result`` of one JSON-RPC call. Anything that is not a JSON-RPC answer (not JSON,
        not an object, no result, a body over MAX_RESPONSE_BYTES once decoded) is an RpcError
        naming what came back, never a KeyError or a MemoryError in the caller."""
        try:
            with self._http.stream(
                "POST", "/", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
            ) as r:
                data = bytearray()
                for chunk in r.iter_bytes():  # decoded: a gzip bomb counts at its real size
                    data += chunk
                    if len(data) > MAX_RESPONSE_BYTES:
                        raise RpcError(
                            f"{method}: the node's answer is over {MAX_RESPONSE_BYTES >> 20} MiB; "
                            "refusing it"
                        )
        except httpx.TransportError as e:
            raise explain_transport_error(self.url, e) from None
        except httpx.HTTPError as e:  # e.g. a malformed gzip body
            raise RpcError(
                f"{method}: could not read the node's answer ({type(e).__name__}: {e})"
            ) from None
        try:
            body = safejson.loads(bytes(data))  # a hostile node nests [[[[... 10^5 deep
        except (ValueError, RecursionError):
            raise RpcError(
                f"{method}: {self.url} answered HTTP {r.status_code} with a body that is not JSON: "
                "it is not a CometBFT RPC endpoint; check --node (the RPC port, 26657 by default)"
            ) from None
        if not isinstance(body, dict) or ("result" not in body and not body.get("error")):
            raise RpcError(
                f"{method}: node answered HTTP {r.status_code} with JSON that is not a JSON-RPC "
                "answer"
            )
        if body.get("error"):
            err = body["error"]
            if not isinstance(err, dict):
                raise RpcError(f"{method}: {str(err)[:300]}")
            raise RpcError(f"{method}: {err.get('message', '')} {err.get('data', '')}".strip())
        Client.answers += 1  # the CLI tells a node's malformed answer from its own bug by this
        return body["result"]

    # -- chain ----------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        return self.call("status")

    def latest_height(self) -> int:
        return int(self.status()["sync_info"]["latest_block_height"])

    def block(self, height: int | None = None) -> dict[str, Any]:
        return self.call("block", **({"height": str(height)} if height else {}))

    def app_hash_at(self, height: int) -> bytes:
        """The app hash in the header of block ``height`` (= state root after block height-1)."""
        hdr = self.call("header", height=str(height))["header"]
        return bytes.fromhex(hdr["app_hash"])

    def validators(self, height: int | None = None) -> list[dict[str, Any]]:
        res = self.call("validators", **({"height": str(height)} if height else {}), per_page="100")
        return list(res["validators"])

    def wait_for_height(self, height: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.latest_height() < height:
            if time.monotonic() > deadline:
                raise RpcError(f"timed out waiting for height {height}")
            time.sleep(0.1)

    # -- txs ------------------------------------------------------------------------------------
    def broadcast_tx_sync(self, tx: bytes) -> str:
        """Submit through CheckTx; returns the tx hash (hex) or raises TxRejected."""
        res = self.call("broadcast_tx_sync", tx=base64.b64encode(tx).decode())
        if int(res["code"]) != 0:
            raise TxRejected(
                int(res["code"]), res.get("codespace", ""), res.get("log", ""), "CheckTx"
            )
        return str(res["hash"])

    def broadcast_tx_async(self, tx: bytes) -> str:
        return str(self.call("broadcast_tx_async", tx=base64.b64encode(tx).decode())["hash"])

    def tx(self, tx_hash: str) -> dict[str, Any] | None:
        try:
            return self.call("tx", hash=base64.b64encode(bytes.fromhex(tx_hash)).decode())
        except RpcError as e:
            if "not found" in str(e):
                return None
            raise

    def wait_for_tx(
        self,
        tx_hash: str,
        timeout: float = 30.0,
        resubmit: Sequence[bytes] = (),
        resubmit_after: float = RESUBMIT_AFTER_S,
    ) -> dict[str, Any]:
        """Wait until the tx is in a block; raise TxRejected if the block rejected it.

        A tx that passed CheckTx can still leave the mempool without a block: dropped when the
        mempool filled up between CheckTx and insertion, evicted on recheck (an earlier tx of the
        same account was dropped, so its sequence no longer follows), or lost with a node
        restart (the mempool is not persisted). ``resubmit`` = the signed bytes of this tx, then
        those of the same account's later txs in order: when the tx is not in a block
        ``resubmit_after`` seconds after the last submission, they are broadcast again, the
        same bytes (same hash, same sequence: at most one copy can ever execute). A copy still
        pending answers "already in cache" and is left alone. If the tx's sequence was taken by
        another tx meanwhile, the rebroadcast is refused with TxRejected (wrong sequence): the
        caller re-signs (``node.client.market_msgs.send_tx`` does)."""
        deadline = time.monotonic() + timeout
        next_submit = time.monotonic() + resubmit_after
        while True:
            res = self.tx(tx_hash)
            if res is not None:
                r = res["tx_result"]
                if int(r.get("code", 0)) != 0:
                    raise TxRejected(
                        int(r["code"]),
                        r.get("codespace", ""),
                        r.get("log", ""),
                        f"block {res['height']}",
                    )
                return res
            if time.monotonic() > deadline:
                raise RpcError(
                    f"tx {tx_hash} not in a block after {timeout:.0f}s"
                    + (f" ({self.resubmitted} rebroadcasts)" if resubmit else "")
                )
            if resubmit and time.monotonic() >= next_submit:
                self._rebroadcast(tx_hash, resubmit)
                next_submit = time.monotonic() + resubmit_after
            time.sleep(0.1)

    def _rebroadcast(self, tx_hash: str, raws: Sequence[bytes]) -> None:
        """broadcast_tx_sync each of ``raws`` again, in order (wait_for_tx). The first is the
        awaited tx: its wrong-sequence refusal is raised unless it landed meanwhile."""
        for i, raw in enumerate(raws):
            try:
                self.broadcast_tx_sync(raw)
                self.resubmitted += 1
            except TxRejected:
                if i == 0 and self.tx(tx_hash) is None:
                    raise
                return  # a later tx refused: the rest cannot follow it; retried next time
            except NodeUnreachable:
                raise
            except RpcError as e:  # "tx already exists in cache" (still pending), "mempool is full"
                if "full" in str(e):
                    return

    # -- state ----------------------------------------------------------------------------------
    def abci_query(
        self, path: str, data: bytes = b"", height: int = 0, prove: bool = False
    ) -> QueryResult:
        result = self.call(
            "abci_query", path=path, data=data.hex(), height=str(height), prove=prove
        )
        try:
            res = result["response"]
            ops = (res.get("proofOps") or {}).get("ops") or []
            return QueryResult(
                code=int(res.get("code", 0)),
                log=str(res.get("log", "")),
                height=int(res.get("height", 0)),
                value=base64.b64decode(res.get("value") or "", validate=True),
                proof_ops=[
                    {
                        "type": o["type"],
                        "key": base64.b64decode(o["key"], validate=True),
                        "data": base64.b64decode(o["data"], validate=True),
                    }
                    for o in ops
                ],
            )
        except (
            KeyError,
            TypeError,
            ValueError,
            AttributeError,
        ) as e:  # binascii.Error is a ValueError
            raise RpcError(
                f"abci_query {path}: the node's answer is malformed ({type(e).__name__}: {e})"
            ) from None
