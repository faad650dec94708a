"""TAB completion of a group's sub-commands answers from `completion_table` (issue 30): the table
is the real command tree's, and the stand-in group completes exactly as the real group does."""

from __future__ import annotations

import pprint

import pytest
from tpwarden.cluster.cli import COMMANDS, Root, app
from tpwarden.cluster.cli.completion_table import SUBCOMMANDS
from tpwarden.cluster.cli.lazy import CompletionGroup, walk
from typer import _click as click
from typer.core import TyperGroup
from typer.main import get_command


def _real_groups() -> dict[str, TyperGroup]:
    """The groups the table must hold: every group without options of its own, the lab's aside."""
    return {
        " ".join(path): cmd
        for path, cmd in walk(get_command(app))
        if path and isinstance(cmd, TyperGroup) and not cmd.params and path[0] not in Root.fallbacks
    }


def test_the_table_is_the_command_trees():
    want = {}
    for key, group in _real_groups().items():
        ctx = click.Context(group)
        subs = {name: group.get_command(ctx, name) for name in group.list_commands(ctx)}
        want[key] = {n: c.get_short_help_str() for n, c in subs.items() if c and not c.hidden}
    assert SUBCOMMANDS == want, "paste into completion_table.py:\n" + pprint.pformat(want)


def _items(group: click.Command, incomplete: str) -> list[tuple[str, str, str | None]]:
    ctx = click.Context(group, info_name=group.name, resilient_parsing=True)
    return [(i.value, i.type, i.help) for i in group.shell_complete(ctx, incomplete)]


@pytest.mark.parametrize("key", sorted(SUBCOMMANDS))
def test_the_stand_in_completes_as_the_real_group(key):
    path = tuple(key.split())
    target, short = COMMANDS[path[0]]
    stand_in = CompletionGroup(target, path, short, SUBCOMMANDS)
    real = _real_groups()[key]
    names = list(SUBCOMMANDS[key])
    for incomplete in ["", names[0][:1], names[-1], "nosuch", "-", "--h"]:
        assert _items(stand_in, incomplete) == _items(real, incomplete), incomplete
    assert stand_in.real() is real  # a sub-command's options: the real group, imported
    for name in names:
        got = stand_in.get_command(click.Context(stand_in), name)
        assert got is not None
        assert isinstance(got, CompletionGroup) or got is real.get_command(
            click.Context(real), name
        )
