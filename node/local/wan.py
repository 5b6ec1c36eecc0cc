"""A WAN on one machine: ``loconet testnet up --wan RTT:BANDWIDTH`` (e.g. ``100ms:100mbit``) puts
latency and a bandwidth limit on every link between the testnet's nodes (CometBFT p2p) and on
every worker's blob endpoint (the workers fetch blobs from each other), through Shopify's
toxiproxy (``make setup`` builds it into ``.bin/toxiproxy-server``), driven over its HTTP API.

One toxiproxy server per testnet (``DIR/wan/toxiproxy.pid``, its log ``DIR/wan/toxiproxy.log``),
its API on 127.0.0.1:``base + 30``; ``testnet up`` starts it and (re)creates every proxy,
``testnet down`` stops it. The setting is ``"wan"`` in testnet.json, so ``up`` on an existing
folder brings the proxies back.

Proxies (each with four toxics: ``latency_up``/``latency_down``, RTT/2 each way, and
``bandwidth_up``/``bandwidth_down``, the rate each way):

- ``p2p-nodeI-nodeJ``, one per ordered pair of nodes: node I dials node J through
  127.0.0.1:``base + 100·I + 40 + J`` (I's ``persistent_peers`` names these addresses), which
  forwards to J's p2p port. A connection between two nodes therefore crosses exactly one proxy,
  whichever side dialed, and ``Wan.partition(node)`` can cut one node off from all the others
  (and only it). At most ``MAX_WAN_NODES`` nodes.
- ``blob-providerI``: the worker's registered blob endpoint (``base + 100·I + 24``, the same port
  as without a WAN, so the on-chain endpoint does not change) is the proxy; the worker itself
  listens one port up (``+ 25``). Every fetch of its blobs by a peer crosses the proxy.

toxiproxy's bandwidth toxic is per connection: two peers fetching from one worker at once get the
rate each (a per-link limit, not a shared uplink). Rates are in KB/s of 1,000 bytes, rounded
down (``100mbit`` = 12,500 KB/s).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import httpx

from node.local import procs
from node.local.manifest import NodeInfo, TestnetError, load, nodes_of, workers_of
from node.paths import PROJECT_ROOT
from node.ports import is_port_free

API_OFFSET = 30  # toxiproxy's API: base + 30
LINK_OFFSET = 40  # node i dials node j at base + 100·i + 40 + j
MAX_WAN_NODES = 50  # link ports 40..89 of each node's 100
BLOB_LISTEN_SHIFT = 1  # a worker behind its proxy listens one port above its endpoint (+25)
MAX_RTT_MS = 10_000
MAX_RATE_KBS = 12_500_000  # 100gbit
MARKER = "toxiproxy"  # in the server's command line (procs.running)

_NUM = r"(\d+(?:\.\d+)?)"
_RTT_UNITS = {"ms": Fraction(1), "s": Fraction(1000)}
_BW_UNITS = {"kbit": Fraction(10**3), "mbit": Fraction(10**6), "gbit": Fraction(10**9)}
_EXAMPLE = "e.g. --wan 100ms:100mbit (RTT in ms or s; bandwidth in kbit, mbit or gbit)"


@dataclass(frozen=True, slots=True)
class WanSpec:
    """A parsed ``--wan``: round-trip time in whole milliseconds, rate in KB/s (1,000 bytes)."""

    rtt_ms: int
    rate_kbs: int
    text: str  # as given (normalised to lower case, no spaces)

    @property
    def latency_up_ms(self) -> int:
        return self.rtt_ms // 2

    @property
    def latency_down_ms(self) -> int:
        return self.rtt_ms - self.rtt_ms // 2

    def to_json(self) -> dict[str, Any]:
        return {"spec": self.text, "rtt_ms": self.rtt_ms, "rate_kbs": self.rate_kbs}


def parse_wan(text: str) -> WanSpec | None:
    """``RTT:BANDWIDTH`` -> WanSpec; ``off`` -> None (no WAN). A bad spec raises TestnetError
    naming the fix."""
    s = text.strip().lower().replace(" ", "")
    if s in ("off", "none"):
        return None
    rtt_s, sep, bw_s = s.partition(":")
    if not sep or not rtt_s or not bw_s:
        raise TestnetError(f"bad --wan {text!r}: write RTT:BANDWIDTH, {_EXAMPLE}; or --wan off")
    return WanSpec(_parse_rtt(rtt_s, text), _parse_rate(bw_s, text), s)


def _number(part: str, units: dict[str, Fraction], what: str, given: str) -> Fraction:
    m = re.fullmatch(_NUM + r"([a-z]*)", part)
    if m is None:
        raise TestnetError(f"bad --wan {given!r}: {what} {part!r} is not a number, {_EXAMPLE}")
    num, unit = m.groups()
    if not unit:
        first = next(iter(units))
        raise TestnetError(
            f"bad --wan {given!r}: {what} {num!r} has no unit: write {num}{first} (units: "
            f"{', '.join(units)}), {_EXAMPLE}"
        )
    if unit not in units:
        raise TestnetError(
            f"bad --wan {given!r}: unknown {what} unit {unit!r} (use {', '.join(units)}), "
            f"{_EXAMPLE}"
        )
    if len(num) > 24:  # Fraction of a huge digit string: slow, and far past any limit anyway
        raise TestnetError(f"bad --wan {given!r}: {what} {part!r} is too large, {_EXAMPLE}")
    return Fraction(num) * units[unit]


def _parse_rtt(part: str, given: str) -> int:
    ms = _number(part, _RTT_UNITS, "RTT", given)
    if ms.denominator != 1:
        raise TestnetError(
            f"bad --wan {given!r}: RTT {part!r} is not a whole number of milliseconds "
            "(toxiproxy's latency is in ms)"
        )
    if ms > MAX_RTT_MS:
        raise TestnetError(
            f"bad --wan {given!r}: RTT {part!r} is more than {MAX_RTT_MS // 1000}s, far past "
            "CometBFT's timeouts: use a smaller RTT"
        )
    return int(ms)


def _parse_rate(part: str, given: str) -> int:
    bits = _number(part, _BW_UNITS, "bandwidth", given)
    if bits == 0:
        raise TestnetError(
            f"bad --wan {given!r}: bandwidth 0 carries nothing: give a rate (at least 8kbit); "
            "to cut a node off, partition it (node.local.wan.Wan.partition)"
        )
    kbs = int(bits / 8000)  # toxiproxy's rate: KB/s of 1,000 bytes, rounded down
    if kbs < 1:
        raise TestnetError(
            f"bad --wan {given!r}: bandwidth {part!r} is below toxiproxy's smallest rate, 1 KB/s "
            "(8kbit): use at least 8kbit"
        )
    if kbs > MAX_RATE_KBS:
        raise TestnetError(
            f"bad --wan {given!r}: bandwidth {part!r} is above 100gbit: use at most 100gbit "
            "(or no --wan for loopback speed)"
        )
    return kbs


def spec_of(m: dict[str, Any]) -> WanSpec | None:
    """The WAN of a testnet manifest (None: none)."""
    w = m.get("wan")
    if not w:
        return None
    spec = parse_wan(str(w.get("spec", "")) if isinstance(w, dict) else "")
    if spec is None:
        raise TestnetError('testnet.json: bad "wan" entry: `loconet testnet up --wan off`')
    return spec


# ------------------------------------------------------------------------------- ports


def api_port(base: int) -> int:
    return base + API_OFFSET


def link_port(base: int, i: int, j: int) -> int:
    """The port node ``i`` dials to reach node ``j`` (toxiproxy forwards it to j's p2p port)."""
    return base + 100 * i + LINK_OFFSET + j


def port_offsets(nodes: int, workers: int = 0) -> list[int]:
    """Offsets from the base port a WAN testnet of this size listens on, beyond the plain
    testnet's (tests pick a base with all of them free)."""
    offs = [API_OFFSET]
    offs += [100 * i + LINK_OFFSET + j for i in range(nodes) for j in range(nodes) if i != j]
    offs += [100 * i + 24 + BLOB_LISTEN_SHIFT for i in range(workers)]
    return offs


def check_size(nodes: int) -> None:
    if nodes > MAX_WAN_NODES:
        raise TestnetError(
            f"--wan supports at most {MAX_WAN_NODES} nodes (each node's link ports are base + "
            f"100·i + {LINK_OFFSET}..{LINK_OFFSET + MAX_WAN_NODES - 1}); this network would have "
            f"{nodes}"
        )


def _index(n: NodeInfo) -> int:
    return int(n.name[4:])


def peers(base: int, nodes: list[NodeInfo], me: NodeInfo) -> str:
    """``persistent_peers`` of node ``me`` in a WAN testnet: every other node through the proxy
    ``me`` dials it by."""
    i = _index(me)
    return ",".join(
        f"{n.node_id}@127.0.0.1:{link_port(base, i, _index(n))}" for n in nodes if n.name != me.name
    )


def worker_listen_port(blob_port: int, wan: bool) -> int:
    """Where a worker's blob server listens: its endpoint's port, or one above it behind a WAN
    proxy (the proxy takes the endpoint's port)."""
    return blob_port + BLOB_LISTEN_SHIFT if wan else blob_port


@dataclass(frozen=True, slots=True)
class Proxy:
    name: str
    listen: int
    upstream: int


def plan_proxies(m: dict[str, Any]) -> list[Proxy]:
    """Every proxy the testnet of manifest ``m`` needs (none without a WAN)."""
    if spec_of(m) is None:
        return []

    base = int(m["base_port"])
    nodes = nodes_of(m)
    check_size(len(nodes))
    out = [
        Proxy(f"p2p-{a.name}-{b.name}", link_port(base, _index(a), _index(b)), b.p2p)
        for a in nodes
        for b in nodes
        if a.name != b.name
    ]
    out += [
        Proxy(f"blob-{w.name}", w.blob_port, worker_listen_port(w.blob_port, True))
        for w in workers_of(m)
    ]
    return out


def wanted_toxics(spec: WanSpec) -> dict[str, dict[str, Any]]:
    """name -> toxic (type, stream, attributes) on every proxy."""
    out: dict[str, dict[str, Any]] = {}
    if spec.rtt_ms:
        out["latency_up"] = {
            "type": "latency",
            "stream": "upstream",
            "attributes": {"latency": spec.latency_up_ms, "jitter": 0},
        }
        out["latency_down"] = {
            "type": "latency",
            "stream": "downstream",
            "attributes": {"latency": spec.latency_down_ms, "jitter": 0},
        }
    for stream, short in (("upstream", "up"), ("downstream", "down")):
        out[f"bandwidth_{short}"] = {
            "type": "bandwidth",
            "stream": stream,
            "attributes": {"rate": spec.rate_kbs},
        }
    return out


# ------------------------------------------------------------------------------- the server


def toxiproxy_binary() -> str:
    """``.bin/toxiproxy-server`` (``make setup``), else ``$LOCONET_TOXIPROXY``, else
    ``toxiproxy-server`` on PATH."""
    local = PROJECT_ROOT / ".bin" / "toxiproxy-server"
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    env = os.environ.get("LOCONET_TOXIPROXY")
    if env:
        if not os.access(env, os.X_OK):
            raise TestnetError(
                f"LOCONET_TOXIPROXY={env} is not an executable file: fix the path or unset it"
            )
        return env
    found = shutil.which("toxiproxy-server")
    if found:
        return found
    raise TestnetError(
        "toxiproxy-server not found (--wan needs it): run `make setup` (it builds Shopify's "
        "toxiproxy into .bin/ with go install)"
    )


def wan_dir(d: Path) -> Path:
    return d / "wan"


def _pid_file(d: Path) -> Path:
    return wan_dir(d) / "toxiproxy.pid"


def server_pid(d: Path) -> int | None:
    """The pid of the testnet's toxiproxy server if it runs; else None."""
    return procs.running(_pid_file(d), MARKER)


def _api_url(m: dict[str, Any]) -> str:
    return f"http://127.0.0.1:{api_port(int(m['base_port']))}"


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/version", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def start_server(d: Path, m: dict[str, Any], timeout: float = 15.0) -> int:
    """Start the testnet's toxiproxy server unless it runs and answers on its API port; its pid."""
    url = _api_url(m)
    pid = server_pid(d)
    if pid is not None:
        if _answers(url):
            return pid
        procs.stop_group(pid, timeout=5)  # another base port (moved), or stuck
    binary = toxiproxy_binary()
    port = api_port(int(m["base_port"]))
    if not is_port_free(port):
        raise TestnetError(
            f"port {port} (toxiproxy's API, base port + {API_OFFSET}) is in use by another "
            "process: stop it, or move the network (`loconet testnet down`, then `loconet "
            "testnet up --base-port P`, same --dir)"
        )
    wan_dir(d).mkdir(parents=True, exist_ok=True)
    log = wan_dir(d) / "toxiproxy.log"
    pid = procs.spawn(
        [binary, "-host", "127.0.0.1", "-port", str(port)],
        log=log,
        pid_file=_pid_file(d),
        env={"LOG_LEVEL": "warn"},  # not a line per connection
    )
    deadline = time.monotonic() + timeout
    while not _answers(url):
        if not procs.alive(pid) or time.monotonic() > deadline:
            procs.stop_group(pid, kill=True, timeout=2)
            tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
            raise TestnetError(
                f"toxiproxy did not answer on {url} within {timeout:.0f}s"
                + (f": {' | '.join(tail)}" if tail else "")
                + f" (log {log})"
            )
        time.sleep(0.1)
    return pid


def stop_server(d: Path) -> list[str]:
    """Stop the testnet's toxiproxy server; ``["toxiproxy"]`` if it ran, else ``[]``."""
    pid = server_pid(d)
    if pid is None:
        return []
    procs.stop_group(pid, timeout=5)
    return ["toxiproxy"]


def up(d: Path, m: dict[str, Any]) -> Wan | None:
    """Bring the WAN of manifest ``m`` up: the server running, every proxy of ``plan_proxies``
    listening (enabled) with the configured toxics, stale proxies removed. Idempotent: proxies
    and toxics already as wanted are left alone (their connections stay open). Without a WAN in
    ``m`` a server still running from before is stopped, and None returned."""
    spec = spec_of(m)
    if spec is None:
        stop_server(d)
        return None
    check_size(len(nodes_of(m)))
    toxiproxy_binary()  # the error naming `make setup` before anything starts
    start_server(d, m)
    wan = Wan(d, m)
    wan.apply(plan_proxies(m), wanted_toxics(spec))
    return wan


class Wan:
    """A running testnet's toxiproxy, over its HTTP API (tests use ``partition``/``heal``)."""

    def __init__(self, d: Path, m: dict[str, Any] | None = None) -> None:
        self.d = d
        self.m = m if m is not None else load(d)
        self.spec = spec_of(self.m)
        if self.spec is None:
            raise TestnetError(f"the testnet in {d} has no WAN: `loconet testnet up --wan RTT:BW`")
        self.url = _api_url(self.m)

    # -- HTTP
    def _call(self, method: str, path: str, body: Any = None) -> Any:
        try:
            r = httpx.request(method, f"{self.url}{path}", json=body, timeout=10.0)
        except httpx.HTTPError as e:
            raise TestnetError(
                f"toxiproxy at {self.url} does not answer ({e}): `loconet testnet up --dir "
                f"{self.d}` starts it"
            ) from None
        if r.status_code >= 400:
            try:
                why = r.json().get("error", r.text)
            except ValueError:
                why = r.text
            raise TestnetError(f"toxiproxy {method} {path}: {r.status_code} {why}")
        return r.json() if r.content else None

    def proxies(self) -> dict[str, dict[str, Any]]:
        """name -> {name, listen, upstream, enabled, toxics: [...]} (GET /proxies)."""
        out: dict[str, dict[str, Any]] = self._call("GET", "/proxies")
        return out

    def toxics(self, proxy: str) -> dict[str, dict[str, Any]]:
        """The toxics on one proxy, by name."""
        return {t["name"]: t for t in self._call("GET", f"/proxies/{proxy}/toxics")}

    # -- setup
    def apply(self, plan: list[Proxy], toxics: dict[str, dict[str, Any]]) -> None:
        have = self.proxies()
        wanted = {p.name for p in plan}
        for name in sorted(set(have) - wanted):  # a removed node's, an old layout's
            self._call("DELETE", f"/proxies/{name}")
        missing = [
            p
            for p in plan
            if p.name not in have
            or have[p.name]["listen"] != f"127.0.0.1:{p.listen}"
            or have[p.name]["upstream"] != f"127.0.0.1:{p.upstream}"
        ]
        for p in missing:
            if p.name not in have and not is_port_free(p.listen):
                raise TestnetError(
                    f"port {p.listen} (WAN proxy {p.name}) is in use by another process: stop "
                    "it, or move the network (`loconet testnet down`, then `loconet testnet up "
                    "--base-port P`, same --dir)"
                )
        if missing:  # create or replace, all in one call
            self._call(
                "POST",
                "/populate",
                [
                    {
                        "name": p.name,
                        "listen": f"127.0.0.1:{p.listen}",
                        "upstream": f"127.0.0.1:{p.upstream}",
                        "enabled": True,
                    }
                    for p in missing
                ],
            )
            have = self.proxies()
        for p in plan:
            cur = {t["name"]: t for t in have[p.name].get("toxics") or []}
            for tname in sorted(set(cur) - set(toxics)):  # e.g. latency of an old RTT of 0
                self._call("DELETE", f"/proxies/{p.name}/toxics/{tname}")
            for tname, want in toxics.items():
                old = cur.get(tname)
                if old is None:
                    self._call(
                        "POST",
                        f"/proxies/{p.name}/toxics",
                        {"name": tname, "toxicity": 1.0, **want},
                    )
                elif old["attributes"] != want["attributes"] or old["stream"] != want["stream"]:
                    self._call("DELETE", f"/proxies/{p.name}/toxics/{tname}")
                    self._call(
                        "POST",
                        f"/proxies/{p.name}/toxics",
                        {"name": tname, "toxicity": 1.0, **want},
                    )
            if not have[p.name]["enabled"]:
                self._set_enabled(p.name, True)

    # -- partitions
    def _set_enabled(self, proxy: str, enabled: bool) -> None:
        self._call("POST", f"/proxies/{proxy}", {"enabled": enabled})

    def links_of(self, name: str) -> list[str]:
        """The proxies that carry ``name``'s traffic: a node's p2p links both ways (nodeI or I),
        or a worker's blob endpoint (providerI)."""
        names = list(self.proxies())
        node = f"node{name}" if name.isdigit() else name
        out = [
            p
            for p in names
            if p == f"blob-{name}"
            or (p.startswith("p2p-") and node in p.removeprefix("p2p-").split("-"))
        ]
        if not out:
            raise TestnetError(f"no WAN link of {name!r}: name a node (node2) or a worker")
        return sorted(out)

    def partition(self, name: str) -> list[str]:
        """Cut ``name`` off: every proxy of its links disabled (listener closed, open
        connections dropped; redials are refused). The proxies it cut."""
        links = self.links_of(name)
        for p in links:
            self._set_enabled(p, False)
        return links

    def heal(self, name: str) -> list[str]:
        """Undo ``partition``: its links enabled again (CometBFT redials its persistent peers
        within a few seconds)."""
        links = self.links_of(name)
        for p in links:
            self._set_enabled(p, True)
        return links

    def partitioned(self) -> list[str]:
        """The proxies disabled now."""
        return sorted(n for n, p in self.proxies().items() if not p["enabled"])
