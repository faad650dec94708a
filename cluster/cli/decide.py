"""`tpwarden decide`: generation-free decisions from the first token's logprobs.

tpwarden decide ask -i inv.yml "Which organ pumps blood?" --choice A=Liver --choice B=Heart
tpwarden decide yesno -i inv.yml "Is the aorta an artery?"
tpwarden decide score -i inv.yml "Rate the answer's correctness: ..."
tpwarden decide run -i inv.yml --data items.jsonl --runs 2 --permute --json
tpwarden decide calibrate -i inv.yml --data validation.jsonl --target-accuracy 0.95

Exit codes: 0 done (a run with some failed items still exits 0, they are counted as errors);
1 the server or the decision failed (every item failed, label missing, HTTP error); 2 bad input.
"""

from __future__ import annotations

from typing import Annotated

import typer
from tpwarden.cluster.cli import decide_batch
from tpwarden.cluster.cli.common import handle_errors
from tpwarden.cluster.cli.decide_common import (
    DECIDE_DEFAULTS,
    CueOpt,
    DecideArgs,
    KOpt,
    MarginOpt,
    PathOpt,
    TimeoutOpt,
    ask_one,
    decision_options,
    setup,
)
from tpwarden.cluster.cli.options import DEFAULT_INVENTORY, InventoryOption, JsonOption
from tpwarden.cluster.decide.core import Item

app = typer.Typer(
    help="Decisions from label-token probabilities (max_tokens=1, no text parsing).",
    no_args_is_help=True,
)
app.add_typer(decide_batch.commands)  # `run` and `calibrate`, declared in their own module


def _choices(raw: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for c in raw:
        label, sep, text = c.partition("=")
        if not sep or not label.strip():
            raise typer.BadParameter(f"{c!r}: give --choice LABEL=TEXT")
        if label.strip() in out:
            raise typer.BadParameter(f"--choice {label.strip()} given twice: one text per label")
        out[label.strip()] = text
    if len(out) < 2:
        raise typer.BadParameter("give at least two --choice LABEL=TEXT")
    return out


@app.command("ask")
@handle_errors
@decision_options
def ask(
    question: Annotated[str, typer.Argument(help="The question.")],
    choice: Annotated[list[str], typer.Option("--choice", help="LABEL=TEXT, repeated.")],
    inventory: InventoryOption = DEFAULT_INVENTORY,
    args: DecideArgs = DECIDE_DEFAULTS,
    as_json: JsonOption = False,
) -> None:
    """One multiple-choice question -> probabilities over the labels, decision, margin, verdict.

    Example: tpwarden decide ask -i inventory.yml "Which organ pumps blood?" --choice A=Liver --choice B=Heart
    """

    item = Item(id="ask", question=question, choices=_choices(choice))
    ask_one(args.setup(inventory), item, as_json)


@app.command("yesno")
@handle_errors
def yesno(
    question: Annotated[str, typer.Argument(help="A yes/no question.")],
    inventory: InventoryOption = DEFAULT_INVENTORY,
    path: PathOpt = "completions",
    margin: MarginOpt = None,
    cue: CueOpt = "Answer:",
    top_logprobs: KOpt = None,
    timeout: TimeoutOpt = 60.0,
    as_json: JsonOption = False,
) -> None:
    """P(Yes) vs P(No) from the first token (Yes/yes/YES count together).

    Example: tpwarden decide yesno -i inventory.yml "Is the aorta an artery?" --json
    """

    ctx = setup(inventory, path, margin, None, None, True, cue, top_logprobs, False, timeout)
    ask_one(ctx, Item(id="yesno", question=question, kind="yesno"), as_json)


@app.command("score")
@handle_errors
def score(
    question: Annotated[str, typer.Argument(help="What to score, with the rubric.")],
    inventory: InventoryOption = DEFAULT_INVENTORY,
    low: Annotated[int, typer.Option(help="Lowest score.")] = 0,
    high: Annotated[int, typer.Option(help="Highest score (10 needs a tokenizer with '10').")] = 10,
    path: PathOpt = "completions",
    cue: CueOpt = "Score:",
    top_logprobs: KOpt = None,
    timeout: TimeoutOpt = 60.0,
    as_json: JsonOption = False,
) -> None:
    """A distribution over integer scores and its expected value.

    Example: tpwarden decide score -i inventory.yml "Rate this summary 0-9: ..." --high 9
    """

    if not 0 <= low < high:
        raise typer.BadParameter("need 0 <= --low < --high")
    ctx = setup(inventory, path, 0.0, None, None, True, cue, top_logprobs, False, timeout)
    ask_one(
        ctx, Item(id="score", question=question, kind="score", score_range=(low, high)), as_json
    )
