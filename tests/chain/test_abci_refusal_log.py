"""Refused ABCI connections are logged one line each up to a bound a minute; a local connect
loop cannot flood the node's log (review finding, issue 28), and every refusal is counted."""

from __future__ import annotations

import logging

import pytest

from abci_app.server import RefusalLog


def test_a_connect_loop_logs_a_bounded_number_of_refusal_lines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    r = RefusalLog()
    with caplog.at_level(logging.WARNING, logger="loconet.abci"):
        for i in range(1000):
            r.note("not cometbft's", now=i // 100)  # 1,000 in 10 s
        assert r.total == 1000
        lines = [rec.getMessage() for rec in caplog.records]
        assert len(lines) == RefusalLog.BURST
        assert all(ln == "ABCI connection refused: not cometbft's" for ln in lines)
        caplog.clear()
        r.note("again", now=RefusalLog.WINDOW_S + 1)  # a new window: the count, then the line
        lines = [rec.getMessage() for rec in caplog.records]
    assert lines[0].startswith(f"ABCI connection refused {1000 - RefusalLog.BURST} more time(s)")
    assert lines[1] == "ABCI connection refused: again" and len(lines) == 2
    assert all("Traceback" not in ln for ln in lines)
