"""One example per command, appended to its --help (kept in one place so none is forgotten;
tests/unit/test_cli_help.py fails when a command has none)."""

from __future__ import annotations

import inspect

import typer

INV = "-i inventory.yml"
EXAMPLES: dict[str, str] = {
    "up": f"tpwarden up {INV}            (then: tpwarden status {INV})",
    "down": f"tpwarden down {INV} --dry-run",
    "restart": f'tpwarden restart {INV} --reason "engine hung" --yes',
    "status": f"tpwarden status {INV} --json | jq .verdict",
    "logs": f"tpwarden logs node1 {INV} --tail 50 --follow",
    "boot": f"tpwarden boot {INV}     (a saved log: tpwarden boot --from-file head.log --json)",
    "lab up": "tpwarden lab up && tpwarden up -i /var/lib/tpwarden-lab/inventory.yml",
    "lab down": "tpwarden lab down",
    "lab status": "tpwarden lab status --json",
    "lab inventory": "tpwarden lab inventory -o lab.yml",
    "lab fault cut": "tpwarden lab fault cut node3",
    "lab fault restore": "tpwarden lab fault restore node3",
    "lab fault heat": "tpwarden lab fault heat node2 --gpu --temp 92 --for 600",
    "lab fault fill-logs": "tpwarden lab fault fill-logs node2",
    "lab fault free-logs": "tpwarden lab fault free-logs node2",
    "lab fault pause": "tpwarden lab fault pause node3",
    "lab fault unpause": "tpwarden lab fault unpause node3",
    "lab fault kill": "tpwarden lab fault kill node1",
    "lab fault cool": "tpwarden lab fault cool node2",
    "lab fault clear": "tpwarden lab fault clear",
    "watchdog run": f"tpwarden watchdog run {INV}     (as provisioned on the head: "
    "tpwarden watchdog run --applied /var/lib/tpwarden/watchdog/applied.json "
    "--state-dir /var/lib/tpwarden/watchdog --ssh-key /etc/tpwarden/watchdog/id_ed25519 "
    "--known-hosts /etc/tpwarden/watchdog/known_hosts)",
    "watchdog status": f"tpwarden watchdog status {INV} --json",
    "watchdog hold": f'tpwarden watchdog hold {INV} --for 30m --reason "driver update"',
    "watchdog release": f"tpwarden watchdog release {INV}",
    "watchdog history": f"tpwarden watchdog history {INV} --limit 20",
    "thermal agent": "tpwarden thermal agent --node node1 --dir /var/log/tpwarden/thermal",
    "thermal report": f"tpwarden thermal report {INV} --since 2026-12-01T22:00 --plot night.png",
    "thermal start": f"tpwarden thermal start {INV}",
    "prometheus config": f"tpwarden prometheus config {INV} -o /etc/prometheus/tpwarden.yml "
    "&& promtool check config /etc/prometheus/tpwarden.yml",
    "thermal stop": f"tpwarden thermal stop {INV}",
    "thermal status": f"tpwarden thermal status {INV} --json",
    "thermal watch": f"tpwarden thermal watch {INV}",
    "bench sweep": f"tpwarden bench sweep {INV} --concurrency 1,4,8,16,32",
    "bench prefill": f"tpwarden bench prefill {INV} --input-len 32k,128k",
    "bench compare": "tpwarden bench compare runs/20261201-k7-sweep runs/20261202-k3-sweep",
    "clocks show": f"tpwarden clocks show {INV}",
    "clocks cap": f"tpwarden clocks cap 2000 {INV}",
    "clocks reset": f"tpwarden clocks reset {INV}",
    "rollout history": f"tpwarden rollout history {INV} --json",
    "report": f"tpwarden report {INV} --since 22:00 --until 07:30 --tz Asia/Seoul --html night.html",
    "thermal zones": f"tpwarden thermal zones {INV} --minutes 10",
}


def add_examples(app: typer.Typer, prefix: str = "") -> None:
    """Append `Example:` to every command of `app` (recursively) that lacks one."""
    for info in app.registered_commands:
        name = info.name or (info.callback.__name__.replace("_", "-") if info.callback else "")
        path = f"{prefix}{name}"
        text = info.help or inspect.getdoc(info.callback) or ""
        if "Example" not in text and path in EXAMPLES:
            info.help = f"{text}\n\nExample: {EXAMPLES[path]}"
    for group in app.registered_groups:
        if group.typer_instance is not None:
            add_examples(group.typer_instance, f"{prefix}{group.name} ")
