"""`tpwarden prometheus config`: a Prometheus scrape config generated from the inventory;
`tpwarden prometheus rules`: tpwarden's alert rules, shipped or time-scaled for rehearsals.

    tpwarden prometheus config -i inventory.yml --out /etc/prometheus/tpwarden.yml
    promtool check config /etc/prometheus/tpwarden.yml

Errors (an exporter listening on loopback on a node another machine must scrape) print the fix
and exit 2 with nothing written; warnings go to stderr and the config is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text
from tpwarden.cluster.cli.common import emit_json, err_console, handle_errors, load
from tpwarden.cluster.cli.inputs import output_file
from tpwarden.cluster.cli.options import DEFAULT_INVENTORY, InventoryOption, JsonOption
from tpwarden.cluster.durable import atomic_write_text
from tpwarden.watchdog.monitoring_files import rules_path
from tpwarden.watchdog.prometheus_config import PromOptions, build_config, render_yaml
from tpwarden.watchdog.rule_scale import scale_rules

app = typer.Typer(help="Prometheus: the scrape config for this cluster.", no_args_is_help=True)


@app.command("config")
@handle_errors
def config(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    out: Annotated[
        str,
        typer.Option(
            "--out", "-o", callback=output_file, help="Write the config here ('-': stdout)."
        ),
    ] = "-",
    interval: Annotated[
        float, typer.Option("--interval", help="scrape_interval in seconds.", min=0.1)
    ] = 15.0,
    evaluation: Annotated[
        float | None,
        typer.Option(
            "--evaluation-interval", help="evaluation_interval (default: --interval).", min=0.1
        ),  # fmt: skip
    ] = None,
    rules: Annotated[
        str | None, typer.Option("--rules", help="Alert rules file (default: tpwarden's own).")
    ] = None,
    api_key_file: Annotated[
        str | None,
        typer.Option("--api-key-file", help="File with the API key on the Prometheus machine."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Scrape jobs tpwarden-thermal, tpwarden-watchdog and vllm, and tpwarden's alert rules."""
    spec = load(inventory)
    options = PromOptions(interval, evaluation, rules, api_key_file)
    cfg = build_config(spec, options)
    text = render_yaml(cfg, str(inventory))
    written = None
    if not cfg.errors and out != "-":
        # atomically: Prometheus reloading mid-write never reads half a file
        atomic_write_text(Path(out), text, mode=0o644)
        written = out
    if as_json:
        emit_json(
            "prometheus config",
            {
                "ok": not cfg.errors,
                "written": written,
                "config": cfg.doc,
                "findings": [f.__dict__ for f in cfg.findings],
            },
        )
    else:
        for f in cfg.findings:
            style = "bold red" if f.level == "error" else "yellow"
            line = Text.assemble((f"{f.level}:", style), " ", f.render().split(": ", 1)[1])
            err_console.print(line, soft_wrap=True)
        if not cfg.errors and out == "-":
            print(text, end="")
        elif written:
            err_console.print(Text(f"wrote {written}"))
    if cfg.errors:
        raise typer.Exit(2)


@app.command("rules")
@handle_errors
def rules(
    out: Annotated[
        str, typer.Option("--out", "-o", help="Write the rules here ('-': stdout).")
    ] = "-",
    time_scale: Annotated[
        float,
        typer.Option(
            "--time-scale",
            help="Multiply every `for:` and every range window (`[2m]`) by this: 0.1 makes the "
            "hung-server alert wait 12 s of flat counters instead of 2 minutes. For rehearsals "
            "(the lab's Prometheus uses it); 1 writes the shipped rules unchanged.",
            min=0.001,
            max=1000.0,
        ),
    ] = 1.0,
    min_range: Annotated[
        float,
        typer.Option(
            "--min-range",
            help="Seconds a scaled range window keeps at least (give two scrape intervals).",
            min=0.0,
        ),
    ] = 30.0,
    as_json: JsonOption = False,
) -> None:
    """tpwarden's alert rules (group `tpwarden`), shipped or with their time windows scaled.

    Example: tpwarden prometheus rules --time-scale 0.1 --min-range 8 -o rules-rehearsal.yml
    (then: tpwarden prometheus config -i inventory.yml --rules rules-rehearsal.yml)
    """
    text = rules_path().read_text()
    if time_scale != 1.0:
        text = scale_rules(text, time_scale, min_range)
    written = None
    if out != "-":
        atomic_write_text(Path(out), text, mode=0o644)
        written = out
    if as_json:
        doc = {"ok": True, "written": written, "time_scale": time_scale, "min_range_s": min_range}
        emit_json("prometheus rules", {**doc, "rules": None if written else text})
    elif written:
        err_console.print(Text(f"wrote {written}"))
    else:
        print(text, end="")
