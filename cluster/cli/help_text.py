"""Help that reads well (issue 30, item 6): every command and group gets its example (from
`examples.EXAMPLES`), paragraphs without hard line breaks, and flags without a `<bool>` type.

Help is click's plain layout (``rich_markup_mode=None``), not typer's rich panels: it wraps to
the terminal like any Unix tool's (the whole width: click's 80-column cap is lifted by the root's
``max_content_width``, issue 52 item 12), and `--help` and TAB completion start without
importing typer's rich formatter (rich_utils, markdown_it: about half of `--help`'s time; issue
30 item 3, measured by bench/cli_startup.py). Examples and tables (indented lines, lists) keep
their lines: a command line is not folded into a sentence."""

from __future__ import annotations

import inspect
import re
import types

from tpwarden.cluster.cli.examples import EXAMPLES
from typer import _click as click
from typer.core import TyperGroup, TyperOption

# a single newline inside a paragraph; kept: blank lines, and lines that start a list or indent
_HARD_BREAK = re.compile(r"(?<=\S)[ \t]*\n(?![ \t]*(?:\n|[-*•] |\s{2}))[ \t]*")
# HOW WIDE the help may be: as wide as the terminal (click caps it at 80 columns by default)
MAX_CONTENT_WIDTH = 10_000


def keeps_lines(paragraph: str) -> bool:
    """An example, or a table or list (a line indented or starting a list item): printed as
    written, never re-wrapped."""
    lines = paragraph.splitlines()
    return paragraph.lstrip().startswith("Example") or any(
        line[:1].isspace() or line.lstrip().startswith(("- ", "* ", "• ")) for line in lines[1:]
    )


def format_help_text(
    self: click.Command, ctx: click.Context, formatter: click.HelpFormatter
) -> None:
    """click's `Command.format_help_text`, but examples and tables keep their lines."""
    text = inspect.cleandoc(self.help or "").partition("\f")[0]
    if not text:
        return
    formatter.write_paragraph()
    with formatter.indentation():
        for i, paragraph in enumerate(p for p in text.split("\n\n") if p.strip()):
            if i:
                formatter.write_paragraph()
            if keeps_lines(paragraph):
                for line in paragraph.splitlines():
                    formatter.write(f"{'':>{formatter.current_indent}}{line}\n")
            else:
                formatter.write_text(paragraph)


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
    # this command's help paragraphs: examples and tables keep their lines
    cmd.format_help_text = types.MethodType(format_help_text, cmd)  # type: ignore[method-assign]
    flags_without_type(cmd, click.Context(cmd))
    if isinstance(cmd, TyperGroup):
        for name, sub in cmd.commands.items():
            polish(sub, (*path, name))


def flags_without_type(cmd: click.Command, ctx: click.Context) -> None:
    """No `<bool>` placeholder after a flag (typer shows one for every flag, --help included)."""
    for param in cmd.get_params(ctx):
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""
