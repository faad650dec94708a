"""Pure: the built-in task presets (every benchmark of the field report), the named suites, and
the preset for a task given on the command line.

Each preset restates lm-eval 0.4.13's task YAML (output type, stops, few-shot, max tokens; a
unit test reads the installed package and fails when they drift) and adds our choices: the
API path, the stops we keep under vLLM's limit, the few-shot count the report ran, the headline
metric. The report's score is shown beside each for reference, never compared automatically:
the report does not say every setting it ran with (see `note` and docs/eval.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.cluster.eval.presets import ApiPath, EvalInputError, TaskPreset

MC, GEN = "multiple_choice", "generate_until"
LL_EXTRACT = "none: log-likelihood of each choice label, highest wins"

# Stop lists as lm-eval 0.4.13's task YAMLs have them (tasks/<name>/...yaml).
_HUMANEVAL_UNTIL = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")
_KORMED_UNTIL = ("Q:", "</s>", "<|im_end|>", ".", "\n\n")
_KMMLU_DIRECT_UNTIL = ("Q:", "\n\n", "</s>", ".")
_GSM8K_UNTIL = ("Question:", "</s>", "<|im_end|>")


def _mc(name: str, shots: int | None, note: str) -> TaskPreset:
    return TaskPreset(
        name=name,
        path=ApiPath.LOGLIKELIHOOD,
        output_type=MC,
        shots=shots,
        metric="acc,none",
        extraction=LL_EXTRACT,
        note=note,
    )


PRESETS: dict[str, TaskPreset] = {
    "mmlu": _mc("mmlu", 5, "multiple_choice: echo+logprobs; 5-shot as the report (YAML: 0)"),
    "mmlu_pro": TaskPreset(
        name="mmlu_pro",
        path=ApiPath.CHAT,
        output_type=GEN,
        until=("Question:",),
        yaml_shots=5,
        shots=5,
        max_gen_toks=2048,
        metric="exact_match,custom-extract",
        extraction='regex "answer is \\(?([A-J])\\)?" (custom-extract), first match',
        note="5-shot chain of thought through chat (few-shot as turns); regex answer",
    ),
    "kmmlu": _mc("kmmlu", 5, "multiple_choice: echo+logprobs; 5-shot as the report (YAML: 0)"),
    "kmmlu_direct": TaskPreset(
        name="kmmlu_direct",
        path=ApiPath.COMPLETIONS,
        output_type=GEN,
        until=_KMMLU_DIRECT_UNTIL,
        shots=5,
        metric="exact_match,none",
        extraction="none: the generated text is the answer (spaces ignored), exact match",
        note="5-shot as the report's KMMLU (YAML: 0), as a continuation: no extraction filter, "
        "so the answer must be the bare letter the shots teach; 4 stops + lm-eval's EOS capped "
        "to 4",
    ),
    "kormedmcqa": TaskPreset(
        name="kormedmcqa",
        path=ApiPath.CHAT,
        output_type=GEN,
        until=_KORMED_UNTIL,
        shots=5,
        max_gen_toks=1024,
        metric="exact_match,extract_answer",
        extraction="KorMedMCQA paper's cascade (utils.ExtractChoiceFilter): 정답 X, then X.",
        note="5-shot as the report (YAML: 0); chat with the server's default template kwargs; "
        "the YAML's 5 stops capped to 4",
    ),
    "medqa_4options": _mc("medqa_4options", None, "multiple_choice: echo+logprobs, 0-shot"),
    "medmcqa": _mc(
        "medmcqa", None, "multiple_choice: echo+logprobs, 0-shot; scored on the validation split"
    ),
    "gsm8k": TaskPreset(
        name="gsm8k",
        path=ApiPath.CHAT,
        output_type=GEN,
        until=_GSM8K_UNTIL,
        yaml_shots=5,
        shots=5,
        metric="exact_match,strict-match",
        extraction='regex "#### N" (strict-match; flexible-extract: the last number) ',
        note="5-shot through chat as the report ran it (few-shot as turns); regex answer",
    ),
    "humaneval": TaskPreset(
        name="humaneval",
        path=ApiPath.COMPLETIONS,
        output_type=GEN,
        until=_HUMANEVAL_UNTIL,
        keep=("\nclass", "\ndef", "\nif", "\nprint"),
        yaml_shots=0,
        shots=0,
        shots_pinned=True,
        max_gen_toks=1024,
        metric="pass@1,create_test",
        extraction="prompt + completion executed against the tests (create_test)",
        unsafe_code=True,
        env={"HF_ALLOW_CODE_EVAL": "1"},
        note="prompt + completion executed; chat scored 17% vs 75% on completions",
    ),
}


@dataclass(frozen=True)
class ReportScore:
    """A score the field report gives (lm-eval 0.4.13, thinking off, temperature 0)."""

    benchmark: str
    score: float  # points (percent)
    metric: str


REPORT: dict[str, ReportScore] = {
    "mmlu": ReportScore("MMLU", 87.9, "acc"),
    "mmlu_pro": ReportScore("MMLU-Pro", 77.6, "exact_match"),
    "kmmlu": ReportScore("KMMLU", 64.5, "acc"),
    "kmmlu_direct": ReportScore("KMMLU (direct)", 66.0, "exact_match"),
    "kormedmcqa": ReportScore("KorMedMCQA", 85.4, "exact_match"),
    "medqa_4options": ReportScore("MedQA", 86.3, "acc"),
    "medmcqa": ReportScore("MedMCQA", 76.4, "acc"),
    "gsm8k": ReportScore("GSM8K", 94.5, "exact_match"),
    "humaneval": ReportScore("HumanEval", 75.0, "pass@1"),
}

# The report's whole evaluation, in its order (~9.5 h there: MMLU 2.5 h, KMMLU 3 h).
SUITES: dict[str, tuple[str, ...]] = {"field": tuple(REPORT)}
DEFAULT_TASKS = ("mmlu", "kmmlu", "kormedmcqa", "humaneval", "gsm8k")


def suite_tasks(name: str) -> tuple[str, ...]:
    try:
        return SUITES[name]
    except KeyError:
        raise EvalInputError(f"no suite {name!r}; known: {', '.join(sorted(SUITES))}") from None


def preset_rows() -> list[JSONObject]:
    """`eval presets`: one row per built-in preset, the report's score beside it."""
    rows = []
    for name, p in PRESETS.items():
        ref = REPORT.get(name)
        rows.append(
            {
                "task": name,
                "path": p.path.value,
                "output_type": p.output_type,
                "shots": p.run_shots(None) or 0,
                "shots_pinned": p.shots_pinned,
                "stops_yaml": list(p.until or ()),
                "stops_kept": list(p.keep) if p.keep is not None else None,
                "max_gen_toks": p.max_gen_toks,
                "metric": p.metric,
                "extraction": p.extraction,
                "note": p.note,
                "suites": sorted(s for s, tasks in SUITES.items() if name in tasks),
                "report": None if ref is None else ref.__dict__,
            }
        )
    return rows


def preset_for(task: str, local: Mapping[str, JSONValue] | None, chat: bool = False) -> TaskPreset:
    """A built-in preset, else one derived from the local YAML's output type."""
    if task in PRESETS and local is None:
        return PRESETS[task]
    if local is None:
        raise EvalInputError(
            f"{task}: no preset and no task YAML under --include-path; known: "
            f"{', '.join(sorted(PRESETS))}"
        )
    otype = local.get("output_type")
    if otype in ("multiple_choice", "loglikelihood", "loglikelihood_rolling"):
        return TaskPreset(
            name=task, path=ApiPath.LOGLIKELIHOOD, output_type=otype, note=f"local {otype}"
        )
    if otype == "generate_until":
        unsafe = bool(local.get("unsafe_code"))
        until = local.get("until")
        humaneval = PRESETS["humaneval"]
        return TaskPreset(
            name=task,
            path=ApiPath.CHAT if chat and not unsafe else ApiPath.COMPLETIONS,
            output_type=otype,
            until=until,
            # a HumanEval copy gets HumanEval's choice of four (drop "\n#", keep "\nprint")
            keep=humaneval.keep if until == humaneval.until else None,
            unsafe_code=unsafe,
            env={"HF_ALLOW_CODE_EVAL": "1"} if unsafe else {},
            note="local generate_until" + (" (executes code)" if unsafe else ""),
        )
    raise EvalInputError(f"{task}: output_type {otype!r} in its YAML is not supported")
