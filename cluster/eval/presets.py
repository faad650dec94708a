"""Pure planning for `tpwarden eval`: per-task path, stop strings, max length, lm-eval argv.

Why each rule exists (the field report's traps):
- vLLM >= 0.28 rejects more than `VLLM_MAX_STOP_STRINGS` (default 4) stop strings with HTTP 400
  (vllm/envs.py:1157 and vllm/entrypoints/generate/base/protocol.py:27 in 0.33.0). lm-eval's
  `local-completions` also appends the tokenizer's EOS string to `until`
  (lm_eval/models/utils.py `handle_stop_sequences`), so 4 task stops become 5 on the wire.
  We cap `until` at the limit and set `eos_string` to a kept stop so nothing is appended: vLLM
  stops on the EOS token by itself, the EOS *string* stop is redundant there.
- Log-likelihood needs echo + prompt logprobs, which only /v1/completions has; no chat template
  is applied on that path, so its numbers are only comparable with the same path.
- HumanEval scores by concatenating prompt + completion; a chat answer in a markdown block
  breaks that, so it goes through raw completions with four stops and the code-eval switches.
- lm-eval's default `max_length` (2048) silently left-truncates: use the server's max_model_len.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.errors import TpwardenError
from tpwarden.cluster.settings import EvalSpec

LM_EVAL_VERSION = "0.4.13"
# The lm-eval venv tools/lm_eval/install.sh makes on this machine: `eval image build` pins its
# versions, `eval datasets` runs its lm-eval, the lab's eval client image copies it.
EVAL_VENV = Path(os.environ.get("TPWARDEN_LMEVAL_VENV", f"/opt/tpwarden-lmeval-{LM_EVAL_VERSION}"))
DEFAULT_NUM_CONCURRENT: int = EvalSpec.model_fields["num_concurrent"].default  # the field's
CONTAINER_DIR = "/bench"
TASKS_DIR = f"{CONTAINER_DIR}/tasks"
RESULTS_DIR = f"{CONTAINER_DIR}/results"


class EvalError(TpwardenError):
    """An eval run could not be planned, started or compared."""


class ApiPath(StrEnum):
    """How a task reaches the server."""

    LOGLIKELIHOOD = "loglikelihood/completions"  # echo + logprobs on raw prompts
    COMPLETIONS = "generate/completions"  # raw prompt continuation, no chat template
    CHAT = "generate/chat"  # server applies its chat template and default kwargs


class EvalInputError(EvalError):
    """Bad input for an eval command (unknown task or suite, data not loaded): nothing ran."""

    exit_code = 2


@dataclass(frozen=True, kw_only=True)
class TaskPreset:
    """What tpwarden knows about a task before asking lm-eval.

    `output_type`, `until`, `yaml_shots`, `max_gen_toks` and `unsafe_code` restate lm-eval
    0.4.13's own task YAML (tests/unit/test_eval_presets.py checks them against the installed
    package); `path`, `keep`, `shots` and `metric` are our choices, with the reason in `note`."""

    name: str
    path: ApiPath
    output_type: str | None = None  # the YAML's (for a group: every leaf's)
    until: tuple[str, ...] | None = None  # the task YAML's own list (None: not generative)
    keep: tuple[str, ...] | None = None  # the stops we send instead (chosen, not truncated)
    yaml_shots: int | None = None  # the YAML's num_fewshot (None: not set, lm-eval runs 0)
    shots: int | None = None  # what we run (None: the YAML's own); --num-fewshot overrides
    shots_pinned: bool = False  # the YAML says num_fewshot: 0, which lm-eval never overrides
    max_gen_toks: int | None = None  # the YAML's (None: lm-eval's default, 256)
    metric: str | None = None  # the headline "metric,filter" key in lm-eval's results
    extraction: str = ""  # how the answer is taken from the output
    unsafe_code: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    note: str = ""

    def run_shots(self, override: int | None) -> int | None:
        """The few-shot count this task runs with (None: the task YAML's own, unchanged).
        lm-eval ignores `--num_fewshot` for a task whose YAML pins 0, so we do too."""
        if self.shots_pinned:
            return 0
        return override if override is not None else self.shots


_OUTPUT_TYPE = re.compile(r"^output_type:\s*['\"]?(\w+)", re.M)
_TASK_NAME = re.compile(r"^task:\s*['\"]?([\w.-]+)", re.M)
_UNSAFE = re.compile(r"^\s*unsafe_code:\s*true\b", re.M | re.I)


# --- server facts ----------------------------------------------------------------------------


def _version_tuple(version: str | None) -> tuple[int, ...] | None:
    m = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", version or "")
    return tuple(int(x or 0) for x in m.groups()) if m else None


def stop_limit(version: str | None, server_env: Mapping[str, str] | None = None) -> int | None:
    """The most stop strings one request may carry. None = no limit (vLLM <= 0.27).

    0.28.0 added `VLLM_MAX_STOP_STRINGS` (default 4; vllm#51447); the server container's env
    can change it. An unknown version gets the strict default: a cap costs nothing, a 400
    costs the run."""
    env = dict(server_env or {})
    if "VLLM_MAX_STOP_STRINGS" in env:
        return int(env["VLLM_MAX_STOP_STRINGS"])
    v = _version_tuple(version)
    if v is not None and v < (0, 28):
        return None
    return 4


@dataclass(frozen=True)
class StopPlan:
    """The `until` a task will send, and what was left out."""

    requested: tuple[str, ...]
    sent: tuple[str, ...]
    dropped: tuple[str, ...]
    limit: int | None
    eos_string: str | None  # set so lm-eval does not append the tokenizer's EOS as a 5th stop

    @property
    def capped(self) -> bool:
        return bool(self.dropped)

    def describe(self) -> str:
        if not self.requested:
            return "-"
        text = f"{len(self.sent)} stops"
        if self.capped:
            text += f" (capped from {len(self.requested)} at the server's limit {self.limit}; "
            text += f"dropped {', '.join(json.dumps(s) for s in self.dropped)})"
        return text


def plan_stops(
    requested: Sequence[str] | None, limit: int | None, keep: Sequence[str] | None = None
) -> StopPlan:
    """Cap a task's `until` list. `keep` (a preset's own choice) wins over truncation."""
    req = tuple(requested or ())
    if not req:
        return StopPlan((), (), (), limit, None)
    if keep is not None:
        sent = tuple(keep)
    elif limit is None or len(req) <= limit:
        sent = req
    else:
        sent = req[:limit]
    if limit is not None and len(sent) > limit:
        raise EvalError(f"preset sends {len(sent)} stops, server accepts {limit}")
    dropped = tuple(s for s in req if s not in sent)
    # lm-eval appends the EOS string unless it is already in the list: name a sent stop as
    # the "EOS string" so the request carries exactly `sent`.
    eos = sent[-1] if limit is not None and len(sent) >= limit else None
    return StopPlan(req, sent, dropped, limit, eos)


def max_length(max_model_len: int | None) -> int:
    """lm-eval's `max_length`: the server's limit, never lm-eval's silent 2048 default."""
    if not max_model_len:
        raise EvalError(
            "the server did not report max_model_len in /v1/models; refusing to let lm-eval "
            "default to 2048 (it would silently truncate long prompts)"
        )
    return int(max_model_len)


# --- local task definitions (--include-path) ----------------------------------------------------


def scan_task_yaml(text: str) -> JSONObject:
    """Pure: the few facts we need from a task YAML (without a YAML loader, because lm-eval's
    YAMLs use `!function` tags): task name, output type, `until`, unsafe_code."""
    name = _TASK_NAME.search(text)
    otype = _OUTPUT_TYPE.search(text)
    return {
        "task": name.group(1) if name else None,
        "output_type": otype.group(1) if otype else None,
        "until": _until_list(text),
        "unsafe_code": bool(_UNSAFE.search(text)),
    }


def _until_list(text: str) -> tuple[str, ...] | None:
    m = re.search(r"^\s+until:\s*(\[.*\])\s*$", text, re.M)
    if m:  # flow style: until: ["a", "b"]
        return tuple(json.loads(m.group(1)))
    m = re.search(r"^(\s+)until:\s*\n((?:\1\s+-\s.*\n?)+)", text, re.M)
    if not m:
        return None
    out = []
    for line in m.group(2).splitlines():
        item = line.strip()[1:].strip()
        out.append(json.loads(item) if item.startswith('"') else item.strip("'"))
    return tuple(out)
