"""`tpwarden`: the command line. A thin layer: it parses arguments, calls the library and renders.

Sub-commands are mounted from one table (``COMMANDS``) and imported on first use (`lazy`), so
`tpwarden --help`, a TAB completion and `inventory check` import only what they need. To add a
command: a function with ``@<typer>.command(name)`` and ``@handle_errors`` in a module whose
``app`` (a group) or ``commands`` (top-level commands) the table names, one row here,
one example in `examples.EXAMPLES`; a group's sub-commands also go in `completion_table.SUBCOMMANDS`
(TAB completion; `tests/unit/test_cli_completion_table.py` prints the rows when they are missing),
and a command with a parameter that completes values (`completion_values`) in
`completion_params.PARAMS` (`tests/unit/test_cli_completion_values.py` prints its rows).

Examples:
    tpwarden inventory check -i inventory.example.yml
    tpwarden plan -i inventory.example.yml --json
"""

from __future__ import annotations

from typing import Annotated

import typer
from tpwarden.cluster import __version__
from tpwarden.cluster.cli.completion_table import SUBCOMMANDS
from tpwarden.cluster.cli.lazy import LazyGroup

CLI = "tpwarden.cluster.cli"

# name -> ("module:attr", the short help `tpwarden --help` shows without importing the module)
COMMANDS: dict[str, tuple[str, str]] = {
    "plan": (f"{CLI}.inventory:commands", "Show what would run on every node: container, image, "
             "full vLLM argv, env (secrets redacted)."),
    "up": (f"{CLI}.control:commands", "Start the server on every node (idempotent), then follow "
           "the boot until it answers."),
    "down": (f"{CLI}.control:commands", "Stop and remove the serving containers on every node "
             "(found by label)."),
    "restart": (f"{CLI}.control:commands", "Down + up with one plan; the restart is recorded in "
                "the event log."),
    "status": (f"{CLI}.control:commands", "One screen: every node (reachable, container, drift, "
               "GPU) and the server; exit 0 only if all is well."),
    "logs": (f"{CLI}.control:commands", "Show (or follow) the serving containers' logs."),
    "boot": (f"{CLI}.control:commands", "Attach to a boot in progress: phase, shards, ETA, until "
             "the server answers; or judge a saved log with --from-file"),
    "provision": (f"{CLI}.provision:commands", "Prepare the nodes (Docker, GPU, image, model) and "
                  "install tpwarden, the thermal agent, the watchdog and the clock cap"),
    "rollout": (f"{CLI}.rollout:commands", "Change the serving config: plan, measure, restart, "
                "verify, keep or roll back."),
    "rollback": (f"{CLI}.rollout:commands", "Restore a recorded config revision (default: the "
                 "one before the last rollout) and restart."),
    "report": (f"{CLI}.report:commands", "How the night went: uptime and restarts with causes, "
               "watchdog decisions, thermal peaks"),
    "inventory": (f"{CLI}.inventory:app", "Validate inventories."),
    "lab": (f"{CLI}.lab:app", "The lab: a simulated 4-node cluster on this machine (needs root)."),
    "watchdog": (f"{CLI}.watchdog:app", "The probe watchdog: run it, see its state, hold or "
                 "release it."),
    "thermal": (f"{CLI}.thermal:app", "GPU and ACPI thermal logging: agent, report."),
    "bench": (f"{CLI}.bench:app", "Benchmark the server from a CPU-only client container; "
              "compare runs."),
    "decide": (f"{CLI}.decide:app", "Decisions from label-token probabilities (max_tokens=1, no "
               "text parsing)."),
    "eval": (f"{CLI}.eval:app", "Accuracy runs (lm-evaluation-harness 0.4.13) from the CPU-only "
             "client container."),
    "prometheus": (f"{CLI}.prometheus:app", "Prometheus: the scrape config for this cluster."),
    "tune": (f"{CLI}.tune:app", "Choose the drafter's draft length from measurement."),
    "flags": (f"{CLI}.flags:app", "The `vllm serve` flag table, read from the serving image."),
    "clocks": (f"{CLI}.control:commands", "Show, cap or reset GPU clocks on every node (NVML)."),
    "incident": (f"{CLI}.incident:app", "Incident dossiers: which rank hung, and where "
                 "(taken before every watchdog restart)."),
    "experiment": (f"{CLI}.experiment:app", "Experiments: a queue of variants measured "
                   "against production, restored by a deadline."),
    "ledger": (f"{CLI}.ledger:app", "The configuration ledger: what ran when the server was "
               "healthy, how well it served, why it got slower."),
}  # fmt: skip


def _lab_not_installed(exc: ModuleNotFoundError) -> typer.core.TyperCommand | None:
    """`tpwarden lab ...` where the lab is absent: it is a development tool, in the source tree
    (`lab/`, installed from a checkout as `tpwarden-lab`) and not in the wheel the nodes and
    operators get."""
    if exc.name != "tpwarden.lab":
        return None

    def refuse() -> None:
        typer.echo(
            "error: the lab is not installed: it is a development tool in tpwarden's source tree "
            "(lab/, its own distribution `tpwarden-lab`), not in the wheel; clone the repository "
            "and run scripts/setup.sh, or `pip install --no-deps -e ./lab` from a checkout",
            err=True,
        )
        raise typer.Exit(2)

    return typer.core.TyperCommand(
        "lab",
        help="The 4-node lab (not installed: it ships with a source checkout).",
        callback=refuse,
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )


class Root(LazyGroup):
    table = COMMANDS
    subtables = SUBCOMMANDS
    fallbacks = {"lab": _lab_not_installed}


app = typer.Typer(
    name="tpwarden",
    cls=Root,
    help="Bring up, watch and measure a multi-node vLLM server from one Ansible inventory.",
    epilog="Example: tpwarden inventory check -i inventory.yml && tpwarden up -i inventory.yml",
    no_args_is_help=True,
    rich_markup_mode=None,  # click's plain help: see help_text
    # help as wide as the terminal (click's default caps it at 80 columns); every sub-command's
    # context inherits it
    context_settings={"max_content_width": 10_000},
)


def _version(value: bool) -> None:
    if value:
        print(f"tpwarden {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    """tpwarden: one inventory, a tensor-parallel vLLM server on N nodes, kept alive and measured."""
