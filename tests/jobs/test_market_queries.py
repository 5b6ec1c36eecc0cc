"""ABCI queries of the market: paths, JSON, proofs against the app hash, history by height."""

import json

from abci_app.codec.address import to_bech32
from abci_app.encoding import decode_msg
from abci_app.jobs.queries import round_to_json
from abci_app.pb import abci, jobs_pb2
from abci_app.store import Proof, verify_proof
from tests.kits.marketkit import BOND, new_market, run_job


def q(m, path, height=0, prove=False):
    return m.chain.app.query(abci.RequestQuery(path=path, height=height, prove=prove))


def test_queries_and_proofs():
    m = new_market(n_providers=3)
    m.create_job(rounds=2)
    run_job(m, 1)
    a = to_bech32(m.providers[0].address)
    r = q(m, f"/provider/{a}", prove=True)
    assert r.code == 0 and json.loads(r.value)["bond"] == BOND
    root = m.store.root_at(r.height)
    for op in r.proof_ops.ops:
        proof = Proof.from_bytes(op.data)
        assert verify_proof(proof, root, op.key, proof.value)
    r = q(m, "/round/1/1", prove=True)
    d = json.loads(r.value)
    assert (
        d["phase"] == "finalized"
        and len(d["participants"]) == 2
        and d["participants"][0]["commitment"]
    )
    (op,) = r.proof_ops.ops
    proof = Proof.from_bytes(op.data)
    assert verify_proof(proof, m.store.root_at(r.height), op.key, proof.value)
    # a client re-derives the answer
    assert round_to_json(decode_msg(jobs_pb2.Round, proof.value)) == d
    assert json.loads(q(m, "/rounds/1?from=1&limit=5").value)["rounds"][0]["round"] == 1
    assert json.loads(q(m, "/rounds/1").value)["total"] == 2
    assert json.loads(q(m, "/job/1").value)["status"] == "completed"
    assert json.loads(q(m, "/jobs?status=completed").value)["total"] == 1
    assert json.loads(q(m, "/providers?status=active").value)["total"] == 3
    mp = json.loads(q(m, "/market_params", prove=True).value)
    assert (
        mp["providers"]["min_provider_stake"] == 1_000_000_000
        and mp["jobs"]["slash_fraction_fraud_bps"] == 5000
    )
    assert mp["jobs"]["min_fraud_verifiers"] == 3
    # history: the job as it was right after creation
    created = json.loads(q(m, "/job/1").value)["created_height"]
    old = json.loads(q(m, "/job/1", height=created).value)
    assert old["status"] == "active" and old["rounds_opened"] == 0


def test_query_errors():
    m = new_market(n_providers=1)
    assert q(m, "/job/9").code != 0
    assert q(m, "/job/x").code != 0
    assert q(m, "/round/1").code != 0
    assert q(m, "/provider/loco1xyz").code != 0
    assert q(m, "/providers?status=weird").code != 0


def test_round_table_renders():
    from node.client.market_render import round_table

    m = new_market(n_providers=3)  # two drawn, one to verify
    m.create_job(rounds=1)
    m.until(m.height + 1)
    lazy = m.round(1, 0).participants[0].address
    run_job(m, 1, skip_commit=frozenset({lazy}))
    text = round_table(json.loads(q(m, "/round/1/0").value))
    assert (
        "missed_commit" in text
        and "accepted" in text
        and "slashed:" in text
        and "phase finalized" in text
    )


def test_invalid_min_fraud_verifiers_param():
    import pytest

    from abci_app.jobs.params import params_from_json

    assert params_from_json({}).min_fraud_verifiers == 3
    assert params_from_json({"min_fraud_verifiers": 7}).min_fraud_verifiers == 7
    for bad in ({"min_fraud_verifiers": 0}, {"min_fraud_verifiers": 8}, {"max_verifiers": 2}):
        with pytest.raises(ValueError, match="min_fraud_verifiers"):
            params_from_json(bad)


def test_cli_market_params_json():
    """``loconet query market-params -o json`` exists (the market's params are not in /params)."""
    from node.cli.main import build_parser
    from node.cli.market import cmd_query_market_params

    a = build_parser().parse_args(["query", "market-params", "-o", "json", "--prove"])
    assert a.func is cmd_query_market_params and a.output == "json" and a.prove
