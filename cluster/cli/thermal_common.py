"""What `tpwarden thermal`'s command modules share: the Typer group and small renderers.

Its own module so that ``thermal_report`` and ``thermal_zones`` need not import ``thermal``,
which imports them to register their commands (no import cycle).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import typer
from rich.console import Console
from rich.text import Text
from tpwarden.cluster.cli.common import error_line
from tpwarden.cluster.errors import ConfigError

app = typer.Typer(help="GPU and ACPI thermal logging: agent, report.", no_args_is_help=True)


def fmt_temp(v: float | None, unit: str = " C") -> str:
    return "-" if v is None else f"{v:.1f}{unit}"


def print_unreachable(console: Console, unreachable: dict[str, str]) -> None:
    for node, reason in sorted(unreachable.items()):
        line = f"{node}: not read ({reason}); its samples are missing here"
        console.print(Text(line, style="red"))


T = TypeVar("T")


def load_or_exit(inventory: Path, load: Callable[[Path], T]) -> T:
    try:
        return load(inventory)
    except ConfigError as exc:
        Console(stderr=True).print(error_line(exc.render()), highlight=False)
        raise typer.Exit(2) from None
