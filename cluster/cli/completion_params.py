"""Stand-ins for the commands whose values TAB completes (issue 52), so that `tpwarden logs -i
INV <TAB>` or `tpwarden eval run --tasks gsm<TAB>` answers without importing the command's
module (half a second: the settings' pydantic, httpx, Docker, paramiko), within the start-up
budget of a command-name TAB (bench/cli_startup.py).

To find which parameter a TAB completes, click must parse the words typed so far with the
command's own parameters: which options take a value, which are flags, which are arguments.
``PARAMS`` holds that much of each such command, and the completer of each parameter that has one
(`completion_values`); a stand-in built from it parses as the real command does, completes values
with the same completers, and hands option and sub-command names (with their help) to the real
command, imported then. Only the shell's completion (``resilient_parsing``) ever builds one.

`tests/unit/test_cli_completion_values.py` fails, printing the rows to paste here, when a
command's parameters change, and checks that every stand-in completes as its real command does.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import tpwarden.cluster.cli.completion_values as completion_values
from typer import _click as click
from typer._click.shell_completion import CompletionItem
from typer._coercion import TypeDescriptor
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption
from typer.main import get_param_completion
from typer.models import OptionInfo

# (name, kind, declarations, completer): kind is "argument", "option" (takes a value),
# "multiple" (a repeatable option), "flag"; the completer is a function of completion_values
Row = tuple[str, str, tuple[str, ...], str]

# command path -> (is it a group, its parameters in the real command's order)
PARAMS: dict[str, tuple[bool, tuple[Row, ...]]] = {'bench prefill': (False,
                   (('inventory', 'option', ('--inventory', '-i'), ''),
                    ('input_len', 'option', ('--input-len',), ''),
                    ('num_prompts', 'option', ('--num-prompts',), ''),
                    ('output_len', 'option', ('--output-len',), ''),
                    ('client_image', 'option', ('--client-image',), ''),
                    ('runs_dir', 'option', ('--runs-dir',), ''),
                    ('dry_run', 'flag', ('--dry-run',), ''),
                    ('as_json', 'flag', ('--json',), ''),
                    ('client_node', 'option', ('--client-node',), 'nodes'))),
 'bench sweep': (False,
                 (('inventory', 'option', ('--inventory', '-i'), ''),
                  ('concurrency', 'option', ('--concurrency',), ''),
                  ('prompts', 'option', ('--prompts',), ''),
                  ('output_len', 'option', ('--output-len',), ''),
                  ('ignore_eos', 'flag', ('--ignore-eos/--no-ignore-eos',), ''),
                  ('num_prompts', 'option', ('--num-prompts',), ''),
                  ('backend', 'option', ('--backend',), ''),
                  ('temperature', 'option', ('--temperature',), ''),
                  ('client_image', 'option', ('--client-image',), ''),
                  ('runs_dir', 'option', ('--runs-dir',), ''),
                  ('dry_run', 'flag', ('--dry-run',), ''),
                  ('as_json', 'flag', ('--json',), ''),
                  ('client_node', 'option', ('--client-node',), 'nodes'),
                  ('dataset', 'option', ('--dataset',), 'bench_datasets'),
                  ('random_input_len', 'option', ('--random-input-len',), ''),
                  ('chat_template_kwargs', 'option', ('--chat-template-kwargs',), ''))),
 'eval run': (False,
              (('inventory', 'option', ('--inventory', '-i'), ''),
               ('tasks', 'option', ('--tasks',), 'eval_tasks'),
               ('suite', 'option', ('--suite',), 'eval_suites'),
               ('num_fewshot', 'option', ('--num-fewshot',), ''),
               ('limit', 'option', ('--limit',), ''),
               ('include_path', 'option', ('--include-path',), ''),
               ('chat', 'option', ('--chat',), 'local_tasks'),
               ('num_concurrent', 'option', ('--num-concurrent',), ''),
               ('client_image', 'option', ('--client-image',), ''),
               ('resume', 'option', ('--resume',), ''),
               ('runs_dir', 'option', ('--runs-dir',), ''),
               ('dry_run', 'flag', ('--dry-run',), ''),
               ('no_data_check', 'flag', ('--no-data-check',), ''),
               ('chat_template_kwargs', 'option', ('--chat-template-kwargs',), ''),
               ('as_json', 'flag', ('--json',), ''))),
 'logs': (False,
          (('node', 'argument', ('node',), 'nodes'),
           ('inventory', 'option', ('--inventory', '-i'), ''),
           ('follow', 'flag', ('--follow', '-f'), ''),
           ('tail', 'option', ('--tail', '-n'), ''))),
 'rollout': (True,
             (('inventory', 'option', ('--inventory', '-i'), ''),
              ('set_', 'multiple', ('--set',), 'set_keys'),
              ('bench', 'option', ('--bench',), 'bench_presets'),
              ('guard', 'multiple', ('--guard',), ''),
              ('yes', 'flag', ('--yes', '-y'), ''),
              ('dry_run', 'flag', ('--dry-run',), ''),
              ('resume', 'flag', ('--resume',), ''),
              ('abort', 'flag', ('--abort',), ''),
              ('via', 'option', ('--via',), ''),
              ('as_json', 'flag', ('--json',), '')))}  # fmt: skip


class _Raw:
    """A stand-in parameter keeps the text it was given: typer"s coercion would import pydantic,
    and a completer reads only names and paths."""

    def process_value(self, ctx: click.Context, value: object) -> object:
        return value


class _Option(_Raw, TyperOption):
    pass


class _Argument(_Raw, TyperArgument):
    pass


def _param(row: Row) -> click.Parameter:
    name, kind, decls, completer = row
    fn = getattr(completion_values, completer) if completer else None
    completes = get_param_completion(fn) if fn else None
    if kind == "argument":
        return _Argument(
            param_decls=[name, *decls[1:]], required=False, type_descriptor=_TEXT,
            autocompletion=completes,
        )  # fmt: skip
    return _Option(
        param_decls=[name, *decls],
        is_flag=kind == "flag",
        multiple=kind == "multiple",
        type_descriptor=_TEXT,
        autocompletion=completes,
    )


_TEXT = TypeDescriptor(annotation=str, parameter_info=OptionInfo(), file_annotation=None)
Real = Callable[[], click.Command | None]  # the real command, imported on first call


class _Unhelped:
    """`--help` unset reads False, not None: typer's coercion of None imports pydantic."""

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None,
        **extra: object,
    ) -> click.Context:  # fmt: skip
        extra.setdefault("default_map", {"help": False})
        made: click.Context = super().make_context(  # type: ignore[misc]
            info_name, args, parent, **extra
        )
        return made


class StandInCommand(_Unhelped, TyperCommand):
    """A command's parameters from ``PARAMS``; names of its options come from the real one."""

    def __init__(self, name: str, rows: tuple[Row, ...], real: Real) -> None:
        super().__init__(name, params=[_param(r) for r in rows], callback=None)
        self.real = real

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        real = self.real() if incomplete and not incomplete[0].isalnum() else None
        # a command offers names of its options; values come from its parameters
        return real.shell_complete(ctx, incomplete) if real is not None else []


class StandInGroup(_Unhelped, TyperGroup):
    """A group with options of its own (``rollout``): its parameters from ``PARAMS``, its
    sub-commands and names from the real group."""

    def __init__(self, name: str, rows: tuple[Row, ...], real: Real) -> None:
        super().__init__(name=name, params=[_param(r) for r in rows], callback=None)
        self.real = real

    def _group(self) -> TyperGroup:
        group = self.real()
        assert isinstance(group, TyperGroup)
        return group

    def list_commands(self, ctx: click.Context) -> list[str]:
        return self._group().list_commands(ctx)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self._group().get_command(ctx, cmd_name)

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        return self._group().shell_complete(ctx, incomplete)


def stand_in(path: str, real: Real) -> click.Command | None:
    """The stand-in of the command at ``path`` ("eval run"), or None when it has none."""
    entry = PARAMS.get(path)
    if entry is None:
        return None
    is_group, rows = entry
    name = path.rsplit(" ", 1)[-1]
    return StandInGroup(name, rows, real) if is_group else StandInCommand(name, rows, real)


def rows_of(cmd: click.Command) -> tuple[bool, tuple[Row, ...]]:
    """What ``PARAMS`` holds for a real command (the test compares, and prints it to paste)."""
    rows = []
    for p in cmd.params:
        assert p.name is not None and p.nargs == 1 and not getattr(p, "count", False), p
        decls: tuple[str, ...]
        if isinstance(p, TyperArgument):
            kind, decls = "argument", (p.name,)
        else:
            kind = "flag" if getattr(p, "is_flag", False) else "option"
            kind = "multiple" if getattr(p, "multiple", False) else kind
            second = "/".join(p.secondary_opts)
            decls = (*p.opts[:1], *p.opts[1:]) if not second else (f"{p.opts[0]}/{second}",)
        rows.append((p.name, kind, decls, _completer_name(p)))
    return isinstance(cmd, TyperGroup), tuple(rows)


def _completer_name(p: click.Parameter) -> str:
    """The completion_values function typer wrapped as ``p``'s completion, or ""."""
    fn = getattr(p, "_custom_shell_complete", None)
    for cell in getattr(fn, "__closure__", None) or ():
        inner = inspect.unwrap(cell.cell_contents) if callable(cell.cell_contents) else None
        if getattr(inner, "__module__", None) == completion_values.__name__:
            return str(inner.__name__)  # type: ignore[union-attr]
    return ""
