"""What is left of a queue, from its results directory's file names (pure).

Each variant writes `<name>.result.json` when it ends, or `<name>.failed.json` when it failed
(a boot that failed, a measurement that could not be taken); a failed variant is recorded and
not tried again. A result wins over a failure of the same name (a retry that succeeded). Names
the plan does not hold are reported, never guessed at; anything else in the directory (a
durable writer's temporary file) is ignored. `production-start.result.json` is production's
opening canary: a resumed queue does not take it again; `production-end.result.json` its
closing one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from tpwarden.cluster.durable import JSONObject

RESULT = ".result.json"
FAILED = ".failed.json"
PRODUCTION_START = "production-start"  # production's opening canary (a name no variant takes)
PRODUCTION_END = "production-end"  # its closing canary, after the restore


def result_name(variant: str) -> str:
    return variant + RESULT


def failure_name(variant: str) -> str:
    return variant + FAILED


@dataclass(frozen=True)
class ResumeState:
    done: tuple[str, ...]  # a result file: measured
    failed: tuple[str, ...]  # a failure file: recorded, not repeated
    left: tuple[str, ...]  # neither: still to run, in queue order
    foreign: tuple[str, ...]  # results of variants the plan does not hold

    @property
    def finished(self) -> bool:
        return not self.left

    def to_json(self) -> JSONObject:
        return {**asdict(self), "finished": self.finished}


def resume_state(order: Sequence[str], files: Iterable[str]) -> ResumeState:
    """`order`: the queue's variant names in run order; `files`: the directory's file names."""
    results, failures = set(), set()
    for name in files:
        if name.endswith(RESULT):
            results.add(name.removesuffix(RESULT))
        elif name.endswith(FAILED):
            failures.add(name.removesuffix(FAILED))
    known = {*order, PRODUCTION_START, PRODUCTION_END}
    return ResumeState(
        done=tuple(v for v in order if v in results),
        failed=tuple(v for v in order if v in failures and v not in results),
        left=tuple(v for v in order if v not in results and v not in failures),
        foreign=tuple(sorted((results | failures) - known)),
    )
