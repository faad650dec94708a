"""The package's import contracts that import-linter does not express (issue 18).

- A function-level import hides a dependency from the reader and from the import graph's
  readers: each one says why it is deferred (an optional dependency, CLI start-up time, a
  module that must not load on the nodes), in a comment on its line or just above its group.
- No import cycle between any two modules of the package (function-level imports included,
  `if TYPE_CHECKING:` ones not: they never run). `lint-imports` checks siblings; this checks
  the whole module graph, parent packages included.
"""

from __future__ import annotations

import ast
import io
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"cluster": "tpwarden.cluster", "node": "tpwarden.node", "watchdog": "tpwarden.watchdog"}


def _sources() -> Iterator[tuple[str, str]]:
    """(path relative to the repository, module name) of every module of the package."""
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield rel, ".".join((package, *parts))


def _comment_lines(text: str) -> set[int]:
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    return {t.start[0] for t in tokens if t.type == tokenize.COMMENT}


def _function_import_groups(tree: ast.AST) -> Iterator[list[ast.stmt]]:
    """Runs of consecutive import statements inside a function body (at any depth)."""

    def bodies(node: ast.AST, in_function: bool) -> Iterator[list[ast.stmt]]:
        inside = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and inside:
                yield [s for s in block if isinstance(s, ast.stmt)]
        for child in ast.iter_child_nodes(node):
            yield from bodies(child, inside)

    for body in bodies(tree, False):
        group: list[ast.stmt] = []
        for stmt in [*body, None]:
            if isinstance(stmt, ast.Import | ast.ImportFrom):
                group.append(stmt)
                continue
            if group:
                yield group
            group = []


def uncommented_function_imports(text: str) -> list[int]:
    """Line numbers of function-level imports with no comment on their line or just above
    their group of consecutive imports."""
    comments = _comment_lines(text)
    bad = []
    for group in _function_import_groups(ast.parse(text)):
        lines = range(group[0].lineno - 1, (group[-1].end_lineno or group[-1].lineno) + 1)
        if not comments.intersection(lines):
            bad.extend(s.lineno for s in group)
    return bad


def test_the_check_sees_a_bare_function_level_import() -> None:
    text = (
        "def f():\n    import json\n    return json\n\n"
        "def g():\n    # deferred: matplotlib takes 0.6 s\n    import matplotlib\n"
        "    from matplotlib import pyplot\n\n"
        "def h():\n    import psutil  # deferred: optional on the node\n"
        "    if True:\n        import csv\n"
    )
    assert uncommented_function_imports(text) == [2, 13]


def test_function_level_imports_say_why_they_are_deferred() -> None:
    found = {}
    for rel, _module in _sources():
        bad = uncommented_function_imports((ROOT / rel).read_text(encoding="utf-8"))
        if bad:
            found[rel] = bad
    assert not found, (
        "function-level imports without a comment saying why they are deferred "
        f"(move them to the module's top, or say why not): {found}"
    )


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported(tree: ast.AST, module: str, is_package: bool) -> Iterator[str]:
    """Every module name `module` imports at run time (absolute, relative resolved)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            yield base
            yield from (f"{base}.{a.name}" for a in node.names)


def import_graph() -> dict[str, set[str]]:
    modules = dict((m, rel) for rel, m in _sources())
    graph: dict[str, set[str]] = {}
    for module, rel in modules.items():
        tree = ast.parse((ROOT / rel).read_text(encoding="utf-8"))
        targets = set(_imported(tree, module, rel.endswith("__init__.py")))
        graph[module] = {t for t in targets if t in modules and t != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_check_sees_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles_in_the_package() -> None:
    assert cycles(import_graph()) == []


@pytest.mark.parametrize(
    ("text", "module", "is_package", "expected"),
    [
        ("from . import rendezvous\n", "p.sim.server", False, {"p.sim", "p.sim.rendezvous"}),
        ("from .boot import DUR\n", "p.sim", True, {"p.sim.boot", "p.sim.boot.DUR"}),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import x\n", "m", False,
         {"typing", "typing.TYPE_CHECKING"}),
        ("def f():\n    import y  # deferred\n", "m", False, {"y"}),
    ],
)  # fmt: skip
def test_imports_are_resolved(text: str, module: str, is_package: bool, expected: set[str]) -> None:
    assert set(_imported(ast.parse(text), module, is_package)) == expected
