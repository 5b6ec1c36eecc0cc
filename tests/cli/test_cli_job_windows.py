"""`tx job create` sizes the windows from the job (issue 30): the job states its compute per round
(`--compute-per-round 30s`, recorded in the spec), and the windows follow from it and the chain's
measured block time with the stated slack (node/client/market_msgs.py compute_windows); `--windows`
still sets them by hand. Offline (--generate-only) the block time is assumed 1 s, and said so."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from abci_app.jobs.msgs import _MIN_BLOCKS, MAX_COMPUTE_S_PER_ROUND
from abci_app.jobs.params import DEFAULTS
from node.client.market_msgs import (
    ATTEST_S,
    COMMIT_FIXED_S,
    REVEAL_S,
    VERIFY_FIXED_S,
    WINDOW_SLACK,
    cap_windows,
    compute_windows,
    measure_block_time,
)
from tests.kits.clikit import flags, offline, run

JOB = flags(rounds=1, shards=4, tokens_per_step=1024, reward_per_round="1loco", participants=2)


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    h = tmp_path_factory.mktemp("cli") / "home"
    r = run("init", "--home", str(h), "--chain-id", "c")
    assert r.returncode == 0, r.stderr
    return h


def create(home, *extra: str):
    r = run(
        *offline(
            home,
            *("tx", "job", "create", "--from", "validator", *JOB),
            *flags(
                initial_model="00" * 32, dataset_id="11" * 32, inner_steps=100, trace_interval=1
            ),
            *extra,
        )
    )
    return r


@given(
    compute=st.floats(0, 10_000),
    block_s=st.floats(0.05, 30),
    h=st.integers(1, 5_000),
    k=st.integers(1, 100),
    segs=st.integers(1, 50),
)
@settings(max_examples=300, deadline=None)
def test_every_window_holds_its_work_with_the_slack_and_meets_the_chain_floor(
    compute, block_s, h, k, segs
):
    w = compute_windows(compute, block_s, inner_steps=h, trace_interval=k, segments=segs)
    for name, v in w.items():
        assert v >= _MIN_BLOCKS[f"{name}_blocks"]
    # the deadline block takes no commitment: commit - 1 blocks hold 3x compute + fixed work
    assert (w["commit"] - 1) * block_s >= WINDOW_SLACK * compute + COMMIT_FIXED_S - 1e-6
    assert w["reveal"] * block_s >= REVEAL_S - 1e-6
    assert w["attest"] * block_s >= ATTEST_S - 1e-6
    seg = min(segs, max(1, h // k))
    verify = compute * seg * k / h
    assert w["verdict"] * block_s >= WINDOW_SLACK * verify + VERIFY_FIXED_S - 1e-6
    # and not much more than that (one block of rounding)
    assert (w["commit"] - 2) * block_s < WINDOW_SLACK * compute + COMMIT_FIXED_S or w[
        "commit"
    ] == _MIN_BLOCKS["commit_blocks"]


def test_slower_blocks_mean_fewer_blocks_and_more_compute_longer_windows():
    kw = {"inner_steps": 500, "trace_interval": 1, "segments": 1}
    fast, slow = compute_windows(30, 0.5, **kw), compute_windows(30, 2.0, **kw)
    assert all(fast[n] >= slow[n] for n in fast) and fast["commit"] > slow["commit"]
    assert compute_windows(300, 1.0, **kw)["commit"] > compute_windows(30, 1.0, **kw)["commit"]


def test_windows_past_the_chain_maximum_are_cut_and_named():
    w, cut = cap_windows({"commit": 500, "reveal": 15, "verdict": 201, "attest": 30}, 200)
    assert w == {"commit": 200, "reveal": 15, "verdict": 200, "attest": 30}
    assert cut == ["commit", "verdict"]


def test_compute_per_round_sizes_the_windows_and_is_recorded(home):
    r = create(home, "--compute-per-round", "30s")
    assert r.returncode == 0, r.stderr
    spec = json.loads(r.stdout)["messages"][0]["create_job"]["spec"]
    assert int(spec["compute_s_per_round"]) == 30
    want = compute_windows(30, 1.0, inner_steps=100, trace_interval=1, segments=1)
    assert int(spec["commit_blocks"]) == want["commit"] == math.ceil(3 * 30 + 30) + 1
    assert int(spec["verdict_blocks"]) == want["verdict"]
    note = [ln for ln in r.stderr.splitlines() if ln.startswith("windows ")]
    assert len(note) == 1 and "--compute-per-round 30s" in note[0]
    assert "1 s/block assumed" in note[0] and "3x slack" in note[0]


def test_without_compute_the_windows_come_from_an_estimate_and_say_so(home):
    r = create(home)
    assert r.returncode == 0, r.stderr
    assert "estimated" in r.stderr and "pass --compute-per-round" in r.stderr
    spec = json.loads(r.stdout)["messages"][0]["create_job"]["spec"]
    assert int(spec["commit_blocks"]) >= _MIN_BLOCKS["commit_blocks"]


def test_explicit_windows_win_and_print_no_note(home):
    r = create(home, "--compute-per-round", "30s", "--windows", "12,8,8,8")
    assert r.returncode == 0, r.stderr
    spec = json.loads(r.stdout)["messages"][0]["create_job"]["spec"]
    assert [int(spec[f"{n}_blocks"]) for n in ("commit", "reveal", "verdict", "attest")] == [
        12,
        8,
        8,
        8,
    ]
    assert not [ln for ln in r.stderr.splitlines() if ln.startswith("windows ")]


def test_a_long_compute_is_cut_to_the_chain_maximum_with_a_note(home):
    r = create(home, "--compute-per-round", "2h")
    assert r.returncode == 0, r.stderr
    spec = json.loads(r.stdout)["messages"][0]["create_job"]["spec"]
    assert int(spec["commit_blocks"]) == DEFAULTS["max_window_blocks"]
    assert "cut to the chain's" in r.stderr


@pytest.mark.parametrize("bad", ["30", "-5s", "1.5m", "5d", "", "٣s", "9999999999s"])
def test_a_duration_needs_a_whole_number_and_a_unit(home, bad):
    r = create(home, "--compute-per-round", bad)
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    # "-5s" is refused before (the CLI's rule for every value starting with "-")
    assert "30s, 5m, 2h" in r.stderr or "cannot be negative" in r.stderr


def test_the_chain_refuses_a_compute_past_a_week():
    from abci_app.jobs.errors import ErrInvalidJobSpec
    from tests.kits.marketkit import create_job_msg, new_market

    m = new_market(n_providers=1)
    res = m.send(m.owner, create_job_msg(compute_s_per_round=MAX_COMPUTE_S_PER_ROUND + 1))
    assert (res.codespace, res.code) == (ErrInvalidJobSpec.codespace, ErrInvalidJobSpec.code)
    assert "compute_s_per_round" in res.log
    res = m.send(m.owner, create_job_msg(compute_s_per_round=MAX_COMPUTE_S_PER_ROUND))
    assert res.code == 0, res.log


class _Chain:
    """A node's answers for measure_block_time: header times every ``step`` seconds."""

    def __init__(self, top: int, step: float) -> None:
        self.top, self.step = top, step

    def latest_height(self) -> int:
        return self.top

    def block(self, height: int) -> dict:
        t = 1_700_000_000 + height * self.step
        sec, frac = int(t), round((t % 1) * 1e9)
        import time as _t

        stamp = _t.strftime("%Y-%m-%dT%H:%M:%S", _t.gmtime(sec)) + f".{frac:09d}Z"
        return {"block": {"header": {"time": stamp}}}


def test_block_time_is_measured_over_the_last_blocks():
    assert measure_block_time(_Chain(500, 0.7)) == pytest.approx(0.7, rel=1e-6)
    assert measure_block_time(_Chain(2, 0.7)) is None  # too young a chain: the caller assumes 1 s

    class Down:
        def latest_height(self) -> int:
            raise OSError("connection refused")

    assert measure_block_time(Down()) is None
