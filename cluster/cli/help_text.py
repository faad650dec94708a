"""Help that reads well (issue 30, item 6): every command and group gets its example (from
`examples.EXAMPLES`), paragraphs without hard line breaks, and flags without a `<bool>` type.

Help is click's plain layout (``rich_markup_mode=None``), not typer's rich panels: it wraps to
the terminal like any Unix tool's, and `--help` and TAB completion start without importing
typer's rich formatter (rich_utils, markdown_it: about half of `--help`'s time; issue 30 item 3,
measured by bench/cli_startup.py)."""

from __future__ import annotations

import re

from tpwarden.cluster.cli.examples import EXAMPLES
from typer import _click as click
from typer.core import TyperGroup, TyperOption

# a single newline inside a paragraph; kept: blank lines, and lines that start a list or indent
_HARD_BREAK = re.compile(r"(?<=\S)[ \t]*\n(?![ \t]*(?:\n|[-*•] |\s{2}))[ \t]*")


def join_lines(text: str) -> str:
    """Re-flow each paragraph of ``text`` onto one line (the terminal wraps it)."""
    return _HARD_BREAK.sub(" ", text)


def polish(cmd: click.Command, path: tuple[str, ...]) -> None:
    """Example, re-flowed help and flag display for ``cmd`` and everything under it."""
    text = join_lines(cmd.help or "")
    example = EXAMPLES.get(" ".join(path))
    if "Example" not in text and example:
        text = f"{text}\n\nExample: {example}"
    cmd.help = text
    cmd.rich_markup_mode = None  # type: ignore[attr-defined]  # TyperCommand/TyperGroup: plain
    flags_without_type(cmd, click.Context(cmd))
    if isinstance(cmd, TyperGroup):
        for name, sub in cmd.commands.items():
            polish(sub, (*path, name))


def flags_without_type(cmd: click.Command, ctx: click.Context) -> None:
    """No `<bool>` placeholder after a flag (typer shows one for every flag, --help included)."""
    for param in cmd.get_params(ctx):
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""
