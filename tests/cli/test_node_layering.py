"""node/'s layering, enforced (docs/design.md): library code never imports the command line
(``node/cli/``, ``node/worker/cli.py``), the import graph of node/ has no circle, and a command
that does not train never loads torch."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NODE = ROOT / "node"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    """module -> the node modules it imports anywhere in its source (top level, inside functions,
    under TYPE_CHECKING: a circle through a lazy import is still a circle)."""
    mods = {_module_name(p): p for p in NODE.rglob("*.py")}
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for n in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(n, ast.Import):
                targets = [a.name for a in n.names]
            elif isinstance(n, ast.ImportFrom):
                base = n.module or ""
                if n.level:
                    up = package.split(".")[: len(package.split(".")) - (n.level - 1)]
                    base = ".".join(up + ([n.module] if n.module else []))
                targets = [f"{base}.{a.name}" for a in n.names] + [base]
            for t in targets:
                # `from node.local import wan` names the module node.local.wan; `from
                # node.cli.main import x` names node.cli.main
                hit = t if t in mods else None
                if hit is not None and hit != name:
                    edges[name].add(hit)
                    break
    return edges


def _circles(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(edges[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, todo = work[-1]
            if todo:
                w = todo.pop()
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, sorted(edges[w])))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(frozenset(comp))
    return out


def _is_cli(module: str) -> bool:
    """The command line: the ``node.cli`` package and the worker's ``node.worker.cli``."""
    return module == "node.cli" or module.startswith("node.cli.") or module.endswith(".cli")


def test_library_modules_of_node_never_import_the_command_line() -> None:
    edges = _graph()
    bad = {
        m: sorted(t for t in targets if _is_cli(t))
        for m, targets in edges.items()
        if not _is_cli(m) and any(_is_cli(t) for t in targets)
    }
    assert bad == {}, f"library code importing the CLI (move what it needs out of the CLI): {bad}"


def test_node_has_no_import_circle() -> None:
    """Not even through a lazy import or under TYPE_CHECKING: a module that needs another's
    names at run time only has a circle waiting for the first caller that imports it early."""
    found = sorted(sorted(c) for c in _circles(_graph()))
    assert found == [], f"import circles in node/: {found}"


def test_the_circle_finder_finds_a_circle_through_a_lazy_import() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(edges) == [frozenset({"a", "b", "c"})]
    assert _circles({"a": {"b"}, "b": set()}) == []


LOADED_BY_HELP = """
import json, sys
from node.cli.main import main
for argv in (["--help"], ["keys", "--help"], ["tx", "bank", "send", "--help"],
             ["query", "balance", "--help"], ["provider", "run", "--help"]):
    try:
        main(argv)
    except SystemExit:
        pass
print(json.dumps(sorted(m for m in ("torch", "numpy") if m in sys.modules)))
"""


def test_commands_that_do_not_train_never_load_torch() -> None:
    """torch takes seconds to import: ``loconet --help`` and the tx and query commands must not
    pay it (the worker imports it when it starts training)."""
    r = subprocess.run(
        [sys.executable, "-c", LOADED_BY_HELP],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert json.loads(r.stdout.strip().splitlines()[-1]) == [], r.stdout[-2000:]
