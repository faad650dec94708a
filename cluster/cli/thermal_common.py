"""What `tpwarden thermal`'s command modules share: small renderers.

Its own module so that ``thermal_report`` and ``thermal_zones`` need not import ``thermal``,
which mounts their commands (no import cycle).
"""

from __future__ import annotations

from rich.console import Console
from rich.text import Text


def fmt_temp(v: float | None, unit: str = " C") -> str:
    return "-" if v is None else f"{v:.1f}{unit}"


def print_unreachable(console: Console, unreachable: dict[str, str]) -> None:
    for node, reason in sorted(unreachable.items()):
        line = f"{node}: not read ({reason}); its samples are missing here"
        console.print(Text(line, style="red"))
