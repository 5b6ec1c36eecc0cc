"""Tolerance-mode probes (docs/threat-model.md *Evidence only re-execution yields*): one test per
strategy, named after it, with balances, slashes and reputations before and after on the real
app."""

from abci_app.jobs import keeper as jobs_keeper
from abci_app.jobs.probe import PROBE_DIM
from abci_app.pb import jobs_pb2, providers_pb2
from tests.jobs.test_incentives import _one_challenge, wealth
from tests.kits.marketkit import (
    BINDING_INDEX,
    BOND,
    MODEL0,
    binding_leaf,
    create_job_msg,
    encode_probe,
    merkle_proof,
    merkle_root,
    new_market,
    run_job,
    submit_msg,
    update_msg,
)


def _verifier_market(rounds: int = 3, verifiers: int = 2, segments: int = 2):
    """Two workers take every slot; six providers only verify (their policy refuses the slot
    reward). Job 1: ``rounds`` rounds, every commitment challenged at ``segments`` segments,
    ``verifiers`` in the first panel; tolerance mode (1,000 ppm)."""
    m = new_market(n_providers=8, n_keys=10)
    workers, verifiers_ = m.providers[:2], m.providers[2:]
    never_work = providers_pb2.JobPolicy(min_slot_reward=10**15)
    m.block([(k, update_msg(policy=never_work)) for k in verifiers_])
    job = create_job_msg(
        rounds=rounds,
        participants_per_round=2,
        verifiers_per_challenge=verifiers,
        challenge_bps=10_000,
        segments_per_challenge=segments,
    )
    assert m.send(m.owner, job).code == 0
    return m, workers, verifiers_


def test_lazy_verifier_in_tolerance_mode_loses():
    """The verifier's dilemma in tolerance mode, with no cheater around: a verifier that always
    votes valid without re-executing must commit probes before the provider's are open; its
    guess (the public previous step's probe) is not within tolerance, so its valid vote counts as
    invalid, the challenge escalates, the appeal panel accepts, and the lazy vote is slashed as a
    wrong vote (10 %, at least the bounty it would have claimed + 1) on every seat. The diligent
    verifiers are paid and the honest providers are paid and never slashed."""
    m, workers, verifiers = _verifier_market()
    lazy = verifiers[0].address
    before = {k.address: wealth(m, k.address) for k in m.providers}
    run_job(m, 1, vote=lambda v, t: (True, 8_000, False) if v == lazy else (True, 8_000))
    seats: dict[bytes, int] = {}
    for r in jobs_keeper.iterate_rounds(m.store, 1):
        for p in r.participants:
            assert p.outcome == jobs_pb2.OUTCOME_ACCEPTED and p.reward > 0 and p.slashed == 0
            assert all(o.end_opened_height and len(o.end_probe) == PROBE_DIM for o in p.reveals)
            for v in p.verifiers:
                seats[v.address] = seats.get(v.address, 0) + 1
                if v.address == lazy:
                    assert v.voted and not v.valid and v.probe_mismatch and v.slashed > 0
                else:
                    assert not v.probe_mismatch and v.slashed == 0
    assert seats.get(lazy, 0) >= 1
    change = {a: wealth(m, a) - before[a] for a in seats}
    assert change[lazy] < -BOND // 20  # at least one wrong-vote slash (10 % of the bond)
    assert all(change[a] > 0 for a in seats if a != lazy)
    assert m.provider(lazy).reputation < 5000
    for k in workers:
        assert wealth(m, k.address) > before[k.address]


def test_honest_verifiers_on_slightly_different_floats_are_never_slashed():
    """Diligent verifiers whose re-execution differs from the provider's in the last bits (every
    probe component off by 5,000 ppm: 5x the job's 1,000 ppm tolerance, 7x the largest ratio
    another thread count or float64 steps gave, README) always agree with the provider: every round
    accepted at the first panel (an audited challenge's extra seat among them: ``audit_bps``),
    nobody escalated by a dispute, nobody slashed, every verifier paid."""
    m, workers, verifiers = _verifier_market(rounds=4, verifiers=3)
    before = {k.address: wealth(m, k.address) for k in m.providers}
    run_job(m, 1, vote=lambda v, t: (True, 8_000, True, 5_000))
    for r in jobs_keeper.iterate_rounds(m.store, 1):
        assert not r.slashes
        for p in r.participants:
            assert p.outcome == jobs_pb2.OUTCOME_ACCEPTED and not p.escalated
            assert all(v.voted and v.valid and not v.probe_mismatch for v in p.verifiers)
    for k in m.providers:
        assert wealth(m, k.address) >= before[k.address]
        assert m.provider(k.address).reputation >= 5000


def test_withholding_the_probe_opening_costs_like_fraud():
    """A provider that reveals its segments but, once the votes are committed, does not open
    the ends and their probes (e.g. because its probes would not match anyone's re-execution)
    is a missed reveal: half its bond burned, reputation 0, jailed, unpaid; exactly what proven
    fraud costs. Its verifiers are neither slashed nor judged."""
    m, cheat = _one_challenge(verifiers=3)
    before, rep_before = wealth(m, cheat), m.provider(cheat).reputation
    others = {k.address: wealth(m, k.address) for k in m.providers if k.address != cheat}
    run_job(m, 1, skip_open_end=frozenset({cheat}))
    (p,) = m.round(1, 0).participants
    assert p.HasField("reveal") and not any(o.end_opened_height for o in p.reveals)
    assert p.outcome == jobs_pb2.OUTCOME_MISSED_REVEAL and p.reward == 0
    assert wealth(m, cheat) - before == -BOND // 2
    assert rep_before == 5000 and m.provider(cheat).reputation == 0
    assert m.provider(cheat).status == providers_pb2.PROVIDER_STATUS_JAILED
    assert all(v.slashed == 0 for v in p.verifiers)
    assert all(wealth(m, a) == w for a, w in others.items())


def test_provider_that_commits_wrong_probes_to_frame_verifiers_is_convicted():
    """A provider that commits probes no re-execution reaches (to get its diligent verifiers'
    valid votes counted invalid and slashed) convicts itself: every diligent probe disagrees,
    so every panel counts invalid, the final verdict is fraud, the provider loses half its bond
    and the verifiers, on the winning side, are not slashed (they share the bounty)."""
    m, cheat = _one_challenge(verifiers=3)
    r0 = m.round(1, 0)
    bogus = [binding_leaf(b"probe", cheat, 1, 0, MODEL0)] + [
        encode_probe([(i + 1) * 1_000_003] * PROBE_DIM) for i in range(5)
    ]
    framed = submit_msg(
        cheat,
        1,
        0,
        r0.base_model_hash,
        probe_root=merkle_root(bogus),
        probe_binding_proof=merkle_proof(bogus, BINDING_INDEX),
    )
    assert m.send(m.key(cheat), framed).code == 0
    before = {k.address: wealth(m, k.address) for k in m.providers}

    # the kits' provider opens the probes of the honest trace: here it must open the committed
    # (bogus) ones, so drive the opening by hand
    from tests.kits.marketkit import actors_block, open_end_msg

    for _ in range(200):
        r = m.round(1, 0)
        if r.phase == jobs_pb2.PHASE_FINALIZED:
            break
        # each panel's ends open in its opening window (the fresh ones of the later panels too)
        panel = {
            jobs_pb2.PHASE_VOTE_REVEAL: 0,
            jobs_pb2.PHASE_APPEAL_REVEAL: 1,
            jobs_pb2.PHASE_FINAL_REVEAL: 2,
        }.get(r.phase, -1)
        shut = [o for o in r.participants[0].reveals if o.panel == panel and not o.end_probe]
        if shut:
            o = shut[0]
            e = o.segment + 1
            msg = open_end_msg(
                cheat,
                1,
                0,
                o.segment,
                probe=[(e + 1) * 1_000_003] * PROBE_DIM,
                probe_proof=merkle_proof(bogus, e + 1),
            )
            assert m.send(m.key(cheat), msg).code == 0
        actors_block(m, 1, skip_open_end=frozenset({cheat}))
    (p,) = m.round(1, 0).participants
    assert p.outcome == jobs_pb2.OUTCOME_FRAUD and p.slashed == BOND // 2
    voted = [v for v in p.verifiers if v.voted]
    assert voted and all(not v.valid and v.probe_mismatch and v.slashed == 0 for v in voted)
    assert all(wealth(m, v.address) >= before[v.address] for v in voted)
