"""``loconet testnet up --wan RTT:BANDWIDTH`` (node/local/wan.py): the spec parser, the proxy
layout a manifest gets, and the CLI refusing a bad spec before it writes anything. No processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from node.local.manifest import NodeInfo, TestnetError
from node.local.testnet import persistent_peers
from node.local.wan import (
    MAX_WAN_NODES,
    WanSpec,
    api_port,
    link_port,
    parse_wan,
    plan_proxies,
    port_offsets,
    wanted_toxics,
    worker_listen_port,
)
from tests.kits.tnkit import cli


@pytest.mark.parametrize(
    ("text", "rtt_ms", "rate_kbs"),
    [
        ("100ms:100mbit", 100, 12_500),  # 100e6 bit/s = 12.5e6 B/s = 12,500 KB/s
        ("0.1s:100mbit", 100, 12_500),
        ("1s:1gbit", 1000, 125_000),
        ("250ms:800kbit", 250, 100),
        ("101ms:8kbit", 101, 1),  # odd RTT: 50 up, 51 down; 8 kbit is the smallest rate
        ("0ms:10mbit", 0, 1250),  # bandwidth only
        ("100MS:100Mbit", 100, 12_500),  # case-insensitive
        (" 40ms : 1.5mbit ", 40, 187),  # spaces ignored; 187.5 KB/s rounded down
        ("10s:100gbit", 10_000, 12_500_000),  # the largest of each
    ],
)
def test_valid(text: str, rtt_ms: int, rate_kbs: int) -> None:
    spec = parse_wan(text)
    assert spec is not None
    assert (spec.rtt_ms, spec.rate_kbs) == (rtt_ms, rate_kbs)
    assert spec.latency_up_ms + spec.latency_down_ms == rtt_ms
    assert 0 <= spec.latency_down_ms - spec.latency_up_ms <= 1
    assert parse_wan(spec.text) == spec  # the stored text parses back to the same


def test_off() -> None:
    assert parse_wan("off") is None and parse_wan("none") is None


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("100ms:100", "has no unit: write 100kbit"),  # unit-less bandwidth
        ("100:100mbit", "has no unit: write 100ms"),  # unit-less RTT
        ("100ms:12500", "units: kbit, mbit, gbit"),
        ("100ms:100mbps", "unknown bandwidth unit 'mbps'"),
        ("100ms:100MB", "unknown bandwidth unit 'mb'"),
        ("100us:100mbit", "unknown RTT unit 'us'"),
        ("100ms", "write RTT:BANDWIDTH"),
        ("100ms:", "write RTT:BANDWIDTH"),
        (":100mbit", "write RTT:BANDWIDTH"),
        ("", "write RTT:BANDWIDTH"),
        ("fast:100mbit", "is not a number"),
        ("-5ms:100mbit", "is not a number"),
        ("1e3ms:100mbit", "is not a number"),
        ("100ms:100mbit:1", "is not a number"),
        ("1.5ms:100mbit", "whole number of milliseconds"),
        ("100ms:0mbit", "bandwidth 0 carries nothing"),  # zero
        ("100ms:0.0kbit", "bandwidth 0 carries nothing"),
        ("100ms:7kbit", "at least 8kbit"),  # below 1 KB/s
        ("11s:100mbit", "more than 10s"),  # huge
        ("100ms:101gbit", "at most 100gbit"),
        ("100ms:" + "9" * 30 + "gbit", "too large"),
        ("9" * 5000 + "ms:1mbit", "too large"),
    ],
)
def test_invalid(text: str, says: str) -> None:
    with pytest.raises(TestnetError) as e:
        parse_wan(text)
    msg = str(e.value)
    assert says in msg, msg
    assert msg.startswith(f"bad --wan {text!r}")


def _node(i: int, base: int) -> NodeInfo:
    o = base + 100 * i
    return NodeInfo(f"node{i}", f"/x/node{i}", o, o + 1, o + 2, o + 4, f"{i:040x}", "A" * 40)


def test_layout() -> None:
    """Node i dials node j at base + 100·i + 40 + j, forwarded to j's p2p port; each worker's
    endpoint port is its proxy, the worker listens one up; nothing collides with the plain
    testnet's ports (p2p, RPC, ABCI, metrics, app metrics, blob) or with each other."""
    base = 30_056
    nodes = [_node(i, base) for i in range(4)]
    m = {
        "base_port": base,
        "nodes": [
            {k: getattr(n, k) for k in NodeInfo.__dataclass_fields__ if k != "operator_key"}
            for n in nodes
        ],
        "wan": WanSpec(100, 12_500, "100ms:100mbit").to_json(),
        "workers": [
            {
                "name": f"provider{i}",
                "key": f"provider{i}",
                "address": "",
                "dir": "/x",
                "blob_port": base + 24 + 100 * i,
                "nodes": [],
            }
            for i in range(5)  # more workers than nodes
        ],
    }
    plan = {p.name: p for p in plan_proxies(m)}
    assert len(plan) == 4 * 3 + 5
    assert plan["p2p-node2-node1"].listen == link_port(base, 2, 1) == base + 241
    assert plan["p2p-node2-node1"].upstream == nodes[1].p2p
    assert plan["blob-provider4"].listen == base + 424
    assert plan["blob-provider4"].upstream == worker_listen_port(base + 424, True) == base + 425
    assert worker_listen_port(base + 424, False) == base + 424  # no WAN: as before
    peers = persistent_peers(nodes, "node2", base).split(",")
    assert peers == [f"{nodes[i].node_id}@127.0.0.1:{link_port(base, 2, i)}" for i in (0, 1, 3)]
    # without a WAN: the plain p2p ports, exactly as before
    assert persistent_peers(nodes, "node2") == ",".join(
        f"{n.node_id}@127.0.0.1:{n.p2p}" for n in nodes if n.name != "node2"
    )
    plain = {base + 100 * i + k for i in range(5) for k in (0, 1, 2, 4, 5, 24)}
    ours = [p.listen for p in plan.values() if p.name.startswith("p2p")] + [api_port(base)]
    ours += [p.upstream for p in plan.values() if p.name.startswith("blob")]
    assert len(set(ours)) == len(ours) and not set(ours) & plain
    assert sorted(base + o for o in port_offsets(4, 5)) == sorted(ours)
    assert plan_proxies({**m, "wan": None}) == []


def test_toxics() -> None:
    t = wanted_toxics(WanSpec(101, 12_500, "101ms:100mbit"))
    assert t["latency_up"] == {
        "type": "latency",
        "stream": "upstream",
        "attributes": {"latency": 50, "jitter": 0},
    }
    assert t["latency_down"]["attributes"]["latency"] == 51
    assert t["latency_down"]["stream"] == "downstream"
    assert t["bandwidth_up"]["attributes"] == t["bandwidth_down"]["attributes"] == {"rate": 12_500}
    assert set(wanted_toxics(WanSpec(0, 5, "0ms:40kbit"))) == {"bandwidth_up", "bandwidth_down"}


def test_too_many_nodes() -> None:
    m = {
        "base_port": 10_000,
        "nodes": [
            {k: getattr(_node(i, 10_000), k) for k in ("name", "home", "p2p", "rpc", "abci")}
            | {"metrics": 0, "node_id": "", "validator_address": ""}
            for i in range(MAX_WAN_NODES + 1)
        ],
        "wan": WanSpec(100, 12_500, "100ms:100mbit").to_json(),
    }
    with pytest.raises(TestnetError, match=f"at most {MAX_WAN_NODES} nodes"):
        plan_proxies(m)


def test_cli_refuses_before_writing(tmp_path: Path) -> None:
    d = tmp_path / "net"
    r = cli("testnet", "up", "--dir", str(d), "--wan", "100ms:100", check=False)
    assert r.returncode != 0
    assert "has no unit: write 100kbit" in r.stderr, r.stderr
    assert not d.exists()
    r = cli(
        "testnet", "up", "--dir", str(d), "--validators", "51", "--wan", "1ms:1mbit", check=False
    )
    assert r.returncode != 0 and "at most 50 nodes" in r.stderr, r.stderr
    assert not d.exists()
