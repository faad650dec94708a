"""Options and setup shared by the `tpwarden decide` commands (inventory -> client, decider,
fitted calibration); rendering of one decision."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Annotated, ParamSpec, get_type_hints

import typer
from rich.table import Table
from tpwarden.cluster.cli.common import console, emit_json, err_console, load, plain, positive
from tpwarden.cluster.cli.inputs import READABLE_FILE
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.decide import fitted as fitted_mod
from tpwarden.cluster.decide.client import LogprobClient, max_logprobs_from_args
from tpwarden.cluster.decide.core import DEFAULT_MARGIN, Decider, Decision, Item
from tpwarden.cluster.spec import ClusterSpec

PathOpt = Annotated[
    str, typer.Option("--path", help="completions (raw prompt) or chat (chat template).")
]
MarginOpt = Annotated[
    float | None, typer.Option("--margin", help="Hold when top1-top2 < this (default: fitted).")
]
TempOpt = Annotated[
    float | None, typer.Option("--temperature", help="Calibration temperature (default: fitted).")
]
CalOpt = Annotated[
    Path | None,
    typer.Option(
        "--calibration", **READABLE_FILE, help="Fitted calibration file (default: state dir)."
    ),
]
NoCalOpt = Annotated[bool, typer.Option("--no-calibration", help="Ignore any fitted calibration.")]
CueOpt = Annotated[str, typer.Option("--cue", help="Answer cue ending the prompt (e.g. 정답:).")]
KOpt = Annotated[
    int | None,
    typer.Option("--top-logprobs", min=1, help="k (default: server --max-logprobs or 20)."),
]
ThinkOpt = Annotated[bool, typer.Option("--thinking", help="Send enable_thinking true (chat).")]
TimeoutOpt = Annotated[
    float, typer.Option("--timeout", callback=positive, help="Seconds per request.")
]
RunsDirOpt = Annotated[
    Path | None, typer.Option("--runs-dir", help="Where run directories go (TPWARDEN_RUNS_DIR).")
]


@dataclass(kw_only=True)
class Setup:
    spec: ClusterSpec
    client: LogprobClient
    decider: Decider
    fitted: fitted_mod.Fitted | None
    notes: list[str]
    calibration_file: str | None = None


def _api_key(spec: ClusterSpec) -> str | None:
    # the same resolution as the probe and bench (an env var here, or the head's root-only file)
    with Controller(spec) as ctl:
        return ctl.api_key()


def setup(
    inventory: Path,
    path: str,
    margin: float | None,
    temperature: float | None,
    calibration: Path | None,
    no_calibration: bool,
    cue: str,
    k: int | None,
    thinking: bool,
    timeout: float,
) -> Setup:

    if path not in ("completions", "chat"):
        raise typer.BadParameter("--path must be completions or chat")
    spec = load(inventory)
    notes: list[str] = []
    fitted = None
    cal_path = None
    if not no_calibration:
        cal_path = calibration or fitted_mod.default_path(spec.name)
        fitted = fitted_mod.load(cal_path)
        if calibration is not None and fitted is None:
            raise typer.BadParameter(f"{calibration}: no such calibration file")
        if fitted is not None:
            if fitted.config_hash != spec.config_hash():
                notes.append(
                    f"calibration fitted under config {fitted.config_hash}, cluster is now "
                    f"{spec.config_hash()}: refit with `tpwarden decide calibrate`"
                )
            if fitted.path != path:
                notes.append(f"calibration was fitted on the {fitted.path} path, not {path}")
    t = temperature if temperature is not None else (fitted.temperature if fitted else 1.0)
    gate = margin
    if gate is None:
        gate = fitted.margin_gate if fitted and fitted.margin_gate is not None else DEFAULT_MARGIN
    client = LogprobClient(
        spec.api_base,
        spec.serving.model.served_name,
        api_key=_api_key(spec),
        k=k or max_logprobs_from_args(spec.serving.extra_args),
        path=path,  # type: ignore[arg-type]
        thinking=thinking,
        timeout_s=timeout,
    )
    decider = Decider(client, temperature=t, margin_gate=gate, cue=cue)
    used = str(cal_path) if fitted is not None else None
    return Setup(
        spec=spec, client=client, decider=decider, fitted=fitted, notes=notes, calibration_file=used
    )


@dataclass(frozen=True)
class DecideArgs:
    """The decision options `decide ask` and `decide run` both take, declared once: each field
    is a command-line option (its type, help and default), put into a command by
    `decision_options`."""

    path: PathOpt = "completions"
    margin: MarginOpt = None
    temperature: TempOpt = None
    calibration: CalOpt = None
    no_calibration: NoCalOpt = False
    cue: CueOpt = "Answer:"
    top_logprobs: KOpt = None
    thinking: ThinkOpt = False
    timeout: TimeoutOpt = 60.0

    def setup(self, inventory: Path) -> Setup:
        """`setup` with these options."""
        return setup(
            inventory,
            self.path,
            self.margin,
            self.temperature,
            self.calibration,
            self.no_calibration,
            self.cue,
            self.top_logprobs,
            self.thinking,
            self.timeout,
        )


DECIDE_DEFAULTS = DecideArgs()
_P = ParamSpec("_P")


def decision_options(command: Callable[_P, None]) -> Callable[_P, None]:
    """Give a command the decision options: its parameter `args: DecideArgs` becomes one
    option per field of DecideArgs, in its place (so --help lists them where it stands), and
    the command is called with them gathered back into one DecideArgs."""
    hints = get_type_hints(DecideArgs, include_extras=True)
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    options = [
        inspect.Parameter(f.name, kind, default=f.default, annotation=hints[f.name])
        for f in fields(DecideArgs)
    ]
    signature = inspect.signature(command, eval_str=True)
    if "args" not in signature.parameters:
        raise TypeError(f"{command.__name__}: no parameter `args: DecideArgs` to put them in")
    params = [
        q for p in signature.parameters.values() for q in (options if p.name == "args" else [p])
    ]

    @functools.wraps(command)
    def with_options(*positional: _P.args, **given: _P.kwargs) -> None:
        # typer passes every option by name, each of the type its field declares
        chosen = {o.name: given.pop(o.name) for o in options}
        given["args"] = DecideArgs(**chosen)  # type: ignore[arg-type]
        command(*positional, **given)

    # typer reads a command's parameters from its signature and its annotations
    with_options.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    with_options.__annotations__ = {p.name: p.annotation for p in params}
    return with_options


def render_decision(d: Decision, title: str) -> None:
    table = Table(title=title)
    for col in ("label", "probability", ""):
        table.add_column(col, justify="left" if col != "probability" else "right")
    for label, p in d.probs.items():
        mark = " <" if label == d.decision else ""
        table.add_row(label, f"{p:.3f}", "#" * round(p * 30) + mark)
    console.print(table)
    colour = "green" if d.verdict == "answer" else "yellow"
    console.print(
        f"decision [bold]{d.decision}[/] · margin {d.margin:.3f} · verdict [{colour}]{d.verdict}[/]"
        f" · {d.latency_ms:.0f} ms · label mass {d.label_mass:.2f} · T={d.temperature:.2f}",
        highlight=False,
    )


def ask_one(setup: Setup, item: Item, as_json: bool) -> None:
    for note in setup.notes:
        err_console.print(f"[yellow]warning:[/] {plain(note)}", highlight=False)
    with setup.client:
        d = setup.decider.decide(item)
    if as_json:
        doc = d.to_json()
        if item.kind == "score":
            doc["expected_score"] = d.expected_score()
        command = {"yesno": "decide yesno", "score": "decide score"}.get(item.kind, "decide ask")
        emit_json(command, doc, indent=2)
        return
    render_decision(d, item.question[:70])
    if item.kind == "score":
        console.print(f"expected score {d.expected_score():.2f}", highlight=False)
