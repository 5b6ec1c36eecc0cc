"""node.safejson: JSON from peers is parsed only when its nesting is bounded, so a hostile node's
``[[[[...`` can never overflow the C stack (a segfault when the recursion limit is raised, as
hypothesis does), whatever the interpreter's recursion limit."""

from __future__ import annotations

import sys

import pytest

from node import safejson


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("{}", 1),
        ("[[], [[]]]", 3),
        ('{"a": "[[[[[[", "b": [1]}', 2),  # brackets inside strings do not count
        ('["\\"[[[["]', 1),  # nor after an escaped quote
        ("7", 0),
    ],
)
def test_depth_known_answers(text: str, want: int) -> None:
    assert safejson.depth(text) == want


def test_invalid_deep_nesting_is_a_value_error_at_any_recursion_limit() -> None:
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(1_000_000)  # json.loads would overflow the C stack here
    try:
        for text in ("[" * 100_000, "{" + '"a":{' * 50_000):
            with pytest.raises(ValueError, match="nested deeper"):
                safejson.loads(text)
    finally:
        sys.setrecursionlimit(old)
    assert safejson.loads(b'{"result": {"x": [1, 2]}}') == {"result": {"x": [1, 2]}}
    with pytest.raises(ValueError):
        safejson.loads(b"\xff")
