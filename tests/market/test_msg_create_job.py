import pytest
from chainkit import assert_rejected
from marketkit import create_job_msg, jobs_pb2, new_market

from abci_app.bank import keeper as bank
from abci_app.bank.errors import ErrInsufficientFunds
from abci_app.jobs.errors import ErrInvalidJobSpec, ErrInvalidLocation, ErrInvalidReward, ErrInvalidRounds
from abci_app.jobs.keys import JOB_ESCROW


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
    assert r.phase == jobs_pb2.PHASE_COMMIT and len(r.participants) == 2 and r.commit_deadline == created + 1 + 3
    assert len({p.shard for p in r.participants}) == 2
    assert m.send(m.owner, create_job_msg()).code == 0
    assert m.job(2).id == 2


def test_invalid_insufficient_escrow():
    m = new_market()
    assert_rejected(m.chain, m.tx(m.owner, create_job_msg(rounds=1000, reward=10**9)), ErrInsufficientFunds)


@pytest.mark.parametrize("bad", [
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
    dict(compression_params=[jobs_pb2.CompressionParam(key="b", value=1), jobs_pb2.CompressionParam(key="a", value=1)]),
    dict(model=jobs_pb2.ModelConfig(n_layers=2, n_heads=3, d_model=64, context_len=64, vocab_size=256)),
    dict(inner_steps=8192, trace_interval=1),
    dict(num_shards=4_097),  # > max_shards: the open would shuffle them all
])
def test_invalid_spec(bad):
    m = new_market()
    assert_rejected(m.chain, m.tx(m.owner, create_job_msg(**bad)), ErrInvalidJobSpec)


def test_invalid_missing_spec():
    m = new_market()
    assert_rejected(m.chain, m.tx(m.owner, jobs_pb2 and __import__("marketkit").tx_pb2.Msg(create_job=jobs_pb2.MsgCreateJob(rounds=1, reward_per_round=1))), ErrInvalidJobSpec)


def test_invalid_rounds_and_reward():
    m = new_market()
    assert_rejected(m.chain, m.tx(m.owner, create_job_msg(rounds=0)), ErrInvalidRounds)
    assert_rejected(m.chain, m.tx(m.owner, create_job_msg(reward=0)), ErrInvalidReward)
    assert_rejected(m.chain, m.tx(m.owner, create_job_msg(rounds=100_000, reward=2**63)), ErrInvalidReward)
    # a slot pays at least min_slot_reward (100,000 uloco): 2 participants need 200,000 per round
    assert_rejected(m.chain, m.tx(m.owner, create_job_msg(reward=199_999)), ErrInvalidReward)
    assert m.send(m.owner, create_job_msg(reward=200_000)).code == 0


def test_invalid_cannot_pay_the_creation_fee():
    """The fee is burned before the escrow is funded: an owner that can fund the escrow but not
    the fee as well is refused, and nothing moves."""
    m = new_market()
    bal = bank.get_balance(m.store, m.owner.address)
    escrow = bal - 1_000_000 + 1  # fundable alone; with the 1 LOCO fee one uloco short
    assert_rejected(m.chain, m.tx(m.owner, create_job_msg(rounds=1, reward=escrow, vreward=0)), ErrInsufficientFunds)
    assert m.send(m.owner, create_job_msg(rounds=1, reward=escrow - 1, vreward=0)).code == 0


def test_create_job_records_where_to_fetch_the_model_and_data():
    m = new_market()
    sources = ["http://10.0.0.1:26680", "https://mirror.example.org/loconet"]
    res = m.send(m.owner, create_job_msg(blob_sources=sources, initial_model_bytes=549_456, dataset_bytes=1_115_394))
    assert res.code == 0, res.log
    s = m.job(1).spec
    assert list(s.blob_sources) == sources and (s.initial_model_bytes, s.dataset_bytes) == (549_456, 1_115_394)


@pytest.mark.parametrize("sources", [
    ["ftp://10.0.0.1/x"],
    ["http://10.0.0.1:26680", "http://10.0.0.1:26680"],  # twice
    [f"http://10.0.0.{i}:26680" for i in range(9)],  # more than 8
    ["http://host:26680/" + "a" * 260],  # longer than 256 bytes
    ["http://h\u00e9:1"],  # not ASCII
    ["http://10.0.0.1:26680/#frag"],
])
def test_invalid_blob_sources(sources):
    m = new_market()
    assert_rejected(m.chain, m.tx(m.owner, create_job_msg(blob_sources=sources)), ErrInvalidLocation)
