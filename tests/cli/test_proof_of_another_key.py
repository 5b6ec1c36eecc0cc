"""A proof must be of the record asked about (attacker-review regression). ``--prove`` and the
explorer checked that each ProofOp verifies against the (trusted) app hash, not which key it
proves, so a lying node could answer provider B's SLA with provider A's proven record, hide B's
SLA behind a true absence proof of an unrelated key, or list a phantom provider "proven" by a
staking record (protobuf parses an UnbondingEntry as a Provider). Now a one-record answer must
prove exactly its key, and each record of a list must sit under the key its own id makes."""

from __future__ import annotations

import json

import pytest

from abci_app.codec.address import to_bech32
from abci_app.encoding import encode_msg
from abci_app.jobs import sla
from abci_app.jobs.keys import job_key, round_key, sla_key
from abci_app.jobs.queries import sla_to_json
from abci_app.pb import jobs_pb2, providers_pb2, staking_pb2
from abci_app.providers.keys import provider_key
from abci_app.providers.queries import provider_to_json
from abci_app.staking.keys import unbonding_key
from abci_app.store import MerkleStore
from node.cli.common import UsageError
from node.cli.market import _proven_one, _proven_sla
from node.client.proofs import verify_ops
from node.client.rpc import QueryResult
from node.explorer.data import Collector, Untrusted

A, B = b"\x0a" * 20, b"\x0b" * 20
GOOD = sla.Sla(rounds_drawn=40, commits_due=40, committed_on_time=40, earned_participant=9_000_000)
BAD = sla.Sla(rounds_drawn=40, commits_due=40, committed_on_time=3, slashed=4_000_000_000)


def _tree(state: dict[bytes, bytes]) -> tuple[MerkleStore, bytes]:
    s = MerkleStore(None)
    s.stage(1, state)
    return s, s.commit()  # the root stands for an app hash the client has verified


def _answer(store: MerkleStore, shown: object, *keys: bytes) -> QueryResult:
    ops = [{"type": "loconet:smt", "key": k, "data": store.prove(k, 1).to_bytes()} for k in keys]
    return QueryResult(0, "", 1, json.dumps(shown).encode(), ops)


SLAS = {sla_key(A): sla.encode_sla(GOOD), sla_key(B): sla.encode_sla(BAD)}


def test_the_cli_refuses_another_providers_sla_and_an_unrelated_absence() -> None:
    store, root = _tree(SLAS)
    for lie, key in (
        (sla_to_json(B, GOOD), sla_key(A)),  # B (slashed, 3/40 on time) shown with A's record
        (sla_to_json(B, sla.Sla()), b"\x99unrelated-absent-key"),  # B's record hidden
    ):
        proven = verify_ops(_answer(store, lie, key), root)  # a true proof, of the wrong key
        with pytest.raises(UsageError, match="not exactly the record asked for"):
            _proven_sla(to_bech32(B))(proven)
    # B's own record, and the absence of a provider with no SLA yet, still re-derive
    assert _proven_sla(to_bech32(B))(verify_ops(_answer(store, {}, sla_key(B)), root)) == (
        sla_to_json(B, BAD)
    )
    c = b"\x0c" * 20
    assert _proven_sla(to_bech32(c))(verify_ops(_answer(store, {}, sla_key(c)), root)) == (
        sla_to_json(c, sla.Sla())
    )


def test_the_cli_refuses_another_job_under_the_asked_ones_query() -> None:
    j1, j2 = jobs_pb2.Job(id=1, rounds=3), jobs_pb2.Job(id=2, rounds=9)
    store, root = _tree({job_key(1): encode_msg(j1), job_key(2): encode_msg(j2)})
    derive = _proven_one(job_key(1), lambda b: jobs_pb2.Job.FromString(b), lambda j: j.rounds)
    assert derive(verify_ops(_answer(store, {}, job_key(1)), root)) == 3
    for keys in ((job_key(2),), (job_key(1), job_key(2))):
        with pytest.raises(UsageError, match="not exactly the record"):
            derive(verify_ops(_answer(store, {}, *keys), root))


class _Stub:
    def __init__(self, qr: QueryResult) -> None:
        self.qr = qr

    def abci_query(self, path: str, height: int = 0, prove: bool = False) -> QueryResult:
        return self.qr


def _collector(qr: QueryResult) -> Collector:
    c = Collector.__new__(Collector)
    c.client, c.proven_keys = _Stub(qr), 0  # type: ignore[assignment]
    return c


def test_the_explorer_refuses_a_swapped_sla() -> None:
    store, root = _tree(SLAS)
    with pytest.raises(Untrusted):
        _collector(_answer(store, sla_to_json(B, GOOD), sla_key(A)))._sla(to_bech32(B), 1, root)
    got = _collector(_answer(store, sla_to_json(B, BAD), sla_key(B)))._sla(to_bech32(B), 1, root)
    assert got == sla_to_json(B, BAD)


def test_the_explorer_refuses_a_phantom_provider_proven_by_a_staking_record() -> None:
    entry = staking_pb2.UnbondingEntry(
        delegator=b"\x0c" * 20, validator=b"\x0d" * 20, amount=5 * 10**9, initial_amount=5 * 10**9
    )
    k = unbonding_key(b"\x0d" * 20, 1)
    real = providers_pb2.Provider(address=A, bond=7)
    store, root = _tree({k: encode_msg(entry), provider_key(A): encode_msg(real)})
    phantom = provider_to_json(providers_pb2.Provider.FromString(encode_msg(entry)))
    lie = {"providers": [phantom], "total": 1}
    with pytest.raises(Untrusted, match="provider list"):
        _collector(_answer(store, lie, k))._providers(1, root)
    honest = {"providers": [provider_to_json(real)], "total": 1}
    assert _collector(_answer(store, honest, provider_key(A)))._providers(1, root) == [
        provider_to_json(real)
    ]


def test_the_explorer_refuses_another_jobs_round_in_a_jobs_rounds() -> None:
    r = jobs_pb2.Round(job_id=2, round=1)
    store, root = _tree({round_key(2, 1): encode_msg(r)})
    c = _collector(_answer(store, {}, round_key(2, 1)))
    with pytest.raises(Untrusted, match="rounds of job 1"):
        c._records(
            verify_ops(_answer(store, {}, round_key(2, 1)), root),
            jobs_pb2.Round.FromString,
            lambda x: round_key(1, x.round) if x.job_id == 1 else b"",
            "rounds of job 1",
        )
