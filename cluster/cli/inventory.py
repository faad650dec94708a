"""`tpwarden inventory check` and `tpwarden plan`: read the inventory, contact nothing."""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from tpwarden.cluster.cli.common import console, emit_json, handle_errors, load
from tpwarden.cluster.cli.options import DEFAULT_INVENTORY, InventoryOption, JsonOption
from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.cluster.errors import TpwardenError
from tpwarden.cluster.spec import ClusterSpec

app = typer.Typer(help="Validate inventories.", no_args_is_help=True)
commands = typer.Typer()  # `plan`, merged into the main app


@app.command("check")
@handle_errors
def inventory_check(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    as_json: JsonOption = False,
    with_nodes: bool = typer.Option(
        False,
        "--nodes",
        help="Also ask every node (over SSH) for its RDMA HCAs: ports, state, rate, RoCE GIDs, "
        "judged as pre-flight judges them (exit 1 on a problem).",
    ),
) -> None:
    """Validate an inventory; exit 2 with file:line, key and a fix if it is wrong.

    Example: tpwarden inventory check -i inventory.example.yml
    """
    spec = load(inventory, flag_table=True)
    fabric = _node_fabric(spec) if with_nodes else None
    bad = fabric is not None and any(not f.get("ok") for f in fabric.values())
    if as_json:
        doc: JSONObject = {"cluster": spec.name, "nodes": [n.name for n in spec.nodes]}
        if fabric is not None:
            doc["fabric"] = dict(fabric)
        if bad and fabric is not None:
            failing = sorted(n for n, f in fabric.items() if not f.get("ok"))
            doc["error"] = {
                "kind": "failed",
                "message": f"RDMA fabric problems on {', '.join(failing)}",
                "hint": "see fabric.<node>.problems (the cause of each)",
                "exit_code": 1,
            }
        emit_json("inventory check", {"ok": not bad, **doc, "config_hash": spec.config_hash()})
        raise typer.Exit(1 if bad else 0)
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
    if fabric is not None:
        _print_fabric(fabric)
        raise typer.Exit(1 if bad else 0)


def _node_fabric(spec: ClusterSpec) -> dict[str, JSONObject]:
    """Each node's HCAs as pre-flight judges them (one collector run per node, in parallel)."""
    # deferred: `inventory check` alone contacts nothing and must start fast
    from tpwarden.cluster.control.nodes import NodeConnector
    from tpwarden.cluster.control.preflight import node_fabric

    connector = NodeConnector(spec.ssh)
    try:
        found = node_fabric(spec, connector, timeout_s=60.0)
    finally:
        connector.close()
    out: dict[str, JSONObject] = {}
    for name, r in found.items():
        if isinstance(r, TpwardenError):
            out[name] = {"ok": False, "error": str(r)}
        else:
            out[name] = {"ok": not r.problems, **r.to_json()}
    return out


def _objects(value: JSONValue) -> list[JSONObject]:
    """The JSON objects of a list (nothing for anything else)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _texts(value: JSONValue) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _print_fabric(fabric: dict[str, JSONObject]) -> None:
    table = Table(title="RDMA HCAs per node", title_justify="left")
    for column in ("node", "HCA", "port", "state", "rate", "RoCE v2 GID", "netdev"):
        table.add_column(column, overflow="fold")
    for node, f in fabric.items():
        for hca in _objects(f.get("hcas")):
            for port in _objects(hca.get("ports")):
                v2 = [
                    g
                    for g in _objects(port.get("gids"))
                    if g.get("type") == "RoCE v2" and g.get("ipv4")
                ]
                gid = ", ".join(f"{g.get('index')}: {g.get('ipv4')}" for g in v2) or "-"
                rate = port.get("rate_gbps")
                rate_text = f"{rate:g} Gb/s" if isinstance(rate, int | float) and rate else "-"
                table.add_row(
                    Text(node), Text(str(hca.get("name"))), str(port.get("port")),
                    Text(str(port.get("state"))), rate_text, Text(gid),
                    Text(", ".join(_texts(hca.get("netdevs"))) or "-"),
                )  # fmt: skip
    console.print(table)
    for node, f in fabric.items():
        line = f.get("summary") or f.get("error") or ""
        console.print(Text(f"{node}: {line}"), highlight=False)
        for text in [*_texts(f.get("problems")), *_texts(f.get("notices"))]:
            console.print(Text(f"  {text}"), highlight=False)


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
