"""`tpwarden inventory check` and `tpwarden plan`: read the inventory, contact nothing."""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from tpwarden.cluster.cli.common import console, emit_json, handle_errors, load
from tpwarden.cluster.cli.options import DEFAULT_INVENTORY, InventoryOption, JsonOption

app = typer.Typer(help="Validate inventories.", no_args_is_help=True)
commands = typer.Typer()  # `plan`, merged into the main app


@app.command("check")
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


@commands.command("plan")
@handle_errors
def plan(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    as_json: JsonOption = False,
) -> None:
    """Show what would run on every node: container, image, full vLLM argv, env (secrets redacted).

    Example: tpwarden plan -i inventory.example.yml --json
    """
    from tpwarden.cluster.launch import plan_cluster  # deferred: not for `inventory check`

    spec = load(inventory, flag_table=True)
    cluster_plan = plan_cluster(spec)
    if as_json:
        emit_json("plan", {"ok": True, **cluster_plan.to_json()})
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
    for line in cluster_plan.containers[0].options_lines():
        console.print(Text(line), highlight=False)
    for c in cluster_plan.containers:
        for f in c.secret_files:
            console.print(
                Text(
                    f"{c.node}: {f.what} written to {f.path} (0600) at apply, read by vLLM at start"
                ),
                highlight=False,
            )
    for warning in cluster_plan.warnings:
        console.print(Text.assemble(("warning:", "yellow"), " ", warning))
