"""The package's modules import each other without a cycle: each one imports alone in a fresh
interpreter, and the graph of their imports (read from the source, `TYPE_CHECKING` blocks and
imports inside functions included) has no cycle."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "sandstream"


def _module(path: Path) -> str:
    parts = ["sandstream", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str) -> set[str]:
    """The package's modules that module `name` imports, wherever in it the import stands."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            target = f"{base}.{node.module}" if node.level and node.module else (node.module or base)
            if node.level == 0 and not target.startswith("sandstream"):
                continue
            # `from . import x` names modules; `from .m import name`, attributes of module m.
            submodules = {f"{target}.{alias.name}" for alias in node.names} & MODULES.keys()
            found |= submodules or ({target} & MODULES.keys())
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in MODULES}
    return found - {name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found: list[list[str]] = []
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                found.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def test_the_import_graph_has_no_cycle() -> None:
    graph = {name: imports_of(name) for name in MODULES}
    assert [] == [" -> ".join(cycle) for cycle in cycles(graph)]


def test_a_cycle_is_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c", "a"]]


@pytest.mark.parametrize("name", sorted(MODULES))
def test_each_module_imports_alone(name: str) -> None:
    run = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True,
                         env={"PYTHONPATH": str(PACKAGE.parent)})
    assert run.returncode == 0, run.stderr
