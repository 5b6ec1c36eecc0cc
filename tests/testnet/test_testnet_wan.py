"""``loconet testnet up --wan 100ms:100mbit`` on real components: 4 real CometBFT validators whose
every p2p link crosses a real toxiproxy (built by ``make setup``). The blocks agree; the toxics
read back from toxiproxy's API are the configured ones and a measured round trip through a link
proxy takes at least the RTT; a partitioned validator leaves the other three producing and
catches up once healed; ``down`` stops toxiproxy and ``up`` brings the proxies back."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from node.local import wan
from node.local.manifest import NodeInfo, load, nodes_of
from node.ports import find_free_base, random_bases
from tests.kits.tnkit import app_hash_at, cli, height, wait_for

pytestmark = pytest.mark.integration

N = 4
RTT_MS = 100
RATE_KBS = 12_500  # 100 mbit/s


def wan_base_port() -> int:
    """A base port (below Linux's ephemeral range) with the plain testnet's ports and the WAN's
    (toxiproxy's API, every link proxy) free."""
    offs = [100 * i + k for i in range(N + 1) for k in (0, 1, 2, 4, 5, 24)]
    offs += wan.port_offsets(N)
    return find_free_base([b + 56 for b in random_bases(20_000, 32_000, 100)], offs)


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[NodeInfo]]]:
    d = tmp_path_factory.mktemp("wan") / "net"
    base = wan_base_port()
    try:
        cli(
            "testnet",
            "up",
            "--dir",
            str(d),
            "--validators",
            str(N),
            "--base-port",
            str(base),
            "--wan",
            f"{RTT_MS}ms:100mbit",
            "--timeout",
            "60",
        )
        yield d, nodes_of(load(d))
    finally:
        if (d / "testnet.json").exists():
            cli("testnet", "down", "--dir", str(d), check=False)


def agree(nodes: list[NodeInfo], at_least: int) -> int:
    """Wait until every node is at ``at_least`` or more; the height all agree on."""
    wait_for(
        f"every node at height {at_least}",
        lambda: all(height(n) >= at_least for n in nodes),
        timeout=40,
    )
    h = min(height(n) for n in nodes)
    hashes = {n.name: app_hash_at(n, h) for n in nodes}
    assert len(set(hashes.values())) == 1, hashes
    return h


def handshake_rtt(port: int) -> tuple[float, float]:
    """(seconds from connect to the peer's first bytes, seconds from our reply to its next
    bytes) over a raw TCP connection to a p2p link proxy: CometBFT's secret connection sends its
    ephemeral key at once, and its sealed auth signature as soon as it has read ours, so the
    second figure is one full round trip through the proxy's toxics."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        t0 = time.monotonic()
        assert s.recv(64)  # its ephemeral X25519 key (length-delimited BytesValue)
        t1 = time.monotonic()
        s.sendall(b"\x22\x0a\x20" + os.urandom(32))  # ours, in the same framing
        t2 = time.monotonic()
        assert s.recv(4096)  # its first sealed frame
        t3 = time.monotonic()
    return t1 - t0, t3 - t2


def test_wan_blocks_toxics_and_latency(net: tuple[Path, list[NodeInfo]]) -> None:
    d, nodes = net
    m = load(d)
    assert m["wan"] == {"spec": "100ms:100mbit", "rtt_ms": RTT_MS, "rate_kbs": RATE_KBS}
    h = agree(nodes, 3)

    # the configuration, read back from toxiproxy: a proxy per directed link, enabled, with the
    # configured toxics; every node dials its peers through them
    w = wan.Wan(d)
    proxies = w.proxies()
    assert sorted(proxies) == sorted(
        f"p2p-{a.name}-{b.name}" for a in nodes for b in nodes if a is not b
    )
    base = m["base_port"]
    for a in nodes:
        for b in nodes:
            if a is b:
                continue
            p = proxies[f"p2p-{a.name}-{b.name}"]
            port = wan.link_port(base, int(a.name[4:]), int(b.name[4:]))
            assert (p["listen"], p["upstream"], p["enabled"]) == (
                f"127.0.0.1:{port}",
                f"127.0.0.1:{b.p2p}",
                True,
            )
            toxics = {t["name"]: (t["type"], t["stream"], t["attributes"]) for t in p["toxics"]}
            assert toxics == {
                "latency_up": ("latency", "upstream", {"latency": RTT_MS // 2, "jitter": 0}),
                "latency_down": ("latency", "downstream", {"latency": RTT_MS // 2, "jitter": 0}),
                "bandwidth_up": ("bandwidth", "upstream", {"rate": RATE_KBS}),
                "bandwidth_down": ("bandwidth", "downstream", {"rate": RATE_KBS}),
            }
        cfg = (a.path / "config" / "config.toml").read_text()
        peers = next(ln for ln in cfg.splitlines() if ln.startswith("persistent_peers ="))
        i = int(a.name[4:])
        for b in nodes:
            if b is not a:
                assert f"{b.node_id}@127.0.0.1:{wan.link_port(base, i, int(b.name[4:]))}" in peers
        assert f":{nodes[(i + 1) % N].p2p}" not in peers  # never the peer's own p2p port

    # measured (no RPC): the latency is there. Lower bounds only (a loaded machine is slower).
    one_way, rtt = min(handshake_rtt(wan.link_port(base, 0, 1)) for _ in range(3))
    assert one_way >= 0.040, one_way  # 50 ms downstream
    assert rtt >= 0.080, rtt  # 100 ms round trip

    # and blocks keep coming through the WAN, agreeing
    t0 = time.monotonic()
    h2 = agree(nodes, h + 5)
    print(f"WAN {RTT_MS} ms: ~{(time.monotonic() - t0) / (h2 - h):.2f} s per block; RTT {rtt:.3f}")


def test_partition_and_heal(net: tuple[Path, list[NodeInfo]]) -> None:
    d, nodes = net
    victim, others = nodes[3], nodes[:3]
    w = wan.Wan(d)
    cut = w.partition(victim.name)
    try:
        assert sorted(cut) == sorted(w.partitioned())
        assert len(cut) == 2 * (N - 1)  # its links both ways, nothing else
        assert all(victim.name in p for p in cut)
        h_cut = max(height(n) for n in nodes)
        # the other three (3/4 of the power) go on; the victim cannot commit alone
        h_others = wait_for(
            "the other three 4 blocks past the cut",
            lambda: min(height(n) for n in others) >= h_cut + 4 and h_cut + 4,
            timeout=30,
        )
        agree(others, h_others)
        assert height(victim) <= h_cut + 1
    finally:
        w.heal(victim.name)
    assert w.partitioned() == []
    target = max(height(n) for n in others)
    wait_for(f"{victim.name} back at height {target}", lambda: height(victim) >= target, timeout=40)
    agree(nodes, target)


def test_down_stops_toxiproxy_and_up_brings_the_wan_back(net: tuple[Path, list[NodeInfo]]) -> None:
    d, nodes = net
    api = f"http://127.0.0.1:{wan.api_port(load(d)['base_port'])}"
    h = min(height(n) for n in nodes)
    r = cli("testnet", "down", "--dir", str(d))
    assert "toxiproxy" in r.stdout
    assert wan.server_pid(d) is None
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{api}/version", timeout=2)
    r = cli("testnet", "up", "--dir", str(d), "--timeout", "60")  # no --wan: the manifest's
    assert "WAN 100ms:100mbit" in r.stdout, r.stdout
    proxies = wan.Wan(d).proxies()
    assert len(proxies) == N * (N - 1) and all(p["enabled"] for p in proxies.values())
    assert all(len(p["toxics"]) == 4 for p in proxies.values())
    agree(nodes, h + 2)
