"""Pure: lm-eval's results JSON -> table rows; two runs -> per-task deltas, and the refusal to
compare runs whose server defaults (thinking on/off) or task paths differ."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tpwarden.cluster.bench import manifest as bm
from tpwarden.cluster.durable import JSONObject, JSONValue

# The headline metric per task type, in order of preference (lm-eval key = "metric,filter").
_PRIMARY = ("pass@1", "exact_match", "acc", "acc_norm", "f1")


@dataclass(frozen=True, kw_only=True)
class Score:
    task: str
    path: str
    n: int | None
    metric: str | None
    score: float | None
    stderr: float | None
    stops: str

    def to_json(self) -> JSONObject:
        return dict(self.__dict__)


def primary_metric(
    metrics: Mapping[str, JSONValue], prefer: str | None = None
) -> tuple[str | None, float | None, float | None]:
    """(metric key, value, stderr) of the headline metric in one task's results block: the
    preset's `prefer` ("exact_match,strict-match") when present, else by _PRIMARY."""
    keys = [k for k in metrics if "," in k and "_stderr" not in k]
    if prefer in keys and isinstance(metrics[prefer], (int, float)):
        keys = [prefer]
    for name in _PRIMARY:
        for key in keys:
            if key.split(",", 1)[0] == name and isinstance(metrics[key], (int, float)):
                m, flt = key.split(",", 1)
                err = metrics.get(f"{m}_stderr,{flt}")
                return key, float(metrics[key]), err if isinstance(err, (int, float)) else None
    return None, None, None


def score_row(
    task: str, path: str, stops: str, doc: Mapping[str, JSONValue], metric: str | None = None
) -> Score:
    """One task's row from lm-eval's `results_*.json` (a group's row is its aggregate)."""
    metrics = (doc.get("results") or {}).get(task) or {}
    key, value, err = primary_metric(metrics, metric)
    n = n_items(task, doc)
    return Score(task=task, path=path, n=n, metric=key, score=value, stderr=err, stops=stops)


def failed_row(task: str, path: str, stops: str, error: str) -> JSONObject:
    """The row of a task that did not finish (a suite went on without it)."""
    row = Score(task=task, path=path, n=None, metric=None, score=None, stderr=None, stops=stops)
    last = error.strip().splitlines()[-1] if error.strip() else "failed"
    return {**row.to_json(), "error": last[:300]}


def n_items(task: str, doc: Mapping[str, JSONValue], depth: int = 0) -> int | None:
    """Items scored: a task's own count, a group's the sum of its subtasks' (lm-eval keeps
    `n-samples` per leaf task and the tree in `group_subtasks`)."""
    n_doc = (doc.get("n-samples") or {}).get(task)
    if n_doc:
        n = n_doc.get("effective", n_doc.get("original"))
        return n if isinstance(n, int) else None
    children = (doc.get("group_subtasks") or {}).get(task) or []
    counts = [n_items(c, doc, depth + 1) for c in children] if depth < 8 else []
    known = [c for c in counts if isinstance(c, int)]
    return sum(known) if known else None


@dataclass(frozen=True)
class Refusal:
    reasons: tuple[str, ...]


def comparability(a: Mapping[str, JSONValue], b: Mapping[str, JSONValue]) -> Refusal | None:
    """Runs under different chat-template defaults (thinking) or with a task on a different
    path measure different things; None when comparable."""
    reasons = []
    da, db = a.get("server_defaults") or {}, b.get("server_defaults") or {}
    if da.get("thinking") != db.get("thinking"):
        reasons.append(f"thinking default differs: A {_onoff(da)} vs B {_onoff(db)}")
    if da.get("chat_template_kwargs") != db.get("chat_template_kwargs"):
        reasons.append(
            "server chat template kwargs differ: "
            f"A {json.dumps(da.get('chat_template_kwargs'))} vs "
            f"B {json.dumps(db.get('chat_template_kwargs'))}"
        )
    # --chat-template-kwargs: the requests' own, beside the server's default (thinking on)
    ra = (a.get("options") or {}).get("chat_template_kwargs")
    rb = (b.get("options") or {}).get("chat_template_kwargs")
    if ra != rb:
        reasons.append(
            f"request chat template kwargs differ: A {json.dumps(ra)} vs B {json.dumps(rb)}"
        )
    pa, pb = task_paths(a), task_paths(b)
    for task in sorted(set(pa) & set(pb)):
        if pa[task] != pb[task]:
            reasons.append(f"{task}: path {pa[task]} vs {pb[task]}")
    return Refusal(tuple(reasons)) if reasons else None


def _onoff(d: Mapping[str, JSONValue]) -> str:
    t = d.get("thinking")
    return "?" if t is None else ("on" if t else "off")


def task_paths(manifest: Mapping[str, JSONValue]) -> dict[str, str]:
    return {p["task"]: p["path"] for p in manifest.get("plans") or []}


def eval_differences(a: Mapping[str, JSONValue], b: Mapping[str, JSONValue]) -> list[bm.Difference]:
    """`bench compare`'s manifest diff plus what only an eval run records."""
    out = list(bm.manifest_diff(a, b))
    extra: dict[str, Callable[[Mapping[str, JSONValue]], JSONValue]] = {
        "lm-eval version": lambda m: m.get("lm_eval_version"),
        "option limit": lambda m: (m.get("options") or {}).get("limit"),
        "option num_concurrent": lambda m: (m.get("options") or {}).get("num_concurrent"),
        "option num_fewshot": lambda m: (m.get("options") or {}).get("num_fewshot"),
        "server restarts during run": lambda m: len(m.get("restarts") or []),
    }
    for fact, get in extra.items():
        if get(a) != get(b):
            out.append(bm.Difference(fact, get(a), get(b), fact.startswith("option")))
    pa, pb = task_paths(a), task_paths(b)
    for task in sorted(set(pa) | set(pb)):
        if pa.get(task) != pb.get(task):
            out.append(bm.Difference(f"{task} path", pa.get(task), pb.get(task), True))
    out.sort(key=lambda d: (not d.likely_cause, d.fact))
    return out


def compare_scores(
    a: Sequence[Mapping[str, JSONValue]], b: Sequence[Mapping[str, JSONValue]]
) -> list[JSONObject]:
    """Join rows by task; delta in points (score is a fraction, delta x100)."""
    by_a = {r["task"]: r for r in a}
    by_b = {r["task"]: r for r in b}
    out = []
    for task in sorted(set(by_a) | set(by_b)):
        ra, rb = by_a.get(task, {}), by_b.get(task, {})
        sa, sb = ra.get("score"), rb.get("score")
        delta = 100.0 * (sb - sa) if isinstance(sa, float) and isinstance(sb, float) else None
        out.append(
            {
                "task": task,
                "path": rb.get("path") or ra.get("path"),
                "a": sa,
                "b": sb,
                "n_a": ra.get("n"),
                "n_b": rb.get("n"),
                "delta_points": delta,
            }
        )
    return out
