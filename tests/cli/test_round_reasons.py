"""Why an accepted update is paid 0 or loses reputation, said where the numbers are (issue 36):
``loconet query round``'s table (node/client/market_render.py) and the explorer's job and provider
pages read the same reasons, derived from the chain's round JSON of a real (in-process) chain."""

from __future__ import annotations

from typing import Any

from abci_app.codec.address import to_bech32
from abci_app.jobs import keeper as jobs_keeper
from abci_app.jobs.queries import job_to_json, round_to_json
from node.client.market_render import reputation_reason, reward_reason, round_table
from node.explorer import views
from node.explorer.data import Snapshot
from node.explorer.server import make_env
from tests.kits.marketkit import agg_hash, new_market, run_job


def rounds_of(m: Any) -> list[dict[str, Any]]:
    return [round_to_json(r) for r in jobs_keeper.iterate_rounds(m.store, 1)]


def test_an_accepted_update_that_did_not_attest_is_unpaid_and_loses_reputation() -> None:
    m = new_market(n_providers=6)
    m.create_job(rounds=1, participants_per_round=4)
    silent: set[bytes] = set()

    def attest(addr: bytes, j: int, r: int) -> bytes | None:
        if not silent:  # the first participant asked never attests
            silent.add(addr)
        return None if addr in silent else agg_hash(j, r)

    run_job(m, 1, attest=attest)
    (r,) = rounds_of(m)
    assert r["attested_model_hash"], "the others still reach the quorum"
    lazy = next(p for p in r["participants"] if p["address"] == to_bech32(next(iter(silent))))
    assert lazy["outcome"] == "accepted" and lazy["reward"] == 0 and lazy["reputation_delta"] < 0
    assert "did not attest" in reward_reason(r, lazy)
    assert "did not attest" in reputation_reason(r, lazy)
    paid = next(p for p in r["participants"] if p["reward"] > 0)
    assert reward_reason(r, paid) == ""
    text = round_table(r)
    assert f"why: {lazy['address']} reward 0: it did not attest" in text
    assert f"why: {lazy['address']} reputation {lazy['reputation_delta']:+d}" in text
    assert f"why: {paid['address']}" not in text

    # the explorer's job page says it beside the number
    job = job_to_json(m.job(1))
    job["round_records"], job["txs"] = [r], {}
    snap = Snapshot(
        height=m.height,
        latest_height=m.height + 1,
        chain_id="loconet-test",
        moniker="n0",
        latest_time="2026-12-01T01:02:03Z",
        app_hash="AB" * 32,
        block_time_ms=500,
        validators=[],
        providers=[],
        jobs=[job],
        proven_keys=1,
    )
    html = (
        make_env()
        .get_template("job.html")
        .render(
            snap=snap, error="", node="n", live=False, poll_ms=2000, updated="", j=job, dash=None
        )
    )
    assert "why 0: it did not attest the round" in html
    rec = views.provider_record(lazy["address"], [job])
    assert "did not attest" in rec["rounds"][0]["why"]["reward"]


def test_no_quorum_means_nobody_is_paid_and_says_so() -> None:
    m = new_market(n_providers=3)
    m.create_job(rounds=1)
    run_job(m, 1, attest=lambda a, j, r: None)  # nobody attests: no model, no pay
    (r,) = rounds_of(m)
    assert not r["attested_model_hash"]
    for p in r["participants"]:
        if p["outcome"] == "accepted":
            assert "no model reached the 2/3 attestation quorum" in reward_reason(r, p)
