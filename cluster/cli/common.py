"""Shared CLI plumbing: the inventory option, error rendering and exit codes.

Exit codes: 0 all well, 1 an operation failed or the cluster is unhealthy, 2 bad input
(inventory or arguments; nothing was run).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.text import Text
from servectl.cluster.errors import ConfigError, ServectlError

console = Console()
err_console = Console(stderr=True)

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_INVENTORY = os.environ.get("SERVECTL_INVENTORY", "inventory.yml")

InventoryOption = Annotated[
    Path,
    typer.Option(
        "--inventory",
        "-i",
        help="Ansible inventory file (env SERVECTL_INVENTORY).",
        show_default=True,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


def handle_errors(func: F) -> F:
    """Turn servectl errors into one red line and the right exit code, never a traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ConfigError as exc:
            err_console.print(_error_line(exc.render()), highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        except ServectlError as exc:
            err_console.print(_error_line(str(exc)), highlight=False, soft_wrap=True)
            raise typer.Exit(exc.exit_code) from None

    return wrapper  # type: ignore[return-value]


def _error_line(message: str) -> Text:
    """Messages quote user text (paths, keys, values): never let rich read it as markup."""
    return Text.assemble(("error:", "bold red"), " ", message)


def load(inventory: Path):  # -> ClusterSpec
    from servectl.cluster.inventory import load_inventory

    return load_inventory(inventory)
