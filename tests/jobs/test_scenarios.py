"""Whole-job scenarios at the state-machine level (every block checks every invariant)."""

import hashlib

from abci_app.bank import keeper as bank
from abci_app.jobs import keeper as jobs_keeper
from abci_app.jobs.keys import JOB_ESCROW
from abci_app.jobs.params import get_params
from abci_app.pb import providers_pb2
from abci_app.providers.errors import ErrTombstoned
from abci_app.providers.keys import PROVIDER_BONDS
from tests.kits.chainkit import assert_rejected
from tests.kits.marketkit import (
    BOND,
    MODEL0,
    OddVoter,
    actors_block,
    agg_hash,
    cancel_msg,
    events_of,
    jobs_pb2,
    new_market,
    run_job,
)

FEE = 1_000_000  # jobs params job_creation_fee (burned by MsgCreateJob)


def test_honest_job_all_paid_reputation_rises():
    m = new_market(n_providers=3)
    owner_bal = bank.get_balance(m.store, m.owner.address)
    bals = {k.address: bank.get_balance(m.store, k.address) for k in m.providers}
    m.create_job(rounds=3, reward=1_000_000, vreward=90_000, commit_blocks=10)
    resps = run_job(m, 1)
    job = m.job(1)
    assert job.status == jobs_pb2.JOB_STATUS_COMPLETED and job.rounds_finalized == 3
    rounds = list(jobs_keeper.iterate_rounds(m.store, 1))
    paid = 0
    for r in rounds:
        assert r.phase == jobs_pb2.PHASE_FINALIZED
        assert all(p.outcome == jobs_pb2.OUTCOME_ACCEPTED for p in r.participants)
        assert all(p.reward > 0 and p.reputation_delta > 0 for p in r.participants)
        # both accepted with equal tokens: each slot is worth half (equal quality, reputation may
        # differ)
        assert r.reward_paid <= 1_000_000 and r.reward_paid >= 1_000_000 - 2
        assert 90_000 - 2 <= r.verifier_paid <= 90_000
        assert r.attested_model_hash == agg_hash(1, r.round)
        paid += r.reward_paid + r.verifier_paid
    # one-step-delay overlap (commit window 10 = reveal + 2 x verdict (commit, open) + attest):
    # round 1 opens at round 0's commit deadline, before round 0 is attested, so it trains on the
    # initial model; round 2 opens in the block that finalizes round 0 (finalize runs first) and
    # trains on its aggregate
    assert rounds[0].base_model_hash == MODEL0 and rounds[1].base_model_hash == MODEL0
    assert rounds[2].base_model_hash == agg_hash(1, 0)
    assert rounds[1].open_height == rounds[0].commit_deadline
    assert job.current_model_hash == agg_hash(1, 2)
    # exact books: owner got back exactly what was not paid
    assert job.refunded == 3 * 1_090_000 - paid
    # the creation fee is never refunded
    assert bank.get_balance(m.store, m.owner.address) == owner_bal - paid - FEE
    gained = sum(bank.get_balance(m.store, k.address) - bals[k.address] for k in m.providers)
    assert gained == paid
    assert bank.get_balance(m.store, JOB_ESCROW) == 0
    for k in m.providers:
        p = m.provider(k.address)
        assert p.bond == BOND and p.reputation >= 5000
    assert sum(m.provider(k.address).reputation for k in m.providers) > 3 * 5000
    kinds = {
        e.type for r in resps for e in list(r.events) + [e for t in r.tx_results for e in t.events]
    }
    for kind in [
        "round.opened",
        "update.submitted",
        "challenge.issued",
        "segment.revealed",
        "verdict.posted",
        "model.attested",
        "round.finalized",
        "reward.paid",
    ]:
        assert kind in kinds, kind


def test_missed_commit_slashed_small_reputation_down():
    m = new_market(n_providers=3)  # two drawn, one to verify the other's challenge
    m.create_job(rounds=1)
    m.until(m.height + 1)
    lazy = m.round(1, 0).participants[0].address
    resps = run_job(m, 1, skip_commit=frozenset({lazy}))
    r = m.round(1, 0)
    p = next(p for p in r.participants if p.address == lazy)
    assert p.outcome == jobs_pb2.OUTCOME_MISSED_COMMIT and p.reward == 0
    assert p.slashed == BOND // 100  # 1 % liveness slash
    prov = m.provider(lazy)
    assert prov.bond == BOND - BOND // 100 and prov.status == providers_pb2.PROVIDER_STATUS_ACTIVE
    assert p.reputation_delta == -500  # 5000 - ceil(5000 * 10 %)
    sl = events_of(resps, "provider.slashed")
    assert (
        len(sl) == 1 and sl[0]["reason"] == "missed_commit" and sl[0]["burned"] == str(BOND // 100)
    )
    # the other participant is paid its slot (half the reward); the other half returns to escrow
    other = next(q for q in r.participants if q.address != lazy)
    assert (
        other.reward == 500_000
        and r.returned_to_escrow == 1_000_000 + 100_000 - 500_000 - r.verifier_paid
    )


def test_missed_reveal_slashed_as_fraud():
    """Withholding a challenged segment costs what proven fraud costs: the fraud fraction (all
    burned: nobody proved anything), reputation 0, jailed."""
    m = new_market(n_providers=2)
    supply = bank.get_supply(m.store)
    m.create_job(rounds=1)
    lazy = m.providers[1].address
    resps = run_job(m, 1, skip_reveal=frozenset({lazy}))
    p = next(p for p in m.round(1, 0).participants if p.address == lazy)
    assert p.outcome == jobs_pb2.OUTCOME_MISSED_REVEAL and p.slashed == BOND // 2 and p.reward == 0
    prov = m.provider(lazy)
    assert (
        prov.reputation == 0
        and prov.status == providers_pb2.PROVIDER_STATUS_JAILED
        and prov.bond == BOND // 2
    )
    assert events_of(resps, "provider.jailed")[0]["reason"] == "missed_reveal"
    # the whole slash burned, and the job fee
    assert bank.get_supply(m.store) == supply - BOND // 2 - FEE


def test_fraud_slashed_jailed_bounty_paid():
    """Fraud needs >= min_fraud_verifiers (3) invalid voters with 2/3 of the stake."""
    m = new_market(n_providers=5)
    m.create_job(rounds=1, participants_per_round=2, verifiers_per_challenge=3)
    m.until(m.height + 1)
    r = m.round(1, 0)
    cheat = r.participants[0].address
    supply = bank.get_supply(m.store)

    def vote(verifier, target):
        return (False, 0) if target == cheat else (True, 7_000)

    resps = run_job(m, 1, vote=vote)
    r = m.round(1, 0)
    p = next(p for p in r.participants if p.address == cheat)
    assert p.outcome == jobs_pb2.OUTCOME_FRAUD and p.reward == 0
    slash = BOND // 2
    assert p.slashed == slash
    prov = m.provider(cheat)
    assert (
        prov.status == providers_pb2.PROVIDER_STATUS_JAILED
        and prov.reputation == 0
        and prov.bond == BOND - slash
    )
    bounty = slash * 2000 // 10_000
    bounties = [x for x in r.payouts if x.kind == "bounty"]
    assert len(p.verifiers) == 3
    # split by stake, truncating: equal stakes -> floor(bounty / 3) each, the dust is burned
    assert [b.amount for b in bounties] == [bounty // 3] * 3
    bounty = sum(b.amount for b in bounties)
    burned = slash - bounty
    assert bank.get_supply(m.store) == supply - burned
    assert events_of(resps, "provider.jailed")[0]["reason"] == "fraud"
    # jailed: never drawn again, may not register again after exit
    from tests.kits.marketkit import exit_msg, register_msg

    assert m.send(m.key(cheat), exit_msg()).code == 0
    m.until(m.provider(cheat).unbonding_height)
    assert m.provider(cheat) is None
    assert_rejected(m.chain, m.tx(m.key(cheat), register_msg()), ErrTombstoned)


def test_silent_verifier_slashed_target_undecided():
    """Silence is never free: a silent first-panel verifier escalates the challenge, and every
    silent verifier of either panel is slashed (liveness) and loses reputation; with no vote at
    all the work is undecided: not paid, not slashed."""
    m = new_market(n_providers=3)
    m.create_job(rounds=1, participants_per_round=1, verifiers_per_challenge=1)
    run_job(m, 1, vote=lambda v, t: None)
    r = m.round(1, 0)
    (p,) = r.participants
    assert (
        p.escalated
        and p.final_tier
        and p.outcome == jobs_pb2.OUTCOME_UNDECIDED
        and p.reward == 0
        and p.slashed == 0
    )
    # first panel, appeal panel, then the final panel (the whole pool: both other providers)
    assert [v.panel for v in p.verifiers] == [0, 1, 2, 2]
    for v in p.verifiers:
        assert not v.voted and v.slashed > 0
    second = (BOND - BOND // 100) // 100
    for a in {v.address for v in p.verifiers}:  # silent twice: its seat in 0 or 1, and in 2
        assert (
            m.provider(a).reputation == 4512 and m.provider(a).bond == BOND - BOND // 100 - second
        )
    assert m.provider(p.address).reputation == 5000
    assert r.reward_paid == 0 and r.verifier_paid == 0 and r.returned_to_escrow == 1_100_000


def test_minority_verifier_loses_reputation():
    m = new_market(n_providers=5)
    m.create_job(rounds=1, participants_per_round=1, verifiers_per_challenge=4)
    m.until(m.height + 1)
    target = m.round(1, 0).participants[0].address
    first = OddVoter(odd=(False, 0), rest=(True, 6_000))
    run_job(m, 1, vote=first)
    r = m.round(1, 0)
    (p,) = r.participants
    # 3 of 4 equal stakes valid: >= 2/3 -> accepted
    assert p.outcome == jobs_pb2.OUTCOME_ACCEPTED and p.quality == 6_000
    assert m.provider(first.address).reputation == 4750
    others = [v.address for v in p.verifiers if v.address != first.address]
    # each paid a third of V (33,333 of the 100,000 reputation_value_unit): a third of the gain
    assert all(m.provider(a).reputation == 5000 + 5000 * 333 // 10_000 for a in others)
    assert {x.address for x in r.payouts if x.kind == "verifier"} == set(others)
    assert target not in others


def test_attest_without_quorum_keeps_base():
    m = new_market(n_providers=3)
    m.create_job(rounds=3, participants_per_round=3, verifiers_per_challenge=1)
    addrs = sorted(k.address for k in m.providers)

    def attest(a, j, rn):  # three different hashes: no 2/3
        return agg_hash(j, rn) + b"" if a == addrs[0] else hashlib.sha256(a + bytes([rn])).digest()

    run_job(m, 1, attest=attest)
    for r in jobs_keeper.iterate_rounds(m.store, 1):
        assert r.attested_model_hash == b""
    assert m.job(1).current_model_hash == MODEL0
    assert m.round(1, 2).base_model_hash == MODEL0


def test_cancel_mid_run_refunds_exactly():
    m = new_market(n_providers=3)  # two drawn, one to verify
    bal = bank.get_balance(m.store, m.owner.address)
    m.create_job(rounds=10, reward=1_000_000, vreward=50_000)
    for _ in range(5):  # round 0 past its commit deadline, round 1 in commit
        actors_block(m, 1)
    j = m.job(1)
    assert j.rounds_opened == 2
    res = m.send(m.owner, cancel_msg(1))
    assert res.code == 0, res.log
    assert m.job(1).status == jobs_pb2.JOB_STATUS_CANCELLING
    run_job(m, 1)
    j = m.job(1)
    assert (
        j.status == jobs_pb2.JOB_STATUS_CANCELLED
        and j.rounds_opened == 2
        and j.rounds_finalized == 2
    )
    paid = sum(r.reward_paid + r.verifier_paid for r in jobs_keeper.iterate_rounds(m.store, 1))
    assert paid > 0 and j.refunded == 10 * 1_050_000 - paid
    assert bank.get_balance(m.store, m.owner.address) == bal - paid - FEE
    assert bank.get_balance(m.store, JOB_ESCROW) == 0


def test_round_waits_for_eligible_providers():
    """With nobody eligible the draw is retried every wait_retry_blocks (10), not every block."""
    m = new_market(n_providers=2, register=False)
    m.create_job(rounds=1)
    created = m.height
    m.until(m.height + 3)
    assert jobs_keeper.get_round(m.store, 1, 0) is None and m.job(1).rounds_opened == 0
    assert m.job(1).waiting_since == created + 1 and m.job(1).next_open_height == created + 11
    from tests.kits.marketkit import register_msg

    assert m.send(m.providers[0], register_msg()).code == 0
    m.until(created + 10)
    assert jobs_keeper.get_round(m.store, 1, 0) is None
    m.until(created + 11)
    r = m.round(1, 0)
    assert [p.address for p in r.participants] == [m.providers[0].address] and m.job(
        1
    ).waiting_since == 0
    run_job(m, 1)


def test_invalid_gift_to_module_account():
    """bank refuses sends to module accounts (escrow, bonds), so their balances move only
    through their modules and the books stay exact."""
    from abci_app.bank.errors import ErrSendToModule
    from tests.kits.chainkit import send_msg

    m = new_market(n_providers=2)
    m.create_job(rounds=1)
    for acct in (JOB_ESCROW, PROVIDER_BONDS):
        before = bank.get_balance(m.store, acct)
        assert_rejected(m.chain, m.tx(m.owner, send_msg(acct, 5)), ErrSendToModule)
        assert bank.get_balance(m.store, acct) == before
    run_job(m, 1)
    assert bank.get_balance(m.store, JOB_ESCROW) == 0


def test_jailed_provider_reputation_never_rises_again():
    """A provider proven fraudulent in round 0 that is also accepted in round 1 (drawn before
    the fraud was proven) keeps reputation 0 and is not paid for round 1: its slot stays in
    the escrow, the others' shares are unchanged."""
    # the job's min_stake keeps the last 3 out of rounds: they verify (a round's rivals never do)
    m = new_market(n_providers=7, bonds=[BOND] * 4 + [10**9] * 3)
    m.create_job(rounds=2, participants_per_round=4, verifiers_per_challenge=3, min_stake=BOND)
    m.until(m.height + 1)
    cheat = m.round(1, 0).participants[0].address

    def vote(v, t):
        return (
            (False, 0)
            if t == cheat and m.round(1, 0).phase == jobs_pb2.PHASE_VERDICT
            else (True, 5_000)
        )

    run_job(m, 1, vote=vote)
    r0, r1 = m.round(1, 0), m.round(1, 1)
    assert next(p for p in r0.participants if p.address == cheat).outcome == jobs_pb2.OUTCOME_FRAUD
    p1 = next(p for p in r1.participants if p.address == cheat)
    assert p1.outcome == jobs_pb2.OUTCOME_ACCEPTED and p1.reputation_delta == 0
    assert (
        m.provider(cheat).reputation == 0
        and m.provider(cheat).status == providers_pb2.PROVIDER_STATUS_JAILED
    )
    # round 1 was opened before round 0's fraud was proven, but finalized after it
    assert r1.open_height < r0.finalized_height < r1.finalized_height


def test_jailed_provider_not_paid_for_rounds_in_flight():
    """Regression: a provider jailed for fraud in round 0 was still paid its round-1 slot."""
    m = new_market(n_providers=7, bonds=[BOND] * 4 + [10**9] * 3)
    budget, vbudget = 1_000_000, 100_000
    m.create_job(
        rounds=2,
        reward=budget,
        vreward=vbudget,
        participants_per_round=4,
        verifiers_per_challenge=3,
        min_stake=BOND,
    )
    m.until(m.height + 1)
    cheat = m.round(1, 0).participants[0].address

    def vote(v, t):  # the cheat is proven fraudulent in round 0 only
        return (
            (False, 0)
            if t == cheat and m.round(1, 0).phase == jobs_pb2.PHASE_VERDICT
            else (True, 5_000)
        )

    run_job(m, 1, vote=vote)
    r1 = m.round(1, 1)
    p1 = next(p for p in r1.participants if p.address == cheat)
    assert p1.outcome == jobs_pb2.OUTCOME_ACCEPTED and p1.reward == 0
    assert cheat not in {x.address for x in r1.payouts}
    others = [p for p in r1.participants if p.address != cheat]
    assert all(p.outcome == jobs_pb2.OUTCOME_ACCEPTED and p.reward > 0 for p in others)
    # the others keep exactly their slot shares; the cheat's slot returns to the escrow
    from abci_app.rewards.rules import compute_participant_payouts

    weights = [
        (p.address, p.commitment.tokens_processed * p.quality * p.reputation)
        for p in r1.participants
    ]
    want = {a: x for a, x in compute_participant_payouts(budget, 4, weights) if a != cheat}
    assert {p.address: p.reward for p in others} == want
    assert r1.reward_paid == sum(want.values()) <= budget * 3 // 4
    assert r1.returned_to_escrow == budget + vbudget - r1.reward_paid - r1.verifier_paid
    # nor a verifier share (it never verifies its co-participants)
    assert all(x.address != cheat for x in r1.payouts if x.kind == "verifier")


def test_single_invalid_verifier_is_overturned_and_slashed():
    """Regression: one drawn verifier voting invalid rejected honest work (or, before, slashed it
    50 % and took a bounty). Now a lone invalid vote escalates to the appeal panel, whose valid
    verdict is final: the work is paid, the false claimant is slashed more than the bounty it
    claimed (200 LOCO + 1 uloco > 10 % of its bond), part of it to the appeal panel."""
    m = new_market(n_providers=5)
    supply = bank.get_supply(m.store)
    m.create_job(rounds=1, participants_per_round=1, verifiers_per_challenge=1)
    m.until(m.height + 1)
    accuser = OddVoter(odd=(False, 0), rest=(True, 8_000))
    resps = run_job(m, 1, vote=accuser)
    r = m.round(1, 0)
    (p,) = r.participants
    assert (
        p.escalated
        and p.outcome == jobs_pb2.OUTCOME_ACCEPTED
        and p.quality == 8_000
        and p.reward == 1_000_000
    )
    assert (
        m.provider(p.address).bond == BOND
        and m.provider(p.address).status == providers_pb2.PROVIDER_STATUS_ACTIVE
    )
    claimed = BOND // 2 * 2_000 // 10_000  # the bounty it hoped for
    (wrong,) = [v for v in p.verifiers if v.address == accuser.address]
    assert wrong.panel == 0 and wrong.slashed == claimed + 1 > BOND // 10
    assert (
        m.provider(accuser.address).bond == BOND - claimed - 1
        and m.provider(accuser.address).reputation == 4750
    )
    # the appeal panel: every provider outside the round and the first panel (its one seat, and
    # the audit's seat when the draw's seed audited the challenge), at most appeal_verifiers
    first = [v for v in p.verifiers if v.panel == 0]
    assert len(first) == (2 if p.audited else 1)
    appeal = [v for v in p.verifiers if v.panel == 1]
    n_appeal = min(get_params(m.store).appeal_verifiers, len(m.providers) - 1 - len(first))
    assert len(appeal) == n_appeal and all(v.voted and v.valid and v.slashed == 0 for v in appeal)
    # the bounty and the verifier pay go to the right side: the appeal panel (and the audit's
    # seat when it voted valid in the first panel), equal bonds, equal shares
    right = {v.address for v in p.verifiers if v.voted and v.valid}
    assert right == {v.address for v in p.verifiers if v.address != accuser.address}
    bounty = sum(x.amount for x in r.payouts if x.kind == "bounty")
    assert bounty == len(right) * ((claimed + 1) * 2_000 // 10_000 // len(right))
    assert {x.address for x in r.payouts if x.kind == "bounty"} == right
    assert bank.get_supply(m.store) == supply - (claimed + 1 - bounty) - FEE
    assert {x.address for x in r.payouts if x.kind == "verifier"} == right
    assert [e["outcome"] for e in events_of(resps, "verdict.decided")] == ["accepted"]
    assert len(events_of(resps, "verdict.escalated")) == 1


def test_a_network_too_small_for_min_fraud_verifiers_proves_fraud_by_all_who_can_judge():
    """3 providers, 1 drawn: only 2 can judge it, fewer than min_fraud_verifiers (3). Both vote
    invalid in every panel: that is ⅔ (here all) of everyone who could have been asked
    (``rounds.compute_min_fraud_voters``), so the fraud is proven: slashed, jailed, the bounty to
    the two. Before, the round ended ``rejected``: a copier in a 4-provider network was never
    slashed (issue 31, 12)."""
    m = new_market(n_providers=3)
    m.create_job(rounds=1, participants_per_round=1, verifiers_per_challenge=1)
    run_job(m, 1, vote=lambda v, t: (False, 0))
    r = m.round(1, 0)
    (p,) = r.participants
    judges = {v.address for v in p.verifiers}
    assert len(judges) == 2  # everyone outside the round
    assert p.outcome == jobs_pb2.OUTCOME_FRAUD and p.slashed > 0 and p.reward == 0
    assert m.provider(p.address).status != providers_pb2.PROVIDER_STATUS_ACTIVE
    assert {x.address for x in r.payouts if x.kind == "bounty"} == judges
    assert all(v.slashed == 0 for v in p.verifiers)


def test_too_few_invalid_voters_for_the_judiciary_reject_without_slashing():
    """The fraud threshold is min_fraud_verifiers, capped at ⌈⅔⌉ of the judiciary: 2 invalid
    voters holding ⅔ of a panel's stake in a network where 5 could judge (threshold 3) only
    reject the work (not paid, nobody slashed)."""
    from abci_app.jobs.rounds import compute_min_fraud_voters, compute_outcome

    assert [compute_min_fraud_voters(3, n) for n in range(8)] == [1, 1, 2, 2, 3, 3, 3, 3]
    assert compute_min_fraud_voters(5, 30) == 5 and compute_min_fraud_voters(1, 30) == 1
    panel = [
        jobs_pb2.VerifierAssignment(address=bytes([i]) * 20, stake=st, voted=True, valid=False)
        for i, st in ((1, 10), (2, 10))
    ] + [jobs_pb2.VerifierAssignment(address=b"\x03" * 20, stake=10, voted=False)]
    need = compute_min_fraud_voters(3, 5)
    assert compute_outcome(panel, 5_000, need)[0] == jobs_pb2.OUTCOME_REJECTED
    assert compute_outcome(panel, 5_000, compute_min_fraud_voters(3, 3))[0] == (
        jobs_pb2.OUTCOME_FRAUD
    )


def test_small_appeal_panel_with_the_first_panel_proves_fraud():
    """A split first panel (2 invalid, 1 lazy valid) and an appeal panel of one that says
    invalid: the appeal decides, and the first panel's invalid voters count towards
    min_fraud_verifiers: fraud."""
    # no panel audit: an audit's extra first-panel seat would take the appeal panel's one provider
    m = new_market(n_providers=5, jobs_params={"audit_bps": 0})
    m.create_job(rounds=1, participants_per_round=1, verifiers_per_challenge=3)
    m.until(m.height + 1)
    lazy = OddVoter(odd=(True, 8_000), rest=(False, 0))
    run_job(m, 1, vote=lazy)
    (p,) = m.round(1, 0).participants
    # the appeal's fraud verdict goes to the final panel (all four providers outside the round)
    assert [v.panel for v in p.verifiers] == [0, 0, 0, 1, 2, 2, 2, 2]
    assert p.outcome == jobs_pb2.OUTCOME_FRAUD
    lazy_seats = [v.slashed for v in p.verifiers if v.address == lazy.address]
    assert lazy_seats == [BOND // 10, (BOND - BOND // 10) // 10]  # wrong twice: first and final


def test_a_waiting_job_costs_the_chain_a_logarithmic_number_of_scans():
    """Issue 31, 7: a job nobody can take retries its draw after wait_retry_blocks (10), then at
    doubling intervals (rounds.compute_next_retry): over max_wait_blocks (1,000) 8 draws and 8
    round.waiting events instead of 100, and it still expires exactly max_wait_blocks after it
    began waiting (escrow back)."""
    from abci_app.jobs.params import DEFAULTS

    m = new_market(n_providers=2, register=False)
    bal = bank.get_balance(m.store, m.owner.address)
    m.create_job(rounds=1)
    since = m.height + 1
    waits: list[int] = []
    while m.job(1).status == jobs_pb2.JOB_STATUS_ACTIVE:
        resp = m.block()
        waits += [m.height for e in resp.events if e.type == "round.waiting"]
        assert m.height < since + 2 * DEFAULTS["max_wait_blocks"]
    assert [w - since for w in waits] == [0, 10, 20, 40, 80, 160, 320, 640]
    assert m.job(1).status == jobs_pb2.JOB_STATUS_CANCELLED
    assert m.job(1).cancel_height == since + DEFAULTS["max_wait_blocks"]
    # the escrow came back; the creation fee is burned
    assert bank.get_balance(m.store, m.owner.address) == bal - m.job(1).creation_fee
