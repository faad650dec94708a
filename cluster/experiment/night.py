"""A night's results directory, `<state>/experiment/<cluster>/<plan's stem>/`:

* `run.json`: the run record (the plan, production's rollout revision and config hash at the
  start, when it started, its deadline, when it finished; `finished` is null while the night
  is unfinished), written atomically at the start, on each resume and at the end;
* `production-start.result.json`, `<variant>.result.json`, `production-end.result.json`: each
  written atomically when its step ends; `<name>.failed.json` for one that failed;
* `events.jsonl`: one line per step (`cluster.event_log.EventLog`), the night's and its
  guard's (`experiment.guard`: `guard.json`, `guard.lock`, `guard.log` beside them).

What is left is `resume.resume_state` of the file names; a variant skipped for lack of time is
an event, never a file, so a later `--resume` may still run it. The figures and the drift of
production between its two canaries are read from the canaries' own JSON (`CanaryOutcome`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tpwarden.cluster.durable import JSONObject, JSONValue, atomic_write_json, read_json
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.event_log import EventLog, read_events
from tpwarden.cluster.experiment.resume import (
    ResumeState,
    failure_name,
    result_name,
    resume_state,
)

RUN = "run.json"
EVENTS = "events.jsonl"


@dataclass
class RunRecord:
    """One night of a plan: what production was when it started, and its deadline."""

    plan: str
    inventory: str
    cluster: str
    production_revision: str  # the rollout store's revision of every file a variant edits
    production_hash: str  # production's config hash: what every node runs once restored
    started: float
    deadline: float
    finished: float | None = None  # None: unfinished (a run was killed, or its restore failed)
    resumed: list[float] = field(default_factory=list)
    aborted_at: float | None = None  # `experiment abort`: when, and by whom
    aborted_by: str | None = None

    def to_json(self) -> JSONObject:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: JSONValue, where: str) -> RunRecord:
        fields = cls.__dataclass_fields__
        if not isinstance(doc, dict) or not all(k in doc for k in list(fields)[:7]):
            raise ConfigError("not a run record", file=where,
                              hint="remove the results directory for a fresh night")  # fmt: skip
        return cls(**{k: v for k, v in doc.items() if k in fields})


class NightFiles:
    """The results directory: the run record, the result and failure files, the events."""

    def __init__(self, root: Path, clock: Callable[[], float] = time.time) -> None:
        self.root = Path(root)
        self.clock = clock
        self._events: EventLog | None = None

    def read_run(self) -> RunRecord | None:
        doc = read_json(self.root / RUN)
        return None if doc is None else RunRecord.from_json(doc, str(self.root / RUN))

    def write_run(self, run: RunRecord) -> None:
        atomic_write_json(self.root / RUN, run.to_json())

    def names(self) -> list[str]:
        return sorted(os.listdir(self.root)) if self.root.is_dir() else []

    def state(self, order: Sequence[str]) -> ResumeState:
        return resume_state(order, self.names())

    def result(self, name: str) -> JSONObject | None:
        doc = read_json(self.root / result_name(name))
        return doc if isinstance(doc, dict) else None

    def failure(self, name: str) -> JSONObject | None:
        doc = read_json(self.root / failure_name(name))
        return doc if isinstance(doc, dict) else None

    def write_result(self, name: str, doc: JSONObject) -> None:
        atomic_write_json(self.root / result_name(name), doc)

    def write_failure(self, name: str, doc: JSONObject) -> None:
        atomic_write_json(self.root / failure_name(name), doc)

    def event(self, kind: str, **fields: JSONValue) -> JSONObject:
        if self._events is None:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._events = EventLog(str(self.root / EVENTS), self.clock)
        return self._events.append(kind, **fields)

    def events(self) -> list[JSONObject]:
        return read_events(str(self.root / EVENTS)).events

    def close(self) -> None:
        if self._events is not None:
            self._events.close()
            self._events = None


def skipped_by_time(events: Sequence[JSONObject]) -> dict[str, str]:
    """Each variant whose latest begin or skip event is a skip, with the policy's reason."""
    out: dict[str, str] = {}
    for ev in events:
        name = ev.get("variant")
        if not isinstance(name, str):
            continue
        if ev.get("kind") == "variant_skipped":
            out[name] = str(ev.get("reason") or "")
        elif ev.get("kind") == "variant_begin":
            out.pop(name, None)
    return out


def tok_s(canary: JSONValue) -> dict[int, float]:
    """A canary's median output tok/s per level (its `to_json()`), levels without one left out."""
    levels = canary.get("levels") if isinstance(canary, dict) else None
    out: dict[int, float] = {}
    for lv in levels if isinstance(levels, list) else []:
        if isinstance(lv, dict) and isinstance(lv.get("output_tok_s"), (int, float)):
            out[int(lv["level"])] = float(lv["output_tok_s"])
    return out


def drift(start: JSONValue, end: JSONValue) -> dict[str, float]:
    """Production's closing canary against its opening one: tok/s ratio per level."""
    a, b = tok_s(start), tok_s(end)
    return {str(lv): round(b[lv] / a[lv], 4) for lv in sorted(a) if lv in b and a[lv] > 0}


def left_on(step: str, old_hash: str, new_hash: str) -> str | None:
    """The config hash a rollout record left the cluster on: its new one when done, its old one
    when rolled back or refused (nothing changed); None when that cannot be told (a rollback
    that failed too, a rollout stopped midway or abandoned)."""
    if step == "done":
        return new_hash
    if step in ("rolled_back", "refused"):
        return old_hash
    return None
