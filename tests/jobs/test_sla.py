"""SLA figures per provider (abci_app/jobs/sla.py, ``/provider/{addr}/sla``) checked against
scripted histories of kept and missed duties: every figure is recounted from the round records
(an oracle written from the round story, not from sla.py) and the hand-known cases are pinned."""

import json

import pytest

from abci_app.codec.address import to_bech32
from abci_app.errors import InvariantBroken
from abci_app.jobs import keeper as jobs_keeper
from abci_app.jobs import sla
from abci_app.jobs.keys import parse_sla_key, sla_key
from abci_app.pb import abci, jobs_pb2
from abci_app.store import Proof, verify_proof
from tests.kits.marketkit import (
    BOND,
    actors_block,
    agg_hash,
    new_market,
    run_job,
)

FINALIZED = jobs_pb2.PHASE_FINALIZED


def q(m, path, prove=False):
    return m.chain.app.query(abci.RequestQuery(path=path, prove=prove))


def sla_of(m, addr):
    r = q(m, f"/provider/{to_bech32(addr)}/sla")
    assert r.code == 0, r.log
    return json.loads(r.value)


def recount(m, job_ids):
    """Expected figures from the finalized round records alone."""
    exp = {}

    def e(a):
        return exp.setdefault(
            a,
            dict.fromkeys(
                [
                    "rounds_drawn",
                    "commits_due",
                    "committed_on_time",
                    "challenged",
                    "reveals_due",
                    "revealed",
                    "verdicts_accepted",
                    "verdicts_against",
                    "attests_due",
                    "attested",
                    "verifier_assigned",
                    "verifier_voted",
                    "earned_participant",
                    "earned_verifier",
                    "earned_bounty",
                    "slashed",
                ],
                0,
            ),
        )

    for jid in job_ids:
        for r in jobs_keeper.iterate_rounds(m.store, jid):
            assert r.phase == FINALIZED
            for p in r.participants:
                d = e(p.address)
                d["rounds_drawn"] += 1
                d["commits_due"] += 1
                d["committed_on_time"] += p.HasField("commitment")
                d["challenged"] += p.challenged
                d["reveals_due"] += p.challenged
                # a reveal whose ends were never opened (tolerance mode) is a missed reveal
                revealed = p.HasField("reveal") and p.outcome != jobs_pb2.OUTCOME_MISSED_REVEAL
                d["revealed"] += revealed
                if revealed:
                    d["verdicts_accepted"] += p.outcome == jobs_pb2.OUTCOME_ACCEPTED
                    d["verdicts_against"] += p.outcome in (
                        jobs_pb2.OUTCOME_FRAUD,
                        jobs_pb2.OUTCOME_REJECTED,
                    )
                    for v in p.verifiers:
                        e(v.address)["verifier_assigned"] += 1
                        e(v.address)["verifier_voted"] += v.voted
                if p.outcome == jobs_pb2.OUTCOME_ACCEPTED:
                    d["attests_due"] += 1
                    d["attested"] += bool(p.attested_hash)
            for pay in r.payouts:
                e(pay.address)["earned_" + pay.kind] += pay.amount
            for s in r.slashes:
                e(s.address)["slashed"] += s.amount
    return exp


def assert_matches_recount(m, job_ids):
    exp = recount(m, job_ids)
    for addr, d in exp.items():
        got = sla_of(m, addr)
        assert {k: got[k] for k in d} == d, to_bech32(addr)
        due = d["commits_due"] + d["reveals_due"] + d["attests_due"] + d["verifier_assigned"]
        kept = d["committed_on_time"] + d["revealed"] + d["attested"] + d["verifier_voted"]
        assert got["window_len"] == min(due, sla.WINDOW) and due <= sla.WINDOW
        assert got["window_bits"].count("1") == kept
        assert got["uptime_bps"] == (kept * 10_000 // due if due else 10_000)
    return exp


def live_round(m, jid, phase):
    return next((r for r in jobs_keeper.iterate_rounds(m.store, jid) if r.phase == phase), None)


def test_sla_scripted_history_of_kept_and_missed_duties():
    """4 rounds, every update challenged by 2 verifiers: round 0 its first participant misses the
    commit; round 1 the first verifier of the first challenge stays silent; round 2 the second
    participant attests nothing; round 3 everyone does its duty."""
    m = new_market(n_providers=5)
    m.create_job(rounds=4, participants_per_round=2, verifiers_per_challenge=2)
    m.until(m.height + 1)
    missed = {}  # duty -> (address, round)

    def vote(verifier, target):
        r = live_round(m, 1, jobs_pb2.PHASE_VERDICT)
        if r is None:  # a later panel (an audit of a unanimous first panel): votes honestly
            return True, 8_000
        first = r.participants[0] if r.participants[0].verifiers else r.participants[1]
        if r.round == 1 and target == first.address and verifier == first.verifiers[0].address:
            missed["vote"] = (verifier, 1)
            return None
        return True, 8_000

    def attest(addr, jid, rn):
        if rn == 2 and addr == m.round(1, 2).participants[1].address:
            missed["attest"] = (addr, 2)
            return None
        return agg_hash(jid, rn)

    for _ in range(300):
        if m.job(1).status == jobs_pb2.JOB_STATUS_COMPLETED:
            break
        r = live_round(m, 1, jobs_pb2.PHASE_COMMIT)
        skip = frozenset()
        if r is not None and r.round == 0:
            skip = frozenset({r.participants[0].address})
            missed["commit"] = (r.participants[0].address, 0)
        actors_block(m, 1, skip_commit=skip, vote=vote, attest=attest)
    assert m.job(1).status == jobs_pb2.JOB_STATUS_COMPLETED
    assert set(missed) == {"commit", "vote", "attest"}

    exp = assert_matches_recount(m, [1])
    lazy = sla_of(m, missed["commit"][0])
    assert lazy["commits_due"] - lazy["committed_on_time"] == 1 and lazy["slashed"] >= BOND // 100
    silent = sla_of(m, missed["vote"][0])
    assert (
        silent["verifier_assigned"] - silent["verifier_voted"] == 1
        and silent["verifier_duty_bps"] < 10_000
    )
    mute = sla_of(m, missed["attest"][0])
    assert mute["attests_due"] - mute["attested"] == 1
    # exactly three duties were missed in the whole network
    total_missed = sum(s["window_bits"].count("0") for s in (sla_of(m, a) for a in exp))
    assert total_missed == 3
    # earnings equal what the rounds paid
    paid = sum(r.reward_paid + r.verifier_paid for r in jobs_keeper.iterate_rounds(m.store, 1))
    assert sum(d["earned_participant"] + d["earned_verifier"] for d in exp.values()) == paid
    assert sla_of(m, missed["commit"][0])["earned_total"] == sum(
        exp[missed["commit"][0]][k]
        for k in ("earned_participant", "earned_verifier", "earned_bounty")
    )


def test_sla_missed_commit_is_a_zero_uptime_window():
    m = new_market(n_providers=3)  # two drawn, one to verify the other's challenge
    m.create_job(rounds=1)
    m.until(m.height + 1)
    lazy, other_addr = (p.address for p in m.round(1, 0).participants)
    run_job(m, 1, skip_commit=frozenset({lazy}))
    s = sla_of(m, lazy)
    assert (s["rounds_drawn"], s["commits_due"], s["committed_on_time"], s["challenged"]) == (
        1,
        1,
        0,
        0,
    )
    assert (
        s["commit_rate_bps"] == 0
        and s["reveal_rate_bps"] is None
        and s["verifier_duty_bps"] is None
    )
    assert s["window_bits"] == "0" and s["uptime_bps"] == 0 and s["slashed"] == BOND // 100
    assert s["earned_total"] == 0 and s["last_duty_height"] == m.round(1, 0).commit_deadline
    other = sla_of(m, other_addr)
    # committed, revealed, attested (bits oldest first)
    assert (
        other["window_bits"] == "111"
        and other["uptime_bps"] == 10_000
        and other["earned_participant"] == 500_000
    )
    assert (
        other["verdicts_accepted"] == 1
        and other["last_duty_height"] == m.round(1, 0).finalized_height
    )


def test_sla_missed_reveal_then_fraud_bounty():
    m = new_market(n_providers=2)
    m.create_job(rounds=1)
    lazy = m.providers[1].address
    run_job(m, 1, skip_reveal=frozenset({lazy}))
    s = sla_of(m, lazy)
    assert (s["committed_on_time"], s["challenged"], s["reveals_due"], s["revealed"]) == (
        1,
        1,
        1,
        0,
    )
    assert s["window_bits"] == "10" and s["uptime_bps"] == 5_000 and s["slashed"] == BOND // 2
    assert s["attests_due"] == 0 and s["verdicts_accepted"] == 0
    assert_matches_recount(m, [1])

    m = new_market(n_providers=5)
    m.create_job(rounds=1, participants_per_round=2, verifiers_per_challenge=3)
    m.until(m.height + 1)
    cheat = m.round(1, 0).participants[0].address
    run_job(m, 1, vote=lambda v, t: (False, 0) if t == cheat else (True, 7_000))
    s = sla_of(m, cheat)
    assert s["verdicts_against"] == 1 and s["verdicts_accepted"] == 0 and s["attests_due"] == 0
    assert s["slashed"] == BOND // 2
    provers = [
        v.address for p in m.round(1, 0).participants if p.address == cheat for v in p.verifiers
    ]
    assert all(sla_of(m, a)["earned_bounty"] == BOND // 2 * 2000 // 10_000 // 3 for a in provers)
    assert_matches_recount(m, [1])


def test_sla_ends_never_opened_count_as_a_missed_reveal():
    """Tolerance mode: a provider that reveals its segments but never opens its ends
    (MsgOpenEnd) is a missed reveal, and its SLA figures say so (revealed 0 of 1, the reveal duty
    missed in the uptime window), like a provider that never revealed; its verifiers' seats are
    not counted (nothing was judged). The same job with the ends opened counts the reveal kept."""
    figures = {}
    for withhold in (True, False):
        m = new_market(n_providers=5)
        m.create_job(rounds=1, participants_per_round=1, verifiers_per_challenge=3)
        m.until(m.height + 1)
        target = m.round(1, 0).participants[0].address
        run_job(m, 1, skip_open_end=frozenset({target}) if withhold else frozenset())
        (p,) = m.round(1, 0).participants
        assert p.HasField("reveal") and p.challenged
        figures[withhold] = s = sla_of(m, target)
        assert (s["challenged"], s["reveals_due"]) == (1, 1)
        assert_matches_recount(m, [1])
        if withhold:
            assert p.outcome == jobs_pb2.OUTCOME_MISSED_REVEAL and s["slashed"] == BOND // 2
            assert s["revealed"] == 0 and s["reveal_rate_bps"] == 0
            assert s["window_bits"] == "10" and s["uptime_bps"] == 5_000
            assert all(sla_of(m, v.address)["verifier_assigned"] == 0 for v in p.verifiers)
        else:
            assert p.outcome == jobs_pb2.OUTCOME_ACCEPTED and s["revealed"] == 1
            assert s["reveal_rate_bps"] == 10_000 and s["window_bits"].startswith("11")
    assert figures[True]["revealed"] < figures[False]["revealed"]


def test_sla_two_jobs_accumulate():
    m = new_market(n_providers=4)
    m.create_job(rounds=2)
    m.create_job(rounds=2, participants_per_round=3)
    for _ in range(300):
        if all(m.job(j).status == jobs_pb2.JOB_STATUS_COMPLETED for j in (1, 2)):
            break
        actors_block(m, 1)
        actors_block(m, 2)
    exp = assert_matches_recount(m, [1, 2])
    assert sum(d["rounds_drawn"] for d in exp.values()) == 2 * 2 + 2 * 3


def test_sla_window_keeps_the_last_64_duties():
    s = sla.Sla()
    assert sla.compute_uptime_bps(s) == 10_000
    for i in range(70):
        sla.process_duty(s, i % 4 != 0, 100 + i)  # duties 0, 4, 8, ... missed
    assert s.window_len == 64 and s.last_duty_height == 169
    # the last 64 duties are 6..69: missed are 8, 12, ..., 68 = 16 of them
    assert s.window_bits.bit_count() == 48 and sla.compute_uptime_bps(s) == 48 * 10_000 // 64
    assert s.window_bits & 1 == 1 and (s.window_bits >> 1) & 1 == 0  # newest (69) kept, 68 missed


def test_sla_encoding_and_key():
    s = sla.Sla(rounds_drawn=3, earned_verifier=2**64 - 1, window_bits=0b101, window_len=3)
    raw = sla.encode_sla(s)
    assert len(raw) == 8 * sla.N_FIELDS and sla.decode_sla(raw) == s
    with pytest.raises(InvariantBroken):
        sla.decode_sla(raw[:-1])
    addr = bytes(range(20))
    assert sla_key(addr) == b"\x56\x14" + addr and parse_sla_key(sla_key(addr)) == addr
    with pytest.raises(InvariantBroken):
        parse_sla_key(sla_key(addr) + b"x")


def test_sla_query_proof_and_errors():
    m = new_market(n_providers=2)
    m.create_job(rounds=1)
    run_job(m, 1)
    a = m.providers[0].address
    r = q(m, f"/provider/{to_bech32(a)}/sla", prove=True)
    assert r.code == 0
    (op,) = r.proof_ops.ops
    proof = Proof.from_bytes(op.data)
    assert op.key == sla_key(a) and verify_proof(
        proof, m.store.root_at(r.height), op.key, proof.value
    )
    from abci_app.jobs.queries import sla_to_json

    # a client re-derives it
    assert sla_to_json(a, sla.decode_sla(proof.value)) == json.loads(r.value)
    # a registered provider with no duty yet: zeros (proof of absence), uptime 100 %
    fresh = m.chain.keys[5]
    from tests.kits.marketkit import register_msg

    assert m.send(fresh, register_msg()).code == 0
    z = sla_of(m, fresh.address)
    assert z["rounds_drawn"] == 0 and z["window_len"] == 0 and z["uptime_bps"] == 10_000
    # an address that is no provider and never had a duty, a bad address, a bad sub-path
    assert "not found" in q(m, f"/provider/{to_bech32(m.chain.keys[6].address)}/sla").log
    assert q(m, "/provider/loco1xyz/sla").code != 0
    assert q(m, f"/provider/{to_bech32(a)}/nope").code != 0
    assert json.loads(q(m, f"/provider/{to_bech32(a)}").value)["bond"] == BOND


def test_sla_rendered_in_query_provider_text():
    from abci_app.providers.queries import provider_to_json
    from node.client.market_render import provider_text

    m = new_market(n_providers=2)
    m.create_job(rounds=1)
    lazy = m.providers[0].address
    run_job(m, 1, skip_commit=frozenset({lazy}))
    p = provider_to_json(m.provider(lazy))
    p["sla"] = sla_of(m, lazy)
    text = provider_text(p, m.height)
    assert "uptime 0.00 % over its last 1 duties" in text
    assert (
        "committed on time 0/1 (0.00 %)" in text and "revealed          0/0 challenged (-)" in text
    )
    assert f"slashed in rounds {BOND // 100} uloco" in text
    assert "sla:" not in provider_text(provider_to_json(m.provider(lazy)), m.height)
