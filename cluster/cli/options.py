"""The options every command shares: the inventory and `--json`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import tpwarden.cluster.cli.completion_values as completion_values
import typer

# env TPWARDEN_INVENTORY; defined in the light completion module, which TAB imports alone
DEFAULT_INVENTORY = completion_values.DEFAULT_INVENTORY

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
