"""A night compressed to minutes, written by the real writers: the watchdog's events from the real
Watchdog (tick() with a fake prober and actuator and an injected clock: busy stretch, a hang, a
restart, recovery); the thermal samples from the real agent and DurableWriter over a fake sysfs
with seven `acpitz` zones (a heat fault with thermal throttling on node2, node3's agent down for
a while); bench and eval run directories from cluster.bench's writer; cluster control's restart
log. Used by tests/unit/test_morning_report.py and by tools/sample_night.py, which packs it as
the sample night `tpwarden report --sample` shows (cluster/data/sample-night.tar.gz).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from tpwarden.cluster.bench.runner import write_json
from tpwarden.cluster.durable import append_jsonl
from tpwarden.cluster.event_log import EventLog
from tpwarden.cluster.reports.morning_io import SAMPLE_ZONE_ROLES
from tpwarden.cluster.reports.thermal.fakes import (
    FakeGpuSampler,
    build_fake_sysfs,
    gb10_sample,
    set_zone_temps,
)
from tpwarden.cluster.vllm.probe import MetricsSnapshot, Outcome, ProbeResult
from tpwarden.node.thermal.agent import ThermalAgent
from tpwarden.node.thermal.writer import DurableWriter
from tpwarden.node.thermal.zones import SysfsZoneReader
from tpwarden.watchdog.alert import Alerter
from tpwarden.watchdog.config import WatchdogConfig
from tpwarden.watchdog.daemon import Watchdog
from tpwarden.watchdog.state import StateStore

KST = ZoneInfo("Asia/Seoul")
T0 = datetime(2026, 12, 2, 22, 0, tzinfo=KST).timestamp()  # 22:00 KST
SAMPLES = 120  # 20 minutes of samples at 10 s: the night, compressed
NODES = ("node1", "node2", "node3", "node4")
ZONES = tuple(("acpitz", 45_000) for _ in range(7))  # GB10: every zone says acpitz
ROLES = SAMPLE_ZONE_ROLES  # what `report --sample` names the zones
HEAT = range(40, 52)  # node2's heat fault: slots with sw_thermal_slowdown
HEAT2 = range(80, 84)  # and a second, shorter episode
DOWN = range(60, 75)  # node3's agent is down


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _thermal(tmp: Path) -> None:
    for idx, node in enumerate(NODES, start=1):
        root = build_fake_sysfs(tmp / "sys" / node, zones=ZONES)
        gpu, clock = FakeGpuSampler(), Clock(T0)
        writer = DurableWriter(tmp / "night" / "thermal", node)
        role = "head" if node == "node1" else "worker"
        agent = ThermalAgent(
            node, 10.0, gpu, SysfsZoneReader(root), writer, clock, lambda s: None, role=role
        )
        agent.anchor(T0)
        for k in range(SAMPLES):
            clock.now = T0 + 10 * k + 0.1
            if node == "node3" and k in DOWN:
                continue
            load = min(k, 30) / 30
            hot = node == "node2" and (k in HEAT or k in HEAT2)
            gpu_c = round(42 + 22 * load + idx * 0.5 + (25 if hot else 0), 1)
            reasons = ("sw_thermal_slowdown",) if hot else ()
            gpu.samples = [gb10_sample(temp_c=gpu_c, reasons=reasons)]
            pcore = int(50_000 + (32_000 if node == "node1" else 20_000 + idx * 1000) * load)
            gpu_zone = int(gpu_c * 1000) + 3000
            set_zone_temps(root, {0: 48_000, 1: pcore, 3: 58_000 + idx * 500, 5: gpu_zone})
            agent.tick()
        writer.close()


class Prober:
    """A compressed night: answering, a busy stretch (timeouts with growing counters), a hang
    (timeouts with flat counters, then refused), and recovery after the restart."""

    def __init__(self, clock: Clock, script: list[tuple[Outcome, bool]]) -> None:
        self.clock, self.script, self.i, self.tokens = clock, script, 0, 1000.0

    def probe(self) -> ProbeResult:
        self.clock.now += 30
        outcome, progress = self.script[min(self.i, len(self.script) - 1)]
        self.i += 1
        if progress:
            self.tokens += 500
        return ProbeResult(outcome, 0.4 if outcome is Outcome.OK else 120.0, "scripted")

    def scrape_metrics(self) -> MetricsSnapshot:
        return MetricsSnapshot(
            self.clock.now,
            {"vllm:generation_tokens_total": self.tokens, "vllm:prompt_tokens_total": 10.0},
        )

    def close(self) -> None:
        pass


class Actuator:
    def __init__(self) -> None:
        self.restarts: list[str] = []

    def restart(
        self, reason: str, evidence: dict[str, Any], keep_fds: tuple[int, ...] = ()
    ) -> None:
        self.restarts.append(reason)

    def boot_progress(self):
        return None

    def collect_evidence(self) -> dict[str, Any]:
        return {"node1": ["EngineCore stuck"]}

    def collect_dossier(self, reason: str) -> dict[str, Any] | None:
        return None  # takes no dossier

    def server_started_at(self) -> float | None:
        return None  # unknown: no fencing

    def close(self) -> None:
        pass


def _watchdog(tmp: Path) -> int:
    ok, busy, hang = (Outcome.OK, True), (Outcome.TIMEOUT, True), (Outcome.TIMEOUT, False)
    script = [ok] * 8 + [busy] * 4 + [ok] * 4 + [hang] * 10 + [ok] * 14
    clock = Clock(T0)
    cfg = WatchdogConfig(probe_url="http://127.0.0.1:9", state_dir=str(tmp / "wd"),
                         interval_s=30, boot_deadline_s=600, stall_after_s=60)  # fmt: skip
    act = Actuator()
    wd = Watchdog(cfg, Prober(clock, script), act, clock, StateStore(cfg.state_path),
                  EventLog(str(tmp / "night" / "events.jsonl"), clock),
                  Alerter(None, None))  # fmt: skip
    for _ in script:
        wd.tick()
    wd.close()
    return len(act.restarts)


def _bench(tmp: Path) -> None:
    run = tmp / "night" / "runs" / "20261202T132000Z-sweep"
    started = datetime.fromtimestamp(T0 + 1200 - 300, tz=KST).isoformat()
    write_json(
        run / "manifest.json",
        {
            "run_id": run.name,
            "kind": "sweep",
            "started_at": started,
            "cluster": {"config_hash": "1f2661cca5ba"},
            "server_defaults": {"drafter_k": 3},
        },
    )
    rows = [
        {"level": 1, "aggregate_tok_s": 11.1, "per_stream_tok_s": 11.1, "ttft_p50_ms": 430.0,
         "itl_p50_ms": 90.0, "acceptance_pct": 41.0, "tokens_per_step": 2.23},
        {"level": 32, "aggregate_tok_s": 171.0, "per_stream_tok_s": 5.3, "ttft_p50_ms": 1500.0,
         "itl_p50_ms": 356.0, "acceptance_pct": 40.0, "tokens_per_step": 2.2},
    ]  # fmt: skip
    write_json(run / "table.json", {"kind": "sweep", "rows": rows})
    # a run from the afternoon before: outside the window
    old = tmp / "night" / "runs" / "20261202T050000Z-sweep"
    write_json(
        old / "manifest.json",
        {
            "run_id": old.name,
            "kind": "sweep",
            "started_at": datetime.fromtimestamp(T0 - 8 * 3600, tz=KST).isoformat(),
        },
    )
    write_json(old / "table.json", {"kind": "sweep", "rows": rows})
    # an eval run in the same runs dir (as `tpwarden eval run` writes it), resumed once
    ev = tmp / "night" / "runs" / "20261202T133000Z-eval"
    write_json(
        ev / "manifest.json",
        {
            "run_id": ev.name, "kind": "eval",
            "started_at": datetime.fromtimestamp(T0 + 1000, tz=KST).isoformat(),
            "finished_at": datetime.fromtimestamp(T0 + 1150, tz=KST).isoformat(),
            "server_defaults": {"drafter_k": 3, "thinking": False},
            "restarts": [{"task": "kormedmcqa", "resume": True}],
        },
    )  # fmt: skip
    write_json(
        ev / "table.json",
        {"kind": "eval", "rows": [
            {"task": "kormedmcqa", "path": "chat", "n": 3009, "metric": "exact_match,flexible",
             "score": 0.854, "stderr": 0.0064, "stops": "4 of 5 (capped)"},
        ]},
    )  # fmt: skip


def _control_log(tmp: Path) -> None:
    """Cluster control's restart log: an operator's restart at 22:17 and the watchdog's own
    (already in the watchdog's log with its cause, so the report must not count it twice)."""
    path = tmp / "night" / "control-events.jsonl"  # as Controller.events writes it
    for minute, who in ((17, "kim@laptop"), (10, "tpwarden-watchdog")):
        at = datetime.fromtimestamp(T0 + minute * 60, tz=KST).isoformat()
        rec = {"ts": at, "event": "restart", "who": who, "why": "driver update", "ok": True}
        append_jsonl(path, rec)


def build_night(tmp: Path) -> dict[str, Any]:
    """Write the night under ``tmp / "night"`` (events.jsonl, thermal/, runs/,
    control-events.jsonl); scratch files go beside it."""
    _thermal(tmp)
    restarts = _watchdog(tmp)
    _bench(tmp)
    _control_log(tmp)
    return {"dir": tmp / "night", "restarts": restarts}
