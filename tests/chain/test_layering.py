"""The rules the design rests on, enforced instead of kept by care (docs/design.md §2 and §9):
abci_app/ never loads torch, numpy, node/, trainer/ or httpx, and its code has no float literal,
no true division, no clock, randomness or environment read, and no unsorted JSON."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "abci_app"
FORBIDDEN_PACKAGES = ("torch", "numpy", "node", "trainer", "httpx", "matplotlib")
FORBIDDEN_IMPORTS = ("time", "random", "datetime", "secrets", "uuid")

LOAD_EVERYTHING = """
import importlib, json, pkgutil, sys
import abci_app
for m in pkgutil.walk_packages(abci_app.__path__, "abci_app."):
    if ".codec.gen" not in m.name:
        importlib.import_module(m.name)
print(json.dumps(sorted({n.split(".")[0] for n in sys.modules})))
"""


def test_importing_every_abci_app_module_loads_no_trainer_node_torch_or_httpx() -> None:
    out = subprocess.run(
        [sys.executable, "-c", LOAD_EVERYTHING],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    loaded = set(json.loads(out))
    assert "abci_app" in loaded
    assert not loaded & set(FORBIDDEN_PACKAGES), sorted(loaded & set(FORBIDDEN_PACKAGES))


def _violations(tree: ast.AST) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, float):
            out.append((n.lineno, f"float literal {n.value!r}"))
        elif isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div):
            # the one allowed `/` joins a pathlib.Path with a literal segment
            if not (isinstance(n.right, ast.Constant) and isinstance(n.right.value, str)):
                out.append((n.lineno, "true division `/` (use // or the integer rules)"))
        elif isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Div):
            out.append((n.lineno, "true division `/=`"))
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "float":
            out.append((n.lineno, "float()"))
        elif isinstance(n, ast.Import):
            banned = FORBIDDEN_IMPORTS + FORBIDDEN_PACKAGES
            out += [
                (n.lineno, f"import {a.name}") for a in n.names if a.name.split(".")[0] in banned
            ]
        elif isinstance(n, ast.ImportFrom) and n.level == 0 and n.module:
            if n.module.split(".")[0] in FORBIDDEN_IMPORTS + FORBIDDEN_PACKAGES:
                out.append((n.lineno, f"from {n.module} import"))
        elif isinstance(n, ast.Attribute) and n.attr in ("environ", "getenv", "environb"):
            out.append((n.lineno, f"environment read .{n.attr}"))
        elif (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr in ("dumps", "dump")
        ):
            sort = [k for k in n.keywords if k.arg == "sort_keys"]
            if not (
                sort and isinstance(sort[0].value, ast.Constant) and sort[0].value.value is True
            ):
                out.append((n.lineno, f"{n.func.attr}() without sort_keys=True"))
    return out


def _sources() -> list[Path]:
    return sorted(p for p in APP.rglob("*.py") if not p.is_relative_to(APP / "codec" / "gen"))


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_consensus_code_has_no_floats_clock_randomness_env_or_unsorted_json(path: Path) -> None:
    found = _violations(ast.parse(path.read_text(), str(path)))
    assert not found, "\n".join(f"{path.relative_to(ROOT)}:{line}: {what}" for line, what in found)


@pytest.mark.parametrize(
    "snippet,what",
    [
        ("x = 0.5", "float literal"),
        ("y = a / b", "true division"),
        ("a /= 2", "/="),
        ("z = float(n)", "float()"),
        ("import time", "import time"),
        ("from random import randint", "from random"),
        ("import os\nh = os.environ['HOME']", "environment"),
        ("import json\ns = json.dumps(d)", "sort_keys"),
        ("import json\ns = json.dumps(d, sort_keys=False)", "sort_keys"),
        ("import torch", "import torch"),
        ("from trainer.commit import Binding", "from trainer"),
    ],
)
def test_scan_catches_each_rule(snippet: str, what: str) -> None:
    found = _violations(ast.parse(snippet))
    assert any(what in f for _, f in found), found


def test_scan_allows_integer_maths_paths_and_sorted_json() -> None:
    ok = "q = a // b\np = Path(x) / 'gen'\ns = json.dumps(d, sort_keys=True, separators=(',', ':'))"
    assert _violations(ast.parse(ok)) == []


# The module graph: which domain modules a module may import (everything else it reaches through a
# Protocol it declares, wired in abci_app/modules.py). bank is the ledger every module pays through.
DOMAIN = ("auth", "bank", "staking", "slashing", "providers", "jobs", "settlement")
MAY_IMPORT = {
    "auth": set(),
    "bank": {"auth"},
    "staking": {"bank"},
    "slashing": set(),
    "providers": {"bank"},
    "jobs": {"bank"},
    "settlement": {"bank"},
}


def _imported_domains(pkg: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for path in sorted((APP / pkg).rglob("*.py")):
        for n in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(n, ast.Import):
                names = [a.name for a in n.names]
            elif isinstance(n, ast.ImportFrom) and n.level == 0 and n.module:
                names = [n.module]
            else:
                continue
            for name in names:
                parts = name.split(".")
                if (
                    parts[0] == "abci_app"
                    and len(parts) > 1
                    and parts[1] in DOMAIN
                    and parts[1] != pkg
                ):
                    out.setdefault(parts[1], []).append(f"{path.relative_to(ROOT)}:{n.lineno}")
    return out


@pytest.mark.parametrize("pkg", DOMAIN)
def test_modules_reach_each_other_only_through_their_protocols(pkg: str) -> None:
    extra = {d: where for d, where in _imported_domains(pkg).items() if d not in MAY_IMPORT[pkg]}
    assert not extra, (
        f"abci_app/{pkg} imports {extra}: declare a Protocol and wire it in modules.py"
    )
