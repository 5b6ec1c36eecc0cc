"""Issue 11: one test per cheating strategy, on the real app (every block commits and checks every
invariant), asserting that the strategy does not pay: balances and reputations before and after.
benchmarks/incentives.py measures the same strategies' expected profit per round."""

from marketkit import BOND, MODEL0, agg_hash, create_job_msg, new_market, run_job

from abci_app.bank import keeper as bank
from abci_app.jobs import keeper as jobs_keeper
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
