"""Units a reader can hold in their head: no class over 500 lines and no function over 80 lines in
the project's code, unless the line above the function says why (``# long: <reason>``); and
imports at the top of the module, unless a comment beside an import inside a function says why it
is deferred (``# lazy: <reason>``: keeping torch off ``loconet --help``, an optional package).

A long function hides its steps; naming them is the cheapest documentation there is. The size rule
covers the shipped packages, the benchmarks and scripts a user runs, and the tests and their kits.
An end-to-end scenario test that reads as one story against one live network (a node, a testnet,
a browser session) carries its reason, ``# long: one live network's story, step by step``:
splitting it would hide the order. The import rule leaves the tests out: a test imports what only
it needs beside it.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("abci_app", "node", "trainer", "contracts", "benchmarks", "scripts", "tests")
IMPORT_PACKAGES = tuple(p for p in PACKAGES if p != "tests")  # the import rule's packages
GENERATED = ("abci_app/codec/gen",)
SKIP_DIRS = {"node_modules", "__pycache__", "build"}
MAX_CLASS_LINES = 500
MAX_FUNCTION_LINES = 80
MARKER = "# long: "


def _sources(packages: tuple[str, ...] = PACKAGES) -> list[Path]:
    out: list[Path] = []
    for pkg in packages:
        for d, dirs, files in os.walk(ROOT / pkg):
            dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.startswith("."))
            for f in sorted(files):
                p = Path(d) / f
                if f.endswith(".py") and not p.relative_to(ROOT).as_posix().startswith(GENERATED):
                    out.append(p)
    return out


def _span(node: ast.AST) -> int:
    assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    assert node.end_lineno is not None
    return node.end_lineno - node.lineno + 1


def _has_reason(lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """The line above the def, or above its first decorator, is ``# long: <reason>``."""
    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
    above = lines[first - 2].strip() if first >= 2 else ""
    return above.startswith(MARKER) and len(above) > len(MARKER) + 10


def find_oversized(source: str, name: str) -> list[str]:
    """Every class over MAX_CLASS_LINES and every function over MAX_FUNCTION_LINES without a
    written reason, as 'name:line what (n lines)'."""
    lines = source.splitlines()
    out: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and _span(node) > MAX_CLASS_LINES:
            out.append(f"{name}:{node.lineno} class {node.name} ({_span(node)} lines)")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if _span(node) > MAX_FUNCTION_LINES and not _has_reason(lines, node):
                out.append(f"{name}:{node.lineno} def {node.name} ({_span(node)} lines)")
    return out


def _is_import(node: ast.AST) -> bool:
    return isinstance(node, (ast.Import, ast.ImportFrom))


def find_unexplained_imports(source: str, name: str) -> list[str]:
    """Imports inside a function with no comment on their lines or on the line above the block of
    imports they belong to, as 'name:line import'."""
    lines = source.splitlines()
    out: list[str] = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for block in ast.walk(fn):
            for field in ("body", "orelse", "finalbody", "handlers"):
                stmts = getattr(block, field, None)
                if not isinstance(stmts, list):
                    continue
                first: ast.stmt | None = None
                for st in stmts:
                    if not _is_import(st):
                        first = None
                        continue
                    first = first or st
                    assert st.end_lineno is not None
                    own = any("#" in lines[i - 1] for i in range(st.lineno, st.end_lineno + 1))
                    above = lines[first.lineno - 2].strip() if first.lineno >= 2 else ""
                    if not own and not above.startswith("#"):
                        out.append(f"{name}:{st.lineno} {lines[st.lineno - 1].strip()}")
    return out


def test_imports_inside_functions_say_why() -> None:
    found: list[str] = []
    for p in _sources(IMPORT_PACKAGES):
        found += find_unexplained_imports(p.read_text(), p.relative_to(ROOT).as_posix())
    assert not found, "move these to the top (or write '# lazy: <reason>' beside them):\n" + (
        "\n".join(found)
    )


@pytest.mark.parametrize(
    ("source", "flagged"),
    [
        ("def f():\n    import torch\n", True),
        ("def f():\n    import torch  # lazy: off the --help path\n", False),
        ("def f():\n    # lazy: off the --help path\n    import torch\n    import numpy\n", False),
        ("def f():\n    # lazy: torch\n    import torch\n    x = 1\n    import numpy\n", True),
        ("import torch\n\ndef f():\n    return torch\n", False),
    ],
)
def test_the_import_scan_flags_what_it_should(source: str, flagged: bool) -> None:
    assert bool(find_unexplained_imports(source, "x.py")) is flagged


def test_no_oversized_class_or_unexplained_long_function() -> None:
    found: list[str] = []
    for p in _sources():
        found += find_oversized(p.read_text(), p.relative_to(ROOT).as_posix())
    assert not found, "split these (or write '# long: <reason>' above the def):\n" + "\n".join(
        found
    )


def _body(n: int) -> str:
    return "".join(f"    x{i} = {i}\n" for i in range(n))


@pytest.mark.parametrize(
    ("source", "flagged"),
    [
        ("def f():\n" + _body(79), False),  # 80 lines: at the limit
        ("def f():\n" + _body(80), True),
        ("# long: a flat table of flags\ndef f():\n" + _body(80), False),
        ("# long: a flat table of flags\n@staticmethod\ndef f():\n" + _body(80), False),
        ("# long:\ndef f():\n" + _body(80), True),  # a marker without a reason is none
        ("class C:\n" + "".join(f"    def m{i}(self):\n        pass\n" for i in range(250)), True),
        ("class C:\n" + "".join(f"    def m{i}(self):\n        pass\n" for i in range(249)), False),
    ],
)
def test_the_scan_flags_what_it_should(source: str, flagged: bool) -> None:
    assert bool(find_oversized(source, "x.py")) is flagged
