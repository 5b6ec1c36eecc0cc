"""Issue 11: one test per cheating strategy, on the real app (every block commits and checks every
invariant), asserting that the strategy does not pay: balances and reputations before and after.
benchmarks/incentives.py measures the same strategies' expected profit per round."""

import hashlib
import itertools
from dataclasses import replace

import pytest

from abci_app import beacon
from abci_app.app import block_context, execute_block
from abci_app.bank import keeper as bank
from abci_app.codec.tx import SignatureCache
from abci_app.jobs import keeper as jobs_keeper
from abci_app.jobs.audit import compute_faked_segments
from abci_app.jobs.errors import (
    ErrCannotDecline,
    ErrNotSelected,
    ErrUnboundCommitment,
    ErrVoteMismatch,
    ErrWrongPhase,
)
from abci_app.jobs.incentives import compute_masked_entries, is_run_start, mask_trace
from abci_app.pb import abci, bank_pb2, jobs_pb2, providers_pb2
from abci_app.store.cachekv import CacheKV
from tests.kits.chainkit import CHAIN_ID, assert_rejected, signer
from tests.kits.marketkit import (
    BINDING_INDEX,
    BOND,
    EXACT,
    MODEL0,
    OddVoter,
    actors_block,
    agg_hash,
    bound_trace_leaves,
    bound_update_leaves,
    create_job_msg,
    entry_leaf,
    exit_msg,
    h,
    hash_leaf,
    merkle_proof,
    merkle_root,
    new_market,
    register_msg,
    run_job,
    submit_msg,
    trace_leaves,
    trace_states,
    tx_pb2,
    update_leaves,
    update_msg,
)


def wealth(m, addr: bytes) -> int:
    p = m.provider(addr)
    return bank.get_balance(m.store, addr) + (p.bond + p.unbonding if p else 0)


def test_random_root_withhold():
    """A provider that commits a random root and, challenged, never reveals loses what proven
    fraud costs (half its bond, burned; reputation 0; jailed): far more than the slot it hoped
    to be paid for, and never less than revealing garbage."""
    m = new_market(n_providers=3)
    m.create_job(rounds=1, participants_per_round=2, challenge_bps=10_000)
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
    m.create_job(
        rounds=6, participants_per_round=3, verifiers_per_challenge=3, challenge_bps=10_000
    )
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
    m.create_job(
        rounds=1,
        participants_per_round=n,
        num_shards=n,
        verifiers_per_challenge=1,
        challenge_bps=500,
    )
    m.until(m.height + 1)
    return m


def test_attest_staller():
    """A participant holding > 1/3 of the attesting stake that never attests blocks the quorum;
    it is not paid and loses reputation (stalling never pays), while the honest attester is paid
    its slot and keeps its reputation (issue 31, 6: it went unpaid and lost reputation with the
    staller)."""
    m = _staller_market([3 * BOND, BOND])
    stall = max(m.round(1, 0).participants, key=lambda p: p.stake).address
    honest = min(m.round(1, 0).participants, key=lambda p: p.stake).address
    before, honest_before = wealth(m, stall), wealth(m, honest)
    run_job(m, 1, attest=lambda a, j, r: None if a == stall else agg_hash(j, r))
    r = m.round(1, 0)
    assert all(p.outcome == jobs_pb2.OUTCOME_ACCEPTED for p in r.participants)
    assert r.attested_model_hash == b"" and m.job(1).current_model_hash == MODEL0
    paid = {p.address: p.reward for p in r.participants}
    assert paid[stall] == 0 and wealth(m, stall) == before
    assert m.provider(stall).reputation == 4500  # missed attest: as a missed commit
    assert paid[honest] == 500_000 and wealth(m, honest) > honest_before
    assert m.provider(honest).reputation == 5000


def test_attest_stallers_over_rounds_leave_the_honest_attester_whole():
    """Issue 31, 6, over three rounds: stallers with > 1/3 of the attesting stake keep every
    quorum away; the honest attester is paid every round and its reputation never moves (it fell
    from 5,000 to 3,645 before), the stallers lose theirs and are paid nothing."""
    m = new_market(n_providers=3, bonds=[2 * BOND, 2 * BOND, BOND])
    m.create_job(
        rounds=3,
        participants_per_round=3,
        num_shards=3,
        verifiers_per_challenge=1,
        challenge_bps=500,
    )
    m.until(m.height + 1)
    stallers = {k.address for k in m.providers if m.provider(k.address).bond == 2 * BOND}
    honest = next(k.address for k in m.providers if k.address not in stallers)
    before = {k.address: wealth(m, k.address) for k in m.providers}
    run_job(m, 1, attest=lambda a, j, r: None if a in stallers else agg_hash(j, r))
    rounds = list(jobs_keeper.iterate_rounds(m.store, 1))
    assert len(rounds) == 3 and all(not r.attested_model_hash for r in rounds)
    for r in rounds:
        paid = {p.address: p.reward for p in r.participants}
        assert paid[honest] > 0 and all(paid[a] == 0 for a in stallers)
    assert m.provider(honest).reputation == 5000
    assert wealth(m, honest) > before[honest]
    for a in stallers:
        assert m.provider(a).reputation < 5000 and wealth(m, a) == before[a]


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


# -- verdicts: secret votes, escalation, slashing of the losing side -------------------------------


def to_verdict(m) -> None:
    """Honest commit and reveal of job 1 round 0; returns in its verdict window."""
    actors_block(m, 1)
    m.until(m.round(1, 0).commit_deadline)
    actors_block(m, 1)
    m.until(m.round(1, 0).reveal_end)


def audit_seats(m) -> int:
    """An audited challenge's extra first-panel seats (rounds.compute_audit_seats)."""
    from abci_app.jobs.params import get_params
    from abci_app.jobs.rounds import compute_audit_seats

    return compute_audit_seats(get_params(m.store))


def _one_challenge(n_providers: int = 8, verifiers: int = 3, bonds: list[int] | None = None, **kw):
    """Job 1 with one participant, always challenged, ``verifiers`` in the first panel; the rest
    of the providers can form the appeal panel."""
    m = new_market(n_providers=n_providers, bonds=bonds)
    m.create_job(
        rounds=1,
        participants_per_round=1,
        verifiers_per_challenge=verifiers,
        challenge_bps=10_000,
        **kw,
    )
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
    # the whole first panel: its 3 seats, and the audit's seats when the draw's seed audited it
    first = {v.address for v in p.verifiers if v.panel == 0}
    pool = len(m.providers) - 1  # every provider outside the round
    assert coalition == first
    assert len(first) == (min(3 + audit_seats(m), pool) if p.audited else 3)
    assert p.escalated and p.outcome == jobs_pb2.OUTCOME_ACCEPTED
    assert (
        p.slashed == 0
        and wealth(m, target) - before[target] == 1_000_000
        and m.provider(target).reputation > 5000
    )
    claimed_each = BOND // 2 * 2_000 // 10_000 // len(coalition)
    for a in coalition:
        lost = before[a] - wealth(m, a)
        # 10 % of its bond > a third of the bounty
        assert lost > claimed_each and lost == BOND // 10
        assert m.provider(a).reputation == 4750


def test_whale_verifier():
    """One verifier with most of the stake cannot decide alone: its invalid vote escalates, the
    appeal panel (drawn without it) overturns it, and it is slashed 10 % of its large bond."""
    m = new_market(n_providers=8, n_keys=10)
    m.create_job(
        rounds=1, participants_per_round=1, verifiers_per_challenge=1, challenge_bps=10_000
    )
    # the participant is drawn; now the whale bonds 100 x and is drawn to verify
    m.until(m.height + 1)
    whale = m.chain.keys[9]
    assert m.send(whale, register_msg(BOND * 100)).code == 0
    to_verdict(m)
    (p,) = m.round(1, 0).participants
    assert [v.address for v in p.verifiers] == [whale.address]
    before = wealth(m, whale.address)
    run_job(m, 1, vote=lambda v, t: (False, 0) if v == whale.address else (True, 8_000))
    (p,) = m.round(1, 0).participants
    assert (
        p.escalated
        and p.outcome == jobs_pb2.OUTCOME_ACCEPTED
        and p.reward == 1_000_000
        and p.slashed == 0
    )
    assert before - wealth(m, whale.address) == BOND * 10  # 10 % of 100 x BOND


def test_lazy_verifier():
    """A verifier that votes valid without re-executing, next to honest ones, loses when the
    work is fake: the split escalates, the appeal panel proves fraud, the lazy vote is slashed
    10 % and the honest voters share the fraud bounty."""
    m, _cheat = _one_challenge()
    lazy = OddVoter(odd=(True, 8_000), rest=(False, 0))
    run_job(m, 1, vote=lazy)
    (p,) = m.round(1, 0).participants
    assert p.escalated and p.final_tier and p.outcome == jobs_pb2.OUTCOME_FRAUD
    assert p.slashed == BOND // 2
    # wrong in the first panel and again in the final panel (every provider outside the round)
    lvs = [v for v in p.verifiers if v.address == lazy.address]
    assert [(v.panel, v.slashed) for v in lvs] == [(0, BOND // 10), (2, (BOND - BOND // 10) // 10)]
    assert m.provider(lazy.address).bond == BOND - BOND // 10 - (BOND - BOND // 10) // 10
    honest = [v for v in p.verifiers if v.address != lazy.address]
    r = m.round(1, 0)
    paid = {x.address for x in r.payouts if x.kind in ("verifier", "bounty")}
    assert lazy.address not in paid and {v.address for v in honest} <= paid


def test_lazy_verifier_no_cheater():
    """The verifier's dilemma, in rounds with no cheater at all (exact mode): a verifier that
    always votes valid with evidence from public data only cannot open its vote, because the end
    state of each opened segment is committed in the trace but never revealed (only its leaf
    hash is) and only re-execution yields it. Its opening is refused, so it is silent: slashed
    (liveness) and loses reputation on every seat, while the diligent verifiers that re-executed
    are paid. It ends with less than every diligent one; the honest providers are all paid."""
    m = new_market(n_providers=8, n_keys=10)
    workers, verifiers = m.providers[:2], m.providers[2:]
    lazy = verifiers[0].address
    never_work = providers_pb2.JobPolicy(
        min_slot_reward=10**15
    )  # verifiers only, never drawn to train
    m.block([(k, update_msg(policy=never_work)) for k in verifiers])
    before = {k.address: wealth(m, k.address) for k in m.providers}
    job = create_job_msg(
        rounds=3,
        participants_per_round=2,
        verifiers_per_challenge=2,
        challenge_bps=10_000,
        segments_per_challenge=2,
        **EXACT,
    )
    assert m.send(m.owner, job).code == 0
    run_job(m, 1, vote=lambda v, t: (True, 8_000, False) if v == lazy else (True, 8_000))
    seats: dict[bytes, int] = {}
    for r in jobs_keeper.iterate_rounds(m.store, 1):
        for p in r.participants:
            assert p.address in {k.address for k in workers}
            assert p.outcome == jobs_pb2.OUTCOME_ACCEPTED and p.reward > 0 and p.slashed == 0
            assert all(o.end_leaf_hash and not o.end_state_hash for o in p.reveals)
            for v in p.verifiers:
                seats[v.address] = seats.get(v.address, 0) + 1
                assert v.voted == (v.address != lazy)  # the lazy opening was refused: silent
    assert seats.get(lazy, 0) >= 1
    change = {a: wealth(m, a) - before[a] for a in seats}
    assert change[lazy] < 0 < min(c for a, c in change.items() if a != lazy)
    assert m.provider(lazy).reputation < 5000
    assert all(m.provider(a).reputation > 5000 for a in seats if a != lazy)
    for k in workers:
        assert wealth(m, k.address) > before[k.address]


def test_lazy_valid_vote_is_refused_in_exact_mode():
    """The chain refuses to open a valid vote whose reached end states are not the committed
    ones (531): a guess or a public neighbour is not evidence; the re-executed states are."""
    from abci_app.jobs.errors import ErrBadEvidence
    from tests.kits.marketkit import vote_msgs

    m, target = _one_challenge(verifiers=2, segments_per_challenge=2, **EXACT)
    to_verdict(m)
    r = m.round(1, 0)
    # the first panel's two seats (and an audit's seats, silent here, when the seed audited it)
    lazy, diligent, *_audit = [v.address for v in r.participants[0].verifiers]
    lazy_commit, lazy_open = vote_msgs(
        r, target, lazy, True, 8_000, diligent=False, tolerance=False
    )
    commit, open_ = vote_msgs(r, target, diligent, True, 8_000, tolerance=False)
    assert m.send(m.key(lazy), lazy_commit).code == 0
    assert m.send(m.key(diligent), commit).code == 0
    m.until(r.verdict_end)
    assert_rejected(m.chain, m.tx(m.key(lazy), lazy_open), ErrBadEvidence)
    assert m.send(m.key(diligent), open_).code == 0


def test_vote_copier():
    """Votes are secret while voting is open: the round shows only hashes, and a copied hash
    cannot be opened by the copier (the voter's address is inside), so the copier is silent:
    slashed and the challenge escalates."""
    from tests.kits.marketkit import open_end_msg, reveal_vote_msg, verdict_msg, vote_msgs

    m, target = _one_challenge(verifiers=2)
    to_verdict(m)
    r = m.round(1, 0)
    # the first panel's two seats (and an audit's seats, silent here, when the seed audited it)
    honest, copier, *_audit = [v.address for v in r.participants[0].verifiers]
    commit, open_ = vote_msgs(r, target, honest, True, 8_000)
    assert m.send(m.key(honest), commit).code == 0
    seen = m.round(1, 0).participants[0].verifiers[0]
    # nothing to copy
    assert seen.vote_hash and not seen.voted and seen.quality == 0 and not seen.evidence
    # copies the hash
    assert m.send(m.key(copier), verdict_msg(1, 0, target, seen.vote_hash)).code == 0
    m.until(r.verdict_end)
    ends = [open_end_msg(target, 1, 0, o.segment) for o in r.participants[0].reveals]
    res = m.block([(m.key(honest), open_)] + [(m.key(target), e) for e in ends])
    assert all(x.code == 0 for x in res.tx_results)
    o = open_.reveal_vote
    assert_rejected(
        m.chain,
        m.tx(m.key(copier), reveal_vote_msg(1, 0, target, True, 8_000, o.evidence, o.salt)),
        ErrVoteMismatch,
    )
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
    colluder = OddVoter(odd=(True, 10_000), rest=(False, 0))
    run_job(m, 1, vote=colluder)
    (p,) = m.round(1, 0).participants
    assert p.outcome == jobs_pb2.OUTCOME_FRAUD and p.slashed == BOND // 2 and p.reward == 0
    assert m.provider(cheat).status == providers_pb2.PROVIDER_STATUS_JAILED
    # wrong in the first panel and in the final panel (every provider outside the round)
    assert m.provider(colluder.address).bond == BOND - BOND // 10 - (BOND - BOND // 10) // 10


def test_owner_sybil():
    """A job owner's Sybil as the lone verifier votes honest work invalid to get the escrow back:
    the vote escalates, the appeal panel accepts, the provider is paid from the escrow (the owner
    gets back only what was not paid) and the Sybil is slashed more than any bounty."""
    m, _target = _one_challenge(verifiers=1)
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


# -- the payload: copies and poison ----------------------------------------------------------------


def _pair():
    """Job 1, one round of two participants (a 500,000 slot each), every commitment challenged
    by three verifiers; a commit window of 6 blocks, so that refused txs and the commitments all
    land before its deadline. Returns in the commit window."""
    m = new_market(n_providers=8)
    m.create_job(
        rounds=1,
        participants_per_round=2,
        verifiers_per_challenge=3,
        challenge_bps=10_000,
        commit_blocks=6,
    )
    m.until(m.height + 1)
    a, b = (p.address for p in m.round(1, 0).participants)
    return m, a, b


def bound_payload_msg(addr: bytes, payload: bytes) -> tx_pb2.Msg:
    """``addr``'s commitment (its own trace and probes, the kits' honest ones) to round 0 of job 1
    with the update root of ``payload`` (the kits' one-chunk stand-in for the bytes) under its own
    binding leaf: what the chain accepts from anyone for any bytes."""
    ul = bound_update_leaves(addr, 1, 0, MODEL0, payload)
    return submit_msg(
        addr,
        1,
        0,
        update_root=merkle_root(ul),
        update_binding_proof=merkle_proof(ul, BINDING_INDEX),
    )


def assert_convicted(m, addr: bytes, before: tuple[int, int]) -> None:
    """Proven fraud: not paid, half the bond burned, reputation from 5,000 to 0, jailed."""
    (p,) = [p for p in m.round(1, 0).participants if p.address == addr]
    assert p.challenged and p.outcome == jobs_pb2.OUTCOME_FRAUD and p.reward == 0
    assert p.slashed == BOND // 2 and wealth(m, addr) - before[0] == -BOND // 2
    assert before[1] == 5000 and m.provider(addr).reputation == 0
    assert m.provider(addr).status == providers_pb2.PROVIDER_STATUS_JAILED


def assert_paid(m, addr: bytes, before: tuple[int, int], slot: int = 500_000) -> None:
    (p,) = [p for p in m.round(1, 0).participants if p.address == addr]
    assert p.outcome == jobs_pb2.OUTCOME_ACCEPTED and p.reward == slot and p.slashed == 0
    assert wealth(m, addr) - before[0] == slot and m.provider(addr).reputation > before[1]


def test_rewrapped_copy():
    """A provider that trains nothing and takes a peer's work: copying the peer's roots (its
    binding proofs with them) is refused before and after the peer lands (523: leaf 0 of every
    root binds the signer). Re-wrapping the peer's payload, the same bytes under its own binding
    leaf, with a trace of its own, is a commitment the chain accepts; challenged, the payload does
    not follow from its own trace (the payload check: compress(base - entry H/k + carry) is not
    those bytes), the panel votes invalid and the copier is convicted as a fraud, while the peer
    whose work it copied is paid its slot."""
    m, copier, peer = _pair()
    before = {a: (wealth(m, a), m.provider(a).reputation) for a in (copier, peer)}
    r = m.round(1, 0)
    copy = submit_msg(peer, 1, 0)  # the peer's roots and proofs, as the peer will send them
    assert_rejected(m.chain, m.tx(m.key(copier), copy), ErrUnboundCommitment)
    assert m.send(m.key(peer), copy).code == 0
    assert_rejected(m.chain, m.tx(m.key(copier), copy), ErrUnboundCommitment)
    peer_bytes = update_leaves(peer, 1, 0)[entry_leaf(0) :]
    rewrapped = bound_payload_msg(copier, b"".join(peer_bytes))
    ul = bound_update_leaves(copier, 1, 0, MODEL0, b"".join(peer_bytes))
    assert ul[entry_leaf(0) :] == peer_bytes  # the same payload, only leaf 0 differs
    assert m.height + 1 < r.commit_deadline
    assert m.send(m.key(copier), rewrapped).code == 0
    (cp,) = [p for p in m.round(1, 0).participants if p.address == copier]
    assert cp.commitment.update_root == merkle_root(ul) != copy.submit_update.update_root
    run_job(m, 1, vote=lambda v, t: (False, 0) if t == copier else (True, 8_000))
    assert_convicted(m, copier, before[copier])
    assert_paid(m, peer, before[peer])


def test_poison():
    """A provider that trains honestly but commits a scaled update (its payload x 100, bound to
    itself): the chain accepts the commitment and every opening of its honest trace (reveals and
    ends all pass their Merkle proofs); the verifiers' payload check (the committed payload is
    not compress(base - entry H/k + carry)) fails, they vote invalid, and the verdict is fraud:
    not paid, half the bond burned, jailed. The honest co-participant is paid its slot."""
    m, poisoner, honest = _pair()
    before = {a: (wealth(m, a), m.provider(a).reputation) for a in (poisoner, honest)}
    (chunk,) = update_leaves(poisoner, 1, 0)[entry_leaf(0) :]
    scaled = hashlib.sha256(b"x100" + chunk).digest()
    assert m.height + 1 < m.round(1, 0).commit_deadline
    res = m.block(
        [
            (m.key(poisoner), bound_payload_msg(poisoner, scaled)),
            (m.key(honest), submit_msg(honest, 1, 0)),
        ]
    )
    assert all(x.code == 0 for x in res.tx_results)
    run_job(m, 1, vote=lambda v, t: (False, 0) if t == poisoner else (True, 8_000))
    (p,) = [p for p in m.round(1, 0).participants if p.address == poisoner]
    first = [o for o in p.reveals if o.panel == 0]  # the later panels' fresh ones come after
    assert p.HasField("reveal") and len(first) == len(p.segments) >= 1
    assert all(o.end_opened_height for o in p.reveals)  # the trace itself was honest
    assert sum(1 for v in p.verifiers if v.voted and not v.valid) >= 3
    assert_convicted(m, poisoner, before[poisoner])
    assert_paid(m, honest, before[honest])


# -- jobs cost something, can be refused, and reputation is earned --------------------------------


def test_junk_job_spammer():
    """A job no provider takes (here: every provider's policy asks more per slot than it pays)
    never makes anyone work or get slashed; it waits, retrying every 10 blocks, and is cancelled
    after max_wait_blocks: the escrow comes back, the creation fee is burned."""
    m = new_market(n_providers=3)
    for k in m.providers:
        assert (
            m.send(k, update_msg(policy=providers_pb2.JobPolicy(min_slot_reward=1_000_000))).code
            == 0
        )
    bal, supply = bank.get_balance(m.store, m.owner.address), bank.get_supply(m.store)
    # 100,000 per slot
    m.create_job(rounds=20, reward=200_000, vreward=0)
    created = m.height
    m.until(created + 999)
    assert m.job(1).status == jobs_pb2.JOB_STATUS_ACTIVE and m.job(1).rounds_opened == 0
    m.until(created + 1_001)
    j = m.job(1)
    assert (
        j.status == jobs_pb2.JOB_STATUS_CANCELLED
        and j.refunded == 20 * 200_000
        and j.rounds_opened == 0
    )
    assert (
        bank.get_balance(m.store, m.owner.address) == bal - 1_000_000
        and bank.get_supply(m.store) == supply - 1_000_000
    )
    for k in m.providers:
        assert m.provider(k.address).bond == BOND and m.provider(k.address).reputation == 5000


def decline_msg(job_id: int, round_: int) -> tx_pb2.Msg:
    return tx_pb2.Msg(decline_round=jobs_pb2.MsgDeclineRound(job_id=job_id, round=round_))


def test_decline_before_commit():
    """A drawn provider that does not want the round declines before committing: no slash, no
    reputation change, its slot stays in the escrow; the other participant is paid its slot."""
    m = new_market(n_providers=3)
    m.create_job(rounds=1, commit_blocks=10)
    m.until(m.height + 1)
    r = m.round(1, 0)
    no, yes = r.participants[0].address, r.participants[1].address
    outsider = next(k for k in m.providers if k.address not in (no, yes))
    assert_rejected(m.chain, m.tx(outsider, decline_msg(1, 0)), ErrNotSelected)
    assert m.send(m.key(no), decline_msg(1, 0)).code == 0
    assert_rejected(m.chain, m.tx(m.key(no), decline_msg(1, 0)), ErrCannotDecline)
    # committed: too late. The commitment is the last message the commit phase waits for, so
    # the phase ends at the next height (early close): the decline goes in the commitment's block
    commit, late = m.tx_pair(m.key(yes), submit_msg(yes, 1, 0), decline_msg(1, 0))
    assert_rejected(m.chain, late, ErrCannotDecline, before=[commit])
    assert m.round(1, 0).commit_deadline == m.height + 1
    assert next(p for p in m.round(1, 0).participants if p.address == yes).HasField("commitment")
    before = wealth(m, no)
    run_job(m, 1, skip_commit=frozenset({no}))
    r = m.round(1, 0)
    p = next(p for p in r.participants if p.address == no)
    assert (
        p.outcome == jobs_pb2.OUTCOME_DECLINED
        and p.slashed == 0
        and p.reward == 0
        and p.reputation_delta == 0
    )
    assert wealth(m, no) == before and m.provider(no).reputation >= 5000
    assert next(p for p in r.participants if p.address == yes).reward == 500_000
    assert_rejected(m.chain, m.tx(m.key(yes), decline_msg(1, 0)), ErrWrongPhase)


def test_reputation_farmer():
    """A provider farming reputation with a self-dealt job (a Sybil owner, min_stake set to
    exclude everyone else) gains no reputation at all: it is drawn without competition
    (``Participant.contested`` false), and reputation grows only from verified work drawn against
    competition (issue 31, 3; before, every verified round raised it: 5,000 -> 9,388 in 20 rounds
    for the fee). The Sybil still pays the burned creation fee and the verifiers, whose panel of
    *other* providers verified the work (the job's min_stake does not filter verifiers).
    (As the owner of the job itself it would never be drawn: test_rival_griefer.)"""
    m = new_market(n_providers=5, bonds=[BOND * 2] + [BOND] * 4)
    farmer = m.providers[0]
    sybil = m.owner
    coalition = wealth(m, farmer.address) + wealth(m, sybil.address)
    assert (
        m.send(
            sybil,
            create_job_msg(
                rounds=20,
                reward=100_000,
                vreward=100_000,
                participants_per_round=1,
                num_shards=1,
                min_stake=BOND * 2,
                challenge_bps=2_000,
            ),
        ).code
        == 0
    )
    rep0 = m.provider(farmer.address).reputation
    run_job(m, 1)
    rounds = list(jobs_keeper.iterate_rounds(m.store, 1))
    assert all(r.participants[0].address == farmer.address for r in rounds)
    verified = [r for r in rounds if r.participants[0].challenged]
    unverified = [r for r in rounds if not r.participants[0].challenged]
    assert verified and unverified
    assert all(not r.participants[0].contested for r in rounds)
    assert all(r.participants[0].reputation_delta == 0 for r in rounds)
    assert all(r.participants[0].reward > 0 for r in verified)
    assert all(
        v.address != farmer.address and v.address != sybil.address
        for r in verified
        for v in r.participants[0].verifiers
    )
    assert m.provider(farmer.address).reputation == rep0
    spent = coalition - wealth(m, farmer.address) - wealth(m, sybil.address)
    assert spent >= 1_000_000 + sum(r.verifier_paid for r in rounds)  # the fee and the verifiers


def test_whitewasher():
    """Exiting and registering the same key again never resets a damaged reputation (min(last,
    initial)); a fresh key starts at initial_reputation, below an established provider whose
    verified work raised it."""
    m = new_market(n_providers=4, n_keys=9)
    m.create_job(rounds=3, participants_per_round=2)
    m.until(m.height + 1)
    lazy = m.round(1, 0).participants[0].address
    run_job(
        m, 1, skip_commit=frozenset({lazy}), vote=lambda v, t: None if v == lazy else (True, 8_000)
    )
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
    m.create_job(
        rounds=4, participants_per_round=2, verifiers_per_challenge=3, challenge_bps=10_000
    )
    run_job(m, 1)
    for r in jobs_keeper.iterate_rounds(m.store, 1):
        assert not r.slashes and all(
            p.outcome == jobs_pb2.OUTCOME_ACCEPTED and p.reward > 0 for p in r.participants
        )
    for k in m.providers:
        assert (
            wealth(m, k.address) >= before[k.address] and m.provider(k.address).reputation >= 5000
        )
    assert (
        sum(wealth(m, k.address) - before[k.address] for k in m.providers)
        == m.job(1).paid_total
        > 0
    )


N_SEG = 100  # H = 100 steps, k = 1: faking f % of the steps fakes (at least) f % of the segments


def faked_trace(addr: bytes, job_id: int, round_: int, faked: set[int]) -> list[bytes]:
    """Leaf data of the bound trace a provider commits when it skipped the steps of the segments
    ``faked``: the end of each faked segment is a made-up state, not what re-executing the
    segment yields (``honest_state``, the kits' stand-in for re-execution)."""
    states = trace_states(addr, job_id, round_, N_SEG + 1)
    made_up = [h(f"faked/{addr.hex()}/{i}") if i - 1 in faked else x for i, x in enumerate(states)]
    return bound_trace_leaves(addr, job_id, round_, MODEL0, made_up)


def reveal_of(tl: list[bytes], job_id: int, round_: int, segment: int, segments: list[int]):
    """marketkit.reveal_msg for the committed trace ``tl`` (the ends stay secret, and so does
    the start of a segment whose predecessor is opened too: only a run's start is public)."""
    s, e = entry_leaf(segment), entry_leaf(segment + 1)
    trace_list = b"".join(mask_trace(tl[entry_leaf(0) :], compute_masked_entries(segments, N_SEG)))
    start = (
        {"start_state_hash": tl[s], "start_location": "http://10.0.0.1:26680/s/a"}
        if is_run_start(segment, segments)
        else {"start_leaf_hash": hash_leaf(tl[s])}
    )
    return tx_pb2.Msg(
        reveal_segment=jobs_pb2.MsgRevealSegment(
            job_id=job_id,
            round=round_,
            segment=segment,
            start_proof=merkle_proof(tl, s),
            end_proof=merkle_proof(tl, e),
            trace_list_hash=hashlib.sha256(trace_list).digest(),
            trace_list=trace_list,
            end_leaf_hash=hash_leaf(tl[e]),
            **start,
        )
    )


def _faker_market():
    """Job 1 (exact mode, a trace of N_SEG segments, 3 drawn per challenge), one round of two
    participants, every commitment challenged by three verifiers; returns in its commit window."""
    m = new_market(n_providers=8)
    m.create_job(
        rounds=1,
        participants_per_round=2,
        num_shards=2,
        inner_steps=N_SEG,
        trace_interval=1,
        segments_per_challenge=3,
        verifiers_per_challenge=3,
        challenge_bps=10_000,
        commit_blocks=6,
        **EXACT,
    )
    m.until(m.height + 1)
    return m


def _commit_traces(m, traces: dict[bytes, list[bytes]]) -> None:
    """Both participants commit ``traces`` in one block, before the commit deadline; then the
    chain draws the challenges at the deadline."""
    r = m.round(1, 0)
    assert m.height + 1 < r.commit_deadline
    res = m.block(
        [
            (
                m.key(a),
                submit_msg(
                    a,
                    1,
                    0,
                    n_entries=N_SEG + 1,
                    probe=False,
                    trace_root=merkle_root(tl),
                    trace_binding_proof=merkle_proof(tl, BINDING_INDEX),
                ),
            )
            for a, tl in traces.items()
        ]
    )
    assert all(x.code == 0 for x in res.tx_results)
    # every participant committed: the phase ends at the next height (early close), read afresh
    m.until(m.round(1, 0).commit_deadline)


@pytest.mark.parametrize("f_bps", [100, 1_000, 5_000])
def test_fake_fraction_of_steps(f_bps: int):
    """Two providers each fake a fraction f of their steps (the fewest segments that takes,
    ceil(f x 100), packed into whole segments: their best case). The chain draws 3 of the 100
    segments of each commitment at the commit deadline, from a seed that did not exist when they
    committed; which segments a provider faked changes only its trace root, never the draw (a
    rehearsal with the same history draws the same segments). One faker's faked segments include
    one of its drawn segments: the honest panel re-executes it, cannot reach the committed end,
    votes invalid (the chain would refuse a valid vote whose reached state is not the committed
    end) and the verdict is fraud: half its bond burned, reputation 0, jailed, nothing paid, at
    every f. The other's miss all three: the chain cannot tell, it is paid its slot (what that
    escape is worth on average, 1 - C(100 - m, 3) / C(100, 3) per round against the collateral,
    is benchmarks/incentives.py's fake-f rows)."""
    rehearsal = _faker_market()
    addrs = [p.address for p in rehearsal.round(1, 0).participants]
    _commit_traces(rehearsal, {a: trace_leaves(a, 1, 0, n_entries=N_SEG + 1) for a in addrs})
    drawn = {p.address: list(p.segments) for p in rehearsal.round(1, 0).participants}
    hit, miss = addrs
    n_fake = compute_faked_segments(N_SEG, f_bps)
    assert n_fake == f_bps * N_SEG // 10_000 and all(len(drawn[a]) == 3 for a in addrs)

    def undrawn(a: bytes) -> list[int]:
        return [s for s in range(N_SEG) if s not in drawn[a]]

    faked = {
        hit: {drawn[hit][0], *undrawn(hit)[: n_fake - 1]},
        miss: set(undrawn(miss)[:n_fake]),
    }
    assert len(faked[hit]) == len(faked[miss]) == n_fake
    assert len(faked[hit] & set(drawn[hit])) == 1 and not faked[miss] & set(drawn[miss])

    m = _faker_market()
    before = {a: (wealth(m, a), m.provider(a).reputation) for a in addrs}
    traces = {a: faked_trace(a, 1, 0, faked[a]) for a in addrs}
    _commit_traces(m, traces)
    m.traces.update({(1, 0, a): traces[a] for a in addrs})  # a later panel's fresh openings
    r = m.round(1, 0)
    assert {p.address: list(p.segments) for p in r.participants} == drawn
    # three verifiers each, and the audit's seats when the seed audited the commitment
    assert all(
        p.challenged and len(p.verifiers) == 3 + (audit_seats(m) if p.audited else 0)
        for p in r.participants
    )
    res = m.block(
        [(m.key(a), reveal_of(traces[a], 1, 0, s, drawn[a])) for a in addrs for s in drawn[a]]
    )
    assert all(x.code == 0 for x in res.tx_results)
    # the oracle of re-execution: a drawn segment that was faked does not re-execute to its end
    run_job(m, 1, vote=lambda v, t: (False, 0) if faked[t] & set(drawn[t]) else (True, 8_000))

    p = {q.address: q for q in m.round(1, 0).participants}
    assert p[hit].outcome == jobs_pb2.OUTCOME_FRAUD and p[hit].reward == 0
    assert p[hit].slashed == BOND // 2 == 1_000 * 1_000_000  # 2,000 x the 500,000 slot
    assert wealth(m, hit) - before[hit][0] == -BOND // 2
    assert before[hit][1] == 5000 and m.provider(hit).reputation == 0
    assert m.provider(hit).status == providers_pb2.PROVIDER_STATUS_JAILED
    assert p[miss].outcome == jobs_pb2.OUTCOME_ACCEPTED and p[miss].slashed == 0
    assert p[miss].reward == 500_000 and wealth(m, miss) - before[miss][0] == 500_000
    assert m.provider(miss).reputation > before[miss][1] == 5000


def test_collateral_keeps_a_cheap_bond_out_of_rich_rounds():
    """A job whose slot is large relative to a provider's bond does not draw that provider: at
    500 bps and a 50 % fraud slash, a bond must cover 2 x slot / (5 % x 50 %) = 80 slots, so on
    average a cheater always loses more than a slot can pay it."""
    from abci_app.jobs.incentives import compute_required_bond

    assert compute_required_bond(80 * 10**6, 2, 500, 5_000, 20_000) == 80 * 40 * 10**6
    m = new_market(n_providers=3, bonds=[10**9, 10**9, 4 * 10**9])  # 1,000, 1,000 and 4,000 LOCO
    slot = 50 * 10**6  # 50 LOCO per slot needs 4,000 LOCO of bond
    m.create_job(
        rounds=1, reward=slot, vreward=0, participants_per_round=1, num_shards=1, challenge_bps=500
    )
    m.until(m.height + 1)
    (p,) = m.round(1, 0).participants
    assert p.address == m.providers[2].address
    # 100 LOCO per slot needs 8,000 LOCO: nobody qualifies, the job waits instead of drawing
    m.create_job(
        rounds=1,
        reward=2 * slot,
        vreward=0,
        participants_per_round=1,
        num_shards=1,
        challenge_bps=500,
    )
    m.until(m.height + 2)
    assert m.job(2).rounds_opened == 0 and m.job(2).waiting_since > 0


# -- the final panel: a coalition below 2/3 of its stake never slashes an honest provider ----------


def one_slot_job(n_keys: int, jobs_params: dict[str, int] | None = None):
    """(market, its only provider): job 1, one round with that provider as its one participant,
    every commitment challenged, one first-panel seat, a 6-block commit window, so that keys
    registered right after this return are in the commit deadline's verifier draw."""
    m = new_market(n_providers=1, n_keys=n_keys, jobs_params=jobs_params)
    job = create_job_msg(
        rounds=1,
        participants_per_round=1,
        verifiers_per_challenge=1,
        challenge_bps=10_000,
        commit_blocks=6,
    )
    assert m.send(m.owner, job).code == 0
    m.until(m.height + 1)
    return m, m.providers[0].address


def _coalition_market(share_pct: int):
    """An honest provider committed and revealed; a 3-key coalition registered before the commit
    deadline holds every seat of the first panel (1) and of the appeal panel (the other 2), the
    worst case; four honest verifiers register during the appeal, so the final panel (every
    provider outside the round) gives the coalition ``share_pct`` % of its stake."""
    m, target = one_slot_job(9)
    coalition, honest = m.chain.keys[2:5], m.chain.keys[5:9]
    m.block([(k, register_msg(BOND)) for k in coalition])
    honest_bond = BOND * 3 * (100 - share_pct) // (4 * share_pct)
    return m, target, coalition, honest, honest_bond


def _run_with_coalition(m, honest, honest_bond, vote):
    registered = False
    for _ in range(500):
        if m.job(1).status == jobs_pb2.JOB_STATUS_COMPLETED:
            return
        r = m.round(1, 0)
        if r.phase == jobs_pb2.PHASE_APPEAL and not registered:
            m.block([(k, register_msg(honest_bond)) for k in honest])
            registered = True
        actors_block(m, 1, vote=vote)
    raise AssertionError("job did not finish")


def _coalition_claims_fraud(share_pct: int):
    m, target, coalition, honest, honest_bond = _coalition_market(share_pct)
    cset = {k.address for k in coalition}
    before = {a: wealth(m, a) for a in cset | {target}}
    _run_with_coalition(
        m, honest, honest_bond, lambda v, t: (False, 0) if v in cset else (True, 8_000)
    )
    (p,) = m.round(1, 0).participants
    panels: dict[int, set[bytes]] = {v.panel: set() for v in p.verifiers}
    for v in p.verifiers:
        panels[v.panel].add(v.address)
    # the coalition held the first and the appeal panel: without the final panel this was fraud
    assert panels[0] | panels[1] == cset and p.escalated and p.final_tier
    assert panels[2] == cset | {k.address for k in honest}
    final_stake = sum(v.stake for v in p.verifiers if v.panel == 2)
    share = sum(v.stake for v in p.verifiers if v.panel == 2 and v.address in cset)
    assert abs(share * 100 - share_pct * final_stake) < final_stake  # the share asked for
    return m, p, cset, before, target


def test_sybil_coalition_10_pct_cannot_slash_an_honest_provider():
    m, p, cset, before, target = _coalition_claims_fraud(10)
    assert p.outcome == jobs_pb2.OUTCOME_ACCEPTED and p.slashed == 0 and p.reward == 1_000_000
    assert wealth(m, target) - before[target] == 1_000_000
    assert all(wealth(m, a) < before[a] - BOND // 10 for a in cset)  # slashed for the false claims


def test_sybil_coalition_33_pct_cannot_slash_an_honest_provider():
    m, p, cset, before, _target = _coalition_claims_fraud(33)
    assert p.outcome == jobs_pb2.OUTCOME_ACCEPTED and p.slashed == 0 and p.reward == 1_000_000
    assert all(wealth(m, a) < before[a] - BOND // 10 for a in cset)


def test_sybil_coalition_45_pct_cannot_slash_an_honest_provider():
    """Between 1/3 and 2/3 of the final panel's stake, a coalition can block a verdict (undecided:
    the provider is not paid, nobody is slashed) but never slash: fraud needs 2/3."""
    m, p, _cset, before, target = _coalition_claims_fraud(45)
    assert p.outcome == jobs_pb2.OUTCOME_UNDECIDED and p.slashed == 0
    assert wealth(m, target) == before[target]
    assert m.provider(target).status == providers_pb2.PROVIDER_STATUS_ACTIVE
    assert not [x for x in m.round(1, 0).payouts if x.kind == "bounty"]


def test_sybil_coalition_50_pct_cannot_slash_an_honest_provider():
    """Half the final panel's stake is still below the 2/3 a fraud verdict needs: the honest
    provider is never slashed, jailed or marked down, and no bounty is paid. What the coalition
    does get (the limit docs/threat-model.md *Why cheating does not pay* states: 1/3 to 2/3 of the
    final panel blocks a verdict, the BFT bound) is a blocked verdict: `undecided`, the provider is
    not paid for work it did, the escrow goes back to the owner, and the false claimants lose
    nothing (a wrong vote is judged against the final outcome, and undecided is none)."""
    m, p, cset, before, target = _coalition_claims_fraud(50)
    assert p.outcome == jobs_pb2.OUTCOME_UNDECIDED and p.slashed == 0 and p.reward == 0
    assert wealth(m, target) == before[target] and m.provider(target).reputation == 5000
    assert m.provider(target).status == providers_pb2.PROVIDER_STATUS_ACTIVE
    assert not m.round(1, 0).payouts and m.job(1).refunded == 1_100_000
    # the griefing is free: every false claimant keeps its bond and its reputation
    assert all(wealth(m, a) == before[a] and m.provider(a).reputation == 5000 for a in cset)
    assert not any(v.slashed for v in p.verifiers)


def test_cheater_is_convicted_by_the_final_panel():
    """A real cheater (every honest verifier re-executes and votes invalid) is convicted by the
    final panel even when a 33 % coalition covers for it there: 2/3 of the stake is enough."""
    m, target, coalition, honest, honest_bond = _coalition_market(33)
    cset = {k.address for k in coalition}
    first_two: set[bytes] = set()

    def vote(v, t):
        r = m.round(1, 0)
        if r.phase != jobs_pb2.PHASE_FINAL:
            first_two.add(v)
            return (False, 0)  # the first and appeal panels re-execute: invalid
        return (True, 8_000) if v in cset else (False, 0)

    before = wealth(m, target)
    _run_with_coalition(m, honest, honest_bond, vote)
    (p,) = m.round(1, 0).participants
    assert p.final_tier and p.outcome == jobs_pb2.OUTCOME_FRAUD and p.slashed == BOND // 2
    assert before - wealth(m, target) == BOND // 2
    assert m.provider(target).status == providers_pb2.PROVIDER_STATUS_JAILED
    # the coalition's valid votes in the final panel were against the verdict: slashed
    finals = [v for v in p.verifiers if v.panel == 2 and v.address in cset]
    assert finals and all(v.slashed > 0 for v in finals)


# -- seeds: a grinding proposer ------------------------------------------------------------------


def beacon_choices(height: int, n_vals: int = 4) -> list[bytes]:
    """The beacons the proposer of block ``height`` can include on a chain of ``n_vals`` equal
    validators: one per > 2/3 subset of the last commit's VRF shares over (chain id, height - 1)
    (5 with 4 validators: tests/chain/test_beacon.py::test_grinder_cannot_change_the_seed)."""
    vals = [signer(2000 + i) for i in range(n_vals)]
    alpha = beacon.alpha(CHAIN_ID, height - 1)
    outs = [(v.address, beacon.output(beacon.prove(v.seed, alpha))) for v in vals]
    return [
        beacon.block_beacon(list(sub))
        for r in range(n_vals, 0, -1)
        if 3 * r > 2 * n_vals
        for sub in itertools.combinations(outs, r)
    ]


def _grinder_market(challenge_bps: int, withhold_peer: bool):
    """Job 1, one round of two participants; the second in address order (the chain draws the
    challenges in address order from one stream) is the grinder: a provider that committed a
    random root and is also the proposer of the last commit block D - 1 and of the commit-deadline
    block D, whose seed draws the challenges. It commits early; at D - 1 it includes the peer's
    commitment or withholds it (``withhold_peer``: the peer then misses it, and the grinder's
    draw moves up the stream). Returns the market at D - 1 committed, the two addresses and the
    txs waiting in the mempool for D (a registration and an exit, which change the verifier
    pool, and a transfer)."""
    m = new_market(n_providers=8, n_keys=11)
    m.create_job(
        rounds=1,
        participants_per_round=2,
        verifiers_per_challenge=3,
        challenge_bps=challenge_bps,
        commit_blocks=6,
    )
    m.until(m.height + 1)
    r = m.round(1, 0)
    peer, grinder = (p.address for p in r.participants)
    assert m.send(m.key(grinder), submit_msg(grinder, 1, 0)).code == 0
    m.until(r.commit_deadline - 2)
    if not withhold_peer:
        assert m.send(m.key(peer), submit_msg(peer, 1, 0)).code == 0
    m.until(r.commit_deadline - 1)
    outsider = next(k for k in m.providers if k.address not in (peer, grinder))
    pending = [
        m.tx(m.chain.keys[9], register_msg(BOND)),
        m.tx(outsider, exit_msg()),
        m.tx(
            m.owner,
            tx_pb2.Msg(send=bank_pb2.MsgSend(to_address=m.chain.keys[10].address, amount=1)),
        ),
    ]
    return m, peer, grinder, pending


def grinder_choices(m, grinder: bytes, pending: list[bytes], n_hashes: int = 8):
    """Every block D the grinder can propose, executed on the committed state and thrown away:
    each ordered subset of the pending txs (withheld, reordered), each with a seed of its
    choosing: one of ``n_hashes`` block hashes (a chain without vote extensions is seeded by the
    hash, which its proposer picks freely) or one of the beacons it may include. Returns, per
    candidate, (challenged, segments, verifiers) of the grinder's commitment."""
    out = []
    h = m.height + 1
    orders = [list(p) for n in range(len(pending) + 1) for p in itertools.permutations(pending, n)]
    hashes = [hashlib.sha256(b"grind%d" % i).digest() for i in range(n_hashes)]
    for txs in orders:
        blk = block_context(m.chain.request(txs), m.chain.app.chain_id)
        seeded = [replace(blk, block_hash=x) for x in hashes]
        seeded += [replace(blk, beacon=b) for b in beacon_choices(h)]
        for d in seeded:
            res = execute_block(m.store, d, txs, SignatureCache())
            assert all(x.code == 0 for x in res.tx_results)
            state = CacheKV(m.store)  # the block's writes over the committed state, thrown away
            for k, v in res.writes.items():
                if v is None:
                    state.delete(k)
                else:
                    state.set(k, v)
            r = jobs_keeper.get_round(state, 1, 0)
            assert r is not None and r.phase == jobs_pb2.PHASE_REVEAL
            (p,) = [p for p in r.participants if p.address == grinder]
            out.append((p.challenged, tuple(p.segments), tuple(v.address for v in p.verifiers)))
    assert len(out) == 16 * (n_hashes + 5)
    return out


def propose(m, txs: list[bytes], block_hash: bytes) -> None:
    """Commit the next block as its proposer chose it (its txs, its hash: the kits' seed), every
    invariant checked as chainkit's Chain.block does."""
    req = m.chain.request(txs)
    req.hash = block_hash
    m.chain.app.finalize_block(req)
    m.chain.app.commit(abci.RequestCommit())
    m.chain.app.invariants()


def test_seed_grinder():
    """A cheater (random root) that proposes the last commit block and the commit-deadline block
    D tries every block it could propose: the peer's commitment at D - 1 included or withheld,
    every withholding and order of the txs waiting for D, every seed (any block hash, every beacon
    subset). Grinding is real: at 5,000 bps some of those blocks leave it unchallenged (the bound,
    not removal, docs/threat-model.md *Seeds*); at the 10,000 bps the job asked for, every one of
    its 416 blocks challenges it (the draws it moved are only which segments and verifiers).
    It proposes the one it likes best, is challenged, reveals, the panel finds no training
    behind the root and it is convicted: half its bond, reputation 0, jailed; the honest peer
    is paid its slot."""
    m, peer, grinder, pending = _grinder_market(5_000, withhold_peer=False)
    low = grinder_choices(m, grinder, pending)
    assert 0 < sum(1 for c in low if not c[0]) < len(low)

    seen = []
    for withhold in (True, False):
        m, peer, grinder, pending = _grinder_market(10_000, withhold_peer=withhold)
        mine = grinder_choices(m, grinder, pending)
        seen += mine
    assert len(seen) == 2 * 16 * 13 and all(c[0] for c in seen)
    assert len({c[1:] for c in seen}) > 1  # it did move the draws, only not the challenge

    before = {a: (wealth(m, a), m.provider(a).reputation) for a in (grinder, peer)}
    # the peer's commitment included, every pending tx withheld, D seeded by a hash it picked
    propose(m, [], hashlib.sha256(b"grind0").digest())
    (p,) = [p for p in m.round(1, 0).participants if p.address == grinder]
    assert (p.challenged, tuple(p.segments), tuple(v.address for v in p.verifiers)) == mine[0]
    run_job(m, 1, vote=lambda v, t: (False, 0) if t == grinder else (True, 8_000))
    assert_convicted(m, grinder, before[grinder])
    assert_paid(m, peer, before[peer])
