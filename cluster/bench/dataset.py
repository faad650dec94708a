"""The prompts a benchmark sends (issue 52: `tune drafter --dataset`, `bench sweep --prompts`),
read from the operator's own file in the formats `vllm bench serve` reads. Pure.

- JSONL, one request a line: ``{"prompt": ...}`` (its ``custom`` dataset, and tpwarden's own
  prompt sets; ``output_tokens`` and other keys ignored: the benchmark forces the output length),
  ``{"messages": [...]}`` (an OpenAI chat request, as a serving log records it: the first user
  turn; also inside ``"body"``, a batch file's line for `vllm run-batch`) or
  ``{"conversations": [...]}`` (a ShareGPT entry a line);
- ShareGPT JSON, a list of ``{"conversations": [{"from", "value"}, ...]}``: the first turn is the
  prompt, as its ``sharegpt`` loader takes it.

The client is given the prompts as a ShareGPT file (`to_sharegpt`: the ``custom`` loader needs
pandas, which a serving image may lack). That loader skips a prompt of more than 1024 tokens or
1 + 2048 with the output (vllm/benchmarks/datasets/datasets.py ``is_valid_sequence``, 0.33.0)
and samples again from the rest: `PromptSet.maybe_skipped` counts the prompts that may be that
long (a token is at least a byte: those longer in UTF-8 bytes), so the advice says when its
sample is not the whole file.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.errors import ConfigError

MAX_PROMPT_TOKENS, MAX_TOTAL_TOKENS = 1024, 2048  # the sharegpt loader's bounds (vLLM 0.33.0)
FORMATS = ("jsonl", "sharegpt")


@dataclass(frozen=True)
class PromptSet:
    source: str
    format: str  # "jsonl" (a request a line) or "sharegpt" (one JSON list)
    prompts: tuple[str, ...]
    sha256: str  # of the file's bytes

    def maybe_skipped(self, output_len: int) -> int:
        """Prompts that may be over the sharegpt loader's bounds (see the module docstring)."""
        return sum(
            1
            for p in self.prompts
            if (n := len(p.encode("utf-8")) + 1) > MAX_PROMPT_TOKENS
            or n + output_len > MAX_TOTAL_TOKENS
        )

    def to_json(self, output_len: int | None = None) -> JSONObject:
        doc: JSONObject = {
            "path": self.source,
            "format": self.format,
            "prompts": len(self.prompts),
            "sha256": self.sha256[:16],
        }
        if output_len is not None:
            doc["maybe_skipped"] = self.maybe_skipped(output_len)
        return doc


def read_prompts(path: Path) -> PromptSet:
    """The prompts of the file at ``path``; ConfigError naming the file and line otherwise."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", file=str(path)) from None
    return parse_prompts(data.decode("utf-8", errors="replace"), str(path), data)


def parse_prompts(text: str, source: str, raw: bytes | None = None) -> PromptSet:
    """`read_prompts` of text held elsewhere (``raw``: the bytes the digest is of)."""
    digest = hashlib.sha256(raw if raw is not None else text.encode("utf-8")).hexdigest()
    if text.lstrip().startswith("["):
        fmt, prompts = "sharegpt", _sharegpt(text, source)
    else:
        fmt, prompts = "jsonl", _jsonl(text, source)
    if not prompts:
        raise ConfigError(
            "no prompts in the file",
            file=source,
            hint='JSONL with a "prompt" or chat "messages" per line, or ShareGPT JSON',
        )
    return PromptSet(source, fmt, tuple(prompts), digest)


def _jsonl(text: str, source: str) -> list[str]:
    out = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise ConfigError(f"not JSON: {exc}", file=source, line=n) from None
        out.append(_prompt_of(item, source, n))
    return out


def _sharegpt(text: str, source: str) -> list[str]:
    try:
        items = json.loads(text)
    except ValueError as exc:
        lineno = getattr(exc, "lineno", None)
        raise ConfigError(f"not JSON: {exc}", file=source, line=lineno) from None
    if not isinstance(items, list):
        raise ConfigError("a ShareGPT file is one JSON list", file=source)
    return [_prompt_of(item, source, None, i) for i, item in enumerate(items)]


def _prompt_of(item: object, source: str, line: int | None, index: int | None = None) -> str:
    """One request's prompt: its "prompt", its first user message, or its first turn."""
    where = "" if index is None else f"entry {index}: "
    if isinstance(item, dict) and isinstance(item.get("body"), dict):
        item = item["body"]  # a batch file's request (`vllm run-batch`, OpenAI's Batch API)
    if isinstance(item, dict):
        if isinstance(item.get("prompt"), str):
            return str(item["prompt"])
        if isinstance(item.get("messages"), list):
            found = _first_user(item["messages"])
            if found is not None:
                return found
        if isinstance(item.get("conversations"), list) and item["conversations"]:
            first = item["conversations"][0]
            if isinstance(first, dict) and isinstance(first.get("value"), str):
                return str(first["value"])
    raise ConfigError(
        f'{where}no "prompt" string, user "messages" or ShareGPT "conversations"',
        file=source,
        line=line,
        hint='e.g. {"prompt": "..."} or {"messages": [{"role": "user", "content": "..."}]}',
    )


def _first_user(messages: Sequence[object]) -> str | None:
    for m in messages:
        if isinstance(m, dict) and m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):  # content parts: the text ones, joined
                texts = [p.get("text") for p in content if isinstance(p, dict)]
                return "\n".join(t for t in texts if isinstance(t, str)) or None
    return None


def sharegpt_json(text: str, source: str = "prompts") -> bytes:
    """A prompt file's text (any format above) as the ShareGPT file `vllm bench serve
    --dataset-name sharegpt` reads."""
    return to_sharegpt(parse_prompts(text, source).prompts)


def to_sharegpt(prompts: Sequence[str]) -> bytes:
    """The prompts as ShareGPT JSON (the loader wants a second turn; its text only matters when
    no output length is forced)."""
    convs = [
        {
            "id": f"p{i}",
            "conversations": [
                {"from": "human", "value": prompt},
                {"from": "gpt", "value": "(output length forced by the benchmark)"},
            ],
        }
        for i, prompt in enumerate(prompts)
    ]
    return json.dumps(convs, ensure_ascii=False).encode()
