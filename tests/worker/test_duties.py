"""The worker's slow duties (re-execution, aggregation) run on their own thread, nearest window
end first, and never hold back the loop: while a verification of round r runs, the loop still
sends round r + 1's commitment and a reveal whose window is nearer (node/worker/duties.py)."""

from __future__ import annotations

import threading
import time
from functools import partial
from typing import Any

from node.worker.duties import DutyQueue
from tests.worker.test_worker_stack import Stand, job


def test_duties_run_nearest_deadline_first_and_once_per_name() -> None:
    q = DutyQueue(1)
    gate = threading.Event()
    ran: list[str] = []

    def hold() -> None:
        gate.wait()

    assert q.submit("gate", 1, hold)
    time.sleep(0.05)  # the thread holds "gate"; the rest queue behind it
    for name, deadline in (("late", 30), ("none", 0), ("soon", 5), ("mid", 10)):
        assert q.submit(name, deadline, partial(ran.append, name))
    assert not q.submit("mid", 1, lambda: ran.append("mid again"))  # queued already: not twice
    assert q.queued() == ["soon", "mid", "late", "none"] and q.running() == ["gate"]
    gate.set()
    assert q.join(10)
    assert ran == ["soon", "mid", "late", "none"]
    assert q.submit("mid", 1, lambda: ran.append("mid again")) and q.join(10)  # done: again
    q.stop()


def test_a_failing_duty_does_not_stop_the_thread() -> None:
    q = DutyQueue(1)
    ran: list[str] = []

    def boom() -> None:
        raise RuntimeError("a peer's bad blob")

    q.submit("boom", 1, boom)
    q.submit("after", 2, lambda: ran.append("after"))
    assert q.join(10) and ran == ["after"]
    q.stop()


def _verifying_round(st: Stand, rn: int) -> dict[str, Any]:
    r = st.verdict_round()
    r["round"] = rn
    r["windows"] = {"verdict_end": 90}
    return r


def test_a_long_verification_never_delays_the_next_commitment_or_a_nearer_duty(tmp_path) -> None:
    j = job("", "tolerance")
    st = Stand(tmp_path, j)
    release = threading.Event()
    verifying = threading.Event()
    order: list[str] = []

    def slow_verify(*a: Any, **k: Any) -> None:  # re-executing round 1 for a long time
        verifying.set()
        release.wait(30)
        order.append("verify/1")

    st.w.do_verify = slow_verify  # type: ignore[method-assign]
    # _round hands the duties the parsed records (records.Round)
    st.w.do_commit = lambda job, r, *a, **k: order.append(f"commit/{r.round}")  # type: ignore[method-assign]
    st.w.do_reveal = lambda job, r, me: order.append(f"reveal/{r.round}")  # type: ignore[method-assign,union-attr]
    reveal = st.commit_round(rn=0)
    reveal["phase"], reveal["windows"] = "reveal", {"reveal_end": 70}
    me = reveal["participants"][0]
    me["commitment"] = {"payload_size": 1}
    me["challenge"] = {"segment": 0, "reveal": None, "reveals": [], "verifiers": []}
    rounds = [_verifying_round(st, 1), st.commit_round(rn=2), reveal]

    st.w._todo = []  # one pass of tick(): collect, then run by deadline
    for r in rounds:
        st.w._round(j, r, height=60)
    todo, st.w._todo = st.w._todo, None
    st.w._run_collected(todo)  # returns while the verification still waits for `release`
    assert verifying.wait(10)  # the verification is running on the duty thread...
    # ...and the loop went on: the reveal (window ends at 70) before the commitment (100)
    assert order == ["reveal/0", "commit/2"], order
    assert st.w._duties.running() == ["verify/3/1/loco1target/0"]
    release.set()
    assert st.w._duties.join(10)
    assert order == ["reveal/0", "commit/2", "verify/1"]
    st.close()
