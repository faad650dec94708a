"""The watchdog's own Prometheus metrics, on a private registry (never the global one)."""

from __future__ import annotations

import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Enum, Gauge, Histogram, start_http_server
from tpwarden.cluster.errors import TpwardenError
from tpwarden.watchdog.config import WatchdogConfig
from tpwarden.watchdog.policy_state import AlertCategory, PolicyState, RestartCause, WatchdogPhase

PROBE_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 90, 120, 180)


class WatchdogMetrics:
    """Metric objects plus an optional HTTP server; `serve()` starts it, `close()` stops it."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.probe_latency = Histogram(
            "tpwarden_watchdog_probe_latency_seconds",
            "Completion probe latency (any outcome).",
            buckets=PROBE_BUCKETS,
            registry=r,
        )
        self.probe_total = Counter(
            "tpwarden_watchdog_probe_total", "Probes by outcome.", ["outcome"], registry=r
        )
        self.verdict_total = Counter(
            "tpwarden_watchdog_verdict_total",
            "Probe verdicts (ok, busy, stalled, hard_fail, misconfig, unknown).",
            ["verdict"],
            registry=r,
        )
        self.restarts_total = Counter(
            "tpwarden_watchdog_restarts_total",
            f"Automatic restarts started, by cause: {', '.join(RestartCause)}.",
            ["cause"],
            registry=r,
        )
        self.alerts_total = Counter(
            "tpwarden_watchdog_alerts_total",
            f"Alerts raised, by category: {', '.join(AlertCategory)}.",
            ["category"],
            registry=r,
        )
        self.consecutive_failures = Gauge(
            "tpwarden_watchdog_consecutive_failures",
            "Consecutive counted probe failures.",
            registry=r,
        )
        self.state = Enum(
            "tpwarden_watchdog_state",
            "Watchdog policy phase.",
            states=[p.value for p in WatchdogPhase],
            registry=r,
        )
        self.hold = Gauge(
            "tpwarden_watchdog_hold",
            "1 while restarts are suppressed (operator or automatic hold).",
            registry=r,
        )
        self.budget_remaining = Gauge(
            "tpwarden_watchdog_restart_budget_remaining",
            "Automatic restarts left in the window.",
            registry=r,
        )
        self.last_success = Gauge(
            "tpwarden_watchdog_last_success_timestamp_seconds",
            "Wall time of the last OK probe.",
            registry=r,
        )
        self.write_errors_total = Counter(
            "tpwarden_watchdog_write_errors_total",
            "Failed writes of the watchdog's own files (state, events); decisions still apply.",
            ["file"],
            registry=r,
        )
        self.alerts_undelivered = Gauge(
            "tpwarden_watchdog_alerts_undelivered",
            "Alerts not yet delivered to every hook (retried with backoff).",
            registry=r,
        )
        self.tick_errors_total = Counter(
            "tpwarden_watchdog_tick_errors_total",
            "Errors inside a watchdog tick, by seam (tick, alerter, outbox, restart, ...); "
            "the loop goes on, decisions still apply.",
            ["seam"],
            registry=r,
        )
        self.last_probe = Gauge(
            "tpwarden_watchdog_last_probe_timestamp_seconds",
            "Wall time of the last probe made (any outcome), or of the daemon's start.",
            registry=r,
        )
        self.probe_interval = Gauge(
            "tpwarden_watchdog_probe_interval_seconds",
            "The probe interval in force (for the probes-stopped alert).",
            registry=r,
        )
        self.probe_timeout = Gauge(
            "tpwarden_watchdog_probe_timeout_seconds",
            "The probe timeout in force (for the probes-stopped alert).",
            registry=r,
        )
        # the configuration ledger's canaries (issue 53; set by watchdog.ledger_jobs)
        self.canary_ratio = Gauge(
            "tpwarden_ledger_canary_ratio",
            "Latest canary's throughput over the best earlier canary of its kind (ledger why).",
            ["level"],
            registry=r,
        )
        self.slowdown = Gauge(
            "tpwarden_ledger_slowdown",
            "1 when the last two canaries at this concurrency were both slower than the best "
            "earlier one beyond noise (ledger why): a confirmed slowdown.",
            ["level"],
            registry=r,
        )
        self.canary_last = Gauge(
            "tpwarden_ledger_canary_last_timestamp_seconds",
            "Wall time of the last canary, by how it ended (ok, deferred, failed).",
            ["status"],
            registry=r,
        )
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def show_state(
        self, state: PolicyState, config: WatchdogConfig, now: float, hold_until: float | None
    ) -> None:
        """Set the gauges from the policy state just committed (the probe settings in force,
        the hold, the restart budget left in the window, the last success)."""
        self.consecutive_failures.set(state.consecutive_failures)
        self.probe_interval.set(config.interval_s)
        self.probe_timeout.set(config.timeout_s)
        self.state.state(state.phase.value)
        held = (
            state.phase in (WatchdogPhase.HELD, WatchdogPhase.GIVEN_UP) or (hold_until or 0) > now
        )
        self.hold.set(1 if held else 0)
        recent = [t for t in state.restart_times if now - t < config.restart_window_s]
        self.budget_remaining.set(max(0, config.max_restarts - len(recent)))
        if state.last_ok_at is not None:
            self.last_success.set(state.last_ok_at)

    def serve(self, host: str, port: int) -> int:
        """Start the /metrics HTTP server; returns the bound port (useful with port 0)."""
        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise TpwardenError(
                f"cannot serve /metrics on {host}:{port}: {exc.strerror or exc} "
                "(another watchdog? set tpwarden.watchdog.metrics_port)"
            ) from None
        return int(self._server.server_port)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
