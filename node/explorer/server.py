"""``loconet explorer``: an aiohttp server rendering the network from a node's RPC.

Pages are rendered on the server from Jinja2 templates shipped in this package (``templates/``)
with charts as inline SVG (``svg.py``); ``static/live.js`` polls the current page's main part
every ``poll`` seconds (``?fragment=1``) and swaps it in, so the page follows the chain without
a reload and still reads fully without JavaScript. Nothing is fetched from outside the node.

Routes: ``/`` (network, validators with moniker, stake and uptime, recent blocks and txs,
providers, jobs, charts), ``/search?q=`` (height, job id, address, tx or model hash),
``/account/{loco1…}`` (proven balance, txs, rewards), ``/validator/{hex}``,
``/provider/{loco1…}``, ``/job/{id}`` (rounds
with phase timeline, participants, commitments, challenges, verdicts, payouts, slashes, each
linked to its tx or block; lineage; loss curve), ``/tx/{hash}``, ``/block/{height}``,
``/api/snapshot`` (the JSON the pages are drawn from), ``/static/*``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
from aiohttp import web
from markupsafe import Markup

from abci_app.codec.address import from_bech32
from abci_app.errors import ErrInvalidAddress
from node.client.proofs import ProofInvalid
from node.client.rpc import RpcError
from node.client.units import fmt_loco as loco_text
from node.explorer import svg, views
from node.explorer.data import Collector, Snapshot, Untrusted
from node.explorer.heldout import HeldOut
from node.httplog import client_error_log

if TYPE_CHECKING:
    from node.client.trust import TrustStore

HERE = Path(__file__).parent
log = logging.getLogger("loconet.explorer")


def fmt_loco(uloco: int | None) -> str:
    """An amount in LOCO, its exact uloco on hover."""
    if uloco is None:
        return "-"
    n = int(uloco)
    return Markup('<span class="amount" title="{:,} uloco">{}</span>').format(n, loco_text(n))


def pct(bps: int | None) -> str:
    return "-" if bps is None else f"{bps / 100:.2f} %"


def _map_str(d: dict[str, Any]) -> dict[str, str]:
    """A message's scalar fields as strings (what ``views.attr_view`` reads beside a value)."""
    return {k: str(v) for k, v in d.items() if isinstance(v, str | int)}


def make_env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(loco=fmt_loco, pct=pct, short=views.short, map_str=_map_str)
    env.globals.update(svg=svg, views=views)
    return env


class Explorer:
    def __init__(
        self,
        node: str,
        poll: float = 2.0,
        trust: TrustStore | None = None,
        heldout: bool = False,
    ) -> None:
        self.node = node
        self.poll = poll
        self.collector = Collector(node, trust=trust)
        self.lookup = Collector(node)  # tx and block pages, beside the poller's snapshot
        self.snap: Snapshot | None = None
        self.error = ""
        self.updated = 0.0
        self.env = make_env()
        self._task: asyncio.Task[None] | None = None
        self.heldout: HeldOut | None = None
        if heldout:
            self.heldout = HeldOut()

    async def refresh(self) -> None:
        try:
            self.snap = await asyncio.to_thread(self.collector.snapshot)
            self.error = ""
            self.updated = time.time()
            if self.heldout is not None and not self.snap.untrusted:
                urls = [p["endpoint"] for p in self.snap.providers if p["endpoint"]]
                for j in self.snap.jobs:
                    self.heldout.want(j, urls)
        except (RpcError, Untrusted) as e:
            self.error = str(e)
        except Exception as e:
            log.exception("snapshot failed")
            self.error = f"{e.__class__.__name__}: {e}"

    async def _loop(self) -> None:
        while True:
            await self.refresh()
            await asyncio.sleep(self.poll)

    async def on_startup(self, app: web.Application) -> None:
        self._task = asyncio.create_task(self._loop())

    async def on_cleanup(self, app: web.Application) -> None:
        if self._task:
            self._task.cancel()
        self.collector.close()
        self.lookup.close()

    # -- rendering ------------------------------------------------------------------------------
    def render(
        self, request: web.Request, name: str, status: int = 200, live: bool = True, **ctx: Any
    ) -> web.Response:
        tmpl = self.env.get_template(name)
        full = {
            "snap": self.snap,
            "error": self.error,
            "node": self.node,
            "live": live,
            "poll_ms": int(self.poll * 1000),
            "updated": time.strftime("%H:%M:%S", time.localtime(self.updated))
            if self.updated
            else "",
            **ctx,
        }
        if request.query.get("fragment"):
            body = "".join(tmpl.blocks["main"](tmpl.new_context(full)))
        else:
            body = tmpl.render(full)
        headers = {
            "X-Height": str(self.snap.height if self.snap else 0),
            "Cache-Control": "no-store",
        }
        return web.Response(text=body, content_type="text/html", status=status, headers=headers)

    async def index(self, request: web.Request) -> web.Response:
        charts: dict[str, Any] = {"rewards_chart": "", "reputation_chart": ""}
        if self.snap:
            charts = {
                "rewards_chart": views.rewards_chart(self.snap.jobs, self.snap.height),
                "reputation_chart": views.reputation_chart(self.snap.reputation_history),
            }
        return self.render(request, "index.html", **charts)

    async def provider(self, request: web.Request) -> web.Response:
        addr = request.match_info["addr"]
        if not _is_address(addr):  # 404 whether or not the node has answered yet
            return self.render(
                request, "missing.html", status=404, what=f"provider {addr[:80]} (not an address)"
            )
        p = self.snap.provider(addr) if self.snap else None
        if self.snap and p is None:
            return self.render(request, "missing.html", status=404, what=f"provider {addr}")
        return self.render(request, "provider.html", address=addr, p=p)

    async def job(self, request: web.Request) -> web.Response:
        jid = request.match_info["job_id"]
        if not _is_u64(jid):  # 404 whether or not the node has answered yet
            return self.render(
                request, "missing.html", status=404, what=f"job {jid[:80]} (not a job id)"
            )
        j = self.snap.job(int(jid)) if self.snap else None
        if self.snap and j is None:
            return self.render(request, "missing.html", status=404, what=f"job {jid}")
        dash = None
        if j and self.snap:
            dash = views.dashboard(j, self.snap.block_times, self.heldout, time.time())
        return self.render(request, "job.html", j=j, dash=dash, heldout=self.heldout)

    async def search(self, request: web.Request) -> web.StreamResponse:
        """The search box: a height, job id, ``loco1…`` address, tx hash or model hash. One
        target found: a redirect to it; several (a number that is both a height and a job id, a
        hash that names a model): a page listing them; none: a page saying so."""
        q = request.query.get("q", "").strip()[:200]
        snap = self.snap
        targets = views.search_targets(q, snap.jobs if snap else [], snap.providers if snap else [])
        # a 64-hex query is a tx only if the chain has that tx
        found = []
        for t in targets:
            if t["href"].startswith("/tx/"):
                try:
                    tx = await asyncio.to_thread(self.lookup.chain.tx, t["href"][4:])
                except (RpcError, ValueError):
                    tx = None
                if tx is None:
                    continue
            if t["href"].startswith("/block/") and snap and int(t["href"][7:]) > snap.latest_height:
                continue
            found.append(t)
        if len(found) == 1:
            raise web.HTTPFound(found[0]["href"])
        return self.render(
            request, "search.html", status=200 if found else 404, live=False, q=q, found=found
        )

    async def account(self, request: web.Request) -> web.Response:
        addr = request.match_info["addr"]
        if not _is_address(addr):
            return self.render(
                request,
                "missing.html",
                status=404,
                live=False,
                what=f"account {addr[:80]} (not a loco1… address)",
            )
        if self.snap is None or self.snap.untrusted:
            return self.render(request, "account.html", live=False, a=None, address=addr)
        snap = self.snap
        try:
            a = await asyncio.to_thread(
                self.lookup.account, addr, snap.height, bytes.fromhex(snap.app_hash)
            )
        except (Untrusted, ProofInvalid) as e:
            return self.render(
                request, "error.html", status=502, live=False, what=f"account {addr}: {e}"
            )
        p = snap.provider(addr)
        vals = [v for v in snap.validators if v.get("operator") == addr]
        return self.render(request, "account.html", live=False, a=a, address=addr, p=p, vals=vals)

    async def validator(self, request: web.Request) -> web.Response:
        addr = request.match_info["addr"].upper()
        if not (len(addr) == 40 and views.is_hex(addr)):
            return self.render(
                request,
                "missing.html",
                status=404,
                live=False,
                what=f"validator {addr[:80]} (not 40 hex characters)",
            )
        snap = self.snap
        if snap is None or snap.untrusted:
            return self.render(request, "validator.html", live=False, v=None, addr=addr)
        try:
            v = await asyncio.to_thread(
                self.lookup.validator, addr, snap.height, bytes.fromhex(snap.app_hash)
            )
        except (Untrusted, ProofInvalid) as e:
            return self.render(
                request, "error.html", status=502, live=False, what=f"validator {addr}: {e}"
            )
        if v is None:
            return self.render(
                request, "missing.html", status=404, live=False, what=f"validator {addr}"
            )
        row = next((x for x in snap.validators if x["address"] == addr), {})
        proposed = [b for b in snap.recent_blocks if b["proposer"] == addr]
        return self.render(
            request, "validator.html", live=False, v=v, addr=addr, row=row, proposed=proposed
        )

    async def tx(self, request: web.Request) -> web.Response:
        h = request.match_info["hash"].upper()
        try:
            t = await asyncio.to_thread(self.lookup.chain.tx, h)
        except (RpcError, ValueError) as e:
            return self.render(
                request, "missing.html", status=404, live=False, what=f"tx {h} ({e})"
            )
        if t is None:
            return self.render(request, "missing.html", status=404, live=False, what=f"tx {h}")
        return self.render(request, "tx.html", live=False, t=t)

    async def block(self, request: web.Request) -> web.Response:
        hs = request.match_info["height"]
        try:
            b = (
                await asyncio.to_thread(self.lookup.chain.block, int(hs))
                if _is_u64(hs) and int(hs) > 0
                else None
            )
        except RpcError as e:
            return self.render(
                request, "missing.html", status=404, live=False, what=f"block {hs} ({e})"
            )
        if b is None:
            return self.render(request, "missing.html", status=404, live=False, what=f"block {hs}")
        return self.render(request, "block.html", live=False, b=b)

    async def api_snapshot(self, request: web.Request) -> web.Response:
        if self.snap is None:
            return web.json_response({"error": self.error or "no snapshot yet"}, status=503)
        return web.json_response({**dataclasses.asdict(self.snap), "error": self.error})

    @web.middleware
    async def errors(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """A node answer the pages cannot use (malformed JSON, missing fields, wrong types) is
        shown as an error page (502), never as aiohttp's bare 500 with a traceback in the log."""
        try:
            return await handler(request)
        except web.HTTPException:
            raise
        except Exception as e:  # noqa: BLE001 (any failure is a page naming it, not a 500)
            log.warning("%s: %s: %s", request.path, type(e).__name__, e)
            return self.render(
                request, "error.html", status=502, live=False, what=f"{type(e).__name__}: {e}"[:300]
            )

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.errors])
        app.router.add_get("/", self.index)
        app.router.add_get("/provider/{addr}", self.provider)
        app.router.add_get("/job/{job_id}", self.job)
        app.router.add_get("/tx/{hash}", self.tx)
        app.router.add_get("/search", self.search)
        app.router.add_get("/account/{addr}", self.account)
        app.router.add_get("/validator/{addr}", self.validator)
        app.router.add_get("/block/{height}", self.block)
        app.router.add_get("/api/snapshot", self.api_snapshot)
        app.router.add_static("/static/", HERE / "static")
        app.on_startup.append(self.on_startup)
        app.on_cleanup.append(self.on_cleanup)
        return app


def _is_u64(text: str) -> bool:
    """A job id or height in a URL: ASCII decimal digits below 2^64 (``²`` or 5000 digits are
    not)."""
    return 0 < len(text) <= 20 and text.isascii() and text.isdigit() and int(text) < 1 << 64


def _is_address(text: str) -> bool:
    """A provider address in a URL: a ``loco1…`` bech32 address of the right length."""
    try:
        from_bech32(text)
    except (ErrInvalidAddress, ValueError):
        return False
    return text == text.strip()


# a connection gets this long to send a whole request, and is closed this long after its last
# answer: aiohttp's default (75 s) let a client that never finishes its headers, or drips one
# header line every few seconds, hold a socket and a handler for good (the blob server: 15 s)
IDLE_TIMEOUT_S = 15.0


def serve(
    node: str,
    host: str,
    port: int,
    poll: float = 2.0,
    idle_timeout: float = IDLE_TIMEOUT_S,
    trust: TrustStore | None = None,
    heldout: bool = False,
) -> None:
    ex = Explorer(node, poll, trust, heldout)
    shown = f"[{host}]" if ":" in host else host
    print(f"loconet explorer: http://{shown}:{port}/  (node {node}; Ctrl-C stops)", flush=True)
    web.run_app(
        ex.app(),
        host=host,
        port=port,
        print=None,
        handle_signals=True,
        keepalive_timeout=idle_timeout,
        logger=client_error_log(),  # a client's unparsable request: one line, no traceback
    )
