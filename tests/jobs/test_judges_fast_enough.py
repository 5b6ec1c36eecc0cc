"""An honest slow machine is not drawn to re-execute what it cannot re-execute in time (attacker
review, issue 35, 3). The verdict window is sized from the job's stated speed (``tx job create``:
WINDOW_SLACK x the re-execution of the challenged segments at the job's compute per round), so a
correct verifier much slower than the need could not vote in time: silent, it would pay
``slash_fraction_liveness_bps`` on every seat. The judge pool (``rounds.compute_judge_pool``:
every verifier panel and the counts of judges) therefore keeps only providers whose standing
speed reaches the need, as the participants' draw does. Here a judge that truthfully claims
500 tokens/s is left out of a job needing 4,096."""

from __future__ import annotations

from abci_app.pb import providers_pb2
from tests.kits.marketkit import actors_block, new_market, register_msg

WINDOWS = {"commit_blocks": 6, "reveal_blocks": 4, "verdict_blocks": 3, "attest_blocks": 3}


def test_a_verifier_slower_than_the_job_s_need_is_never_drawn_to_re_execute() -> None:
    m = new_market(n_providers=2, register=False)
    worker, slow = m.providers
    judge_reg = register_msg(throughput=500)  # the truth: 500 tokens/s
    judge_reg.register_provider.policy.CopyFrom(providers_pb2.JobPolicy(min_slot_reward=10**15))
    m.block([(worker, register_msg(throughput=50_000)), (slow, judge_reg)])
    m.create_job(rounds=1, compute_s_per_round=2, **WINDOWS)  # 8,192 tokens in 2 s: 4,096/s
    m.until(m.height + 1)
    r = m.round(1, 0)
    assert [p.address for p in r.participants] == [worker.address]
    actors_block(m, 1)
    m.until(r.open_height + WINDOWS["commit_blocks"] + 1)
    (p,) = m.round(1, 0).participants
    assert p.challenged  # the kit's jobs challenge every commitment
    assert slow.address not in {v.address for v in p.verifiers}
