"""Synthetic but deterministic text: a tiny tokenizer, token streams and logprobs.

* ``tokenize`` splits text so that ``"".join(tokens) == text`` (words with their leading
  space, single digits, punctuation, one token per non-ASCII letter, e.g. Hangul).
* Greedy (temperature 0) output is a pure function of the prompt; sampled output of
  (prompt, seed) or of the server's seeded stream.
* Multiple-choice prompts ending in ``Answer:`` put most first-token probability on one
  option letter chosen by a hash of the prompt, so logprob-based decisions are testable.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .oracle import LogprobOracle

_TOKEN_RE = re.compile(r" ?[A-Za-z]{1,10}| ?[0-9]| ?[^\sA-Za-z0-9\w]| ?[^\W\d_A-Za-z]|[\s\S]")
_MC_OPTION = re.compile(r"^\s*\(?([A-J])[\.\):]\s", re.M)
_MC_TAIL = re.compile(r"(?:Answer|answer|ANSWER|정답|답)\s*:\s*$")

WORDS = (
    "the model answers with a short synthetic sentence about cluster nodes and tensor "
    "parallel serving while the watchdog checks health metrics tokens per second "
    "latency thermal zones remain calm under steady load today because simulated "
    "engines never tire of writing plausible prose for tests"
).split()
EOS_MIN, EOS_SPAN = 24, 360


def tokenize(text: str) -> list[str]:
    return _TOKEN_RE.findall(text)


def token_of_id(tid: int) -> str:
    return " " + WORDS[tid] if 0 <= tid < len(WORDS) else f"<|{tid}|>"


def _h(*parts: object) -> int:
    raw = "\x1f".join(str(p) for p in parts).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "big")


@dataclass(frozen=True)
class TokenChoice:
    """One position: the chosen token, its logprob, and the top candidates (best first)."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...]


def mc_letters(text: str) -> list[str] | None:
    """Option letters when ``text`` is a multiple-choice prompt ending in ``Answer:``."""
    if not _MC_TAIL.search(text):
        return None
    letters = list(dict.fromkeys(_MC_OPTION.findall(text)))
    return letters if len(letters) >= 2 else None


def mc_distribution(text: str, letters: list[str]) -> list[tuple[str, float]]:
    """Deterministic letter distribution (logprobs, best first) for an MC prompt."""
    h = _h("mc", text)
    fav = letters[h % len(letters)]
    rng = random.Random(h)
    p_fav = 0.30 + 0.69 * rng.random()
    others = [x for x in letters if x != fav]
    weights = [rng.random() + 0.05 for _ in others]
    rest = (1.0 - p_fav) * 0.97  # a little mass stays on non-letter tokens
    probs = [(fav, p_fav)] + [
        (x, rest * w / sum(weights)) for x, w in zip(others, weights, strict=True)
    ]
    sep = "" if text.endswith((" ", "\n")) else " "
    out = sorted(((sep + x, math.log(p)) for x, p in probs), key=lambda t: -t[1])
    # keep the favoured letter strictly on top even if a weight tied it
    return out


def _filler(rng: random.Random, exclude: set[str], n: int, below: float) -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = []
    lp = below
    for word in rng.sample(WORDS, min(len(WORDS), n + len(exclude) + 2)):
        tok = " " + word
        if tok in exclude or len(out) >= n:
            continue
        lp -= 0.3 + rng.random() * 1.5
        out.append((tok, lp))
    return out


def candidates(context_key: int, n_top: int) -> list[tuple[str, float]]:
    """Top candidates for a free-text position (logprobs, best first)."""
    rng = random.Random(context_key)
    p1 = 0.25 + 0.7 * rng.random()
    first = " " + WORDS[rng.randrange(len(WORDS))]
    return [(first, math.log(p1))] + _filler(rng, {first}, max(n_top, 1), math.log(p1))


class Generator:
    """Yields the completion tokens of one request, one position at a time."""

    def __init__(
        self,
        prompt_text: str,
        temperature: float,
        seed: int | None,
        server_rng: random.Random,
        ignore_eos: bool,
        oracle: LogprobOracle | None = None,
    ) -> None:
        self.prompt = prompt_text
        self.greedy = temperature <= 0.0
        base = (
            _h("gen", prompt_text)
            if self.greedy
            else (_h("gen", prompt_text, seed) if seed is not None else server_rng.getrandbits(63))
        )
        self.key = base
        self.rng = random.Random(base)
        self.eos_at = None if ignore_eos else EOS_MIN + _h("eos", prompt_text) % EOS_SPAN
        self.pos = 0
        self.letters = mc_letters(prompt_text)
        # a scripted first token (tests of logprob decisions) only after an answer cue
        self.oracle = oracle if _MC_TAIL.search(prompt_text) else None

    def finished_naturally(self) -> bool:
        return self.eos_at is not None and self.pos >= self.eos_at

    def next(self, n_top: int) -> TokenChoice:
        scripted = (
            self.oracle.first_token(self.prompt, n_top) if self.pos == 0 and self.oracle else None
        )
        if scripted:
            top = scripted
        elif self.pos == 0 and self.letters:
            top = mc_distribution(self.prompt, self.letters)
        else:
            top = candidates(_h(self.key, self.pos), n_top)
        self.pos += 1
        idx = 0
        if not self.greedy and len(top) > 1 and self.rng.random() < 0.25:
            idx = 1 + self.rng.randrange(len(top) - 1)
        token, lp = top[idx]
        return TokenChoice(token, lp, tuple(top[: max(n_top, 0)]))


def prompt_logprobs(tokens: list[str], n_top: int) -> list[TokenChoice | None]:
    """Scores of the prompt's own tokens (first position is None, like vLLM)."""
    out: list[TokenChoice | None] = [None] if tokens else []
    key = _h("p", tokens[0]) if tokens else 0
    for i in range(1, len(tokens)):
        tok = tokens[i]
        top = None
        if tokens[i - 1].rstrip().endswith(":"):
            prefix = "".join(tokens[:i])
            letters = mc_letters(prefix)
            if letters:
                top = mc_distribution(prefix, letters)
        if top is None:
            top = candidates(key, n_top)
            rng = random.Random(_h(key, tok))
            if top[0][0] != tok and rng.random() < 0.35:
                top[0] = (tok, top[0][1])  # the text often is the greedy continuation
        lp = dict(top).get(tok)
        if lp is None:
            lp = top[-1][1] - 0.5 - 4.0 * random.Random(_h(key, tok, 1)).random()
        out.append(TokenChoice(tok, lp, tuple(top[: max(n_top, 0)])))
        key = _h(key, tok)
    return out
