"""Label tokens in a first-token top list -> a probability distribution over the choices. Pure.

A tokenizer shows the answer "A" as " A", "A", "A.", "(A", "Ａ" (full-width)...; every form found
in the top list counts for its label (their probabilities add). A label with no form in the list
has unknown probability: that is an error (`LabelMissing`), never a silent 0, because a 0 would
look like a confident decision. A token that is only the first piece of two labels (a tokenizer
that splits "10" into "1" "0" while "1" is also a label, or byte pieces of "①" and "②") cannot
be attributed: that is `SplitLabel`.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tpwarden.cluster.errors import TpwardenError

# punctuation a label is commonly wrapped in or followed by (after NFKC, so "（Ａ）" is "(A)")
_OPEN = "([{<\"'"
_CLOSE = ".):]}>,;\"'"
_BYTES = re.compile(r"\\x([0-9a-fA-F]{2})")


class DecideError(TpwardenError):
    """A decision could not be made or trusted."""


class LabelMissing(DecideError):
    """A label has no token in the returned top list: its probability is unknown."""

    def __init__(self, missing: Sequence[str], k: int, floor_logprob: float | None) -> None:
        self.missing, self.k, self.floor_logprob = list(missing), k, floor_logprob
        bound = (
            f" (each is below p={math.exp(floor_logprob):.3g}, the smallest listed)"
            if floor_logprob is not None
            else ""
        )
        super().__init__(
            f"label(s) {', '.join(self.missing)} not in the top {k} first tokens{bound}: "
            "probability mass unknown; raise --max-logprobs on the server, or check the prompt "
            "(thinking on? the model may not answer with a label)"
        )


class SplitLabel(DecideError):
    """The tokenizer splits labels so that their first tokens collide."""

    def __init__(self, token: str, labels: Sequence[str]) -> None:
        self.token, self.labels = token, list(labels)
        super().__init__(
            f"first token {token!r} begins labels {', '.join(self.labels)}: the tokenizer splits "
            "them, so one token cannot tell them apart; use single-token labels (A, B, C ...)"
        )


@dataclass(frozen=True)
class Label:
    """One choice's label and the spellings that count for it (compared after NFKC + trim)."""

    key: str
    forms: tuple[str, ...]

    @classmethod
    def of(cls, key: str, aliases: Sequence[str] = ()) -> Label:
        # as written and NFKC-folded ("①" is also "1", "Ａ" also "A"): byte pieces of the
        # written form must still be recognised
        spelled = (key, *aliases)
        forms = tuple(dict.fromkeys([*(_norm(x) for x in spelled), *(x.strip() for x in spelled)]))
        return cls(key, forms)


def letter_labels(keys: Sequence[str]) -> list[Label]:
    return [Label.of(k) for k in keys]


def yes_no_labels() -> list[Label]:
    return [Label.of("Yes", ("yes", "YES", "Y")), Label.of("No", ("no", "NO", "N"))]


def score_labels(low: int = 0, high: int = 10) -> list[Label]:
    return [Label.of(str(s)) for s in range(low, high + 1)]


def _norm(text: str) -> str:
    return unicodedata.normalize("NFKC", text).strip()


def _core(text: str) -> str:
    """'(A)' -> 'A', ' A.' -> 'A', 'Ａ' -> 'A'."""
    t = _norm(text)
    t = t.lstrip(_OPEN).rstrip(_CLOSE).strip()
    return t


def _token_bytes(token: str) -> bytes | None:
    """vLLM shows a token that is not valid UTF-8 on its own as 'bytes:\\xe2\\x91'."""
    if token.startswith("bytes:"):
        return bytes(int(h, 16) for h in _BYTES.findall(token))
    return None


def _owners(token: str, labels: Sequence[Label]) -> list[Label]:
    raw = _token_bytes(token)
    if raw is not None:  # a byte piece: which labels' UTF-8 spellings begin with it?
        return [
            lab
            for lab in labels
            if raw and any(f.encode().startswith(raw.lstrip(b" ")) for f in lab.forms)
        ]
    core = _core(token)
    if not core:
        return []
    exact = [lab for lab in labels if core in lab.forms]
    if exact:
        return exact
    head = _norm(token).lstrip(_OPEN)
    return [lab for lab in labels if head and any(f.startswith(head) for f in lab.forms)]


@dataclass(frozen=True)
class LabelLogprobs:
    """Per label, log of the summed probability of its tokens; the tokens that counted."""

    logprobs: dict[str, float]
    tokens: dict[str, tuple[str, ...]]
    mass: float  # total first-token probability on labels (low: the prompt format is off)


def label_logprobs(
    top: Mapping[str, float] | Sequence[tuple[str, float]], labels: Sequence[Label], k: int
) -> LabelLogprobs:
    """Collect the labels' probability from one position's top list (token -> logprob)."""
    items = list(top.items()) if isinstance(top, Mapping) else list(top)
    found: dict[str, list[float]] = {lab.key: [] for lab in labels}
    toks: dict[str, list[str]] = {lab.key: [] for lab in labels}
    by_key = {lab.key: lab for lab in labels}
    for token, lp in items:
        if lp is None or not math.isfinite(lp):
            continue
        owners = _owners(token, labels)
        if len(owners) > 1:
            raise SplitLabel(token, [o.key for o in owners])
        if owners:
            found[owners[0].key].append(lp)
            toks[owners[0].key].append(token)
    missing = [key for key, lps in found.items() if not lps]
    if missing:
        # "10" missing while "1" (a label) is present: the tokenizer split "10"
        for key in missing:
            for other, other_toks in toks.items():
                if other != key and any(
                    by_key[key].forms[0].startswith(_core(t)) for t in other_toks
                ):
                    raise SplitLabel(other_toks[0], [other, key])
        floor = min((lp for _, lp in items if lp is not None), default=None)
        raise LabelMissing(missing, k, floor)
    out = {key: _logsumexp(lps) for key, lps in found.items()}
    mass = sum(math.exp(v) for v in out.values())
    return LabelLogprobs(out, {k_: tuple(v) for k_, v in toks.items()}, mass)


def _logsumexp(xs: Sequence[float]) -> float:
    m = max(xs)
    return m + math.log(sum(math.exp(x - m) for x in xs))


def normalise(logprobs: Mapping[str, float], temperature: float = 1.0) -> dict[str, float]:
    """Softmax of the label logprobs divided by `temperature` (1.0 = plain renormalisation)."""
    if temperature <= 0:
        raise ValueError("temperature must be > 0")
    scaled = {k: v / temperature for k, v in logprobs.items()}
    z = _logsumexp(list(scaled.values()))
    return {k: math.exp(v - z) for k, v in scaled.items()}


def top_two(probs: Mapping[str, float]) -> tuple[str, float]:
    """(decision, margin): the most probable label (first in label order on a tie) and
    p(top1) - p(top2)."""
    ranked = sorted(probs.items(), key=lambda kv: -kv[1])
    second = ranked[1][1] if len(ranked) > 1 else 0.0
    return ranked[0][0], ranked[0][1] - second
