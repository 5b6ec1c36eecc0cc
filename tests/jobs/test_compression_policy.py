"""One compression policy grammar (abci_app/jobs/policy.py) for the chain and the trainer.

The chain's MsgCreateJob spec check accepts a policy exactly when the trainer runs it: a
hypothesis test draws policy strings (grammar pieces, numbers at and past their bounds,
friendly spellings, random text) and checks, for each one, chain-accepts <=> trainer-runs,
where "runs" means the trainer's registry builds the round policy, picks a codec, compresses
a small update and the verifier's path (canonical bytes -> codec_from_payload -> decompress)
decodes it. Refusals carry code 517 in the jobs codespace and a stable ``reason``.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from abci_app.jobs.errors import ErrInvalidJobSpec
from abci_app.jobs.msgs import validate_spec
from abci_app.jobs.params import DEFAULTS, params_from_json
from abci_app.jobs.policy import (
    MAX_POLICY_LEN,
    PolicyError,
    canonical_policy,
    parse_policy,
)
from tests.kits.chainkit import assert_rejected
from tests.kits.marketkit import create_job_msg, job_spec, jobs_pb2, new_market
from trainer.commit import decode, encode
from trainer.compression import CompressionState, codec_from_payload, load_policy, make_codec

PARAMS = params_from_json(dict(DEFAULTS))
SHAPES = {"b": (7,), "w": (6, 5)}


def chain_accepts(policy: str) -> bool:
    try:
        validate_spec(job_spec(compression_policy=policy), PARAMS)
    except ErrInvalidJobSpec:
        return False
    return True


def trainer_runs(policy: str) -> bool:
    try:
        pol = load_policy(policy, default_budget_bytes=10_000)
    except PolicyError:
        return False
    codec = pol.choose(0, SHAPES)
    g = torch.Generator().manual_seed(0)
    t = {n: torch.randn(s, generator=g) for n, s in SHAPES.items()}
    raw = encode(codec.compress(t, CompressionState()))
    out = codec_from_payload(decode(raw)).decompress(decode(raw), SHAPES)
    assert {n: v.shape for n, v in out.items()} == {n: torch.Size(s) for n, s in SHAPES.items()}
    return True


QUANT = st.sampled_from(["", "+fp16", "+int8", "+int4", "+int2", "+int1", "+fp32", "+int3", "+"])
NUM = st.one_of(
    st.integers(0, 5000).map(str),
    st.sampled_from(
        ["1048576", "1048577", "1099511627776", "1099511627777", "07", "-1", "x", "", "1e3"]
    ),
)
DEC = st.one_of(
    st.integers(1, 10**6).flatmap(
        lambda u: st.integers(0, 20).map(lambda e: "0." + str(u).rjust(e, "0") if e else str(u))
    ),
    st.sampled_from(
        [
            "1",
            "0.01",
            "0.010",
            ".5",
            "1.0",
            "0",
            "0.0",
            "2",
            "1e-2",
            "0.0625",
            "0." + "0" * 17 + "1",
            "0." + "0" * 18 + "1",
        ]
    ),
)
CODEC = st.one_of(
    st.tuples(st.just("dense"), QUANT).map("".join),
    st.tuples(st.just("topk:"), DEC, QUANT).map("".join),
    st.tuples(st.just("lowrank:"), NUM, QUANT).map("".join),
    st.tuples(st.just("stride:"), NUM, QUANT).map("".join),
    st.tuples(st.just("chunk:"), NUM, st.sampled_from(["/", ""]), NUM, QUANT).map("".join),
)
ADAPTIVE = st.tuples(
    st.just("adaptive"),
    st.sampled_from(["", ":"]).flatmap(lambda c: NUM.map(lambda n: c + n) if c else st.just("")),
    st.sampled_from(
        [
            "",
            "/topk",
            "/topk+int8",
            "/topk+int4",
            "/topk+int2",
            "/chunk",
            "/stride-chunk",
            "/stride>chunk",
            "/chunk+int2",
            "/lowrank",
        ]
    ),
).map("".join)
POLICIES = st.one_of(
    CODEC,
    ADAPTIVE,
    st.sampled_from(
        [
            "none",
            "fp32",
            "fp16",
            "int8",
            "int4",
            "raw",
            "topk+int4",
            "Top K",
            "",
            " dense",
            "DENSE",
            "x" * (MAX_POLICY_LEN + 1),
        ]
    ),
    st.text(alphabet="adeiknoprstwxz0123456789:/+.->", max_size=24),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(POLICIES)
def test_chain_accepts_exactly_what_the_trainer_runs(policy):
    assert chain_accepts(policy) == trainer_runs(policy), policy


@settings(max_examples=200, deadline=None)
@given(POLICIES)
def test_friendly_spellings_map_to_one_canonical_policy(policy):
    """What the trainer CLI takes (make_codec / load_policy(strict=False)) is a canonical
    policy the chain accepts, and runs the same codec."""
    try:
        canon = canonical_policy(policy)
    except PolicyError:
        with pytest.raises(PolicyError):
            load_policy(policy, default_budget_bytes=10_000, strict=False)
        return
    assert chain_accepts(canon) and parse_policy(canon).canonical == canon
    assert canonical_policy(canon) == canon
    loose = load_policy(policy, default_budget_bytes=10_000, strict=False)
    assert (
        loose.choose(0, SHAPES).name
        == load_policy(canon, default_budget_bytes=10_000).choose(0, SHAPES).name
    )
    if chain_accepts(policy):
        assert canon == policy  # the chain only takes canonical spellings


@pytest.mark.parametrize(
    "policy",
    [
        "dense",
        "dense+int8",
        "topk:0.01+int4",
        "topk:0.016+int4",
        "topk:1",
        "lowrank:4+int8",
        "chunk:64/4096+int2",
        "stride:9+int2",
        "stride:5+int1",
        "adaptive",
        "adaptive:4062/stride-chunk",
        "adaptive:3000/topk+int8",
        "adaptive/chunk",
    ],
)
def test_trainer_policies_create_jobs(policy):
    m = new_market()
    res = m.send(m.owner, create_job_msg(compression_policy=policy))
    assert res.code == 0, res.log
    assert m.job(1).spec.compression_policy == policy
    assert trainer_runs(policy)


@pytest.mark.parametrize(
    "policy,reason,says",
    [
        ("raw", "unknown", "unknown compression 'raw'"),  # the old chain default
        ("topk+int4", "unknown", "topk needs an argument"),  # the old job --help example
        ("", "empty", "empty"),
        ("x" * (MAX_POLICY_LEN + 1), "too_long", "at most 64"),
        ("Top K", "charset", "[a-z0-9:/+.-]"),
        ("topk:2", "number", "(0, 1]"),
        ("topk:0", "number", "(0, 1]"),
        ("lowrank:07", "not_canonical", "write 'lowrank:7'"),
        ("stride:0", "range", "1..1048576"),
        ("chunk:5000/4096", "range", "chunk K must be 1..4096"),
        ("topk:0.1+int2", "quantizer", "does not go with topk"),
        ("chunk:64/4096+int1", "quantizer", "does not go with chunk"),
        ("topk:0.1+int3", "quantizer", "unknown quantizer"),
        ("adaptive:0", "range", "adaptive BYTES"),
        ("adaptive/chunk+int2", "quantizer", "chooses its own quantizer"),
        ("int8", "not_canonical", "write 'dense+int8'"),
        ("none", "not_canonical", "write 'dense'"),
        ("topk:0.010+int4", "not_canonical", "write 'topk:0.01+int4'"),
        ("chunk:64+int2", "not_canonical", "write 'chunk:64/4096+int2'"),
        ("dense+fp32", "not_canonical", "write 'dense'"),
        ("adaptive/topk+int4", "not_canonical", "write 'adaptive'"),
    ],
)
def test_invalid_compression_policy(policy, reason, says):
    with pytest.raises(PolicyError) as e:
        parse_policy(policy)
    assert e.value.reason == reason and says in str(e.value)
    with pytest.raises(PolicyError):  # the trainer's registry refuses it for a job too
        load_policy(policy, default_budget_bytes=1000)
    m = new_market()
    res = assert_rejected(
        m.chain, m.tx(m.owner, create_job_msg(compression_policy=policy)), ErrInvalidJobSpec
    )
    assert res.codespace == "jobs" and says in res.log and "compression_policy" in res.log


def test_invalid_compression_params():
    """Every parameter is in the policy string: a spec with compression_params is refused."""
    m = new_market()
    res = assert_rejected(
        m.chain,
        m.tx(
            m.owner,
            create_job_msg(
                compression_params=[jobs_pb2.CompressionParam(key="density_bps", value=160)]
            ),
        ),
        ErrInvalidJobSpec,
    )
    assert res.codespace == "jobs" and "compression_params must be empty" in res.log


def test_exact_density_and_payload_names_round_trip():
    """k = ceil(D * n) in integers (0.07 * 100 is 7.000000000000001 in floats), and every
    codec an adaptive ladder picks names itself canonically, so the verifier rebuilds it."""
    c = make_codec("topk:0.07")
    p = c.compress({"a": torch.arange(100, dtype=torch.float32)}, CompressionState())
    assert c.k(100) == 7 and c.decompress(p)["a"].count_nonzero() == 7
    shapes = {"w": (300, 7), "b": (13,)}
    for budget, ladder in (
        (100, "topk+int8"),
        (100, "chunk"),
        (100, "stride-chunk"),
        (500, "topk"),
    ):
        pol = load_policy(f"adaptive:{budget}/{ladder}", default_budget_bytes=1)
        for codec in pol.ladder()[:16]:
            assert parse_policy(codec.name).canonical == codec.name
            t = {n: torch.ones(s) for n, s in shapes.items()}
            raw = encode(codec.compress(t, CompressionState()))
            assert codec_from_payload(decode(raw)) == codec
