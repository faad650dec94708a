"""The lab's thermal stand-in through a scripted story, written by the real thermal agent: the
sensor driver (lab/sensors.py) ticks with each rank's load (lab/rankload.py) from a scripted
server and scripted containers, and the node's real agent samples the files it writes (the
zones through the real sysfs reader; the GPU from the NVML stand-in's state file, which the stub
library serves on a lab node). Used by tests/unit/test_lab_rank_load.py; `python -m
tests.unit.lab_thermal_story DIR` renders the demo's and a night's plots into DIR.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from unittest import mock
from zoneinfo import ZoneInfo

from tpwarden.cluster.durable import JSONObject, atomic_write_text, read_jsonl
from tpwarden.cluster.reports.thermal.fakes import FakeGpuSampler, gb10_sample
from tpwarden.lab import rankload, sensors
from tpwarden.node.thermal.agent import ThermalAgent
from tpwarden.node.thermal.writer import DurableWriter
from tpwarden.node.thermal.zones import SysfsZoneReader

NODES = ("node1", "node2", "node3", "node4")
KST = ZoneInfo("Asia/Seoul")
DEMO_T0 = datetime(2026, 12, 7, 20, 50, tzinfo=KST).timestamp()
NIGHT_T0 = datetime(2026, 12, 7, 22, 0, tzinfo=KST).timestamp()
ZONE_ROLES = {str(i): z.role for i, z in enumerate(sensors.GB10_ZONES)}

# (seconds from the start, what the server answers: running requests or None, containers)
Phase = tuple[float, float | None, dict[str, str]]
UP = dict.fromkeys(NODES, "running")
NODE3_PAUSED = {**UP, "node3": "paused"}

# The demo (scripts/demo.sh) in ten minutes: the boot, idle with the watchdog armed, a minute and
# a half of load, node3's rank paused (the probe's requests stay running: the live ranks wait in
# the collective), the watchdog's restart (containers removed, then a new boot), idle again.
DEMO: tuple[Phase, ...] = (
    (0, None, {}),
    (60, None, UP),  # booting: the API not up yet
    (150, 0.0, UP),  # ready, idle
    (210, 8.0, UP),  # load
    (300, 2.0, NODE3_PAUSED),  # hung on node3
    (345, None, {}),  # restart: removed
    (355, None, UP),  # booting again
    (445, 0.0, UP),  # ready
)
DEMO_END = 600.0
HANG = (300.0, 345.0)
LOAD = (210.0, 300.0)


class StateFileGpu(FakeGpuSampler):
    """The GPU as NVML reports it on a lab node: the stub serves the state file's temperature."""

    def __init__(self, state_file: Path) -> None:
        super().__init__()
        self.state_file = state_file

    def sample_all(self) -> list[object]:
        state = sensors.read_gpu_state(self.state_file)
        self.samples = [gb10_sample(temp_c=float(state["temp_c"]))]
        return super().sample_all()


def _scripted(phases: Iterable[Phase], t0: float, clock: Callable[[], float]):
    ordered = sorted(phases, key=lambda p: p[0])

    def now() -> Phase:
        return [p for p in ordered if p[0] <= clock() - t0][-1]

    return (lambda: now()[1]), (lambda: now()[2])


def run_story(
    root: Path, phases: Iterable[Phase], t0: float, seconds: float, dt_s: float, every_s: float
) -> list[JSONObject]:
    """Tick the lab's driver every ``dt_s`` through ``phases`` and sample every ``every_s`` with
    each node's real agent; the records the agents wrote, in time order. (Nothing is fsynced:
    a story of thousands of ticks in seconds.)"""
    with mock.patch.object(sensors, "atomic_write_text", _unsynced):
        return _run_story(root, phases, t0, seconds, dt_s, every_s)


def _unsynced(path: Path, text: str, *, mode: int, sync: bool) -> None:
    atomic_write_text(path, text, mode=mode, sync=False)


def _run_story(
    root: Path, phases: Iterable[Phase], t0: float, seconds: float, dt_s: float, every_s: float
) -> list[JSONObject]:
    now = [t0]
    running, containers = _scripted(phases, t0, lambda: now[0])

    def server() -> float | None:
        r = running()
        return None if r is None else rankload.load_from_running(r)

    paths = [
        sensors.NodeSensorPaths(n, root / n / "gpu-state", root / n / "sys/class/thermal", i == 0)
        for i, n in enumerate(NODES)
    ]
    driver = sensors.SensorDriver(
        paths, rankload.RankLoadSource(server, containers, NODES), lambda: now[0]
    )
    for n in NODES:
        driver.boot(n)
    agents = []
    for p in paths:
        writer = DurableWriter(root / "thermal", p.name, fsync=lambda fd: None)
        agent = ThermalAgent(
            p.name, every_s, StateFileGpu(p.gpu_state_path), SysfsZoneReader(root / p.name / "sys"),
            writer, lambda: now[0], lambda s: None, role="head" if p.is_head else "worker",
        )  # fmt: skip
        agent.anchor(t0)
        agents.append((agent, writer))
    steps, per_sample = int(seconds / dt_s), round(every_s / dt_s)
    for k in range(steps + 1):
        now[0] = t0 + k * dt_s
        driver.tick()
        if k % per_sample == 0:
            for agent, _ in agents:
                agent.tick()
    for _, writer in agents:
        writer.close()
    records = [r for f in sorted((root / "thermal").glob("*.jsonl")) for r in read_jsonl(f)]
    return sorted(records, key=lambda r: (r["ts"], r["node"]))


def demo_records(root: Path) -> list[JSONObject]:
    """The demo's ten minutes, ticked every 2 s and sampled every 4 s (the lab does both every
    second; the curves are the same)."""
    return run_story(root, DEMO, DEMO_T0, DEMO_END, dt_s=2.0, every_s=4.0)


def night_phases(hours: float) -> tuple[Phase, ...]:
    """A night: idle, an evaluation's steady load from 22:30, a hang at 03:00 and the restart,
    the evaluation resumed, idle from 07:00."""
    h = 3600.0
    return (
        (0, 0.0, UP),
        (0.5 * h, 16.0, UP),
        (5 * h, 2.0, NODE3_PAUSED),
        (5 * h + 360, None, {}),
        (5 * h + 380, None, UP),
        (5 * h + 1500, 16.0, UP),
        (9 * h, 0.0, UP),
        (hours * h, 0.0, UP),
    )


def night_records(root: Path, hours: float = 10.0) -> list[JSONObject]:
    return run_story(root, night_phases(hours), NIGHT_T0, hours * 3600, dt_s=60.0, every_s=120.0)


def render(out: Path) -> list[Path]:
    """The demo's and a night's plots, as `tpwarden thermal report --plot` draws them."""
    # deferred: matplotlib only where a picture is drawn
    from tpwarden.cluster.reports.thermal.plot import figure_png, thermal_figure
    from tpwarden.cluster.reports.thermal.report import build_report

    out.mkdir(parents=True, exist_ok=True)
    demo, night = demo_records(out / "demo"), night_records(out / "night")
    hang = (DEMO_T0 + HANG[0] - 60, DEMO_T0 + HANG[0] + 120)  # three minutes around the hang
    written = []
    for name, records, window in (
        ("demo", demo, (None, None)),
        ("demo-3min", demo, hang),
        ("night", night, (None, None)),
    ):
        rep = build_report(records, since=window[0], until=window[1], zone_roles=ZONE_ROLES)
        png = out / f"lab-thermal-{name}.png"
        png.write_bytes(figure_png(thermal_figure(rep, records, KST, ZONE_ROLES)))
        written.append(png)
    return written


if __name__ == "__main__":
    for path in render(Path(sys.argv[1])):
        print(path)
