"""A scripted first-token distribution for prompts that end in an answer cue (``Answer:``).

Tests of logprob-based decisions need to say exactly which label tokens the server returns and
with what logprob; the hash-based letter distribution in ``textgen`` cannot be steered. This hook
reads a JSON file named by ``VLLM_SIM_LOGPROB_ORACLE`` (re-read when it changes, like the fault
file) and, when a rule matches the prompt, replaces the first generated position's candidates.
Response shapes do not change: the result is an ordinary best-first candidate list.

    {"rules": [{"match": "Q7", "labels": {"A": -0.1, "B": -2.4}},
               {"match": "Q8", "sequence": [{"labels": {"A": -0.6, "B": -0.8}},
                                            {"labels": {"A": -0.8, "B": -0.6}}]},
               {"match": "Q9", "by_text": {"Heart": -0.05, "Liver": -3.0}},
               {"match": "Q10", "tokens": {" A": -0.7, "A": -1.2, "(": -1.5}}],
     "position_bias": {"A": 2.0},
     "jitter": 0.0}

* ``match``: substring of the prompt (absent: every prompt with an answer cue).
* one source: ``labels`` (label -> logprob, rendered like the letters of ``textgen``), ``tokens``
  (token text -> logprob, verbatim: variants, split or missing labels), ``by_text`` (option text
  -> logprob, mapped to whatever letter the option has in this prompt: reordering the choices
  moves the probability with the text), or ``sequence`` (a list of sources; the n-th matching
  request uses entry n mod len: injected flips).
* ``position_bias`` (per rule or global): label -> logprob added before renormalising.
* ``jitter`` (per rule or global): Gaussian noise (sigma, in logprob units) on every scripted token.

The scripted tokens keep their total probability; the rest of the mass goes to filler words.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
from typing import Any

_OPTION = re.compile(r"^\s*\(?([A-J])[\.\):]\s+(.*?)\s*$", re.M)
_FILLER = ("the", "model", "answer", "is", "not", "sure", "maybe", "it", "option", "correct")


class LogprobOracle:
    def __init__(self, path: str | None, seed: int = 0) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self._doc: dict[str, Any] = {}
        self._counts: dict[int, int] = {}
        self._rng = random.Random(seed)

    @classmethod
    def from_env(cls) -> LogprobOracle:
        return cls(
            os.environ.get("VLLM_SIM_LOGPROB_ORACLE"), int(os.environ.get("VLLM_SIM_SEED", "0"))
        )

    def _load(self) -> dict[str, Any]:
        if not self.path:
            return {}
        try:
            st = os.stat(self.path)
        except OSError:
            self._doc, self._stamp = {}, None
            return {}
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp != self._stamp:
            try:
                with open(self.path, encoding="utf-8") as f:
                    self._doc = json.load(f)
            except (OSError, ValueError):
                self._doc = {}  # a half-written file: keep answering, pick it up next time
            self._stamp = stamp
            self._counts = {}
        return self._doc

    def first_token(self, prompt: str, n_top: int) -> list[tuple[str, float]] | None:
        """Best-first candidates for the first generated token, or None when no rule matches."""
        doc = self._load()
        for i, rule in enumerate(doc.get("rules") or []):
            if rule.get("match", "") in prompt:
                source = rule
                seq = rule.get("sequence")
                if seq:
                    n = self._counts.get(i, 0)
                    self._counts[i] = n + 1
                    source = seq[n % len(seq)]
                scripted = self._scripted(source, prompt)
                bias = rule.get("position_bias", doc.get("position_bias")) or {}
                jitter = float(rule.get("jitter", doc.get("jitter", 0.0)))
                return _with_filler(self._perturb(scripted, bias, jitter), n_top)
        return None

    def _scripted(self, source: dict[str, Any], prompt: str) -> dict[str, float]:
        sep = "" if prompt.endswith((" ", "\n")) else " "
        if "tokens" in source:
            return {str(t): float(lp) for t, lp in source["tokens"].items()}
        if "by_text" in source:
            letter_of = {text: letter for letter, text in _OPTION.findall(prompt)}
            return {
                sep + letter_of[text]: float(lp)
                for text, lp in source["by_text"].items()
                if text in letter_of
            }
        return {sep + str(k): float(lp) for k, lp in (source.get("labels") or {}).items()}

    def _perturb(
        self, scripted: dict[str, float], bias: dict[str, float], jitter: float
    ) -> dict[str, float]:
        if not scripted or (not bias and jitter <= 0):
            return scripted
        mass = sum(math.exp(lp) for lp in scripted.values())
        moved = {
            t: lp + float(bias.get(t.strip(), 0.0)) + (self._rng.gauss(0, jitter) if jitter else 0)
            for t, lp in scripted.items()
        }
        total = sum(math.exp(lp) for lp in moved.values())
        return {t: lp - math.log(total) + math.log(mass) for t, lp in moved.items()}


def _with_filler(scripted: dict[str, float], n_top: int) -> list[tuple[str, float]]:
    out = sorted(scripted.items(), key=lambda t: -t[1])
    rest = max(1.0 - sum(math.exp(lp) for _, lp in out), 1e-9)
    floor = min((lp for _, lp in out), default=0.0)
    for i, word in enumerate(w for w in _FILLER if " " + w not in scripted):
        if len(out) >= max(n_top, len(scripted) + 1):
            break
        # halves of the leftover mass, and always below every scripted token
        out.append((" " + word, min(math.log(rest / 2 ** (i + 1)), floor - 0.01 * (i + 1))))
    return out
