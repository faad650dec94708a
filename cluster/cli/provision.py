"""`tpwarden provision`: prepare the nodes and install the agents, through ansible-runner.

Its ``commands`` (the one, ``provision``) are merged into the main app. This layer parses options, shows per-host progress and the
summary table, and sets the exit code (0 ok, 1 a task failed or a host was unreachable, 2 bad
input); the work is in ``tpwarden.cluster.provision.gateway``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.live import Live
from rich.table import Table
from rich.text import Text
from tpwarden.cluster.cli.common import console, emit_json, err_console, handle_errors, load, plain
from tpwarden.cluster.cli.inputs import READABLE_FILE
from tpwarden.cluster.cli.options import DEFAULT_INVENTORY, InventoryOption, JsonOption
from tpwarden.cluster.operations.flags import after_provision
from tpwarden.cluster.provision import gateway as prov
from tpwarden.cluster.spec import ClusterSpec

log = logging.getLogger("tpwarden.provision")
commands = typer.Typer()

_STYLE = {"ok": "green", "changed": "yellow", "failed": "bold red", "unreachable": "bold red"}


class _Progress:
    """Per-host counters and the task each host is on, redrawn as events arrive."""

    def __init__(self, hosts: list[str]) -> None:
        self.rows: dict[str, dict[str, Any]] = {
            h: {"ok": 0, "changed": 0, "failed": 0, "unreachable": 0, "task": ""} for h in hosts
        }

    def update(self, event: prov.TaskEvent) -> None:
        row = self.rows.setdefault(
            event.host, {"ok": 0, "changed": 0, "failed": 0, "unreachable": 0, "task": ""}
        )
        if event.status in row:
            row[event.status] += 1
        row["task"] = event.task

    def table(self) -> Table:
        t = Table(box=None, pad_edge=False)
        for col in ("host", "ok", "changed", "failed", "unreachable", "last task"):
            t.add_column(col)
        for host, r in sorted(self.rows.items()):
            t.add_row(
                host, str(r["ok"]), f"[yellow]{r['changed']}[/]" if r["changed"] else "0",
                f"[red]{r['failed']}[/]" if r["failed"] else "0",
                f"[red]{r['unreachable']}[/]" if r["unreachable"] else "0", r["task"],
            )  # fmt: skip
        return t


def _summary(result: prov.ProvisionResult) -> Table:
    mode = " --check" if result.check else ""
    t = Table(title=f"{result.playbook}{mode}: {result.status} · run {result.ident}")
    for col in ("host", "ok", "changed", "failed", "unreachable", "skipped"):
        t.add_column(col, justify="left" if col == "host" else "right")
    for h in result.hosts:
        style = None if h.good else "red"
        t.add_row(
            h.host, str(h.ok), str(h.changed), str(h.failed), str(h.unreachable), str(h.skipped),
            style=style,
        )  # fmt: skip
    return t


@commands.command("provision")
@handle_errors
def provision(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    check: Annotated[
        bool, typer.Option("--check", help="Dry run: report what would change, change nothing.")
    ] = False,
    tags: Annotated[
        str | None,
        typer.Option(
            "--tags", help="Only these parts: prereqs,image,model,tpwarden,secrets,units."
        ),
    ] = None,
    remove: Annotated[
        bool, typer.Option("--remove", help="Remove everything provisioning installed.")
    ] = False,
    extra_vars: Annotated[
        list[Path] | None,
        typer.Option("--extra-vars", "-e", help="YAML/JSON file of variables (repeatable)."),
    ] = None,
    vault_password_file: Annotated[
        Path | None,
        typer.Option("--vault-password-file", **READABLE_FILE, help="Ansible Vault password file."),
    ] = None,
    verify_model: Annotated[
        str | None,
        typer.Option(
            "--verify-model",
            metavar="auto|sha256|size",
            help="How each node's model is checked against the manifest: auto (default: full "
            "sha256 the first time on a node, then size+mtime), sha256 (reread every byte, "
            "~the model's size per node), size.",
        ),
    ] = None,
    source: Annotated[
        Path | None,
        typer.Option(
            "--source",
            help="tpwarden source tree for the node wheel (default: this checkout; installed "
            "without one: the installed package, repacked).",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Prepare the nodes (Docker, GPU, image, model) and install tpwarden, the thermal agent,
    the watchdog and the clock cap as systemd units, through ansible-runner.

    Examples:
        tpwarden provision -i inventory.yml
        tpwarden provision -i inventory.yml --check
        tpwarden provision -i inventory.yml --tags units
        tpwarden provision -i inventory.yml --tags model --verify-model sha256
        tpwarden provision -i inventory.yml --remove
    """
    spec = load(inventory)  # validated once: a bad inventory exits 2 before anything runs
    request = prov.ProvisionRequest(
        inventory=inventory,
        check=check,
        tags=prov.parse_tags(tags),
        remove=remove,
        source_dir=source or prov.SOURCE_DIR,
        extra_vars_files=tuple(extra_vars or ()),
        vault_password_file=vault_password_file,
        model_verify=verify_model,
    )
    prov.prepare(request)  # bad paths or tags: exit 2 before a private dir is made
    progress = _Progress([n.name for n in spec.nodes])
    if as_json:
        result = prov.run(request)
    else:
        with Live(progress.table(), console=console, refresh_per_second=4, transient=True) as live:

            def on_event(event: prov.TaskEvent) -> None:
                progress.update(event)
                if event.status in ("failed", "unreachable"):
                    live.console.print(
                        f"[{_STYLE[event.status]}]{event.status}[/] {event.host}: {event.task}: "
                        f"{event.message}", highlight=False, soft_wrap=True,
                    )  # fmt: skip
                live.update(progress.table())

            result = prov.run(request, on_event)
    log.info("provision run %s: artifacts %s", result.ident, result.artifact_dir)
    # the image is on the head now: read its own flag table (plan checks argv against it)
    fetch = result.ok and not (check or remove) and (not request.tags or "image" in request.tags)
    flags = flag_table(spec, quiet=as_json) if fetch else None
    if as_json:
        emit_json(
            "provision", {"dry_run": check, **result.to_json(), "flag_table": flags}, indent=2
        )
    else:
        console.print(_summary(result))
        for m in result.model_checks:  # the model check's choice and its cost, per node
            console.print(plain(f"model {m.host}: {m.message}"), highlight=False, soft_wrap=True)
        if check and result.ok:
            console.print(
                "nothing to change"
                if result.changed == 0
                else f"{result.changed} change(s) pending"
            )
        console.print(
            plain(f"artifacts: {result.artifact_dir} (run {result.ident})"), highlight=False
        )
    if not result.ok:
        if not as_json:
            err_console.print(f"[bold red]provisioning failed[/] (run {result.ident})")
        raise typer.Exit(1)
    if flags is not None and not flags["ok"]:
        raise typer.Exit(1)  # no flag table for this vLLM: plan could check nothing


def flag_table(spec: ClusterSpec, quiet: bool) -> dict[str, Any]:
    """Read the image's flag table on the head, saying so unless ``quiet`` (--json)."""
    if not quiet:
        where = f"{spec.serving.image} on {spec.head.name}"
        console.print(Text(f"flag table: reading vLLM's parser in {where} ..."))
    got = after_provision(spec)
    if not quiet and got.result is None:
        level = ("warning:", "yellow") if got.fallback else ("error:", "bold red")
        tail = f"; plan uses the shipped {spec.serving.vllm_version} table" if got.fallback else ""
        err_console.print(Text.assemble(level, f" flag table: {got.error}{tail}"), highlight=False)
    elif not quiet and got.result is not None:
        result = got.result
        line = f"flag table: vLLM {result.vllm_version} from {result.image} -> {result.path}"
        console.print(Text(line + (f" ({result.mismatch})" if result.mismatch else "")))
    return got.to_json()
