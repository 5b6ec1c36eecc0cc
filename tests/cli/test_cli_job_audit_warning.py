"""`tx job create` warns (one stderr line naming the fix) when a job's challenge settings cost
more than the budgets of issue 29: the verifiers' expected compute, panel audits and the fixed
work per opened segment included, <= 5 % of the provider's; the round's verification bytes
(reveals served and fetched) <= 1/200 of per-step fp32 ring AllReduce for the same steps, half of
the whole round's 100x budget. The defaults (5 % challenged, one segment) meet both; the catch
rate is reported, not required: the collateral makes cheating lose at any rate
(docs/threat-model.md "Enough segments"). Offline (--generate-only): no node."""

from __future__ import annotations

import json

import pytest

from abci_app.jobs.audit import compute_verifier_compute_bps
from abci_app.jobs.params import DEFAULTS
from node.client.market_msgs import (
    DEFAULT_CHALLENGE_BPS,
    DEFAULT_COMPRESSION,
    DEFAULT_SEGMENTS_PER_CHALLENGE,
    FIXED_STEPS_PER_CHALLENGE,
    FIXED_STEPS_PER_SEGMENT,
    build_create_job,
    expected_verifier_compute_bps,
    expected_verifier_work_bps,
    job_audit_warning,
    verification_traffic_share,
)
from tests.kits.clikit import flags, offline, run

JOB = flags(rounds=1, shards=4, tokens_per_step=1024, reward_per_round="1loco")


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    h = tmp_path_factory.mktemp("cli") / "home"
    r = run("init", "--home", str(h), "--chain-id", "c")
    assert r.returncode == 0, r.stderr
    return h


def create(home, *extra: str, participants: int = 4):
    r = run(
        *offline(
            home,
            *("tx", "job", "create", "--from", "validator", *JOB),
            *flags(initial_model="00" * 32, dataset_id="11" * 32, participants=participants),
            *extra,
        )
    )
    assert r.returncode == 0, r.stderr
    spec = json.loads(r.stdout)["messages"][0]["create_job"]["spec"]
    warnings = [ln for ln in r.stderr.splitlines() if ln.startswith("warning:")]
    return spec, warnings


def test_the_default_job_meets_both_budgets_without_a_warning(home):
    """5 % challenged, one segment: the DiLoCo table's H = 100 with 4 participants and longer."""
    spec, warnings = create(home, *flags(inner_steps=100, trace_interval=1))
    assert int(spec["segments_per_challenge"]) == DEFAULT_SEGMENTS_PER_CHALLENGE == 1
    assert int(spec["challenge_bps"]) == DEFAULT_CHALLENGE_BPS == 500
    assert spec["compression_policy"] == DEFAULT_COMPRESSION == "dense+int8"
    assert warnings == []
    _, warnings = create(home, *flags(inner_steps=960, trace_interval=1))
    assert warnings == []


def test_the_old_defaults_warn_about_bytes_and_compute_and_name_the_fix(home):
    """Every commitment challenged, 15 segments, H = 100: the verification moved ~45 % of what
    per-step AllReduce would (issue 29) and cost 53 % of the provider's compute (42 % re-executed
    steps and fixed work per segment, 11 % fixed work per challenge)."""
    extra = flags(inner_steps=100, trace_interval=1, challenge_bps=10_000, segments=15)
    _, warnings = create(home, *extra)
    assert len(warnings) == 1, warnings
    w = warnings[0]
    assert "53.20 %" in w and "> 5 %" in w
    assert "1/2 of what per-step fp32 AllReduce would" in w and "(> 1/200" in w
    assert "fix: --segments 1 --challenge-bps 800" in w
    _, again = create(
        home, *flags(inner_steps=100, trace_interval=1, challenge_bps=800, segments=1)
    )
    assert again == []


def test_a_short_round_names_more_steps_when_the_floor_is_not_enough(home):
    """H = 40 steps among 2 participants: even the chain's floor moves more than the budget."""
    _, warnings = create(home, *flags(inner_steps=40, trace_interval=10), participants=2)
    assert len(warnings) == 1, warnings
    w = warnings[0]
    assert "cannot stay 100x below it" in w and "more steps per round (--inner-steps)" in w
    assert f"--challenge-bps {DEFAULTS['min_challenge_bps']}" in w


def test_a_short_trace_warns_about_verifier_compute(home):
    """H/k = 4 with every segment of every commitment re-executed: all of the provider's steps,
    1.4x with audits, half a step of fixed work per step at k = 2 and 8 steps per challenge over
    the round's 8; one participant, so no AllReduce to compare bytes with."""
    extra = flags(inner_steps=8, trace_interval=2, challenge_bps=10_000, segments=4)
    _, warnings = create(home, *extra, participants=1)
    assert len(warnings) == 1, warnings
    w = warnings[0]
    assert "350.00 %" in w and "> 5 %" in w and "panel audits and the fixed work" in w
    assert "AllReduce" not in w


def test_the_warning_reuses_the_chain_formulas():
    d = {"inner_steps": 100, "trace_interval": 1, "participants_per_round": 4}
    assert job_audit_warning(d) is None
    assert FIXED_STEPS_PER_SEGMENT == 1 and FIXED_STEPS_PER_CHALLENGE == 8
    for n, k in ((480, 1), (960, 1), (480, 4)):
        steps = expected_verifier_compute_bps(n, 1, 500)
        # 5 % of rounds x 1.4 verifiers x 8 steps over the round's n·k
        fixed = 500 * 14_000 * 8 // (10_000 * n * k)
        assert expected_verifier_work_bps(n, 1, 500, k) == steps * (k + 1) // k + fixed
    one = compute_verifier_compute_bps(100, 1, 500)  # 5 bps: 1/100 of the steps, 5 % of rounds
    audits = DEFAULTS["audit_bps"] * DEFAULTS["audit_verifiers"]  # 4000 x 1
    assert expected_verifier_compute_bps(100, 1, 500) == one * (10_000 + audits) // 10_000
    # bytes: 5 % x 1.4 verifiers x 2 states of 12 B/param, served and fetched, over
    # 2 x 100 steps x 1.5 x 4 B/param of AllReduce
    assert verification_traffic_share(100, 100, 1, 500, 4) == pytest.approx(
        2 * 0.05 * 1.4 * 24 / (2 * 100 * 1.5 * 4)
    )
    assert verification_traffic_share(100, 100, 1, 500, 1) is None
    # no whole number of segments: the chain refuses the job, nothing to warn about
    assert job_audit_warning({"inner_steps": 7, "trace_interval": 2}) is None


def test_the_library_default_is_the_cli_default():
    msg = build_create_job(
        {
            "model": {
                "n_layers": 2,
                "n_heads": 2,
                "d_model": 64,
                "context_len": 64,
                "vocab_size": 256,
            },
            "initial_model_hash": "00" * 32,
            "dataset_id": "11" * 32,
            "inner_steps": 480,
            "trace_interval": 1,
            "compression_policy": "dense",
            "participants_per_round": 1,
            "num_shards": 2,
            "tokens_per_step": 1024,
            "windows": {"commit": 10, "reveal": 5, "verdict": 5, "attest": 5},
            "challenge_bps": 500,
            "verifiers_per_challenge": 1,
            "rounds": 1,
            "reward_per_round": 1,
        }
    )
    assert msg.create_job.spec.segments_per_challenge == DEFAULT_SEGMENTS_PER_CHALLENGE == 1
