"""Shared CLI plumbing: the inventory option, error rendering and exit codes.

Exit codes: 0 all well, 1 an operation failed or the cluster is unhealthy, 2 bad input
(inventory or arguments; nothing was run). No other code leaves the CLI: a library error with
another code is reported as 1.

JSON: every command that acts or reports takes ``--json`` and prints exactly one JSON document on
stdout, success or failure, built here and only here (`emit_json`, `emit_failure`): the envelope
``schema_version``, ``command``, ``ok``, ``dry_run``, then the command's fields; on failure also
``error: {kind, message, hint, exit_code}``. ``schema_version`` is SCHEMA_VERSION (bumped when a
field changes meaning or goes away; new fields may appear without a bump). The JSON Schema of the
envelope ships as package data: ``tpwarden/cluster/data/cli-envelope.schema.json``.

Text: user, log and inventory text is never rich markup: print it through `Text` or `plain`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import tpwarden.cluster.cli.completion_values as completion_values
import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text
from tpwarden.cluster.errors import ConfigError, TpwardenError

console = Console()
err_console = Console(stderr=True)

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_INVENTORY = completion_values.DEFAULT_INVENTORY  # env TPWARDEN_INVENTORY

InventoryOption = Annotated[
    Path,
    typer.Option(
        "--inventory",
        "-i",
        help="Ansible inventory file (env TPWARDEN_INVENTORY).",
        show_default=True,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


SCHEMA_VERSION = 1
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def envelope(command: str, doc: dict[str, Any], version: int = SCHEMA_VERSION) -> dict[str, Any]:
    """The one JSON envelope: schema_version, command, ok, dry_run, then ``doc``'s fields
    (``ok`` defaults to true and ``dry_run`` to false when ``doc`` does not say)."""
    head = {
        "schema_version": version,
        "command": command,
        "ok": bool(doc.get("ok", True)),
        "dry_run": bool(doc.get("dry_run", False)),
    }
    return {**head, **{k: v for k, v in doc.items() if k not in head}}


def emit_json(
    command: str, doc: dict[str, Any], version: int = SCHEMA_VERSION, indent: int | None = None
) -> None:
    """Print the one JSON document of ``command`` (see the module docstring)."""
    print(json.dumps(envelope(command, doc, version), default=str, indent=indent))


def emit_failure(command: str, kind: str, message: str, hint: str, code: int) -> None:
    """The failure document: the envelope with ``ok`` false and ``error``."""
    error = {"kind": kind, "message": message, "hint": hint, "exit_code": code}
    emit_json(command, {"ok": False, "error": error})


def positive(value: float | None) -> float | None:
    """An option callback: the value must be greater than 0 (typer's `min` is inclusive)."""
    if value is not None and value <= 0:
        raise typer.BadParameter(f"{value:g} is not greater than 0")
    return value


def plain(text: object) -> str:
    """User, log or inventory text made safe to embed in rich markup (the one escaping helper:
    "[/etc/ssh]" or "[rank1]" print as written, never as a style or a MarkupError)."""
    return escape(str(text))


def _current_command() -> str:
    """The running command's path without the program name ("watchdog hold")."""
    from typer._click.globals import get_current_context  # deferred: only on a failure

    ctx = get_current_context(silent=True)
    return " ".join(ctx.command_path.split()[1:]) if ctx is not None else "tpwarden"


def exit_code(code: int) -> int:
    """Only 0, 1 and 2 leave the CLI (README); anything else is "an operation failed"."""
    return code if code in (EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT) else EXIT_FAILED


def handle_errors(func: F) -> F:
    """Turn tpwarden errors, and OSErrors on user-named paths, into one red line and the right
    exit code, never a traceback; with ``--json`` (an ``as_json`` argument) also the failure
    envelope on stdout."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ConfigError as exc:
            fail("config", exc.render(), exc.hint or "", EXIT_BAD_INPUT, kwargs)
        except TpwardenError as exc:
            code = exit_code(exc.exit_code)
            fail("input" if code == 2 else "failed", str(exc), "", code, kwargs)
        except OSError as exc:
            where = f"{exc.filename}: " if exc.filename else ""
            fail("io", f"{where}{exc.strerror or exc}", "", EXIT_FAILED, kwargs)

    return wrapper  # type: ignore[return-value]


def fail(kind: str, message: str, hint: str, code: int, kwargs: dict[str, Any]) -> None:
    """Report a failure (the error line, and the JSON envelope when --json) and exit ``code``."""
    err_console.print(error_line(message), highlight=False, soft_wrap=True)
    if kwargs.get("as_json"):
        emit_failure(_current_command(), kind, message, hint, code)
    raise typer.Exit(code) from None


def error_line(message: str) -> Text:
    """Messages quote user text (paths, keys, values): never let rich read it as markup."""
    return Text.assemble(("error:", "bold red"), " ", message)


def load(inventory: Path, *, flag_table: bool = False):  # -> ClusterSpec
    """`flag_table`: also refuse an inventory no `vllm serve` flag table fits (check, plan)."""
    from tpwarden.cluster.inventory.load import load_inventory  # not for --help or TAB (issue 30)

    return load_inventory(inventory, flag_table=flag_table)
