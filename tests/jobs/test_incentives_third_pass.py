"""Issue 31 (incentives, third pass): one strategy test per item still open after the second
pass, named after it, on the real app (every block commits and checks every invariant), with
balances and reputations before and after. Items 1, 2, 7, 12 and 13 have theirs in
test_worker_feasibility.py, test_scenarios.py, test_early_close.py and test_msg_attest_model.py;
item 6 (attest stallers) in test_incentives.py."""

from abci_app.bank import keeper as bank
from abci_app.jobs import keeper as jobs_keeper
from abci_app.jobs.rounds import compute_draw_size, is_contested
from abci_app.pb import jobs_pb2
from abci_app.providers.params import DEFAULTS as PROVIDER_DEFAULTS
from tests.kits.marketkit import BOND, Market, exit_msg, new_market, register_msg, run_job

LOCO = 1_000_000
RESERVE = {"reserve_verifiers": 1}  # the chain's default (the unit kits turn it off)


def wealth(m: Market, addr: bytes) -> int:
    p = m.provider(addr)
    return bank.get_balance(m.store, addr) + (p.bond + p.unbonding if p else 0)


def probation_market(n_providers: int, bonds: list[int] | None = None) -> Market:
    """A market under the chain's own providers params: a new key starts at the probation floor."""
    return new_market(
        n_providers=n_providers,
        bonds=bonds,
        providers_params={
            k: PROVIDER_DEFAULTS[k] for k in ("initial_reputation", "reputation_floor")
        },
        jobs_params=RESERVE,
    )


# -- 3: reputation cannot be bought; a fresh key starts below any record it could shed ----------


def test_item_3_a_self_paid_job_buys_no_reputation():
    """An owner funds a job whose filter (min_stake) leaves one eligible provider: its friend is
    drawn every round and paid the owner's own money back. Verified, accepted, paid: and yet its
    reputation does not move, because it was never drawn against competition (it rose 5,000 ->
    9,388 in 20 such rounds before, for the 1 LOCO fee)."""
    m = probation_market(4, bonds=[4 * BOND, BOND, BOND, BOND])
    friend = next(k.address for k in m.providers if m.provider(k.address).bond == 4 * BOND)
    rep0 = m.provider(friend).reputation
    m.create_job(rounds=6, participants_per_round=1, min_stake=3 * BOND, challenge_bps=10_000)
    run_job(m, 1)
    rounds = list(jobs_keeper.iterate_rounds(m.store, 1))
    assert len(rounds) == 6
    for r in rounds:
        (p,) = r.participants
        assert p.address == friend and p.outcome == jobs_pb2.OUTCOME_ACCEPTED
        assert p.reward > 0 and p.verifiers and not p.contested
    assert m.provider(friend).reputation == rep0


def test_item_3_reputation_grows_from_contested_paid_work():
    """The same job open to every provider of equal weight: each drawn provider was one of four
    that could have been drawn, so its verified, paid round lifts its reputation; the owner's money
    went to whoever the beacon drew."""
    m = probation_market(5)
    reps0 = {k.address: m.provider(k.address).reputation for k in m.providers}
    m.create_job(rounds=4, participants_per_round=1, challenge_bps=10_000)
    run_job(m, 1)
    gained = set()
    for r in jobs_keeper.iterate_rounds(m.store, 1):
        (p,) = r.participants
        assert p.contested and p.outcome == jobs_pb2.OUTCOME_ACCEPTED and p.reward > 0
        gained.add(p.address)
    assert gained and all(m.provider(a).reputation > reps0[a] for a in gained)


def test_item_3_a_fresh_key_starts_at_the_floor_no_record_falls_below():
    """Probation: a new key starts at ``initial_reputation`` = ``reputation_floor``, and no loss
    short of fraud takes a record below the floor, so shedding a damaged record for a new key never
    raises a reputation (whitewashing). A provider that misses every commit keeps losing its bond
    (1 % a round) but stays at the floor; exiting and registering again gives it the floor, not
    more."""
    m = probation_market(3)
    floor = PROVIDER_DEFAULTS["reputation_floor"]
    assert PROVIDER_DEFAULTS["initial_reputation"] <= floor
    assert all(m.provider(k.address).reputation == floor for k in m.providers)
    lazy = m.providers[0]
    bond0 = m.provider(lazy.address).bond
    m.create_job(rounds=4, participants_per_round=2, challenge_bps=500)
    run_job(m, 1, skip_commit=frozenset({lazy.address}))
    missed = sum(
        1
        for r in jobs_keeper.iterate_rounds(m.store, 1)
        for p in r.participants
        if p.address == lazy.address and p.outcome == jobs_pb2.OUTCOME_MISSED_COMMIT
    )
    assert missed >= 1
    assert m.provider(lazy.address).reputation == floor
    assert m.provider(lazy.address).bond < bond0
    assert m.send(lazy, exit_msg()).code == 0
    m.until(m.provider(lazy.address).unbonding_height)
    assert m.provider(lazy.address) is None
    assert m.send(lazy, register_msg(BOND)).code == 0
    assert m.provider(lazy.address).reputation == floor


def test_item_3_contested_means_at_most_half_the_eligible_weight():
    assert is_contested(1, 2) and is_contested(1, 4)
    assert not is_contested(3, 5) and not is_contested(1, 1)


# -- 4: scoring a rival through a Sybil verifier ---------------------------------------------------


def test_item_4_scoring_a_rival_low_through_a_sybil_verifier_pays_nothing():
    """Two participants of equal stake and work; the panel of one (the rival's) holds the other's
    Sybil, which opens a valid vote scoring the rival at quality 1, while the griefer's own panel
    scores it 10,000. Both are paid the same slot: quality is not what pays (the griefer's share
    doubled before, +5 LOCO a round in one case)."""
    m = new_market(n_providers=6)
    m.create_job(rounds=1, participants_per_round=2, verifiers_per_challenge=1)
    m.until(m.height + 1)
    a, b = (p.address for p in m.round(1, 0).participants)

    def vote(verifier: bytes, target: bytes) -> tuple[bool, int]:
        return (True, 1) if target == b else (True, 10_000)

    run_job(m, 1, vote=vote)
    r = m.round(1, 0)
    pa, pb = (next(p for p in r.participants if p.address == x) for x in (a, b))
    assert pa.outcome == pb.outcome == jobs_pb2.OUTCOME_ACCEPTED
    assert pb.quality < pa.quality  # recorded as voted
    assert pa.reward == pb.reward > 0


# -- 10: silence is never acceptance; a challenge always gets verifiers -------------------------


def test_item_10_the_draw_leaves_judges_outside_the_round():
    """Two providers, a job asking for both: one is drawn, the other can verify it (before, both
    were drawn and every challenge was accepted unverified)."""
    m = new_market(n_providers=2, jobs_params=RESERVE)
    m.create_job(rounds=2, participants_per_round=2, verifiers_per_challenge=1)
    run_job(m, 1)
    for r in jobs_keeper.iterate_rounds(m.store, 1):
        (p,) = r.participants
        assert p.challenged and len(p.verifiers) >= 1
        assert p.outcome == jobs_pb2.OUTCOME_ACCEPTED and p.reward > 0
    spec = jobs_pb2.JobSpec(participants_per_round=4, verifiers_per_challenge=1, challenge_bps=500)
    assert compute_draw_size(spec, 4, 4) == 3
    assert compute_draw_size(spec, 5, 6) == 4
    assert compute_draw_size(spec, 1, 1) == 1  # one provider: drawn, nobody can judge it
    assert compute_draw_size(spec, 4, None) == 4  # reserve_verifiers off
    never_challenged = jobs_pb2.JobSpec(participants_per_round=4, verifiers_per_challenge=1)
    assert compute_draw_size(never_challenged, 4, 4) == 4  # challenge_bps 0: nothing to judge


def test_item_10_a_challenge_nobody_can_verify_is_not_accepted():
    """A network of one provider: its challenged commitment finds no verifier at the deadline nor
    at the reveal end, and ends undecided: not paid, not slashed (it was accepted at the
    unverified quality before, whatever the challenge rate)."""
    m = new_market(n_providers=1, jobs_params=RESERVE)
    m.create_job(rounds=1, participants_per_round=1, challenge_bps=10_000)
    run_job(m, 1)
    (p,) = m.round(1, 0).participants
    assert p.challenged and not p.verifiers
    assert p.outcome == jobs_pb2.OUTCOME_UNDECIDED and p.reward == 0 and p.slashed == 0


def test_item_10_a_challenge_without_verifiers_is_carried_to_the_reveal_end():
    """Two providers: one drawn, the other its only judge, which exits before the commit
    deadline. The challenge finds nobody there; a provider that registers during the reveal window
    is seated at the reveal end, re-executes and votes, and the honest work is accepted and paid."""
    m = new_market(n_providers=2, n_keys=4, jobs_params=RESERVE)
    m.create_job(
        rounds=1,
        participants_per_round=2,
        verifiers_per_challenge=1,
        commit_blocks=6,
        reveal_blocks=6,
    )
    m.until(m.height + 1)
    r = m.round(1, 0)
    (part,) = r.participants
    judge = next(k for k in m.providers if k.address != part.address)
    assert m.send(judge, exit_msg()).code == 0
    newcomer = m.chain.keys[3]
    seated = False
    for _ in range(200):
        r = m.round(1, 0)
        if r.phase == jobs_pb2.PHASE_REVEAL and m.provider(newcomer.address) is None:
            (p,) = r.participants
            assert p.challenged and not p.verifiers  # nobody at the deadline
            assert m.send(newcomer, register_msg(BOND)).code == 0
            m.providers.append(newcomer)
        if r.phase == jobs_pb2.PHASE_VERDICT:
            (p,) = r.participants
            seated = seated or [v.address for v in p.verifiers] == [newcomer.address]
        if m.job(1).status == jobs_pb2.JOB_STATUS_COMPLETED:
            break
        from tests.kits.marketkit import actors_block

        actors_block(m, 1)
    assert seated
    (p,) = m.round(1, 0).participants
    assert p.outcome == jobs_pb2.OUTCOME_ACCEPTED and p.reward > 0


# -- 11: griefing by silence costs the griefer more than the honest --------------------------------


def test_item_11_a_silent_verifier_pays_more_than_the_slot_it_leaves_unpaid():
    """Three providers, two drawn, one judge: nobody is left for an appeal panel. The judge commits
    nothing; the challenge ends undecided and the honest provider loses its slot (50 LOCO). The
    silent judge is slashed at least that slot + 1 uloco (the 1 % liveness slash was 20 LOCO, less
    than the harm)."""
    m = new_market(n_providers=3, jobs_params=RESERVE)
    reward = 100 * LOCO
    m.create_job(
        rounds=1, participants_per_round=2, verifiers_per_challenge=1, reward=reward, vreward=LOCO
    )
    m.until(m.height + 1)
    r = m.round(1, 0)
    judge = next(
        k.address for k in m.providers if k.address not in {p.address for p in r.participants}
    )
    target = r.participants[0].address
    before = wealth(m, judge)

    def vote(verifier: bytes, t: bytes) -> tuple[bool, int] | None:
        return None if t == target else (True, 8_000)

    run_job(m, 1, vote=vote)
    r = m.round(1, 0)
    p = next(p for p in r.participants if p.address == target)
    assert p.challenged and not p.escalated and p.outcome == jobs_pb2.OUTCOME_UNDECIDED
    slot = reward // 2
    assert p.reward == 0
    (seat,) = p.verifiers
    assert seat.address == judge and not seat.voted
    assert seat.slashed == slot + 1 > BOND // 100  # more than the 1 % liveness slash alone
    # its pay for the other challenge it judged does not make up for it
    assert before - wealth(m, judge) > slot - r.verifier_paid


def test_item_10_a_reveal_awaiting_carried_seats_closes_in_the_next_block():
    """The reveal phase ends early once every challenged provider has revealed, in the block of
    the last reveal. When a challenge waits for carried seats, that end-block draws its panel, so
    it closes one block later: the provider sending the last reveal cannot pick, by timing it, the
    block whose (already known) seed seats its judges."""
    from abci_app.jobs.rounds import compute_close_height

    waiting = jobs_pb2.Round(
        phase=jobs_pb2.PHASE_REVEAL,
        participants=[jobs_pb2.Participant(address=b"a" * 20, challenged=True)],
    )
    seated = jobs_pb2.Round()
    seated.CopyFrom(waiting)
    seated.participants[0].verifiers.add(address=b"v" * 20, stake=1)
    assert compute_close_height(waiting, 100, entering=False) == 101
    assert compute_close_height(seated, 100, entering=False) == 100
