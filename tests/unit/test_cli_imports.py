"""The CLI parses, calls one operation and renders (issue 51): what import-linter cannot say.

import-linter keeps lock, hold and event-log modules out of the CLI (`cli-renders`) and each
command's modules apart from another command's (`cli-commands-apart`). It does not see names:
a CLI module that reaches into another module's private names (`from x import _helper`) leans on
what that module may change at will. Shared helpers are public, in a module of their own.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "cluster" / "cli"


def private_imports(text: str) -> list[str]:
    """`module:name` for every private name a module imports from tpwarden."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tpwarden."):
            found += [
                f"{node.module}:{a.name}"
                for a in node.names
                if a.name.startswith("_") and not a.name.endswith("__")  # __version__ is public
            ]
    return found


def test_the_check_sees_a_private_import() -> None:
    text = "from tpwarden.cluster.cli.report import _zone_roles, check\nfrom os import _exit\n"
    assert private_imports(text) == ["tpwarden.cluster.cli.report:_zone_roles"]


def test_no_cli_module_imports_a_private_name() -> None:
    bad = {
        path.name: names
        for path in sorted(CLI.glob("*.py"))
        if (names := private_imports(path.read_text(encoding="utf-8")))
    }
    assert bad == {}, f"private names imported by CLI modules (make them public): {bad}"
