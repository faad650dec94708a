"""`tpwarden`: the command line. A thin layer: it parses arguments, calls the library and renders.

Examples:
    tpwarden inventory check -i inventory.example.yml
    tpwarden plan -i inventory.example.yml --json
"""

from __future__ import annotations

import importlib
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from tpwarden.cluster import __version__
from tpwarden.cluster.cli.common import (
    DEFAULT_INVENTORY,
    InventoryOption,
    JsonOption,
    console,
    emit_json,
    handle_errors,
    load,
)
from tpwarden.cluster.launch import plan_cluster

app = typer.Typer(
    name="tpwarden",
    help="Bring up, watch and measure a multi-node vLLM server from one Ansible inventory.",
    no_args_is_help=True,
    rich_markup_mode="rich",
)
inventory_app = typer.Typer(help="Validate inventories.", no_args_is_help=True)
app.add_typer(inventory_app, name="inventory")


def _version(value: bool) -> None:
    if value:
        console.print(f"tpwarden {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    """tpwarden: one inventory, a tensor-parallel vLLM server on N nodes, kept alive and measured."""


@inventory_app.command("check")
@handle_errors
def inventory_check(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    as_json: JsonOption = False,
) -> None:
    """Validate an inventory; exit 2 with file:line, key and a fix if it is wrong.

    Example: tpwarden inventory check -i inventory.example.yml
    """
    spec = load(inventory, flag_table=True)
    if as_json:
        doc = {"cluster": spec.name, "nodes": [n.name for n in spec.nodes]}
        emit_json("inventory check", {"ok": True, **doc, "config_hash": spec.config_hash()})
        return
    console.print(
        Text.assemble(
            ("ok", "green"),
            f" {inventory}: cluster ",
            (spec.name, "bold"),
            f", head {spec.head.name}, workers "
            f"{', '.join(n.name for n in spec.workers) or '-'}, config {spec.config_hash()}",
        ),
        highlight=False,
    )


@app.command("plan")
@handle_errors
def plan(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    as_json: JsonOption = False,
) -> None:
    """Show what would run on every node: container, image, full vLLM argv, env (secrets redacted).

    Example: tpwarden plan -i inventory.example.yml --json
    """
    spec = load(inventory, flag_table=True)
    cluster_plan = plan_cluster(spec)
    if as_json:
        emit_json("plan", cluster_plan.to_json())
        return
    table = Table(
        title=f"cluster {escape(cluster_plan.cluster)} · config {cluster_plan.config_hash} · "
        f"backend {cluster_plan.backend}",
        show_lines=True,
    )
    for column in ("node", "role/rank", "container", "command"):
        table.add_column(column, overflow="fold")
    for c in cluster_plan.containers:
        cmd = " ".join(c.command)
        if c.exec_after_start:
            cmd += "\nthen exec: " + " ".join(c.exec_after_start)
        # every cell is user text (argv, image, names): Text, never markup ("[conceal]" in a
        # model path must print, not hide the rest of the command line)
        table.add_row(
            Text(c.node), Text(f"{c.role}/{c.rank}"), Text(f"{c.name}\n{c.image}"), Text(cmd)
        )
    console.print(table)
    first = cluster_plan.containers[0].to_json()
    console.print(
        Text("env (head): " + ", ".join(f"{k}={v}" for k, v in first["env"].items())),
        highlight=False,
    )
    for warning in cluster_plan.warnings:
        console.print(Text.assemble(("warning:", "yellow"), " ", warning))


def _mount_lab_not_installed() -> None:
    """`tpwarden lab ...` where the lab is absent: it is a development tool, in the source tree
    (`cluster/lab/`, an editable install sees it) and not in the wheel the nodes and operators get."""

    @app.command(
        "lab",
        help="The 4-node lab (not installed: it ships with a source checkout).",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )
    def _lab(ctx: typer.Context) -> None:
        typer.echo(
            "error: the lab is not installed: it is a development tool in tpwarden's source tree "
            "(cluster/lab/), not in the wheel; clone the repository and run scripts/setup.sh, or "
            "`pip install -e .` from a checkout",
            err=True,
        )
        raise typer.Exit(2)


def _mount_optional() -> None:
    """Sub-command groups live in their own modules."""
    for module, name in (
        ("tpwarden.cluster.cli.lab", "lab"),
        ("tpwarden.cluster.cli.watchdog", "watchdog"),
        ("tpwarden.cluster.cli.thermal", "thermal"),
        ("tpwarden.cluster.cli.bench", "bench"),
        ("tpwarden.cluster.cli.decide", "decide"),
        ("tpwarden.cluster.cli.eval", "eval"),
        ("tpwarden.cluster.cli.prometheus", "prometheus"),
        ("tpwarden.cluster.cli.flags", "flags"),
    ):
        try:
            sub = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if name == "lab" and exc.name == "tpwarden.cluster.lab":
                _mount_lab_not_installed()
                continue
            if exc.name != module:
                raise
            continue
        app.add_typer(sub.app, name=name)
    try:
        control = importlib.import_module("tpwarden.cluster.cli.control")
    except ModuleNotFoundError as exc:
        if exc.name != "tpwarden.cluster.cli.control":
            raise
    else:
        control.register(app)
    importlib.import_module("tpwarden.cluster.cli.provision").register(app)
    # deferred: mounted with the other sub-command groups above, once `app` exists
    from tpwarden.cluster.cli import rollout
    from tpwarden.cluster.cli.examples import add_examples

    rollout.register(app)
    importlib.import_module("tpwarden.cluster.cli.report").register(app)
    add_examples(app)


_mount_optional()
