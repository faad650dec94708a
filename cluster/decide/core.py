"""Questions, prompts and decisions: one multiple-choice / yes-no / score item -> a Decision.

The prompt ends in an answer cue ("Answer:"), the server generates one token, and the labels'
logprobs in that token's top list, renormalised (optionally with a fitted temperature), are the
distribution. No output text is parsed. The margin is p(top1) - p(top2); under the gate the
verdict is `hold` (the field run flipped 3.4 % of answers between two temperature-0 runs, and
flips sit at small margins).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Literal

from tpwarden.cluster.decide.client import LogprobClient
from tpwarden.cluster.decide.labels import (
    DecideError,
    Label,
    label_logprobs,
    letter_labels,
    normalise,
    score_labels,
    top_two,
    yes_no_labels,
)
from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.cluster.errors import ConfigError

Kind = Literal["choice", "yesno", "score"]
DEFAULT_CUE = "Answer:"
# Until a gate is fitted on validation data: a starting point, not a measured value.
DEFAULT_MARGIN = 0.10


@dataclass(frozen=True)
class Item:
    id: str
    question: str
    _: KW_ONLY  # the rest by name
    choices: dict[str, str] = field(default_factory=dict)  # label -> text (kind "choice")
    answer: str | None = None
    kind: Kind = "choice"
    score_range: tuple[int, int] = (0, 10)

    def labels(self) -> list[Label]:
        if self.kind == "yesno":
            return yes_no_labels()
        if self.kind == "score":
            return score_labels(*self.score_range)
        return letter_labels(list(self.choices))

    def reordered(self, order: Sequence[str]) -> tuple[Item, dict[str, str]]:
        """The same question with the choice texts in `order` (labels stay A, B, ...).
        Returns the new item and new-label -> original-label."""
        keys = list(self.choices)
        mapping = {new: old for new, old in zip(keys, order, strict=True)}
        choices = {new: self.choices[old] for new, old in mapping.items()}
        answer = next((n for n, o in mapping.items() if o == self.answer), None)
        return Item(
            id=self.id, question=self.question, choices=choices, answer=answer, kind=self.kind
        ), mapping


def render_prompt(item: Item, cue: str = DEFAULT_CUE) -> str:
    if item.kind == "yesno":
        return f"{item.question.rstrip()}\nAnswer Yes or No.\n{cue}"
    if item.kind == "score":
        lo, hi = item.score_range
        return f"{item.question.rstrip()}\nGive one integer score from {lo} to {hi}.\n{cue}"
    lines = [item.question.rstrip()]
    lines += [f"{label}. {text}" for label, text in item.choices.items()]
    return "\n".join(lines) + f"\n{cue}"


def item_from_json(doc: Mapping[str, JSONValue], where: str) -> Item:
    """One JSONL line: {"id", "question", "choices": {"A": "...", ...}, "answer"?, "kind"?}."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("question"), str):
        raise ConfigError("each line needs a string `question`", file=where, key="question")
    kind = doc.get("kind", "choice")
    if kind not in ("choice", "yesno", "score"):
        raise ConfigError(
            f"unknown kind {kind!r}", file=where, key="kind", hint="choice|yesno|score"
        )
    choices = doc.get("choices") or {}
    if kind == "choice" and (not isinstance(choices, Mapping) or len(choices) < 2):
        raise ConfigError(
            "`choices` must map at least two labels to texts", file=where, key="choices"
        )
    answer = doc.get("answer")
    if answer is not None and kind == "choice" and str(answer) not in choices:
        raise ConfigError(f"answer {answer!r} is not a label", file=where, key="answer")
    return Item(
        id=str(doc.get("id", where)),
        question=doc["question"],
        choices={str(k): str(v) for k, v in choices.items()},
        answer=None if answer is None else str(answer),
        kind=kind,
    )


def load_items(path: Path) -> list[Item]:
    items = []
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read: {e.strerror}", file=str(path)) from None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except json.JSONDecodeError as e:
            raise ConfigError(f"not JSON: {e.msg}", file=str(path), line=n) from None
        items.append(item_from_json(doc, f"{path}:{n}"))
    if not items:
        raise ConfigError("no items", file=str(path))
    ids = [i.id for i in items]
    if len(set(ids)) != len(ids):
        raise ConfigError("item ids must be unique", file=str(path), key="id")
    return items


@dataclass(frozen=True, kw_only=True)
class Decision:
    id: str
    probs: dict[str, float]  # label -> probability (after temperature), sums to 1
    label_logprobs: dict[str, float]  # raw, before renormalising (what calibration fits on)
    decision: str
    margin: float
    verdict: Literal["answer", "hold"]
    latency_ms: float
    label_mass: float  # first-token probability that fell on any label
    k: int
    temperature: float
    answer: str | None = None

    @property
    def correct(self) -> bool | None:
        return None if self.answer is None else self.decision == self.answer

    def expected_score(self) -> float | None:
        try:
            return sum(int(k) * p for k, p in self.probs.items())
        except ValueError:
            return None

    def to_json(self) -> JSONObject:
        doc = {
            "id": self.id,
            "probs": self.probs,
            "decision": self.decision,
            "margin": self.margin,
            "verdict": self.verdict,
            "latency_ms": self.latency_ms,
            "label_mass": self.label_mass,
            "label_logprobs": self.label_logprobs,
            "k": self.k,
            "temperature": self.temperature,
        }
        if self.answer is not None:
            doc["answer"], doc["correct"] = self.answer, self.correct
        return doc


def decision_from_logprobs(
    item_id: str,
    logprobs: Mapping[str, float],
    *,
    temperature: float = 1.0,
    margin_gate: float = DEFAULT_MARGIN,
    latency_ms: float = 0.0,
    label_mass: float = 1.0,
    k: int = 0,
    answer: str | None = None,
) -> Decision:
    """Pure: label logprobs -> probabilities, decision, margin and the gate's verdict."""
    probs = normalise(logprobs, temperature)
    decision, margin = top_two(probs)
    verdict: Literal["answer", "hold"] = "hold" if margin < margin_gate else "answer"
    return Decision(
        id=item_id, probs=probs, label_logprobs=dict(logprobs), decision=decision, margin=margin, verdict=verdict, latency_ms=latency_ms, label_mass=label_mass, k=k,
        temperature=temperature, answer=answer,
    )  # fmt: skip


class Decider:
    """Asks one item through a LogprobClient. `clock` (seconds, monotonic) is injectable."""

    def __init__(
        self,
        client: LogprobClient,
        *,
        temperature: float = 1.0,
        margin_gate: float = DEFAULT_MARGIN,
        cue: str = DEFAULT_CUE,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if temperature <= 0:
            raise DecideError("temperature must be > 0")
        self.client = client
        self.temperature = temperature
        self.margin_gate = margin_gate
        self.cue = cue
        self.clock = clock

    def decide(self, item: Item) -> Decision:
        prompt = render_prompt(item, self.cue)
        t0 = self.clock()
        first = self.client.first_token(prompt)
        latency_ms = (self.clock() - t0) * 1000.0
        try:
            found = label_logprobs(first.top, item.labels(), first.k)
        except DecideError as e:
            e.latency_ms = latency_ms  # type: ignore[attr-defined]  # the request did happen
            raise
        return decision_from_logprobs(
            item.id,
            found.logprobs,
            temperature=self.temperature,
            margin_gate=self.margin_gate,
            latency_ms=latency_ms,
            label_mass=found.mass,
            k=first.k,
            answer=item.answer,
        )
