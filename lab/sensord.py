"""The lab's sensor daemon: every second, the sensor model writes each node's GPU state and zones.

Runs as ``python -m tpwarden.lab.sensord ROOT`` in its own process group (started and stopped by
lab.py, pidfile ``ROOT/sensord.pid``). Each rank's load comes from the head's ``/metrics`` and
the node's serving container (rankload.py); heat faults come from each node's ``heat.json``::

    {"gpu_temp_c": 95, "zones": {"cpu_pcore_0": 101}, "until": 1767000000.0}

(zones by role name from ``sensors.GB10_ZONES`` or by index; ``until`` is epoch seconds.)
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import time
from pathlib import Path

from tpwarden.lab import rankload, sensors
from tpwarden.lab.paths import HEAD, NODE_NAMES, LabPaths, NodePaths

log = logging.getLogger(__name__)
INTERVAL_S = 1.0
METRICS_PORT = 8000


def sensor_paths(node: NodePaths) -> sensors.NodeSensorPaths:
    return sensors.NodeSensorPaths(node.name, node.gpu_state, node.thermal, node.name == HEAD)


def boot_sensors(node: NodePaths) -> None:
    """Idle readings for a node that is (re)booting; clears any GPU clock cap."""
    driver = sensors.SensorDriver([sensor_paths(node)], lambda: {}, time.time)
    driver.boot(node.name)
    driver.tick()


def zone_index(name: str | int) -> int:
    """A zone given by role name (``cpu_pcore_0``) or index."""
    roles = [z.role for z in sensors.GB10_ZONES]
    if isinstance(name, int) or str(name).isdigit():
        index = int(name)
        if 0 <= index < len(roles):
            return index
    elif name in roles:
        return roles.index(name)
    raise ValueError(f"unknown zone {name!r} (zones: {', '.join(roles)} or 0..{len(roles) - 1})")


def heat_overrides(doc: dict, now: float) -> list[tuple[str | int, float, float]]:
    """(target, temp_c, remaining_s) for each override in a heat.json document still active."""
    remaining = float(doc.get("until", 0)) - now
    if remaining <= 0:
        return []
    out: list[tuple[str | int, float, float]] = []
    if doc.get("gpu_temp_c") is not None:
        out.append((sensors.GPU, float(doc["gpu_temp_c"]), remaining))
    for zone, temp in (doc.get("zones") or {}).items():
        out.append((zone_index(zone), float(temp), remaining))
    return out


class HeatWatcher:
    """Applies a node's heat.json to the driver whenever the file changes."""

    def __init__(self, node: NodePaths) -> None:
        self.node = node
        self.seen: float | None = None

    def poll(self, driver: sensors.SensorDriver, now: float) -> None:
        try:
            mtime = self.node.heat.stat().st_mtime
        except FileNotFoundError:
            if self.seen is not None:  # heat.json removed (`lab fault cool`): end the overrides
                driver.cool(self.node.name)
            self.seen = None
            return
        if mtime == self.seen:
            return
        self.seen = mtime
        try:
            doc = json.loads(self.node.heat.read_text())
            for target, temp_c, remaining in heat_overrides(doc, now):
                driver.heat(self.node.name, target, temp_c, remaining)
        except (OSError, ValueError, TypeError) as exc:
            log.warning("%s: ignoring heat.json: %s", self.node.name, exc)


def serve(paths: LabPaths, stop: list[bool]) -> None:
    nodes = paths.all_nodes()
    server = rankload.ServerLoad(f"http://{paths.head_ip}:{METRICS_PORT}/metrics")
    containers = rankload.ServerContainers(cluster=paths.cluster_name)  # this lane's only
    load = rankload.RankLoadSource(server, containers, NODE_NAMES)
    driver = sensors.SensorDriver([sensor_paths(n) for n in nodes], load, time.time)
    watchers = [HeatWatcher(n) for n in nodes]
    next_tick = time.monotonic()
    while not stop[0]:
        for watcher in watchers:
            watcher.poll(driver, time.time())
        try:
            driver.tick()
        except OSError as exc:  # a node dir being torn down
            log.warning("tick failed: %s", exc)
        next_tick += INTERVAL_S
        time.sleep(max(0.0, next_tick - time.monotonic()))
    server.close()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    stop = [False]

    def on_term(signum: int, frame: object) -> None:
        stop[0] = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    paths = LabPaths(Path(args[0])) if args else LabPaths.from_env()
    log.info("sensord: %s", paths.root)
    serve(paths, stop)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
