"""Issue 11 (audit): every seeded end-block draw of block h uses block h's seed, which its
proposer (and anyone who saw the vote extensions over h - 1) knows before h's txs are chosen. The
draws therefore read the providers as they were at the start of block h
(``providers.keeper.get_draw_pool``, README *Draws see the state before the seeded block*): an
attacker's register, bond top-up, policy update or exit landing in block h cannot move
(a) the participant draw of a round opened in h, nor (b) the challenges, segments and verifiers
drawn at the commit deadline D = h (nor the next round, opened in the same block).

Each case runs the seeded block on copies of the committed state (``execute_block`` over the
store, as ``chainkit.assert_rejected`` does) with and without the attacker's tx, for several
seeds (block hashes), and compares every round record the block writes. A control runs the same
tx one block earlier, where it may and does move the draw (so the comparison is not vacuous)."""

from __future__ import annotations

import hashlib

import pytest

from abci_app.app import BlockResult, block_context, execute_block
from abci_app.codec.tx import Ed25519Signer, SignatureCache
from abci_app.context import Ctx
from abci_app.encoding import decode_msg, prefix_end
from abci_app.jobs.keys import ROUND_PREFIX
from abci_app.pb import jobs_pb2, providers_pb2, tx_pb2
from abci_app.providers import keeper, msgs
from abci_app.store import CacheKV, KVReader
from tests.kits.marketkit import (
    BOND,
    Market,
    actors_block,
    create_job_msg,
    exit_msg,
    new_market,
    non_participant,
    register_msg,
    run_job,
    submit_msg,
    update_msg,
)

KINDS = ("register", "top_up", "policy", "exit")
SEEDS = [hashlib.sha256(b"draw-independence/%d" % i).digest() for i in range(12)]
BONDS = [BOND, 2 * BOND, 3 * BOND, BOND + 7, 5 * BOND]
# a policy that refuses every job of these tests (their slots pay 500,000 uloco)
REFUSE_ALL = providers_pb2.JobPolicy(min_slot_reward=10**15)


def attack(m: Market, kind: str, provider: Ed25519Signer, few: bool = True) -> tuple:
    """(signer, msg) of the attacker's tx: a fresh key registers; ``provider`` (a registered
    provider) tops up its bond (a few uloco, or ten bonds for the control), refuses every job by
    its policy, or exits."""
    if kind == "register":
        fresh = next(k for k in m.chain.keys[1:] if m.provider(k.address) is None)
        return fresh, register_msg(4 * BOND)
    if kind == "top_up":
        return provider, update_msg(add_bond=3 if few else 10 * BOND)
    if kind == "policy":
        return provider, update_msg(policy=REFUSE_ALL)
    return provider, exit_msg()


def signed(m: Market, txs: list[tuple[Ed25519Signer, tx_pb2.Msg]]) -> list[bytes]:
    seqs = dict(m.chain.seqs)
    out = []
    for k, msg in txs:
        s = seqs.get(k.address, 0)
        out.append(m.chain.tx(k, [msg], seq=s))
        seqs[k.address] = s + 1
    return out


def run(
    m: Market, state: KVReader, height: int, raws: list[bytes], seed: bytes
) -> tuple[BlockResult, CacheKV]:
    """Execute block ``height`` (hash = seed: the kits' blocks carry no beacon) over ``state``;
    returns the result and a copy of the state after it (nothing is committed)."""
    req = m.chain.request(raws)
    req.height, req.hash = height, seed
    req.time.seconds = 1_700_000_000 + height
    blk = block_context(req, m.chain.app.chain_id)
    res = execute_block(state, blk, raws, SignatureCache())
    assert all(r.code == 0 for r in res.tx_results), [r.log for r in res.tx_results]
    after = CacheKV(state)
    for k, v in res.writes.items():
        after.set(k, v) if v is not None else after.delete(k)
    return res, after


def drawn(res: BlockResult) -> dict[bytes, bytes]:
    """Every round record the block wrote (participants, shards, stakes, challenges, segments,
    verifiers), as bytes."""
    rounds = {k: v for k, v in res.writes.items() if ROUND_PREFIX <= k < prefix_end(ROUND_PREFIX)}
    assert rounds, "the block drew nothing"
    for v in rounds.values():
        assert v is not None and decode_msg(jobs_pb2.Round, v).participants
    return rounds  # type: ignore[return-value]


def check_block(
    m: Market,
    height: int,
    pre: list[tuple[Ed25519Signer, tx_pb2.Msg]],
    kind: str,
    provider: Ed25519Signer,
) -> None:
    """The committed state is at ``height - 2``; block ``height - 1`` holds ``pre``; block
    ``height`` is the seeded one. For every seed: identical round records with and without the
    attacker's tx in block ``height``; and, for the control, at least one seed where the same
    change made in block ``height - 1`` moves them."""
    assert m.height == height - 2
    moved = 0
    for seed in SEEDS:
        prev_seed = hashlib.sha256(b"prev" + seed).digest()
        _, s1 = run(m, m.store, height - 1, signed(m, pre), prev_seed)
        without, _ = run(m, s1, height, [], seed)
        with_tx, _ = run(m, s1, height, signed(m, [attack(m, kind, provider)]), seed)
        assert drawn(with_tx) == drawn(without), f"{kind} in the seeded block moved the draw"
        early = signed(m, [*pre, attack(m, kind, provider, few=False)])
        _, c1 = run(m, m.store, height - 1, early, prev_seed)
        control, _ = run(m, c1, height, [], seed)
        moved += drawn(control) != drawn(without)
    assert moved, f"control: {kind} a block earlier never moved the draw (the test proves nothing)"


@pytest.mark.parametrize("kind", KINDS)
def test_participant_draw_ignores_the_seeded_blocks_txs(kind):
    """(a) The round opened in block h (its job created in h - 1) draws the same participants,
    shards, stakes and reputations whatever the attacker does in h."""
    m = new_market(n_providers=5, bonds=BONDS)
    h = m.height + 2
    check_block(m, h, [(m.owner, create_job_msg(rounds=2))], kind, m.providers[3])


@pytest.mark.parametrize("early", [True, False], ids=["early_close", "full_window"])
@pytest.mark.parametrize("kind", KINDS)
def test_verifier_draw_at_the_commit_deadline_ignores_its_txs(kind, early):
    """(b) At the commit deadline D: which commitments are challenged, their segments and their
    verifiers (every provider outside the round), and the next round's participants (opened in
    the same end-block) are the same whatever the attacker does in block D. ``early``: every
    participant commits in block D - 1, so the commit phase ends early at D = that block + 1
    (rounds.close_if_done); else one participant never commits and D is the window's end."""
    m = new_market(n_providers=5, bonds=BONDS)
    m.create_job(
        rounds=2, participants_per_round=2, verifiers_per_challenge=2, segments_per_challenge=2
    )
    m.until(m.height + 1)  # round 0 opens
    r = m.round(1, 0)
    if early:
        commits = [
            (m.key(p.address), submit_msg(p.address, 1, 0, r.base_model_hash))
            for p in r.participants
        ]
        d = m.height + 2
        assert d < r.commit_deadline  # before the window's end
        check_block(m, d, commits, kind, non_participant(m, r))
        return
    # the first participant commits at once, the other never does
    actors_block(m, 1, skip_commit=frozenset({r.participants[1].address}))
    assert m.round(1, 0).commit_deadline == r.commit_deadline
    m.until(r.commit_deadline - 2)
    check_block(m, r.commit_deadline, [], kind, non_participant(m, r))


# -- the pool's rules -----------------------------------------------------------------------------


def test_draw_pool_is_the_block_start_less_the_punished():
    """``get_draw_pool`` over a block's cache: the providers of the block's start with their
    records of then (a top-up, a policy change and an exit in the block change nothing, a
    registration adds nobody), less the ones the block jailed (tombstoned) or slashed."""
    m = new_market(n_providers=6, n_keys=9, bonds=[BOND] * 6)
    a, b, c, d, e, f = m.providers
    fresh = m.chain.keys[7]
    block = CacheKV(m.store)
    ctx = Ctx(block_context(m.chain.request([]), m.chain.app.chain_id), block)
    before = {p.address: p for p in keeper.get_eligible(m.store, 0, 0)}
    msgs.process_msg_update_provider(ctx, a.address, update_msg(add_bond=5).update_provider)
    msgs.process_msg_update_provider(ctx, b.address, update_msg(policy=REFUSE_ALL).update_provider)
    msgs.process_msg_exit_provider(ctx, c.address, providers_pb2.MsgExitProvider())
    msgs.process_msg_register_provider(ctx, fresh.address, register_msg().register_provider)
    keeper.jail(ctx, d.address, "fraud")
    keeper.slash(ctx, e.address, 100, reason="missed_commit", job_id=1, round_=0)
    pool = {p.address: p for p in keeper.get_draw_pool(block, 0, 0)}
    assert sorted(pool) == sorted([a.address, b.address, c.address, f.address])
    for addr, p in pool.items():
        assert p == before[addr]  # bond, reputation, policy and status of the block's start
    # the current view has moved on (what get_eligible would have drawn from)
    now = {p.address for p in keeper.get_eligible(block, 0, 0)}
    assert c.address not in now and d.address not in now and fresh.address in now


def test_draw_pool_excludes_a_slash_hidden_by_a_top_up():
    """A provider slashed in the block stays out even if a top-up in the same block brought its
    bond back above where it started (slashed_total, not the bond, tells)."""
    m = new_market(n_providers=3)
    a = m.providers[0]
    block = CacheKV(m.store)
    ctx = Ctx(block_context(m.chain.request([]), m.chain.app.chain_id), block)
    msgs.process_msg_update_provider(ctx, a.address, update_msg(add_bond=BOND).update_provider)
    keeper.slash(ctx, a.address, 100, reason="missed_commit", job_id=1, round_=0)
    assert keeper.get_provider(block, a.address).bond > BOND
    assert a.address not in {p.address for p in keeper.get_draw_pool(block, 0, 0)}


def test_provider_exiting_in_its_draw_block_keeps_the_duty():
    """A provider that exits in the block whose end-block draws it is drawn (as it was at the
    block's start) and the duty binds it as any duty assigned before an exit: it misses its
    commitment and is slashed from its unbonding at the finalize; later rounds no longer draw it."""
    m = new_market(n_providers=3)
    quitter = m.providers[1]
    m.create_job(rounds=2, participants_per_round=3)
    resp = m.block([(quitter, exit_msg())])  # round 0 opens in this block's end-block
    assert resp.tx_results[0].code == 0
    r0 = m.round(1, 0)
    assert quitter.address in {p.address for p in r0.participants}
    run_job(m, 1, skip_commit=frozenset({quitter.address}))
    r0 = m.round(1, 0)
    me = next(p for p in r0.participants if p.address == quitter.address)
    assert me.outcome == jobs_pb2.OUTCOME_MISSED_COMMIT and me.slashed > 0
    p = m.provider(quitter.address)
    assert p is not None and p.status == keeper.EXITING and p.unbonding == BOND - me.slashed
    assert quitter.address not in {p.address for p in m.round(1, 1).participants}
