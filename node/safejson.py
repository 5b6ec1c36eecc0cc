"""JSON from peers (a node's RPC or websocket answer), parsed only when its nesting is bounded.

``json.loads`` relies on the interpreter's recursion limit to stop ``[[[[...`` nested 100,000
deep: at the default limit it raises RecursionError, but a process (or a library such as
hypothesis, or a test run) that raised the limit overflows the C stack first, and the process
dies with a segmentation fault. Input from the network is therefore measured before it is
parsed: brackets outside strings are counted (a C-speed scan), and a document nested deeper than
``max_depth`` is refused with ValueError, like any other malformed document.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

MAX_DEPTH = 128
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def depth(text: str) -> int:
    """The deepest nesting of ``text``'s arrays and objects (strings' contents not counted)."""
    brackets = _BRACKET.findall(_STRING.sub("", text))
    return max(accumulate(_STEP[b] for b in brackets), default=0)


def loads(text: str | bytes, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` of a document nested at most ``max_depth`` deep; ValueError otherwise."""
    try:
        s = text.decode("utf-8") if isinstance(text, bytes) else text
    except UnicodeDecodeError as e:  # a peer's bytes: the CLI read it as "a file ... not UTF-8"
        raise ValueError(f"JSON that is not UTF-8 ({e.reason} at byte {e.start})") from None
    if depth(s) > max_depth:
        raise ValueError(f"JSON nested deeper than {max_depth} levels")
    return json.loads(s, parse_constant=_no_constant)


def _no_constant(name: str) -> Any:
    """NaN, Infinity and -Infinity are not JSON (RFC 8259), and no node sends them: a lying one's
    ``"height": Infinity`` made int() raise OverflowError, a traceback in the CLI."""
    raise ValueError(f"{name} is not a JSON number")
