"""What cluster control reports: progress events and the typed results of its actions.

Shared by `tpwarden.cluster.control.controller` and its parts (preflight, apply, boot, clocks), so that
none of them imports the facade.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from tpwarden.cluster.boot.progress import BootProgress
from tpwarden.cluster.control.plan import ControlPlan
from tpwarden.cluster.durable import JSONValue

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ControlEvent:
    """Progress report for the CLI: `kind` in preflight/remove/start/boot/ready/failed/info."""

    kind: str
    node: str | None
    message: str
    progress: BootProgress | None = None


EventCallback = Callable[[ControlEvent], None]


class Emit(Protocol):
    """How the parts report progress: `emit(kind, node, message, progress)`."""

    def __call__(
        self, kind: str, node: str | None, message: str, progress: BootProgress | None = None
    ) -> None: ...


def emitter(on_event: EventCallback | None) -> Emit:
    """An `Emit` over the CLI's callback; a callback that raises is logged, never propagated."""
    callback = on_event or (lambda e: None)

    def emit(
        kind: str, node: str | None, message: str, progress: BootProgress | None = None
    ) -> None:
        try:
            callback(ControlEvent(kind, node, message, progress))
        except Exception:  # noqa: BLE001 - a broken renderer must not break an apply
            log.exception("event callback failed")

    return emit


class ServerProbe(NamedTuple):
    """The 1-token probe as cluster control reports it (`status`, `up`, a rollout's verify):
    healthy or not, the latency when the server answered, and why not. A named tuple: code that
    unpacks ``(ok, latency_ms, error)`` reads it as before."""

    ok: bool
    latency_ms: float | None = None
    error: str | None = None

    def describe(self) -> str:
        """ "12 ms" when healthy, else why not."""
        if self.ok and self.latency_ms is not None:
            return f"{self.latency_ms:.0f} ms"
        return str(self.error)


@dataclass(frozen=True)
class NodeOutcome:
    node: str
    ok: bool
    message: str


@dataclass(frozen=True)
class PreflightReport:
    ok: bool
    problems: tuple[str, ...]
    facts: Mapping[str, JSONValue] = field(default_factory=dict)


@dataclass(frozen=True)
class BootResult:
    ready: bool
    progress: BootProgress
    elapsed_s: float
    reason: str | None = None
    last_lines: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ApplyResult:
    plan: ControlPlan
    outcomes: tuple[NodeOutcome, ...]
    boot: BootResult | None = None
    # after a ready boot: the network NCCL chose per rank (Controller.nccl_transport)
    transport: Mapping[str, JSONValue] | None = None

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outcomes) and (self.boot is None or self.boot.ready)


@dataclass(frozen=True)
class ClockResult:
    node: str
    ok: bool
    message: str
    gpus: tuple[Mapping[str, JSONValue], ...] = ()
