"""The invariant simulation, short (tests/kits/simkit.py; the long run is benchmarks/simulate.py):
random valid and invalid txs across every module, rounds through every phase, invariants after
every block, two apps (one on a SQLite file, reopened every 50 blocks) agreeing on every
response. Then: each kind of check the simulation makes does fail when its property breaks."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

import abci_app.app as app_module
from abci_app.jobs import keeper as jobs_keeper
from abci_app.jobs.phases import PHASE_END_FIELD, PHASE_END_FIELD_BY_NAME
from abci_app.jobs.rounds import TRANSITIONS
from abci_app.pb import jobs_pb2
from abci_app.staking import events as staking_events
from tests.kits.simkit import SimConfig, SimStats, SimulationFailure, simulate

SEEDS = (2, 3, 7)  # their union reaches every outcome below (checked by the coverage test)
BLOCKS = 150


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, SimStats]:
    out = {}
    for seed in SEEDS:
        disk = tmp_path_factory.mktemp(f"sim{seed}") / "second.db"
        out[seed] = simulate(SimConfig(seed=seed, blocks=BLOCKS, disk=disk, restart_every=50))
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_simulation_keeps_every_invariant_and_both_apps_agree(
    runs: dict[int, SimStats], seed: int
) -> None:
    st = runs[seed]  # any violation or divergence raised SimulationFailure in the fixture
    assert st.blocks == BLOCKS
    assert st.restarts == BLOCKS // 50
    assert st.compared >= 2 * BLOCKS  # FinalizeBlock and Commit at least, every block
    assert 0 < st.ok < st.txs  # valid and invalid txs both
    assert st.rejected_checks > 0


def test_simulation_exercises_every_module_and_phase(runs: dict[int, SimStats]) -> None:
    """Not vacuous: over the seed list every operation is accepted and rejected somewhere, every
    round phase is reached, and the outcomes, slashes and jails the invariants are about happen."""
    ops: Counter[str] = Counter()
    events: Counter[str] = Counter()
    phases: Counter[int] = Counter()
    for st in runs.values():
        for op, (acc, rej) in st.ops().items():
            ops[op + " ok"] += acc
            ops[op + " rejected"] += rej
        events.update(st.events)
        phases.update(st.phases)
    for op in (
        "send",
        "create_validator",
        "bond",
        "unbond",
        "unjail",
        "register",
        "update",
        "exit",
        "create_job",
        "cancel",
        "withdraw",
        "onboard",
        "commit",
        "reveal",
        "verdict",
        "attest",
    ):
        assert ops[op + " ok"] > 0, op
        if op not in (
            "commit",
            "reveal",
            "verdict",
            "attest",
        ):  # duties fail in the *_bad ops below
            assert ops[op + " rejected"] > 0, op
    for op in ("commit_bad", "reveal_bad", "verdict_bad", "attest_bad", "stale"):
        assert ops[op + " rejected"] > 0 and ops[op + " ok"] == 0, op
    for fault in ("badsig", "chain", "gap", "replay", "timeout", "garbage", "fee"):
        assert sum(n for k, n in ops.items() if f"/{fault} " in k) > 0, fault
        assert sum(n for k, n in ops.items() if f"/{fault} ok" in k) == 0, fault
    assert all(phases[p] > 0 for p in (1, 3, 4, 5, 7, 8, 9)), phases
    # both ways a phase ends: early, its messages all in (round.closed_early), and at its window's
    # end (a participant silent): every round that leaves its commit phase enters its reveal
    early = events["round.closed_early:commit"]
    assert 0 < early < phases[jobs_pb2.PHASE_REVEAL], (early, phases)
    for e in (
        "round.finalized",
        "job.closed:completed",
        "job.closed:cancelled",
        "verdict.decided:accepted",
        "verdict.decided:fraud",
        # "verdict.decided:rejected" needs an invalid side holding 2/3 of a panel's stake with
        # fewer voters than min(min_fraud_verifiers, 2/3 of the judiciary): since the threshold is
        # capped by the network's size (rounds.compute_min_fraud_voters) the simulation's small
        # networks prove fraud instead; the outcome is pinned by tests/jobs/test_scenarios.py
        # test_too_few_invalid_voters_for_the_judiciary_reject_without_slashing
        "verdict.decided:undecided",
        "provider.slashed:missed_commit",
        "provider.slashed:missed_reveal",
        "provider.slashed:fraud",
        "provider.unbonded",
        "reward.paid:bounty",
        "validator.jailed:downtime",
        "validator.jailed:double_sign",
        "validator.unjailed",
        "stake.unbonded",
        "model.attested",
    ):
        assert events[e] > 0, e


def test_due_fields_match_the_phase_machine() -> None:
    """The one phase table (``jobs.phases``) names a transition for every live phase and a Round
    field for each: the liveness invariant, the end block, the worker and the kits read it."""
    assert TRANSITIONS.keys() == PHASE_END_FIELD.keys()
    fields = {f.name for f in jobs_pb2.Round.DESCRIPTOR.fields}
    assert set(PHASE_END_FIELD.values()) <= fields
    assert len(PHASE_END_FIELD_BY_NAME) == len(PHASE_END_FIELD)


# -- the checks fail when their property breaks ----------------------------------------------------


def test_divergence_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """One app writes an extra key from height 20 on (as a nondeterministic module would)."""
    real = app_module.execute_block
    calls = {"n": 0}

    def flaky(state, block, txs, sigs):
        res = real(state, block, txs, sigs)
        calls["n"] += 1
        if block.height >= 20 and calls["n"] % 2 == 0:  # every second call is the second app's
            res.writes[b"\xffnondeterministic"] = b"x"
        return res

    monkeypatch.setattr(app_module, "execute_block", flaky)
    with pytest.raises(SimulationFailure, match="divergence in FinalizeBlock at height 20"):
        simulate(SimConfig(seed=3, blocks=30))


def test_a_rejected_tx_that_writes_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    real = app_module.process_tx

    def leaky(ctx, raw, sigs):
        r = real(ctx, raw, sigs)
        if r.code:
            ctx.store.set(b"\xfeleak", raw[:8])
        return r

    monkeypatch.setattr(app_module, "process_tx", leaky)
    with pytest.raises(SimulationFailure, match="rejected txs changed state"):
        simulate(SimConfig(seed=3, blocks=30))


def test_supply_moving_without_its_event_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    real = staking_events.reward_minted_event
    monkeypatch.setattr(staking_events, "reward_minted_event", lambda amount: real(amount - 1))
    with pytest.raises(SimulationFailure, match="supply moved by"):
        simulate(SimConfig(seed=3, blocks=5))


def test_a_broken_module_invariant_stops_the_simulation(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Escrow books: a round that pays one uloco more than its records say."""
    from abci_app.errors import InvariantBroken

    real = jobs_keeper.pay

    def overpay(store, job, recipient, amount):
        real(store, job, recipient, amount + 1)

    monkeypatch.setattr(jobs_keeper, "pay", overpay)
    with pytest.raises(InvariantBroken):
        simulate(SimConfig(seed=1, blocks=BLOCKS, disk=tmp_path / "b.db"))
