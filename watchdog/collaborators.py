"""What the watchdog daemon (`tpwarden.watchdog.daemon.Watchdog`) is given, typed: the prober,
the actuator (cluster control as the watchdog sees it, complete: the daemon calls every method,
none is looked up by name) and a newly applied plan to follow (`PlanChange`). Below the daemon
and its parts (`daemon_io`, `daemon_restart`), so all of them name the same types.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.vllm.probe_types import MetricsSnapshot, ProbeResult
from tpwarden.watchdog.config import WatchdogConfig
from tpwarden.watchdog.observation import BootReading


class Actuator(Protocol):
    """Cluster control as the watchdog sees it (`tpwarden.watchdog.actuator.ControllerActuator`
    over `tpwarden.cluster.control.controller.Controller`)."""

    def restart(self, reason: str, evidence: JSONObject, keep_fds: tuple[int, ...] = ()) -> None:
        """Restart the whole server (all ranks). Raises on failure (`RestartJobOverdue` when
        the restart job outlived the wait and still runs). `keep_fds`: descriptors a restart
        job in another process keeps open for its whole life (the cluster restart lock's)."""

    def boot_progress(self) -> BootReading | None:
        """Current boot phase and a growing counter (e.g. shards loaded), or None if unknown
        (the real actuator reads it from the head's log: `tpwarden.watchdog.actuator`)."""

    def collect_evidence(self) -> JSONObject:
        """Last log lines per node (and anything else worth keeping before a restart)."""

    def collect_dossier(self, reason: str) -> JSONObject | None:
        """Which rank hung, and where (issue 32), stored with the restart; None: this actuator
        takes no dossier (no `incident_dossier` event)."""

    def server_started_at(self) -> float | None:
        """Epoch of the head container's start, None if unknown: fences off a restart that
        someone else already made (`RestartPath._restarted_by_someone_else`)."""

    def close(self) -> None:
        """Release what the actuator holds (SSH connections); called when it is replaced."""


class Prober(Protocol):
    """The probe of the serving endpoint (`tpwarden.cluster.vllm.probe.Prober`)."""

    def probe(self) -> ProbeResult: ...

    def scrape_metrics(self) -> MetricsSnapshot: ...

    def close(self) -> None: ...


@dataclasses.dataclass(frozen=True)
class PlanChange:
    """A new applied plan to follow: its settings, a prober and an actuator built for it."""

    config: WatchdogConfig
    prober: Prober
    actuator: Actuator
    detail: JSONObject
