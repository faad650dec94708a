"""Pure: one lm-eval invocation per task (its own stops, EOS string, cache and result files).

One task per invocation because `--gen_kwargs` and `eos_string` apply to every task of an
invocation, and a finished task must not be redone when a later one is interrupted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.eval.presets import (
    DEFAULT_NUM_CONCURRENT,
    RESULTS_DIR,
    TASKS_DIR,
    ApiPath,
    StopPlan,
    TaskPreset,
    max_length,
    plan_stops,
    stop_limit,
)


@dataclass(frozen=True, kw_only=True)
class ServerFacts:
    """What the plan needs from the server (from /version, /v1/models and the inventory)."""

    base_url: str  # as the client container reaches it (host network)
    model: str  # served model name
    tokenizer: str  # local path inside the container (the model dir, mounted read-only)
    max_model_len: int | None
    version: str | None
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class EvalOptions:
    tasks: tuple[str, ...]
    limit: int | None = None
    num_concurrent: int = DEFAULT_NUM_CONCURRENT
    include_path: str | None = None  # host folder of task YAMLs, copied to TASKS_DIR
    chat_tasks: tuple[str, ...] = ()  # local generate_until tasks to send through chat
    num_fewshot: int | None = None  # overrides every preset's few-shot count (not a pinned 0)
    suite: str | None = None  # the named suite the tasks came from (catalog.SUITES)
    keep_going: bool = False  # a task lm-eval fails on is recorded and the next one runs
    seed: int = 1234
    max_retries: int = 5
    request_timeout_s: int = 600
    client_image: str | None = None
    task_timeout_s: float = 6 * 3600.0
    max_resumes: int = 3
    # Every chat-path request's chat_template_kwargs (vLLM's request field, beside the
    # server's default): accuracy with thinking on costs one run, not a restart.
    chat_template_kwargs: JSONObject | None = None

    def to_json(self) -> JSONObject:
        doc = {k: getattr(self, k) for k in self.__dataclass_fields__}
        doc["tasks"], doc["chat_tasks"] = list(self.tasks), list(self.chat_tasks)
        return doc


@dataclass(frozen=True)
class TaskPlan:
    task: str
    preset: TaskPreset
    stops: StopPlan
    argv: tuple[str, ...]
    env: Mapping[str, str]
    shots: int | None = None  # None: the task YAML's own count (nothing passed)
    # what its requests carry as chat_template_kwargs (None: the server's default only;
    # completions-path tasks render no chat template, so they never carry any)
    chat_template_kwargs: JSONObject | None = None

    def to_json(self) -> JSONObject:
        return {
            "task": self.task,
            "path": self.preset.path.value,
            "note": self.preset.note,
            "stops_requested": list(self.stops.requested),
            "stops_sent": list(self.stops.sent),
            "stops_dropped": list(self.stops.dropped),
            "stop_limit": self.stops.limit,
            "stops": self.stops.describe(),
            "shots": self.shots,
            "metric": self.preset.metric,
            "extraction": self.preset.extraction,
            "unsafe_code": self.preset.unsafe_code,
            "env": dict(self.env),
            "argv": list(self.argv),
            "chat_template_kwargs": self.chat_template_kwargs,
        }


def model_args(
    preset: TaskPreset, stops: StopPlan, srv: ServerFacts, opts: EvalOptions
) -> JSONObject:
    chat = preset.path is ApiPath.CHAT
    args: JSONObject = {
        "model": srv.model,
        "base_url": srv.base_url.rstrip("/")
        + ("/v1/chat/completions" if chat else "/v1/completions"),
        "num_concurrent": opts.num_concurrent,
        "max_retries": opts.max_retries,
        "timeout": opts.request_timeout_s,
        "max_length": max_length(srv.max_model_len),
    }
    if not chat:
        # the model's own tokenizer, from the read-only model dir: context lengths for
        # log-likelihood are counted with it (never a hub download; HF is offline)
        args.update(tokenizer=srv.tokenizer, tokenizer_backend="huggingface")
    if stops.eos_string is not None:
        args["eos_string"] = stops.eos_string
    return args


def task_plan(task: str, preset: TaskPreset, srv: ServerFacts, opts: EvalOptions) -> TaskPlan:
    stops = plan_stops(preset.until, stop_limit(srv.version, srv.env), preset.keep)
    chat = preset.path is ApiPath.CHAT
    argv = [
        "python", "-m", "lm_eval", "run",
        "--model", "local-chat-completions" if chat else "local-completions",
        "--tasks", task,
        "--model_args", json.dumps(model_args(preset, stops, srv, opts), ensure_ascii=False),
        "--batch_size", "1",
        "--output_path", f"{RESULTS_DIR}/out",
        # request cache: an interrupted task resumes from the answers already received
        "--use_cache", f"{RESULTS_DIR}/cache/{task}",
        "--log_samples",
        "--seed", str(opts.seed),
    ]  # fmt: skip
    gen: JSONObject = {}
    if stops.requested:
        gen = {"until": list(stops.sent), "temperature": 0}
    kwargs = opts.chat_template_kwargs if chat else None
    if kwargs is not None:
        # lm-eval's chat model puts the gen_kwargs it does not know into the request body
        gen["chat_template_kwargs"] = kwargs
    if gen:
        argv += ["--gen_kwargs", json.dumps(gen, ensure_ascii=False)]
    shots = preset.run_shots(opts.num_fewshot)
    if shots is not None and not preset.shots_pinned:
        argv += ["--num_fewshot", str(shots)]
    if chat:
        argv += ["--apply_chat_template"]
        if shots:  # lm-eval's default with a chat template, said out loud for the manifest
            argv += ["--fewshot_as_multiturn", "true"]
    if opts.limit is not None:
        argv += ["--limit", str(opts.limit)]
    if opts.include_path:
        argv += ["--include_path", TASKS_DIR]
    if preset.unsafe_code:
        argv += ["--confirm_run_unsafe_code"]
    env = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.update(preset.env)
    return TaskPlan(task, preset, stops, tuple(argv), env, shots, kwargs)


def plan_tasks(
    presets: Sequence[TaskPreset], srv: ServerFacts, opts: EvalOptions
) -> list[TaskPlan]:
    return [task_plan(p.name, p, srv, opts) for p in presets]
