"""Pure: how far a night-long eval is, and what the suite did.

Progress comes from lm-eval's own "Requesting API" bar in the client's log (requests answered
of the requests this attempt sends; a resumed attempt counts only what its cache lacks). The
rate is measured over a sliding window of those counts, so the ETA follows the server as it is
now (a restart, a slower task), not an average since dusk. The suite summary says, per task,
whether it ran once, was resumed after a failure (a server restart), or was kept from an
earlier invocation (`--resume`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tpwarden.cluster.durable import JSONObject, JSONValue

# tqdm's line: "Requesting API:  45%|████▌     | 450/1000 [00:30<00:37, 14.9it/s]"
_BAR = re.compile(r"Requesting API:\s*\d+%\|[^|]*\|\s*(\d+)/(\d+)\s*\[")
DEFAULT_WINDOW_S = 600.0


@dataclass(frozen=True)
class Sample:
    """One observation: seconds since the task's attempt started, requests answered."""

    t_s: float
    done: int


@dataclass(frozen=True)
class TaskProgress:
    task: str
    position: int  # 1-based place in the run's task list
    count: int
    attempt: int
    done: int | None
    total: int | None
    rate_rps: float | None  # measured over the window; None until two samples differ in time
    eta_s: float | None

    def to_json(self) -> JSONObject:
        return dict(self.__dict__)


def parse_bar(log_text: str) -> tuple[int, int] | None:
    """(answered, total) from the last "Requesting API" bar in a client log, None before it."""
    last = None
    for m in _BAR.finditer(log_text):
        last = m
    return (int(last.group(1)), int(last.group(2))) if last else None


def measured_rate(samples: Sequence[Sample], window_s: float = DEFAULT_WINDOW_S) -> float | None:
    """Requests per second over the last `window_s` of samples (None: not measurable yet)."""
    if len(samples) < 2:
        return None
    last = samples[-1]
    first = next((s for s in samples if last.t_s - s.t_s <= window_s), samples[0])
    if first is last:
        first = samples[-2]
    dt = last.t_s - first.t_s
    if dt <= 0:
        return None
    return max(0.0, (last.done - first.done) / dt)


def estimate(
    task: str,
    position: int,
    count: int,
    attempt: int,
    samples: Sequence[Sample],
    total: int | None,
    window_s: float = DEFAULT_WINDOW_S,
) -> TaskProgress:
    """The task's progress and ETA from its samples (no ETA while nothing was measured, or
    while the rate is zero: a stalled server has no honest ETA)."""
    done = samples[-1].done if samples else None
    rate = measured_rate(samples, window_s)
    eta = None
    if rate and total is not None and done is not None:
        eta = max(0, total - done) / rate
    return TaskProgress(task, position, count, attempt, done, total, rate, eta)


class TaskWatch:
    """The samples of one attempt of one task, fed with the client's log as it arrives.
    Time is passed in (monotonic seconds); it starts nothing and reads no clock."""

    def __init__(self, task: str, position: int, count: int, attempt: int, start_s: float):
        self.task, self.position, self.count, self.attempt = task, position, count, attempt
        self.start_s = start_s
        self.samples: list[Sample] = []
        self.total: int | None = None

    def observe(self, log_text: str, now_s: float) -> TaskProgress:
        bar = parse_bar(log_text)
        if bar is not None:
            done, self.total = bar
            if self.samples and done < self.samples[-1].done:  # a new bar: start over
                self.samples.clear()
            self.samples.append(Sample(now_s - self.start_s, done))
        return estimate(
            self.task, self.position, self.count, self.attempt, self.samples, self.total
        )


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def render_progress(p: TaskProgress) -> str:
    """One line: "gsm8k [8/9] attempt 1: 450/1319 requests (34%), 3.2 req/s, ETA 4m31s"."""
    head = f"{p.task} [{p.position}/{p.count}]" + (f" attempt {p.attempt}" if p.attempt > 1 else "")
    if p.done is None or p.total is None:
        return f"{head}: preparing (no requests answered yet)"
    pct = f" ({100 * p.done / p.total:.0f}%)" if p.total else ""
    rate = "rate ?" if p.rate_rps is None else f"{p.rate_rps:.1f} req/s"
    eta = "ETA ?" if p.eta_s is None else f"ETA {fmt_duration(p.eta_s)}"
    return f"{head}: {p.done}/{p.total} requests{pct}, {rate}, {eta}"


def suite_summary(
    manifest: Mapping[str, JSONValue], rows: Sequence[Mapping[str, JSONValue]]
) -> list[JSONObject]:
    """Per task in run order: score, attempts, and how it ended (ran, resumed, kept)."""
    attempts: dict[str, int] = {}
    for a in manifest.get("attempts") or []:
        attempts[a["task"]] = attempts.get(a["task"], 0) + 1
    restarts: dict[str, int] = {}
    for r in manifest.get("restarts") or []:
        if r.get("resume"):
            restarts[r["task"]] = restarts.get(r["task"], 0) + 1
    kept = set(manifest.get("kept") or [])
    failed = {f["task"] for f in manifest.get("failed") or []}
    out = []
    for row in rows:
        task = row["task"]
        n_att = attempts.get(task, 0)
        # resumed: more than one attempt, in this invocation or an earlier one (--resume keeps
        # the attempts); kept: finished by an earlier invocation, not run by this one
        how = "resumed" if n_att > 1 else "kept" if task in kept else "ran"
        how = "failed" if task in failed and row.get("score") is None else how
        out.append(
            {
                "task": task,
                "path": row.get("path"),
                "score": row.get("score"),
                "metric": row.get("metric"),
                "n": row.get("n"),
                "attempts": n_att,
                "resumes": restarts.get(task, 0),
                "how": how,
            }
        )
    return out


def render_summary(suite: str | None, summary: Sequence[Mapping[str, JSONValue]]) -> list[str]:
    """Lines for the end of a run: one per task, then which tasks were resumed or kept."""
    lines = [f"suite {suite}:" if suite else "tasks:"]
    for s in summary:
        score = "-" if not isinstance(s["score"], (int, float)) else f"{100 * s['score']:.1f}"
        lines.append(f"  {s['task']}: {score} ({s['metric'] or '-'}, n={s['n'] or '-'}) {s['how']}")
    resumed = [s["task"] for s in summary if s["how"] == "resumed"]
    kept = [s["task"] for s in summary if s["how"] == "kept"]
    if resumed:
        lines.append(f"resumed after a failure (server restart): {', '.join(resumed)}")
    if kept:
        lines.append(f"kept from an earlier invocation (--resume): {', '.join(kept)}")
    failed = [s["task"] for s in summary if s["how"] == "failed"]
    if failed:
        lines.append(f"FAILED (no score; the run went on): {', '.join(failed)}")
    return lines
