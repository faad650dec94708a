"""`tpwarden eval datasets`: the tasks' Hugging Face data for a cluster without Hub access.
Rendering only; the work is in cluster.eval.datasets (archive) and cluster.eval.cache (head)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from tpwarden.cluster.cli.common import console, emit_json, err_console, handle_errors, load, plain
from tpwarden.cluster.cli.inputs import output_file
from tpwarden.cluster.cli.options import DEFAULT_INVENTORY, InventoryOption, JsonOption
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.eval.cache import load_to_head
from tpwarden.cluster.eval.catalog import suite_tasks
from tpwarden.cluster.eval.datasets import fetch as fetch_archive
from tpwarden.cluster.eval.datasets import read_archive
from tpwarden.cluster.eval.presets import EVAL_VENV, EvalInputError

app = typer.Typer(
    help="The tasks' datasets for a cluster without Hub access: fetch and pack on a connected "
    "machine, load into the head's cache.",
    no_args_is_help=True,
)


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _tasks(suite: str | None, tasks: str | None) -> tuple[str, ...]:
    if (suite is None) == (tasks is None):
        raise typer.BadParameter("give exactly one of --suite or --tasks", param_hint="--suite")
    if suite is not None:
        return suite_tasks(suite)
    return tuple(t.strip() for t in (tasks or "").split(",") if t.strip())


def _summary(doc: JSONObject) -> list[JSONObject]:
    return [
        {"task": t, "datasets": len(e.get("datasets") or []), "metrics": e.get("metrics") or []}
        for t, e in sorted((doc.get("tasks") or {}).items())
    ]


@app.command("fetch")
@handle_errors
def fetch(
    out: Annotated[
        Path,
        typer.Option("--out", "-o", callback=output_file, help="The archive to write (.tar.gz)."),
    ],
    suite: Annotated[str | None, typer.Option(help="A named suite (field).")] = None,
    tasks: Annotated[str | None, typer.Option(help="Comma list of lm-eval task names.")] = None,
    venv: Annotated[
        Path, typer.Option(help="The lm-eval 0.4.13 venv whose `datasets` downloads.")
    ] = EVAL_VENV,
    as_json: JsonOption = False,
) -> None:
    """On a machine with Hub access: download every dataset the tasks load (read from lm-eval's
    own task YAMLs) and HumanEval's code_eval metric into a fresh cache, and pack it into one
    archive for `eval datasets load`."""

    names = _tasks(suite, tasks)
    if not as_json:
        err_console.print(f"fetching the data of {len(names)} tasks with {plain(venv)} ...")
    doc = fetch_archive(names, venv, out, _now())
    if as_json:
        emit_json("eval datasets fetch", {"archive": str(out), "tasks": _summary(doc)})
        return
    for row in _summary(doc):
        console.print(f"{row['task']}: {row['datasets']} dataset(s)", highlight=False)
    console.print(f"archive: {plain(out)}", highlight=False)


@app.command("load")
@handle_errors
def load_cmd(
    archive: Annotated[
        Path, typer.Argument(exists=True, dir_okay=False, help="Archive from `fetch`.")
    ],
    inventory: InventoryOption = DEFAULT_INVENTORY,
    as_json: JsonOption = False,
) -> None:
    """Put an archive's datasets into the head's cache (`tpwarden.eval.hf_cache`, mounted by
    the eval client as HF_HOME) and record its tasks in the cache's index, which `eval run`
    checks before it starts."""

    spec = load(inventory)
    hf_cache = spec.eval.hf_cache
    if not hf_cache:
        raise EvalInputError(
            f"{inventory}: set tpwarden.eval.hf_cache (a folder on the head) to load datasets"
        )
    read_archive(archive)  # a bad archive is refused before any connection
    with Controller(spec) as ctl:
        merged = load_to_head(ctl.session(spec.head), archive, hf_cache, _now())
    held = sorted(merged["tasks"])
    if as_json:
        emit_json(
            "eval datasets load",
            {"node": spec.head.name, "hf_cache": hf_cache, "tasks_held": held},
        )
        return
    console.print(
        f"{plain(spec.head.name)}:{plain(hf_cache)} holds the data of: {', '.join(held)}",
        highlight=False,
    )
