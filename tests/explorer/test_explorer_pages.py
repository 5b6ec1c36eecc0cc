"""The explorer's derivations, charts and templates over real chain data (a marketkit chain run
in-process), without a node or a browser (tests/integration/test_explorer.py does both)."""

from __future__ import annotations

import itertools
import re

import pytest

from abci_app.jobs import keeper as jobs_keeper
from abci_app.jobs import sla
from abci_app.jobs.queries import job_to_json, round_to_json, sla_to_json
from abci_app.providers.queries import provider_to_json
from node.explorer import svg, views
from node.explorer.data import Snapshot
from node.explorer.server import make_env
from tests.kits.marketkit import new_market, run_job


@pytest.fixture(scope="module")
def snap() -> Snapshot:
    m = new_market(n_providers=3)
    m.create_job(rounds=2)
    run_job(m, 1, skip_commit=frozenset({m.providers[0].address}))
    job = job_to_json(m.job(1))
    job["round_records"] = [round_to_json(r) for r in jobs_keeper.iterate_rounds(m.store, 1)]
    job["txs"] = {
        "0": [
            {
                "kind": "commit",
                "actor": job["round_records"][0]["participants"][0]["address"],
                "target": job["round_records"][0]["participants"][0]["address"],
                "hash": "AB" * 32,
                "height": 5,
            }
        ]
    }
    provs = []
    for k in m.providers:
        p = provider_to_json(m.provider(k.address))
        p["sla"] = sla_to_json(k.address, sla.get_sla(m.store, k.address))
        provs.append(p)
    hist = {p["address"]: [(1, 5000), (m.height, p["reputation"])] for p in provs}
    return Snapshot(
        height=m.height,
        latest_height=m.height + 1,
        chain_id="loconet-test",
        moniker="n0",
        latest_time="2026-12-01T01:02:03.456Z",
        app_hash="AB" * 32,
        block_time_ms=550,
        validators=[{"address": "CD" * 20, "power": 100}],
        providers=provs,
        jobs=[job],
        proven_keys=7,
        reputation_history=hist,
    )


def test_rewards_over_time_adds_up_to_what_rounds_paid(snap: Snapshot) -> None:
    rw = views.rewards_over_time(snap.jobs)
    paid = sum(r["reward_paid"] for r in snap.jobs[0]["round_records"])
    vpaid = sum(r["verifier_paid"] for r in snap.jobs[0]["round_records"])
    assert rw["participant"][-1][1] == paid and rw["verifier"][-1][1] == vpaid
    assert [h for h, _ in rw["participant"]] == sorted(
        r["finalized_height"] for r in snap.jobs[0]["round_records"]
    )
    assert all(a[1] <= b[1] for a, b in itertools.pairwise(rw["participant"]))  # cumulative


def test_provider_record_and_earnings_match_the_sla_figures(snap: Snapshot) -> None:
    for p in snap.providers:
        rec = views.provider_record(p["address"], snap.jobs)
        assert sum(x["amount"] for x in rec["payouts"]) == p["sla"]["earned_total"]
        assert sum(x["amount"] for x in rec["slashes"]) == p["sla"]["slashed"]
        assert sum(r["role"] == "participant" for r in rec["rounds"]) == p["sla"]["rounds_drawn"]
        pts = views.earnings_over_time(p["address"], snap.jobs)
        assert (pts[-1][1] if pts else 0) == p["sla"]["earned_total"]


def test_lineage_and_loss_curve(snap: Snapshot) -> None:
    j = snap.jobs[0]
    lin = views.lineage(j)
    assert lin[0]["label"] == "initial" and lin[0]["hash"] == j["spec"]["initial_model_hash"]
    assert [m["hash"] for m in lin[1:]] == [
        r["attested_model_hash"] for r in j["round_records"] if r["attested_model_hash"]
    ]
    lc = views.loss_curve(j)
    assert [x for x, _ in lc["loss after inner steps"]] == [0, 1] and lc["loss after inner steps"][
        0
    ][1] == pytest.approx(5.2)


def test_svg_charts() -> None:
    assert svg.nice_ticks(0, 1_000_000) == [0, 200_000, 400_000, 600_000, 800_000, 1_000_000]
    assert all(t == int(t) for t in svg.nice_ticks(3, 17, integer=True))
    chart = svg.line_chart(
        [("a", [(1, 2), (5, 9)]), ("b <x>", [(2, 1)])], title="T & U", x_label="h", y_label="v"
    )
    assert chart.count("<polyline") == 2 and "b &lt;x&gt;" in chart and "T &amp; U" in chart
    assert "no data yet" in svg.line_chart([], title="empty", x_label="x", y_label="y")
    segs = svg.phase_segments(
        {
            "open_height": 10,
            "commit_deadline": 15,
            "reveal_end": 19,
            "verdict_end": 23,
            "attest_end": 27,
        }
    )
    assert segs == [("commit", 10, 15), ("reveal", 15, 19), ("verdict", 19, 23), ("attest", 23, 27)]
    tl = svg.timeline(
        {
            "open_height": 10,
            "commit_deadline": 15,
            "reveal_end": 19,
            "verdict_end": 23,
            "attest_end": 27,
        },
        17,
    )
    assert tl.count("<rect") == 4 and 'class="now"' in tl
    strip = svg.duty_strip("1101", 64)
    assert (
        strip.count('class="kept"') == 3
        and strip.count('class="missed"') == 1
        and strip.count('class="empty"') == 60
    )


def test_templates_render_what_a_person_needs(snap: Snapshot) -> None:
    env = make_env()
    base = {
        "snap": snap,
        "error": "",
        "node": "http://127.0.0.1:26657",
        "live": True,
        "poll_ms": 2000,
        "updated": "01:02:03",
    }
    index = env.get_template("index.html").render(
        base,
        rewards_chart=views.rewards_chart(snap.jobs),
        reputation_chart=views.reputation_chart(snap.reputation_history),
    )
    for text in [
        "loconet-test",
        "0.55 s",
        snap.app_hash,
        "Rewards paid, cumulative",
        "job 1",
        "completed",
        "2 finalized / 2 opened / 2",
        "7 records",
    ]:
        assert text in index, text
    for p in snap.providers:
        assert f'href="/provider/{p["address"]}"' in index
    lazy = next(
        p for p in snap.providers if p["sla"]["commits_due"] > p["sla"]["committed_on_time"]
    )
    page = env.get_template("provider.html").render(base, address=lazy["address"], p=lazy)
    assert (
        "SLA figures" in page
        and "missed_commit" in page
        and f"{lazy['sla']['uptime_bps'] / 100:.2f} %" in page
    )
    job = env.get_template("job.html").render(base, j=snap.jobs[0])
    assert "Round 0" in job and "Round 1" in job and "slash: missed_commit" in job
    assert re.search(r'href="/tx/(AB){32}"', job)  # the commit linked to its tx
    assert job.count('class="timeline"') == 2
    # the live fragment is the page's main part only
    t = env.get_template("job.html")
    frag = "".join(t.blocks["main"](t.new_context({**base, "j": snap.jobs[0]})))
    assert "Round 0" in frag and "<header>" not in frag


class ChainClient:
    """``node.client.rpc.Client.abci_query`` answered by an in-process app (real store, real
    proofs); ``tamper(path, data)`` edits the JSON a dishonest node would send."""

    def __init__(self, m, tamper=None) -> None:
        self.m, self.tamper = m, tamper

    def abci_query(self, path, data=b"", height=0, prove=False):
        import json as _json

        from abci_app.pb import abci
        from node.client.rpc import QueryResult

        r = self.m.chain.app.query(abci.RequestQuery(path=path, height=height, prove=prove))
        value = r.value
        if self.tamper and r.code == 0:
            value = _json.dumps(self.tamper(path, _json.loads(value))).encode()
        return QueryResult(
            code=r.code,
            log=r.log,
            height=r.height,
            value=value,
            proof_ops=[{"type": o.type, "key": o.key, "data": o.data} for o in r.proof_ops.ops],
        )


def _collector(m, tamper=None):
    from node.explorer.data import Collector

    c = Collector.__new__(Collector)
    c.client, c.proven_keys = ChainClient(m, tamper), 0
    return c


def test_collector_rederives_from_proofs_and_refuses_a_lying_node() -> None:
    from node.client.proofs import ProofInvalid
    from node.explorer.data import Untrusted

    m = new_market(n_providers=3)
    m.create_job(rounds=1)
    run_job(m, 1)
    h = m.height
    root = m.store.root_at(h)
    c = _collector(m)
    provs = c._providers(h, root)
    assert len(provs) == 3 and all(
        c._sla(p["address"], h, root)["rounds_drawn"] >= 0 for p in provs
    )
    jobs = c._jobs(h, root)
    assert jobs[0]["status"] == "completed" and len(jobs[0]["round_records"]) == 1
    assert c.proven_keys == 3 + 3 + 1 + 1

    def richer(path, d):  # a node that inflates a provider's earnings
        if path.endswith("/sla"):
            d["earned_participant"] += 1
        return d

    with pytest.raises(Untrusted, match="disagrees with its own proof"):
        _collector(m, richer)._sla(provs[0]["address"], h, root)

    def reworded(path, d):  # ... or reports another round outcome
        if path.startswith("/rounds/"):
            d["rounds"][0]["participants"][0]["outcome"] = "fraud"
        return d

    with pytest.raises(Untrusted):
        _collector(m, reworded)._jobs(h, root)
    with pytest.raises(ProofInvalid):  # proofs checked against another app hash
        _collector(m)._providers(h, m.store.root_at(h - 1))


def test_invalid_on_chain_strings_are_escaped(snap: Snapshot) -> None:
    """On-chain strings (region, endpoint, moniker, memo, event attributes, a tx log) a hostile
    node or user chose: every page shows them as text, never as markup."""
    import copy

    evil = '"><script>alert(1)</script><img src=x onerror=alert(2)>'
    s = copy.deepcopy(snap)
    p = s.providers[0]
    p.update(region=evil, endpoint="http://a/" + evil)
    s.validators[0]["moniker"] = evil
    s.moniker, s.chain_id = evil, evil
    env = make_env()
    base = {
        "snap": s,
        "error": evil,
        "node": evil,
        "live": True,
        "poll_ms": 2000,
        "updated": "01:02:03",
    }
    tx = {
        "hash": "AB" * 32,
        "height": 3,
        "code": 5,
        "log": evil,
        "codespace": evil,
        "signer": p["address"],
        "fee": 1,
        "sequence": 0,
        "memo": evil,
        "messages": [{"type": evil, "body": {"x": evil}}],
        "events": [{"type": evil, "attributes": {evil: evil}}],
    }
    block = {
        "height": 3,
        "time": evil,
        "proposer": evil,
        "hash": evil,
        "app_hash": evil,
        "txs": [evil],
        "events": [{"type": evil, "attributes": {evil: evil}}],
    }
    pages = [
        env.get_template("index.html").render(base, rewards_chart="", reputation_chart=""),
        env.get_template("provider.html").render(base, address=p["address"], p=p),
        env.get_template("tx.html").render(base, t=tx),
        env.get_template("block.html").render(base, b=block),
        env.get_template("missing.html").render(base, what=evil),
        env.get_template("error.html").render(base, what=evil),
        views.reputation_chart({evil: [(1, 5000), (2, 6000)]}),
    ]
    for page in pages:
        assert "<script>" not in page and "<img" not in page
    assert all("&lt;script&gt;" in page for page in pages[1:6])  # shown, as text
