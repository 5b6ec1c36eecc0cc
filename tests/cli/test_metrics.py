"""Prometheus metrics (issue 13 item 2): the app's /metrics and CometBFT's, scraped during a real
node run and parsed with prometheus_client's parser; the worker's helper on its own registry."""

from __future__ import annotations

import json

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from tests.kits.clikit import run
from tests.kits.nodekit import Node


def scrape(url: str) -> dict[str, list]:
    text = httpx.get(url, timeout=10).text
    fams: dict[str, list] = {}
    for fam in text_string_to_metric_families(text):
        fams.setdefault(fam.name, []).extend(fam.samples)
    return fams


def value(fams: dict[str, list], name: str, **labels: str) -> float:
    return sum(
        s.value
        for samples in fams.values()
        for s in samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


@pytest.mark.integration
def test_node_metrics_scraped_during_a_run(tmp_path):
    node = Node(tmp_path / "home")
    info = node.init()
    home = str(node.home)
    node.start()
    try:
        node.wait_height(3)
        bob = json.loads(run("keys", "add", "bob", "--home", home, "-o", "json").stdout)["address"]
        assert (
            run(
                "tx", "bank", "send", bob, "1loco", "--from", "validator", "--home", home
            ).returncode
            == 0
        )
        bad = run(
            "tx",
            "bank",
            "send",
            info["validator_account"],
            "10loco",
            "--from",
            "bob",
            "--home",
            home,
        )
        assert bad.returncode == 1  # bob has no funds for the fee: CheckTx rejects it
        h = node.wait_height(node.wait_height(1) + 1)
        app = scrape(f"http://127.0.0.1:{node.ports.metrics + 1}/metrics")
        assert value(app, "loconet_blocks_total") >= 3 and value(app, "loconet_commits_total") >= 3
        assert value(app, "loconet_height") >= h - 1
        assert value(app, "loconet_block_execution_seconds_count") == value(
            app, "loconet_blocks_total"
        )
        assert value(app, "loconet_txs_total", stage="block", code="0") >= 1
        # the rejection, by code
        assert value(app, "loconet_txs_total", stage="check", codespace="bank") >= 1
        assert value(app, "loconet_events_total", type="transfer") >= 1
        assert {"loconet_rounds", "loconet_verdicts", "loconet_slashes"} <= set(app)
        assert value(app, "loconet_rounds", phase="commit") == 0
        comet = scrape(f"http://127.0.0.1:{node.ports.metrics}/metrics")
        assert value(comet, "cometbft_consensus_height") >= h
        # no terminal, no --log-console: cometbft's log stays in its file
        assert "executed block" not in (node.home / "node.out").read_text()
        assert "executed block" in (node.home / "cometbft.log").read_text()
    finally:
        node.stop()


def test_worker_metrics_helper():
    from node.metrics import WorkerMetrics

    m = WorkerMetrics(CollectorRegistry())
    m.blob_in(1000)
    m.blob_out(250)
    m.step(2.5, 0.02)
    m.step(2.25, 0.03)
    m.round_done(True)
    from prometheus_client import generate_latest

    fams = {}
    for fam in text_string_to_metric_families(generate_latest(m.registry).decode()):
        fams.setdefault(fam.name, []).extend(fam.samples)
    assert value(fams, "loconet_blob_bytes_total", direction="in") == 1000
    assert value(fams, "loconet_blob_bytes_total", direction="out") == 250
    assert value(fams, "loconet_training_loss") == 2.25
    assert value(fams, "loconet_training_steps_total") == 2
    assert value(fams, "loconet_training_step_seconds_count") == 2
    assert value(fams, "loconet_rounds_done_total", result="committed") == 1


@pytest.mark.integration
def test_busy_metrics_port_does_not_stop_the_node(tmp_path):
    import socket

    node = Node(tmp_path / "home")
    node.init()
    blocker = socket.socket()
    blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    blocker.bind(("127.0.0.1", node.ports.metrics + 1))
    blocker.listen(1)
    node.start()
    try:
        node.wait_height(2)
        assert "app metrics off" in (node.home / "node.out").read_text()
    finally:
        node.stop()
        blocker.close()
