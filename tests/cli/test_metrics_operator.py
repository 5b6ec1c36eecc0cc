"""Metrics an operator alerts on (issue 36): no ``*_created`` series, a ``job`` label on the
rounds and the training loss, per-provider gauges read from the committed state of a real chain
(marketkit, in process), and a Grafana dashboard whose every metric exists."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from node.metrics import MeteredApplication, NodeMetrics, WorkerMetrics, pending_duties
from tests.kits.marketkit import job_in_commit, new_market, run_job

ROOT = Path(__file__).resolve().parents[2]


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def metered(m: Any) -> Any:
    """MeteredApplication's commit-time figures over a marketkit chain's store (the methods only
    read ``store``, ``metrics`` and ``_block_times``)."""
    fake = SimpleNamespace(
        store=m.store, metrics=NodeMetrics(CollectorRegistry()), _block_times=[0.0, 10.0]
    )
    due = MeteredApplication._count_rounds(fake)  # type: ignore[arg-type]
    MeteredApplication._provider_gauges(fake, due)  # type: ignore[arg-type]
    return fake


def test_no_created_series() -> None:
    node, worker = NodeMetrics(CollectorRegistry()), WorkerMetrics(CollectorRegistry())
    node.blocks.inc()
    node.txs.labels("check", "", "0").inc()
    worker.step(2.0, 0.1, 1)
    for reg in (node.registry, worker.registry):
        text = generate_latest(reg).decode()
        assert "_created" not in text, [ln for ln in text.splitlines() if "_created" in ln][:3]


def test_training_loss_and_round_by_job() -> None:
    w = WorkerMetrics(CollectorRegistry())
    w.step(3.5, 0.2, 7)
    w.step(2.5, 0.2, 8)
    w.round_trained(8, 4, 40, 12.5)
    s = samples(w.registry)
    assert s[("loconet_training_loss", (("job", "7"),))] == 3.5
    assert s[("loconet_training_loss", (("job", "8"),))] == 2.5
    assert s[("loconet_training_round", (("job", "8"),))] == 4
    assert s[("loconet_training_round_seconds", (("job", "8"),))] == 12.5


def test_rounds_by_job_and_next_duty_in_the_commit_window() -> None:
    m, r = job_in_commit(n_providers=3)
    fake = metered(m)
    s = samples(fake.metrics.registry)
    assert s[("loconet_rounds", (("job", "1"), ("phase", "commit")))] == 1
    due = pending_duties(r)
    assert {d for _, d in due} == {"commit"} and len(due) == len(r.participants)
    from abci_app.codec.address import to_bech32

    for p in r.participants:
        a = to_bech32(p.address)
        left = s[("loconet_provider_next_duty_blocks", (("duty", "commit"), ("provider", a)))]
        assert left == r.commit_deadline - m.height > 0
        # at the mean block time of the blocks seen (10 s here)
        secs = s[("loconet_provider_next_duty_seconds", (("duty", "commit"), ("provider", a)))]
        assert secs == left * 10.0


def test_provider_gauges_after_a_job_with_a_missed_commit() -> None:
    m = new_market(n_providers=3)
    m.create_job(rounds=2)
    lazy = m.providers[0].address
    run_job(m, 1, skip_commit=frozenset({lazy}))
    s = samples(metered(m).metrics.registry)
    from abci_app.codec.address import to_bech32
    from abci_app.jobs import sla

    assert not any(k[0] == "loconet_rounds" for k in s)  # the job is over: no open round
    assert not any(k[0] == "loconet_provider_next_duty_blocks" for k in s)  # nothing due
    for k in m.providers:
        a, p, rec = to_bech32(k.address), m.provider(k.address), sla.get_sla(m.store, k.address)
        assert p is not None
        assert s[("loconet_provider_reputation", (("provider", a),))] == p.reputation
        assert s[("loconet_provider_bond_uloco", (("provider", a),))] == p.bond
        earned = rec.earned_participant + rec.earned_verifier + rec.earned_bounty
        assert s[("loconet_provider_earned_uloco", (("provider", a),))] == earned
        missed = s[("loconet_provider_missed_duties", (("duty", "commit"), ("provider", a)))]
        assert missed == rec.commits_due - rec.committed_on_time
    a = to_bech32(lazy)
    assert s[("loconet_provider_missed_duties", (("duty", "commit"), ("provider", a)))] >= 1
    assert s[("loconet_provider_slashed_uloco", (("provider", a),))] > 0


def test_grafana_dashboard_names_only_metrics_that_exist() -> None:
    """Every ``loconet_*`` name in networks/grafana/loconet.json is one node/metrics.py exports
    (a histogram's ``_bucket``/``_sum``/``_count``, a counter's ``_total``), and the per-provider
    gauges are on it."""
    node, worker = NodeMetrics(CollectorRegistry()), WorkerMetrics(CollectorRegistry())
    exported: set[str] = set()
    for reg in (node.registry, worker.registry):
        for fam in reg.collect():
            base = fam.name
            exported |= {base, base + "_total", base + "_bucket", base + "_sum", base + "_count"}
    dash = json.loads((ROOT / "networks/grafana/loconet.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    named = {n for e in exprs for n in re.findall(r"\bloconet_[a-z_]+", e)}
    assert named and named <= exported, named - exported
    for want in (
        "loconet_provider_reputation",
        "loconet_provider_bond_uloco",
        "loconet_provider_earned_uloco",
        "loconet_provider_missed_duties",
        "loconet_provider_next_duty_seconds",
    ):
        assert want in named, want
    assert any("by (job, phase)" in e for e in exprs)
