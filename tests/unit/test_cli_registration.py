"""One registration style (issue 51 item 6): every command is a function declared with a
decorator on its module's Typer and wrapped by `handle_errors` (one `error:` line, the JSON
envelope with `--json`); the root table names a module's group (`app`) or its top-level
commands (`commands`). No `register()` functions, no commands nested in one, no import made
for its side effect of registering commands."""

from __future__ import annotations

import ast
from pathlib import Path

from tpwarden.cluster.cli import COMMANDS, app
from tpwarden.cluster.cli.lazy import walk
from typer.main import get_command

CLI = Path(__file__).resolve().parents[2] / "cluster" / "cli"
# the lab, a development tool, keeps its own error lines and exit codes (README)
OWN_ERRORS = ("lab",)


def test_the_table_names_a_group_or_a_modules_commands() -> None:
    for name, (target, _) in COMMANDS.items():
        assert target.rpartition(":")[2] in ("app", "commands"), (name, target)


def test_no_module_registers_commands_by_calling_something() -> None:
    for path in sorted(CLI.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        funcs = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert "register" not in funcs, path.name
        late = [n for n in tree.body[1:] if isinstance(n, ast.ImportFrom | ast.Import)
                and n.lineno > max(f.lineno for f in tree.body if isinstance(f, ast.FunctionDef))
                ] if funcs else []  # fmt: skip
        assert not late, f"{path.name}: an import after the functions (a side effect?)"
        nested = [
            inner.name
            for f in ast.walk(tree)
            if isinstance(f, ast.FunctionDef)
            for inner in ast.walk(f)
            if inner is not f
            and isinstance(inner, ast.FunctionDef)
            and any(ast.unparse(d).endswith(".command") or ".command(" in ast.unparse(d)
                    for d in inner.decorator_list)
        ]  # fmt: skip
        assert not nested, f"{path.name}: commands declared inside a function: {nested}"


def test_every_command_handles_its_errors() -> None:
    bare = [
        " ".join(path)
        for path, cmd in walk(get_command(app))
        if path
        and path[0] not in OWN_ERRORS
        and (not getattr(cmd, "commands", None) or getattr(cmd, "invoke_without_command", False))
        and not getattr(cmd.callback, "handles_errors", False)
    ]
    assert bare == [], f"commands without handle_errors: {bare}"
