"""What one watchdog tick sees: the probe, /metrics, the boot's progress and the operator's hold.

Its own module so that the verdict rules (``verdict``) and the policy (``policy``, which uses
them) both read it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpwarden.cluster.hold import OperatorHold
from tpwarden.cluster.vllm.probe_types import MetricsSnapshot, ProbeResult


@dataclass(frozen=True)
class BootReading:
    """What the actuator sees of a boot: a phase name and a counter that only grows."""

    phase: str
    progress: float = 0.0
    failed: bool = False  # the boot is over without success (e.g. the head container exited)


@dataclass(frozen=True)
class Observation:
    probe: ProbeResult
    metrics: MetricsSnapshot | None = None
    boot_progress: BootReading | None = None
    hold: OperatorHold | None = None
    released_at: float | None = None  # last operator `release` (ends HELD / GIVEN_UP)
    canary: str | None = None  # run id of a canary lease in force: its load is not users'
    # (tpwarden.cluster.canary_lease)
