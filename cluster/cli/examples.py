"""One example per command, appended to its --help (kept in one place so none is forgotten;
tests/unit/test_cli_help.py fails when a command has none)."""

from __future__ import annotations

import inspect

import typer

INV = "-i inventory.yml"
EXAMPLES: dict[str, str] = {
    "up": f"servectl up {INV}            (then: servectl status {INV})",
    "down": f"servectl down {INV} --dry-run",
    "restart": f'servectl restart {INV} --reason "engine hung" --yes',
    "status": f"servectl status {INV} --json | jq .verdict",
    "logs": f"servectl logs node1 {INV} --tail 50 --follow",
    "boot": f"servectl boot {INV}     (a saved log: servectl boot --from-file head.log --json)",
    "lab up": "servectl lab up && servectl up -i /var/lib/servectl-lab/inventory.yml",
    "lab down": "servectl lab down",
    "lab status": "servectl lab status --json",
    "lab inventory": "servectl lab inventory -o lab.yml",
    "lab fault cut": "servectl lab fault cut node3",
    "lab fault restore": "servectl lab fault restore node3",
    "lab fault heat": "servectl lab fault heat node2 --gpu --temp 92 --for 600",
    "lab fault fill-logs": "servectl lab fault fill-logs node2",
    "lab fault free-logs": "servectl lab fault free-logs node2",
    "lab fault pause": "servectl lab fault pause node3",
    "lab fault unpause": "servectl lab fault unpause node3",
    "lab fault kill": "servectl lab fault kill node1",
    "lab fault cool": "servectl lab fault cool node2",
    "lab fault clear": "servectl lab fault clear",
    "watchdog run": f"servectl watchdog run {INV}     (as provisioned on the head: "
    "servectl watchdog run --applied /var/lib/servectl/watchdog/applied.json "
    "--state-dir /var/lib/servectl/watchdog --ssh-key /etc/servectl/watchdog/id_ed25519 "
    "--known-hosts /etc/servectl/watchdog/known_hosts)",
    "watchdog status": f"servectl watchdog status {INV} --json",
    "watchdog hold": f'servectl watchdog hold {INV} --for 30m --reason "driver update"',
    "watchdog release": f"servectl watchdog release {INV}",
    "watchdog history": f"servectl watchdog history {INV} --limit 20",
    "thermal agent": "servectl thermal agent --node node1 --dir /var/log/servectl/thermal",
    "thermal report": f"servectl thermal report {INV} --since 2026-12-01T22:00 --plot night.png",
    "thermal start": f"servectl thermal start {INV}",
    "prometheus config": f"servectl prometheus config {INV} -o /etc/prometheus/servectl.yml "
    "&& promtool check config /etc/prometheus/servectl.yml",
    "thermal stop": f"servectl thermal stop {INV}",
    "thermal status": f"servectl thermal status {INV} --json",
    "thermal watch": f"servectl thermal watch {INV}",
    "bench sweep": f"servectl bench sweep {INV} --concurrency 1,4,8,16,32",
    "bench prefill": f"servectl bench prefill {INV} --input-len 32k,128k",
    "bench compare": "servectl bench compare runs/20261201-k7-sweep runs/20261202-k3-sweep",
    "clocks show": f"servectl clocks show {INV}",
    "clocks cap": f"servectl clocks cap 2000 {INV}",
    "clocks reset": f"servectl clocks reset {INV}",
    "rollout history": f"servectl rollout history {INV} --json",
    "report": f"servectl report {INV} --since 22:00 --until 07:30 --tz Asia/Seoul --html night.html",
    "thermal zones": f"servectl thermal zones {INV} --minutes 10",
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
