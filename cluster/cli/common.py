"""Shared CLI plumbing: the inventory option, error rendering and exit codes.

Exit codes: 0 all well, 1 an operation failed or the cluster is unhealthy, 2 bad input
(inventory or arguments; nothing was run). No other code leaves the CLI: a library error with
another code is reported as 1.

JSON: every command that acts or reports takes ``--json`` and prints one JSON document whose
``schema_version`` is SCHEMA_VERSION (bumped when a field changes meaning or goes away; new
fields may appear without a bump).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.text import Text
from tpwarden.cluster.errors import ConfigError, TpwardenError
from tpwarden.cluster.inventory import load_inventory

console = Console()
err_console = Console(stderr=True)

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_INVENTORY = Path(os.environ.get("TPWARDEN_INVENTORY", "inventory.yml"))

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


def emit_json(command: str, doc: dict[str, Any]) -> None:
    """Print one JSON document for ``command`` with the schema version first."""
    print(json.dumps({"schema_version": SCHEMA_VERSION, "command": command, **doc}, default=str))


def exit_code(code: int) -> int:
    """Only 0, 1 and 2 leave the CLI (README); anything else is "an operation failed"."""
    return code if code in (EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT) else EXIT_FAILED


def handle_errors(func: F) -> F:
    """Turn tpwarden errors into one red line and the right exit code, never a traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ConfigError as exc:
            err_console.print(error_line(exc.render()), highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        except TpwardenError as exc:
            err_console.print(error_line(str(exc)), highlight=False, soft_wrap=True)
            raise typer.Exit(exit_code(exc.exit_code)) from None

    return wrapper  # type: ignore[return-value]


def error_line(message: str) -> Text:
    """Messages quote user text (paths, keys, values): never let rich read it as markup."""
    return Text.assemble(("error:", "bold red"), " ", message)


def load(inventory: Path, *, flag_table: bool = False):  # -> ClusterSpec
    """`flag_table`: also refuse an inventory no `vllm serve` flag table fits (check, plan)."""
    return load_inventory(inventory, flag_table=flag_table)
