"""``testnet status``'s LAST LOG LINE column (issue 36): the line's time of day and message, cut
at the end; cutting the front left half a timestamp (``6:52,769 loconet.worker INFO ...``)."""

from __future__ import annotations

from node.cli.testnet import log_column


def test_the_time_is_kept_whole_and_the_message_cut_at_the_end() -> None:
    line = (
        "2026-12-01 02:06:52,769 loconet.worker INFO round 1/3: update submitted at height 41 "
        "(honest) " + "x" * 200
    )
    col = log_column(line)
    assert col.startswith("02:06:52 round 1/3: update submitted at height 41")
    assert len(col) == 90 and col.endswith("…")


def test_a_warning_keeps_its_level_and_other_lines_pass_through() -> None:
    assert log_column("2026-12-01 02:06:52,769 loconet.worker WARNING no --node answers") == (
        "02:06:52 WARNING no --node answers"
    )
    assert log_column("Traceback (most recent call last):") == "Traceback (most recent call last):"
    assert log_column("") == ""
