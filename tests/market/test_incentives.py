"""Issue 11: one test per cheating strategy, on the real app (every block commits and checks every
invariant), asserting that the strategy does not pay: balances and reputations before and after.
benchmarks/incentives.py measures the same strategies' expected profit per round."""

from chainkit import assert_rejected
from marketkit import (
    BOND,
    MODEL0,
    actors_block,
    agg_hash,
    create_job_msg,
    exit_msg,
    new_market,
    register_msg,
    run_job,
    tx_pb2,
    update_msg,
)

from abci_app.bank import keeper as bank
from abci_app.jobs import keeper as jobs_keeper
from abci_app.jobs.errors import ErrCannotDecline, ErrNotSelected, ErrVoteMismatch, ErrWrongPhase
from abci_app.pb import jobs_pb2, providers_pb2


def wealth(m, addr: bytes) -> int:
    p = m.provider(addr)
    return bank.get_balance(m.store, addr) + (p.bond + p.unbonding if p else 0)


def test_random_root_withhold():
    """A provider that commits a random root and, challenged, never reveals loses what proven
    fraud costs (half its bond, burned; reputation 0; jailed): far more than the slot it hoped
    to be paid for, and never less than revealing garbage."""
    m = new_market(n_providers=3)
    assert m.send(m.owner, create_job_msg(rounds=1, participants_per_round=2, challenge_bps=10_000)).code == 0
    m.until(m.height + 1)
    cheat = m.round(1, 0).participants[0].address
    before, rep_before = wealth(m, cheat), m.provider(cheat).reputation
    run_job(m, 1, skip_reveal=frozenset({cheat}))
    p = next(p for p in m.round(1, 0).participants if p.address == cheat)
    assert p.outcome == jobs_pb2.OUTCOME_MISSED_REVEAL and p.reward == 0
    assert wealth(m, cheat) - before == -BOND // 2
    assert rep_before == 5000 and m.provider(cheat).reputation == 0
    assert m.provider(cheat).status == providers_pb2.PROVIDER_STATUS_JAILED
    # the honest co-participant is paid its slot and slashed nothing
    other = next(p for p in m.round(1, 0).participants if p.address != cheat)
    assert other.reward == 500_000 and other.slashed == 0


def test_rival_griefer():
    """A participant is never drawn to verify a participant of its own round (its quality score
    would move the round's pay to itself), and a job's owner is never drawn at all."""
    m = new_market(n_providers=7)
    owner_provider = m.providers[0]
    m.owner = owner_provider  # the owner is a registered provider too
    assert m.send(m.owner, create_job_msg(rounds=6, participants_per_round=3, verifiers_per_challenge=3,
                                          challenge_bps=10_000)).code == 0
    run_job(m, 1)
    n_checked = 0
    for r in jobs_keeper.iterate_rounds(m.store, 1):
        parts = {p.address for p in r.participants}
        assert owner_provider.address not in parts
        for p in r.participants:
            assert p.challenged and len(p.verifiers) == 3
            for v in p.verifiers:
                assert v.address not in parts and v.address != owner_provider.address
                n_checked += 1
    assert n_checked == 6 * 3 * 3


def _staller_market(bonds: list[int]):
    m = new_market(n_providers=len(bonds), bonds=bonds)
    n = len(bonds)
    assert m.send(m.owner, create_job_msg(rounds=1, participants_per_round=n, num_shards=n, verifiers_per_challenge=1,
                                          challenge_bps=500)).code == 0
    m.until(m.height + 1)
    return m


def test_attest_staller():
    """A participant holding > 1/3 of the attesting stake that never attests blocks the quorum;
    it is not paid (nobody is, without a quorum) and loses reputation: stalling never pays."""
    m = _staller_market([3 * BOND, BOND])
    stall = max(m.round(1, 0).participants, key=lambda p: p.stake).address
    before = wealth(m, stall)
    run_job(m, 1, attest=lambda a, j, r: None if a == stall else agg_hash(j, r))
    r = m.round(1, 0)
    assert all(p.outcome == jobs_pb2.OUTCOME_ACCEPTED for p in r.participants)
    assert r.attested_model_hash == b"" and m.job(1).current_model_hash == MODEL0
    assert r.reward_paid == 0 and wealth(m, stall) == before
    assert m.provider(stall).reputation == 4500  # missed attest: as a missed commit


def test_attest_staller_below_a_third_is_unpaid():
    """With a quorum, an accepted participant that did not attest it gets nothing; the attesters
    are paid their slots exactly as if it had failed."""
    m = _staller_market([BOND, BOND, BOND])
    stall = m.round(1, 0).participants[0].address
    before = wealth(m, stall)
    run_job(m, 1, attest=lambda a, j, r: None if a == stall else agg_hash(j, r))
    r = m.round(1, 0)
    assert r.attested_model_hash
    paid = {p.address: p.reward for p in r.participants}
    assert paid[stall] == 0 and wealth(m, stall) == before
    assert all(v == 333_333 for a, v in paid.items() if a != stall)
    assert r.returned_to_escrow == 1_100_000 - 2 * 333_333
    assert m.provider(stall).reputation == 4500


# -- verdicts: secret votes, escalation, slashing of the losing side ---------------------------------


def to_verdict(m) -> None:
    """Honest commit and reveal of job 1 round 0; returns in its verdict window."""
    actors_block(m, 1)
    m.until(m.round(1, 0).commit_deadline)
    actors_block(m, 1)
    m.until(m.round(1, 0).reveal_end)


def _one_challenge(n_providers: int = 8, verifiers: int = 3, bonds: list[int] | None = None, **kw):
    """Job 1 with one participant, always challenged, ``verifiers`` in the first panel; the rest
    of the providers can form the appeal panel."""
    m = new_market(n_providers=n_providers, bonds=bonds)
    assert m.send(m.owner, create_job_msg(rounds=1, participants_per_round=1, verifiers_per_challenge=verifiers,
                                          challenge_bps=10_000, **kw)).code == 0
    m.until(m.height + 1)
    return m, m.round(1, 0).participants[0].address


def test_sybil_verifier_coalition():
    """A coalition holding the whole first panel claims fraud against honest work: the claim
    escalates, the appeal panel accepts the work, the honest provider is paid and not slashed,
    and every claimant loses more than the bounty it hoped for."""
    m, target = _one_challenge()
    coalition: set[bytes] = set()

    def vote(v, t):
        first = {x.address for x in m.round(1, 0).participants[0].verifiers if x.panel == 0}
        if v in first:
            coalition.add(v)
            return (False, 0)
        return (True, 8_000)

    before = {k.address: wealth(m, k.address) for k in m.providers}
    run_job(m, 1, vote=vote)
    (p,) = m.round(1, 0).participants
    assert len(coalition) == 3 and p.escalated and p.outcome == jobs_pb2.OUTCOME_ACCEPTED
    assert p.slashed == 0 and wealth(m, target) - before[target] == 1_000_000 and m.provider(target).reputation > 5000
    claimed_each = BOND // 2 * 2_000 // 10_000 // 3
    for a in coalition:
        lost = before[a] - wealth(m, a)
        assert lost > claimed_each and lost == BOND // 10  # 10 % of its bond > a third of the bounty
        assert m.provider(a).reputation == 4750


def test_whale_verifier():
    """One verifier with most of the stake cannot decide alone: its invalid vote escalates, the
    appeal panel (drawn without it) overturns it, and it is slashed 10 % of its large bond."""
    m = new_market(n_providers=8, n_keys=10)
    assert m.send(m.owner, create_job_msg(rounds=1, participants_per_round=1, verifiers_per_challenge=1,
                                          challenge_bps=10_000)).code == 0
    m.until(m.height + 1)  # the participant is drawn; now the whale bonds 100 x and is drawn to verify
    whale = m.chain.keys[9]
    assert m.send(whale, register_msg(BOND * 100)).code == 0
    to_verdict(m)
    (p,) = m.round(1, 0).participants
    assert [v.address for v in p.verifiers] == [whale.address]
    before = wealth(m, whale.address)
    run_job(m, 1, vote=lambda v, t: (False, 0) if v == whale.address else (True, 8_000))
    (p,) = m.round(1, 0).participants
    assert p.escalated and p.outcome == jobs_pb2.OUTCOME_ACCEPTED and p.reward == 1_000_000 and p.slashed == 0
    assert before - wealth(m, whale.address) == BOND * 10  # 10 % of 100 x BOND


def test_lazy_verifier():
    """A verifier that votes valid without re-executing, next to honest ones, loses when the
    work is fake: the split escalates, the appeal panel proves fraud, the lazy vote is slashed
    10 % and the honest voters share the fraud bounty."""
    m, cheat = _one_challenge()
    lazy: list[bytes] = []

    def vote(v, t):
        if not lazy:
            lazy.append(v)
        return (True, 8_000) if v == lazy[0] else (False, 0)

    run_job(m, 1, vote=vote)
    (p,) = m.round(1, 0).participants
    assert p.escalated and p.outcome == jobs_pb2.OUTCOME_FRAUD and p.slashed == BOND // 2
    (lv,) = [v for v in p.verifiers if v.address == lazy[0]]
    assert lv.panel == 0 and lv.slashed == BOND // 10
    assert m.provider(lazy[0]).bond == BOND - BOND // 10
    honest = [v for v in p.verifiers if v.address != lazy[0]]
    r = m.round(1, 0)
    paid = {x.address for x in r.payouts if x.kind in ("verifier", "bounty")}
    assert lazy[0] not in paid and {v.address for v in honest} <= paid


def test_vote_copier():
    """Votes are secret while voting is open: the round shows only hashes, and a copied hash
    cannot be opened by the copier (the voter's address is inside), so the copier is silent:
    slashed and the challenge escalates."""
    from marketkit import reveal_vote_msg, verdict_msg, vote_msgs

    m, target = _one_challenge(verifiers=2)
    to_verdict(m)
    r = m.round(1, 0)
    honest, copier = [v.address for v in r.participants[0].verifiers]
    commit, open_ = vote_msgs(r, target, honest, True, 8_000)
    assert m.send(m.key(honest), commit).code == 0
    seen = m.round(1, 0).participants[0].verifiers[0]
    assert seen.vote_hash and not seen.voted and seen.quality == 0 and not seen.evidence  # nothing to copy
    assert m.send(m.key(copier), verdict_msg(1, 0, target, seen.vote_hash)).code == 0  # copies the hash
    m.until(r.verdict_end)
    assert m.send(m.key(honest), open_).code == 0
    o = open_.reveal_vote
    assert_rejected(m.chain, m.tx(m.key(copier), reveal_vote_msg(1, 0, target, True, 8_000, o.evidence, o.salt)), ErrVoteMismatch)
    run_job(m, 1)
    (p,) = m.round(1, 0).participants
    assert p.escalated and p.outcome == jobs_pb2.OUTCOME_ACCEPTED
    (cv,) = [v for v in p.verifiers if v.address == copier]
    assert not cv.voted and cv.slashed == BOND // 100 and m.provider(copier).reputation < 5000


def test_garbage_reveal_with_colluding_verifier():
    """Revealing garbage with one colluding verifier among three no longer ends 'rejected' for
    free: the split escalates, the appeal panel proves fraud (50 %, jailed) and the colluder's
    valid vote is slashed."""
    m, cheat = _one_challenge()
    colluder: list[bytes] = []

    def vote(v, t):
        if not colluder:
            colluder.append(v)
        return (True, 10_000) if v == colluder[0] else (False, 0)

    run_job(m, 1, vote=vote)
    (p,) = m.round(1, 0).participants
    assert p.outcome == jobs_pb2.OUTCOME_FRAUD and p.slashed == BOND // 2 and p.reward == 0
    assert m.provider(cheat).status == providers_pb2.PROVIDER_STATUS_JAILED
    assert m.provider(colluder[0]).bond == BOND - BOND // 10


def test_owner_sybil():
    """A job owner's Sybil as the lone verifier votes honest work invalid to get the escrow back:
    the vote escalates, the appeal panel accepts, the provider is paid from the escrow (the owner
    gets back only what was not paid) and the Sybil is slashed more than any bounty."""
    m, target = _one_challenge(verifiers=1)
    to_verdict(m)
    sybil = m.round(1, 0).participants[0].verifiers[0].address
    owner_before, sybil_before = wealth(m, m.owner.address), wealth(m, sybil)
    run_job(m, 1, vote=lambda v, t: (False, 0) if v == sybil else (True, 8_000))
    (p,) = m.round(1, 0).participants
    assert p.outcome == jobs_pb2.OUTCOME_ACCEPTED and p.reward == 1_000_000
    r = m.round(1, 0)
    assert m.job(1).refunded == 1_100_000 - r.reward_paid - r.verifier_paid
    coalition_gain = (wealth(m, m.owner.address) - owner_before) + (wealth(m, sybil) - sybil_before)
    # the owner got back only the unpaid remainder; the Sybil lost more than the bounty it claimed
    assert coalition_gain == m.job(1).refunded - (BOND // 2 * 2_000 // 10_000 + 1) < 0


# -- jobs cost something, can be refused, and reputation is earned --------------------------------


def test_junk_job_spammer():
    """A job no provider takes (here: every provider's policy asks more per slot than it pays)
    never makes anyone work or get slashed; it waits, retrying every 10 blocks, and is cancelled
    after max_wait_blocks: the escrow comes back, the creation fee is burned."""
    m = new_market(n_providers=3)
    for k in m.providers:
        assert m.send(k, update_msg(policy=providers_pb2.JobPolicy(min_slot_reward=1_000_000))).code == 0
    bal, supply = bank.get_balance(m.store, m.owner.address), bank.get_supply(m.store)
    assert m.send(m.owner, create_job_msg(rounds=20, reward=200_000, vreward=0)).code == 0  # 100,000 per slot
    created = m.height
    m.until(created + 999)
    assert m.job(1).status == jobs_pb2.JOB_STATUS_ACTIVE and m.job(1).rounds_opened == 0
    m.until(created + 1_001)
    j = m.job(1)
    assert j.status == jobs_pb2.JOB_STATUS_CANCELLED and j.refunded == 20 * 200_000 and j.rounds_opened == 0
    assert bank.get_balance(m.store, m.owner.address) == bal - 1_000_000 and bank.get_supply(m.store) == supply - 1_000_000
    for k in m.providers:
        assert m.provider(k.address).bond == BOND and m.provider(k.address).reputation == 5000




def decline_msg(job_id: int, round_: int) -> tx_pb2.Msg:
    return tx_pb2.Msg(decline_round=jobs_pb2.MsgDeclineRound(job_id=job_id, round=round_))


def test_decline_before_commit():
    """A drawn provider that does not want the round declines before committing: no slash, no
    reputation change, its slot stays in the escrow; the other participant is paid its slot."""
    m = new_market(n_providers=3)
    assert m.send(m.owner, create_job_msg(rounds=1, commit_blocks=10)).code == 0
    m.until(m.height + 1)
    r = m.round(1, 0)
    no, yes = r.participants[0].address, r.participants[1].address
    outsider = next(k for k in m.providers if k.address not in (no, yes))
    assert_rejected(m.chain, m.tx(outsider, decline_msg(1, 0)), ErrNotSelected)
    assert m.send(m.key(no), decline_msg(1, 0)).code == 0
    assert_rejected(m.chain, m.tx(m.key(no), decline_msg(1, 0)), ErrCannotDecline)
    actors_block(m, 1, skip_commit=frozenset({no}))
    assert_rejected(m.chain, m.tx(m.key(yes), decline_msg(1, 0)), ErrCannotDecline)  # committed: too late
    before = wealth(m, no)
    run_job(m, 1, skip_commit=frozenset({no}))
    r = m.round(1, 0)
    p = next(p for p in r.participants if p.address == no)
    assert p.outcome == jobs_pb2.OUTCOME_DECLINED and p.slashed == 0 and p.reward == 0 and p.reputation_delta == 0
    assert wealth(m, no) == before and m.provider(no).reputation >= 5000
    assert next(p for p in r.participants if p.address == yes).reward == 500_000
    assert_rejected(m.chain, m.tx(m.key(yes), decline_msg(1, 0)), ErrWrongPhase)


def test_reputation_farmer():
    """A provider farming reputation with a self-dealt job (a Sybil owner, min_stake set to
    exclude everyone else) gains reputation only in rounds a panel of *other* providers verified
    (unchallenged work earns none; the job's min_stake does not filter verifiers), and the Sybil
    pays the burned creation fee and the verifiers: reputation costs real, verified work and money.
    (As the owner of the job itself it would never be drawn: test_rival_griefer.)"""
    m = new_market(n_providers=5, bonds=[BOND * 2] + [BOND] * 4)
    farmer = m.providers[0]
    sybil = m.owner
    coalition = wealth(m, farmer.address) + wealth(m, sybil.address)
    assert m.send(sybil, create_job_msg(rounds=20, reward=100_000, vreward=100_000, participants_per_round=1,
                                        num_shards=1, min_stake=BOND * 2, challenge_bps=2_000)).code == 0
    rep0 = m.provider(farmer.address).reputation
    run_job(m, 1)
    rounds = list(jobs_keeper.iterate_rounds(m.store, 1))
    assert all(r.participants[0].address == farmer.address for r in rounds)
    verified = [r for r in rounds if r.participants[0].challenged]
    unverified = [r for r in rounds if not r.participants[0].challenged]
    assert verified and unverified and all(r.participants[0].reputation_delta == 0 for r in unverified)
    assert all(r.participants[0].reputation_delta > 0 for r in verified)
    assert all(v.address != farmer.address and v.address != sybil.address for r in verified for v in r.participants[0].verifiers)
    assert m.provider(farmer.address).reputation - rep0 == sum(r.participants[0].reputation_delta for r in rounds)
    spent = coalition - wealth(m, farmer.address) - wealth(m, sybil.address)
    assert spent >= 1_000_000 + sum(r.verifier_paid for r in rounds)  # the fee and the verifiers


def test_whitewasher():
    """Exiting and registering the same key again never resets a damaged reputation (min(last,
    initial)); a fresh key starts at initial_reputation, below an established provider whose
    verified work raised it."""
    m = new_market(n_providers=4, n_keys=9)
    assert m.send(m.owner, create_job_msg(rounds=3, participants_per_round=2)).code == 0
    m.until(m.height + 1)
    lazy = m.round(1, 0).participants[0].address
    run_job(m, 1, skip_commit=frozenset({lazy}), vote=lambda v, t: None if v == lazy else (True, 8_000))
    damaged = m.provider(lazy).reputation
    assert damaged < 5000
    established = max(m.provider(k.address).reputation for k in m.providers if k.address != lazy)
    assert established > 5000
    k = m.key(lazy)
    assert m.send(k, exit_msg()).code == 0
    m.until(m.provider(lazy).unbonding_height)
    assert m.send(k, register_msg()).code == 0
    assert m.provider(lazy).reputation == damaged  # the record follows the key
    fresh = m.chain.keys[8]
    assert m.send(fresh, register_msg()).code == 0
    assert m.provider(fresh.address).reputation == 5000 < established


def test_honest():
    """Honest providers, every commitment challenged by three verifiers: everyone is paid,
    nobody is slashed, reputations rise, the escrow closes exactly."""
    m = new_market(n_providers=6)
    before = {k.address: wealth(m, k.address) for k in m.providers}
    assert m.send(m.owner, create_job_msg(rounds=4, participants_per_round=2, verifiers_per_challenge=3,
                                          challenge_bps=10_000)).code == 0
    run_job(m, 1)
    for r in jobs_keeper.iterate_rounds(m.store, 1):
        assert not r.slashes and all(p.outcome == jobs_pb2.OUTCOME_ACCEPTED and p.reward > 0 for p in r.participants)
    for k in m.providers:
        assert wealth(m, k.address) >= before[k.address] and m.provider(k.address).reputation >= 5000
    assert sum(wealth(m, k.address) - before[k.address] for k in m.providers) == m.job(1).paid_total > 0


def test_fake_fraction_of_steps():
    """A provider whose challenged segment is faked (any fraction f of its steps: a challenge hits
    a faked segment with probability >= f) is proven fraudulent by an honest panel and loses half
    its bond: 1,000 x its slot here, against a saving of at most the slot's training cost."""
    m, cheat = _one_challenge()
    before = wealth(m, cheat)
    run_job(m, 1, vote=lambda v, t: (False, 0) if t == cheat else (True, 8_000))
    (p,) = m.round(1, 0).participants
    assert p.outcome == jobs_pb2.OUTCOME_FRAUD and p.reward == 0
    assert before - wealth(m, cheat) == BOND // 2 == 1_000 * 1_000_000
    assert m.provider(cheat).status == providers_pb2.PROVIDER_STATUS_JAILED


def test_collateral_keeps_a_cheap_bond_out_of_rich_rounds():
    """A job whose slot is large relative to a provider's bond does not draw that provider: at
    500 bps and a 50 % fraud slash, a bond must cover 2 x slot / (5 % x 50 %) = 80 slots, so on
    average a cheater always loses more than a slot can pay it."""
    from abci_app.jobs.incentives import compute_required_bond

    assert compute_required_bond(80 * 10**6, 2, 500, 5_000, 20_000) == 80 * 40 * 10**6
    m = new_market(n_providers=3, bonds=[10**9, 10**9, 4 * 10**9])  # 1,000, 1,000 and 4,000 LOCO
    slot = 50 * 10**6  # 50 LOCO per slot needs 4,000 LOCO of bond
    assert m.send(m.owner, create_job_msg(rounds=1, reward=slot, vreward=0, participants_per_round=1, num_shards=1,
                                          challenge_bps=500)).code == 0
    m.until(m.height + 1)
    (p,) = m.round(1, 0).participants
    assert p.address == m.providers[2].address
    # 100 LOCO per slot needs 8,000 LOCO: nobody qualifies, the job waits instead of drawing
    assert m.send(m.owner, create_job_msg(rounds=1, reward=2 * slot, vreward=0, participants_per_round=1, num_shards=1,
                                          challenge_bps=500)).code == 0
    m.until(m.height + 2)
    assert m.job(2).rounds_opened == 0 and m.job(2).waiting_since > 0
