"""`tpwarden experiment show PLAN [VARIANT] -i INVENTORY`: a night's full results, read from its
results directory only (no node contacted, no lock taken).

Everything `experiment status` says (`experiment_run.experiment_status`: each variant's
status, production's two canaries, the deadline, the lock, the guard), and for one variant or
every one: its result file whole (its changes, config hash, rollout, times, the canary's JSON)
with each canary level compared figure by figure with production's opening canary
(`experiment.show.compare_levels`), or its failure file whole (the stage and the error: the
boot reader's root cause for a boot that failed); then the night's events in order (one
variant's: those that name it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.experiment.night import NightFiles
from tpwarden.cluster.experiment.resume import PRODUCTION_END, PRODUCTION_START
from tpwarden.cluster.experiment.show import compare_levels, variant_events
from tpwarden.cluster.operations.experiment_run import NightStatus, experiment_status


@dataclass(frozen=True)
class NightShow:
    status: NightStatus
    variant: str | None  # None: every variant
    variants: list[JSONObject]  # the status rows shown, each with `compared`
    production_end: list[JSONObject]  # production's closing canary against its opening one
    events: list[JSONObject]

    def to_json(self) -> JSONObject:
        return {**self.status.to_json(), "variant": self.variant, "variants": self.variants,
                "production_end_compared": self.production_end,
                "events": self.events}  # fmt: skip


def experiment_show(plan: Path, inventory: Path, variant: str | None = None) -> NightShow:
    """The night's results (module docstring); an unknown `variant` is bad input (exit 2)."""
    status = experiment_status(plan, inventory)
    names = [str(row["name"]) for row in status.variants]
    if variant is not None and variant not in names:
        raise ConfigError(f"the plan has no variant {variant!r} (its variants: "
                          f"{', '.join(names)})", key="VARIANT")  # fmt: skip
    base = (status.production.get(PRODUCTION_START) or {}).get("canary")
    rows = [
        {**row, "compared": compare_levels(row.get("canary"), base)}
        for row in status.variants
        if variant is None or row["name"] == variant
    ]
    events = NightFiles(status.results).events()
    if variant is not None:
        events = variant_events(events, variant)
    end = (status.production.get(PRODUCTION_END) or {}).get("canary")
    return NightShow(status, variant, rows, compare_levels(end, base), events)
