"""Every command and group's --help carries an example, reads well (no `<bool>` placeholder, no
hard line break mid-sentence, every option described), and --help works for all of them. The
commands come from the CLI's own tree, lazy groups resolved (a new command cannot escape)."""

import re

from tpwarden.cluster.cli import COMMANDS, app
from tpwarden.cluster.cli.lazy import walk
from typer.main import get_command
from typer.testing import CliRunner

TREE = list(walk(get_command(app)))


def test_the_walk_sees_every_table_row_and_the_subcommands():
    tops = {p[0] for p, _ in TREE if len(p) == 1}
    assert tops == set(COMMANDS)
    assert ("watchdog", "hold") in {p for p, _ in TREE} and len(TREE) > 50


def test_every_command_and_group_has_an_example():
    missing = [
        " ".join(p) or "tpwarden"
        for p, cmd in TREE
        if "Example" not in (cmd.help or "") + (cmd.epilog or "")
    ]
    assert not missing, f"commands without an example: {missing}"


def test_help_renders_for_every_command_without_placeholders():
    runner = CliRunner()
    for path, _ in TREE:
        result = runner.invoke(app, [*path, "--help"], terminal_width=100)
        assert result.exit_code == 0, (path, result.output)
        assert "Example" in result.output, path
        assert "<bool>" not in result.output, path


def test_no_hard_line_break_inside_a_paragraph():
    # a break is allowed before a blank line, an indented line or a "- " list item
    broken = [" ".join(p) for p, cmd in TREE if re.search(r"\S\n(?!\s|- )", cmd.help or "")]
    assert not broken, broken


def test_every_option_is_described():
    bare = [
        f"{' '.join(p)} {param.opts[0]}"
        for p, cmd in TREE
        for param in cmd.params
        if param.param_type_name == "option" and not getattr(param, "help", None)
    ]
    assert not bare, bare


def test_the_table_help_is_what_the_command_says():
    """`tpwarden --help` lists the table's text without importing: it must match the command."""
    for path, cmd in TREE:
        if len(path) == 1:
            assert " ".join((cmd.help or "").split()).startswith(COMMANDS[path[0]][1]), path
