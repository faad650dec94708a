"""The options every command shares: the inventory and `--json`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

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
