"""The node side of the thermal agent: what runs on a node, with only the standard library,
pynvml, psutil when the interpreter has it (else /proc/meminfo) and prometheus_client (its
zipapp, ``tpwarden.cluster.node_zipapp.THERMAL_AGENT``, carries the last one).

    python3 thermal-agent.pyz agent --node node1 --dir /var/log/tpwarden/thermal --interval 10
    python3 thermal-agent.pyz status --node node1 --dir /var/log/tpwarden/thermal

``agent`` runs until SIGTERM. ``status`` prints one JSON document about this node's files (the
operator's ``tpwarden thermal status`` parses it); it never fails on a missing directory.
``tpwarden thermal agent`` (the CLI, for provisioned nodes) calls :func:`run_agent` too.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from tpwarden.cluster.durable import (
    THERMAL_BUDGET_MB,
    THERMAL_DIR,
    THERMAL_METRICS_HOST,
    THERMAL_METRICS_PORT,
    JSONObject,
)
from tpwarden.cluster.errors import TpwardenError
from tpwarden.node.gpu_access import find_denial
from tpwarden.node.memory import memory_reader
from tpwarden.node.thermal.agent import AgentStats, ThermalAgent
from tpwarden.node.thermal.alerts import AlertPolicy
from tpwarden.node.thermal.records import GpuSampler
from tpwarden.node.thermal.writer import DurableWriter
from tpwarden.node.thermal.zones import SysfsZoneReader

log = logging.getLogger("tpwarden.thermal")

TAIL_BYTES = 64 * 1024


@dataclass(frozen=True, kw_only=True)
class AgentOptions:
    node: str
    directory: Path
    interval_s: float = 10.0
    metrics_port: int = THERMAL_METRICS_PORT  # -1: off
    metrics_host: str = THERMAL_METRICS_HOST
    sysfs_root: Path = Path("/sys")
    role: str | None = None
    alert_margin_c: float | None = None
    max_file_bytes: int = 64 * 2**20
    budget_bytes: int = THERMAL_BUDGET_MB * 2**20
    zone_roles: dict[str, str] | None = None  # zone index/name/type -> role (metrics label)


class NoGpu:
    """Stands in when NVML cannot be imported: every sample records why, zones still log."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def sample_all(self) -> list[object]:
        raise RuntimeError(f"GPU unavailable: {self.reason}")


def gpu_sampler() -> GpuSampler:
    try:
        # deferred: an optional dependency (see below)
        from tpwarden.node.gpu import Nvml
    except ImportError as exc:  # pynvml missing: no GPU is a normal state for this agent
        log.warning("NVML unavailable, logging thermal zones only: %s", exc)
        return NoGpu(str(exc))
    nvml = Nvml()
    status = nvml.status()
    if not status.available:
        log.warning("NVML %s: %s; logging thermal zones only", status.state, status.reason)
    return nvml


def run_agent(opts: AgentOptions) -> AgentStats:
    """Wire sampler, writer, agent and /metrics; run until SIGTERM/SIGINT. Returns AgentStats."""
    stop = threading.Event()
    writer = DurableWriter(
        opts.directory,
        opts.node,
        max_file_bytes=opts.max_file_bytes,
        max_total_bytes=max(opts.budget_bytes, opts.max_file_bytes),
    )
    gpu = gpu_sampler()
    agent = ThermalAgent(
        opts.node, opts.interval_s, gpu, SysfsZoneReader(opts.sysfs_root), writer, time.time,
        stop.wait, role=opts.role, alerts=AlertPolicy(zone_margin_c=opts.alert_margin_c),
        memory=memory_reader(),  # psutil; /proc/meminfo where python3 has none (node/memory.py)
        gpu_access=find_denial,  # a denied /dev/nvidia<N> is said as such (node/gpu_access.py)
    )  # fmt: skip

    def _stop(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        agent.stop()
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    server = None
    if opts.metrics_port >= 0:
        try:
            # deferred: prometheus_client may be absent on the node; /metrics is optional
            from tpwarden.node.thermal.metrics import MetricsServer, ThermalCollector

            server = MetricsServer(
                ThermalCollector(agent, time.time, zone_roles=opts.zone_roles),
                opts.metrics_host,
                opts.metrics_port,
            )
            log.info("metrics on http://%s:%d/metrics", opts.metrics_host, server.start())
        except (
            ImportError,
            OSError,
            TpwardenError,
        ) as exc:  # /metrics is optional; samples are not
            log.error("no /metrics (%s); sampling goes on", exc)
            server = None
    log.info("thermal agent %s: every %g s into %s", opts.node, opts.interval_s, opts.directory)
    try:
        stats = agent.run()
    finally:
        if server:
            server.stop()
        writer.close()
        close = getattr(gpu, "close", None)
        if close:
            close()
    log.info("stopped: %s", stats)
    return stats


# -- status: facts about this node's files --------------------------------------------------------
def _last_record(path: Path) -> JSONObject | None:
    """The last whole JSON line of a file (reads only its tail)."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - TAIL_BYTES))
        data = f.read()
    for raw in reversed(data.split(b"\n")):
        if raw.strip():
            try:
                rec = json.loads(raw)
            except ValueError:
                continue  # a torn last line: the one before it is whole
            if isinstance(rec, dict):
                return rec
    return None


def node_status(node: str, directory: Path, now: float) -> JSONObject:
    """Files, bytes used, today's sample count, dropped records, the latest record."""
    files = DurableWriter(directory, node).files()
    today = time.strftime("%Y%m%d", time.gmtime(now))
    doc: JSONObject = {
        "node": node,
        "dir": str(directory),
        "now": now,
        "files": len(files),
        "bytes_used": 0,
        "samples_today": 0,
        "dropped_today": 0,
        "latest": None,
        "error": None,
    }
    try:
        for p in files:
            doc["bytes_used"] += p.stat().st_size
            if p.name.startswith(f"thermal-{node}-{today}"):
                with open(p, "rb") as f:
                    for raw in f:
                        if raw.endswith(b"\n"):
                            doc["samples_today"] += 1
                        if b'"dropped_records":' in raw:
                            try:
                                doc["dropped_today"] += int(json.loads(raw)["dropped_records"])
                            except (ValueError, KeyError, TypeError):
                                pass
        for p in reversed(files):
            rec = _last_record(p)
            if rec is not None:
                doc["latest"] = rec
                break
    except OSError as exc:
        doc["error"] = f"{type(exc).__name__}: {exc}"
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tpwarden-thermal-agent")
    sub = ap.add_subparsers(dest="action", required=True)
    a = sub.add_parser("agent", help="sample until SIGTERM")
    a.add_argument("--node", required=True)
    a.add_argument("--dir", default=THERMAL_DIR)
    a.add_argument("--interval", type=float, default=10.0)
    a.add_argument("--metrics-port", type=int, default=THERMAL_METRICS_PORT)
    a.add_argument("--metrics-host", default=THERMAL_METRICS_HOST)
    a.add_argument("--sysfs-root", default="/sys")
    a.add_argument("--role", choices=("head", "worker"))
    a.add_argument("--alert-margin", type=float)
    a.add_argument("--max-file-mb", type=float, default=64.0)
    a.add_argument("--budget-mb", type=float, default=float(THERMAL_BUDGET_MB))
    a.add_argument("--zone-role", action="append", default=[], help="INDEX=ROLE (repeatable)")
    s = sub.add_parser("status", help="print this node's file facts as JSON")
    s.add_argument("--node", required=True)
    s.add_argument("--dir", default=THERMAL_DIR)
    args = ap.parse_args(argv)
    if args.action == "status":
        json.dump(node_status(args.node, Path(args.dir), time.time()), sys.stdout)
        sys.stdout.write("\n")
        return 0
    if args.interval < 0.05:
        ap.error("--interval must be >= 0.05")
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    run_agent(
        AgentOptions(
            node=args.node,
            directory=Path(args.dir),
            interval_s=args.interval,
            metrics_port=args.metrics_port,
            metrics_host=args.metrics_host,
            sysfs_root=Path(args.sysfs_root),
            role=args.role,
            alert_margin_c=args.alert_margin,
            max_file_bytes=int(args.max_file_mb * 2**20),
            budget_bytes=int(args.budget_mb * 2**20),
            zone_roles=dict(x.split("=", 1) for x in args.zone_role if "=" in x) or None,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
