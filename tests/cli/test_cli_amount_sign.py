"""A non-positive bare amount (`-3`, `0`) was told to "give a unit, -3uloco or -3loco", which is
refused next; it now says the range at once (new-user review regression)."""

from __future__ import annotations

import pytest

from node.cli.common import UsageError, parse_amount


@pytest.mark.parametrize("text", ["-3", "-1.5", "0", "-0.5", "+0"])
def test_invalid_amount_not_positive_is_not_told_to_add_a_unit(text: str) -> None:
    with pytest.raises(UsageError, match="must be between 1uloco") as e:
        parse_amount(text)
    assert "give a unit" not in str(e.value)
    with pytest.raises(UsageError, match="give a unit, 5uloco or 5loco"):
        parse_amount("5")  # a positive bare number still gets the unit hint
