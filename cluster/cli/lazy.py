"""The root command group: sub-commands resolved on first use from a table, so `tpwarden --help`,
a TAB completion and `inventory check` import only what the chosen command needs (issue 30).

A table row is ``name -> (target, short help)``; ``target`` is ``"module:attr"`` where ``attr`` is
a ``typer.Typer``: ``app``, a group (mounted as ``name``), or ``commands``, a module's top-level
commands (merged into the root: ``name`` is one of them). Either way every command is declared
the one way: a decorator on its module's Typer (a group split over modules mounts its parts'
Typers with ``add_typer``). Listing the commands (root --help, TAB
on the command name) reads the short help from the table and imports nothing.

Every resolved command is polished once (`help_text.polish`): an example appended, no `<bool>`
placeholder. Usage errors become one ``error:`` line naming the fix (`errors.usage_error`).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import typer
from tpwarden.cluster.cli.completion_params import stand_in
from typer import _click as click
from typer.core import TyperCommand, TyperGroup

Table = Mapping[str, tuple[str, str]]

_RESOLVED: dict[str, dict[str, click.Command]] = {}  # target -> the commands it mounts


def _mount(target: str, name: str) -> dict[str, click.Command]:
    """Import ``module:attr`` and return the click commands it mounts, by name (cached)."""
    if target not in _RESOLVED:
        module, _, attr = target.partition(":")
        obj = getattr(importlib.import_module(module), attr)
        assert isinstance(obj, typer.Typer), target
        holder = typer.Typer()
        holder.callback()(lambda: None)
        if attr == "commands":
            holder.add_typer(obj)  # a module's top-level commands, merged
        else:
            holder.add_typer(obj, name=name)
        group = typer.main.get_command(holder)
        assert isinstance(group, TyperGroup)
        from tpwarden.cluster.cli.help_text import polish  # deferred: once a command resolves

        for mounted, cmd in group.commands.items():
            polish(cmd, (mounted,))
        _RESOLVED[target] = dict(group.commands)
    return _RESOLVED[target]


class LazyGroup(TyperGroup):
    """A typer group whose commands come from ``TABLE`` (set by the package) on first use."""

    table: Table = {}
    subtables: Mapping[str, Mapping[str, str]] = {}  # group path -> sub-command -> short help
    fallbacks: Mapping[str, Callable[[ModuleNotFoundError], click.Command | None]] = {}
    _listing = False  # while True, unresolved commands are stubs built from the table

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*self.commands, *(n for n in self.table if n not in self.commands)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands or cmd_name not in self.table:
            return self.commands.get(cmd_name)
        target, short = self.table[cmd_name]
        if self._listing and target not in _RESOLVED:
            return TyperCommand(cmd_name, help=short, callback=None)
        if ctx.resilient_parsing and target not in _RESOLVED and cmd_name in self.subtables:
            return CompletionGroup(target, (cmd_name,), short, self.subtables)  # a TAB completion
        if ctx.resilient_parsing and target not in _RESOLVED:  # a TAB completing a value
            made = stand_in(cmd_name, lambda: _mount(target, cmd_name)[cmd_name])
            if made is not None:
                return made
        try:
            return _mount(target, cmd_name)[cmd_name]
        except ModuleNotFoundError as exc:
            fallback = self.fallbacks.get(cmd_name)
            made = fallback(exc) if fallback else None
            if made is None:
                raise
            return made

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        if extra.get("resilient_parsing"):
            extra.setdefault("default_map", _flags_off(self))
        return super().make_context(info_name, args, parent, **extra)

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from tpwarden.cluster.cli.help_text import flags_without_type  # deferred: help only

        flags_without_type(self, ctx)
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[Any]:
        self._listing = True
        try:
            return super().shell_complete(ctx, incomplete)
        finally:
            self._listing = False

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        if not standalone_mode:
            return super().main(argv, prog_name, complete_var, False, **extra)
        from typer.exceptions import Abort  # deferred: kept next to its one use

        try:
            rv = super().main(argv, prog_name, complete_var, False, **extra)
        except click.ClickException as exc:
            from tpwarden.cluster.cli.errors import usage_error  # deferred: on a rejection

            sys.exit(usage_error(exc, argv))
        except Abort:
            print("Aborted.", file=sys.stderr)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


def _flags_off(cmd: click.Command) -> dict[str, bool]:
    """While the shell completes (resilient parsing), an unset flag reads False instead of None:
    typer then skips its coercion, whose first use imports pydantic (~0.1 s per TAB)."""
    flags = [
        p.name
        for p in cmd.params
        if p.name
        and getattr(getattr(p, "type_descriptor", None), "annotation", None) is bool
        and p.default is not True
    ]
    return dict.fromkeys([*flags, "help"], False)


class CompletionGroup(LazyGroup):
    """Stands in for the command group ``path`` while the shell completes: its sub-commands'
    names and short help come from ``subtables`` (`completion_table`), so `tpwarden watchdog
    h<TAB>` imports nothing; a sub-command's own options are completed by the real command,
    imported then. Never built for running a command or for --help (``resilient_parsing`` only).
    """

    def __init__(
        self,
        target: str,
        path: tuple[str, ...],
        short: str,
        subtables: Mapping[str, Mapping[str, str]],
    ) -> None:
        super().__init__(name=path[-1], short_help=short)
        self.target, self.path, self.subtables = target, path, subtables

    def _children(self) -> Mapping[str, str]:
        return self.subtables[" ".join(self.path)]

    def real(self) -> click.Command:
        """The group this stands in for, its module imported."""
        cmd = _mount(self.target, self.path[0])[self.path[0]]
        for name in self.path[1:]:
            assert isinstance(cmd, TyperGroup)
            sub = cmd.get_command(click.Context(cmd), name)
            assert sub is not None
            cmd = sub
        return cmd

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self._children())

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        short = self._children().get(cmd_name)
        path = (*self.path, cmd_name)
        if short is not None and " ".join(path) in self.subtables:
            return CompletionGroup(self.target, path, short, self.subtables)
        if short is not None and self._listing:
            return TyperCommand(cmd_name, short_help=short, callback=None)
        if ctx.resilient_parsing:  # a TAB completing a value
            made = stand_in(" ".join(path), lambda: self._real_command(cmd_name))
            if made is not None:
                return made
        return self._real_command(cmd_name)

    def _real_command(self, cmd_name: str) -> click.Command | None:
        real = self.real()
        assert isinstance(real, TyperGroup)
        return real.get_command(click.Context(real), cmd_name)


def walk(cmd: click.Command, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command and group under ``cmd`` (lazy ones resolved), parents before children."""
    yield path, cmd
    if isinstance(cmd, TyperGroup):
        ctx = click.Context(cmd)
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from walk(sub, (*path, name))
