import pytest

from abci_app.bank import keeper as bank
from abci_app.bank.errors import ErrInsufficientFunds
from abci_app.jobs.errors import (
    ErrInvalidJobSpec,
    ErrInvalidLocation,
    ErrInvalidReward,
    ErrInvalidRounds,
)
from abci_app.jobs.keys import JOB_ESCROW
from abci_app.pb import tx_pb2
from tests.kits.chainkit import assert_rejected
from tests.kits.marketkit import create_job_msg, jobs_pb2, new_market


def test_create_job_escrows_budget_and_opens_round_next_block():
    m = new_market()
    bal = bank.get_balance(m.store, m.owner.address)
    supply = bank.get_supply(m.store)
    res = m.send(m.owner, create_job_msg(rounds=3, reward=1_000_000, vreward=100))
    assert res.code == 0, res.log
    created = m.height
    j = m.job(1)
    assert j.escrow == 3 * 1_000_100 == j.escrow_funded and j.status == jobs_pb2.JOB_STATUS_ACTIVE
    # the creation fee (1 LOCO) is burned, never refunded
    assert j.creation_fee == 1_000_000 and bank.get_supply(m.store) == supply - 1_000_000
    assert bank.get_balance(m.store, m.owner.address) == bal - 3 * 1_000_100 - 1_000_000
    assert bank.get_balance(m.store, JOB_ESCROW) == 3 * 1_000_100
    assert j.next_open_height == created + 1
    m.until(created + 1)
    r = m.round(1, 0)
    assert (
        r.phase == jobs_pb2.PHASE_COMMIT
        and len(r.participants) == 2
        and r.commit_deadline == created + 1 + 3
    )
    assert len({p.shard for p in r.participants}) == 2
    m.create_job()
    assert m.job(2).id == 2


def test_invalid_insufficient_escrow():
    m = new_market()
    assert_rejected(
        m.chain, m.tx(m.owner, create_job_msg(rounds=1000, reward=10**9)), ErrInsufficientFunds
    )


@pytest.mark.parametrize(
    "bad",
    [
        dict(inner_steps=7),  # H % k != 0
        dict(trace_interval=0),
        dict(initial_model_hash=b"x" * 31),
        dict(dataset_id=b""),
        dict(participants_per_round=0),
        dict(participants_per_round=33),
        dict(num_shards=1),
        dict(commit_blocks=0),
        dict(attest_blocks=201),
        dict(challenge_bps=100),
        dict(challenge_bps=10_001),
        dict(verifiers_per_challenge=0),
        dict(min_reputation=10_001),
        dict(tokens_per_step=0),
        dict(compression_policy="Top K"),
        dict(
            compression_params=[
                jobs_pb2.CompressionParam(key="b", value=1),
                jobs_pb2.CompressionParam(key="a", value=1),
            ]
        ),
        dict(
            model=jobs_pb2.ModelConfig(
                n_layers=2, n_heads=3, d_model=64, context_len=64, vocab_size=256
            )
        ),
        dict(inner_steps=8192, trace_interval=1),
        dict(num_shards=4_097),  # > max_shards: the open would shuffle them all
    ],
)
def test_invalid_spec(bad):
    m = new_market()
    assert_rejected(m.chain, m.tx(m.owner, create_job_msg(**bad)), ErrInvalidJobSpec)


def test_invalid_missing_spec():
    m = new_market()
    assert_rejected(
        m.chain,
        m.tx(
            m.owner,
            tx_pb2.Msg(create_job=jobs_pb2.MsgCreateJob(rounds=1, reward_per_round=1)),
        ),
        ErrInvalidJobSpec,
    )


def test_invalid_rounds_and_reward():
    m = new_market()
    assert_rejected(m.chain, m.tx(m.owner, create_job_msg(rounds=0)), ErrInvalidRounds)
    assert_rejected(m.chain, m.tx(m.owner, create_job_msg(reward=0)), ErrInvalidReward)
    assert_rejected(
        m.chain, m.tx(m.owner, create_job_msg(rounds=100_000, reward=2**63)), ErrInvalidReward
    )
    # a slot pays at least min_slot_reward (100,000 uloco): 2 participants need 200,000 per round
    assert_rejected(m.chain, m.tx(m.owner, create_job_msg(reward=199_999)), ErrInvalidReward)
    m.create_job(reward=200_000)


def test_invalid_cannot_pay_the_creation_fee():
    """The fee is burned before the escrow is funded: an owner that can fund the escrow but not
    the fee as well is refused, and nothing moves."""
    m = new_market()
    bal = bank.get_balance(m.store, m.owner.address)
    escrow = bal - 1_000_000 + 1  # fundable alone; with the 1 LOCO fee one uloco short
    assert_rejected(
        m.chain,
        m.tx(m.owner, create_job_msg(rounds=1, reward=escrow, vreward=0)),
        ErrInsufficientFunds,
    )
    m.create_job(rounds=1, reward=escrow - 1, vreward=0)


def test_create_job_records_where_to_fetch_the_model_and_data():
    m = new_market()
    sources = ["http://10.0.0.1:26680", "https://mirror.example.org/loconet"]
    res = m.send(
        m.owner,
        create_job_msg(blob_sources=sources, initial_model_bytes=549_456, dataset_bytes=1_115_394),
    )
    assert res.code == 0, res.log
    s = m.job(1).spec
    assert list(s.blob_sources) == sources and (s.initial_model_bytes, s.dataset_bytes) == (
        549_456,
        1_115_394,
    )


@pytest.mark.parametrize(
    "sources",
    [
        ["ftp://10.0.0.1/x"],
        ["http://10.0.0.1:26680", "http://10.0.0.1:26680"],  # twice
        [f"http://10.0.0.{i}:26680" for i in range(9)],  # more than 8
        ["http://host:26680/" + "a" * 260],  # longer than 256 bytes
        ["http://h\u00e9:1"],  # not ASCII
        ["http://10.0.0.1:26680/#frag"],
    ],
)
def test_invalid_blob_sources(sources):
    m = new_market()
    assert_rejected(
        m.chain, m.tx(m.owner, create_job_msg(blob_sources=sources)), ErrInvalidLocation
    )


def test_invalid_trace_too_long_for_the_reveal_tx():
    """The first opening carries the whole trace list (32 bytes an entry) in one tx of at most
    MAX_TX_BYTES: a job of H/k + 1 = 4,097 entries (max_trace_entries) asked for a 131 KB list,
    so no challenged provider could ever reveal, and each was slashed as for fraud
    (missed_reveal); likewise a vote's opening holds one reached state per opened segment.
    Refused at creation above MAX_TRACE_LIST_ENTRIES; at that bound the largest reveal and
    vote-opening txs (longest locations, memo, chain id, fee, sequence, ids) fit."""
    from abci_app.codec.tx import MAX_MEMO_BYTES, MAX_TX_BYTES, build_tx
    from abci_app.jobs.msgs import MAX_TRACE_LIST_ENTRIES
    from tests.kits.chainkit import signer
    from tests.kits.marketkit import reveal_msg

    m = new_market()
    n = MAX_TRACE_LIST_ENTRIES
    res = assert_rejected(
        m.chain, m.tx(m.owner, create_job_msg(inner_steps=n, trace_interval=1)), ErrInvalidJobSpec
    )
    assert "reveal" in res.log and str(n) in res.log
    ok = m.send(m.owner, create_job_msg(inner_steps=n - 1, trace_interval=1))
    assert ok.code == 0, ok.log
    k = signer(7)
    loc = "http://" + "a" * 240 + ".io/x"
    msg = reveal_msg(
        k.address, 1, 0, n - 2, n_entries=n, start_location=loc[:256], end_location=loc[:256]
    )
    assert len(msg.reveal_segment.trace_list) == 32 * n
    raw = build_tx(
        k,
        chain_id="c" * 50,
        msgs=[msg],
        sequence=2**64 - 1,
        fee=2**64 - 1,
        memo="m" * MAX_MEMO_BYTES,
        timeout_height=2**64 - 1,
    )
    assert 55_000 < len(raw) <= MAX_TX_BYTES, len(raw)
    # a verifier's vote opening on a challenge of every segment (H/k = n - 1 reached states)
    from abci_app.jobs.incentives import compute_evidence
    from tests.kits.marketkit import reveal_vote_msg

    reached = [bytes([i % 256]) * 32 for i in range(n - 1)]
    vote = reveal_vote_msg(
        2**64 - 1, 2**64 - 1, k.address, False, 0, compute_evidence(reached), b"s" * 32, reached
    )
    raw = build_tx(
        k,
        chain_id="c" * 50,
        msgs=[vote],
        sequence=2**64 - 1,
        fee=2**64 - 1,
        memo="m" * MAX_MEMO_BYTES,
        timeout_height=2**64 - 1,
    )
    assert 55_000 < len(raw) <= MAX_TX_BYTES, len(raw)


def test_invalid_tolerance_job_opening_more_probes_than_a_tx_holds():
    """Tolerance mode: a vote's opening carries 32 integers per opened segment; a job that opens
    more than MAX_PROBE_SEGMENTS segments per challenge could never have its votes opened (every
    verifier slashed as silent): refused at creation. At the bound the largest opening (every
    integer at its widest encoding) fits in one tx."""
    from abci_app.codec.tx import MAX_TX_BYTES
    from abci_app.jobs.msgs import MAX_PROBE_SEGMENTS
    from abci_app.jobs.probe import PROBE_DIM, PROBE_LIMIT, compute_probe_evidence
    from tests.kits.chainkit import signer
    from tests.kits.marketkit import reveal_vote_msg

    m = new_market()
    n = MAX_PROBE_SEGMENTS
    over = create_job_msg(inner_steps=n + 1, trace_interval=1, segments_per_challenge=n + 1)
    res = assert_rejected(m.chain, m.tx(m.owner, over), ErrInvalidJobSpec)
    assert str(n) in res.log
    # more segments than that are fine when fewer are opened (min(s, H/k))
    ok = m.send(
        m.owner, create_job_msg(inner_steps=4 * n, trace_interval=1, segments_per_challenge=n)
    )
    assert ok.code == 0, ok.log
    k = signer(7)
    probes = [-(PROBE_LIMIT - 1)] * (PROBE_DIM * n)
    vote = reveal_vote_msg(
        2**64 - 1, 2**64 - 1, k.address, True, 10_000, compute_probe_evidence(probes), b"s" * 32
    )
    vote.reveal_vote.probes.extend(probes)
    raw = _largest_tx(k, vote)
    assert 50_000 < len(raw) <= MAX_TX_BYTES - 8_000, len(raw)  # 52.4 KB: room to spare


def _largest_tx(k, msg) -> bytes:
    """``msg`` in a tx with every envelope field at its largest."""
    from abci_app.codec.tx import MAX_MEMO_BYTES, build_tx

    return build_tx(
        k,
        chain_id="c" * 50,
        msgs=[msg],
        sequence=2**64 - 1,
        fee=2**64 - 1,
        memo="m" * MAX_MEMO_BYTES,
        timeout_height=2**64 - 1,
    )
