"""`tpwarden eval image`: the lm-eval client image, built on the head for its platform.
Rendering only; the work is in cluster.eval.image_build (pure) and cluster.eval.image_head."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from tpwarden.cluster.bench.plan import client_image as bench_image
from tpwarden.cluster.cli.common import console, emit_json, err_console, handle_errors, load, plain
from tpwarden.cluster.cli.options import DEFAULT_INVENTORY, InventoryOption, JsonOption
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.eval.image_head import build as build_image
from tpwarden.cluster.eval.image_head import plan_image
from tpwarden.cluster.eval.presets import EVAL_VENV

app = typer.Typer(
    help="The lm-eval client image: built on the head, for its architecture and Python.",
    no_args_is_help=True,
)
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / (
    "tpwarden/eval-wheelhouse"
)


@app.command("build")
@handle_errors
def build(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    base: Annotated[
        str | None,
        typer.Option(help="Base image on the head (default: the bench client image)."),
    ] = None,
    venv: Annotated[
        Path | None,
        typer.Option(
            help=f"The lm-eval 0.4.13 venv whose versions the image pins (default: {EVAL_VENV} "
            "when it is there, else the pins shipped with tpwarden).",
        ),
    ] = None,
    wheel_cache: Annotated[
        Path, typer.Option(help="Where the head's wheels are kept between builds.")
    ] = DEFAULT_CACHE,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Read the base, print the plan; build nothing.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Build the eval client image on the head: FROM a base the head runs (its facts read from
    the base itself), lm_eval 0.4.13 with its api extra installed offline from wheels chosen
    here for the head's architecture and Python. Prints the tag to set as
    tpwarden.eval.client_image. Works from an installed tpwarden: the pins ship with it."""

    spec = load(inventory)
    base_image = base or bench_image(spec)
    with Controller(spec) as ctl:
        gw = ctl.docker(spec.head)
        plan = plan_image(gw, base_image, venv)
        if not dry_run:
            log = None if as_json else (lambda line: err_console.print(plain(line)))
            plan = build_image(gw, plan, wheel_cache, log=log or (lambda line: None))
    if as_json:
        emit_json("eval image build", {"dry_run": dry_run, **plan.to_json()}, indent=2)
        return
    f = plan.facts
    console.print(
        f"{plain(spec.head.name)}: {plain(base_image)} runs Python {f.python} on {f.machine} "
        f"(glibc {f.glibc}); {len(plan.wheels)} wheels to add, pinned by {plain(plan.pins_from)}",
        highlight=False,
    )
    if dry_run:
        console.print(plain(plan.dockerfile), highlight=False)
    state = "already there" if plan.exists else ("built" if plan.built else "to build")
    console.print(f"image {plain(plan.tag)}: {state}", highlight=False)
    console.print(
        f"inventory: tpwarden.eval.client_image: {plain(plan.tag)}   (or eval run --client-image)",
        highlight=False,
    )
