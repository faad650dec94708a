"""What the thermal agent costs per sample, next to node_exporter scraping the same zones.

Runs the real agent loop (real clock and sleep, real sysfs reader on a fake 7-zone tree, fake
GPU sampler, real fsync-per-record writer) for N samples at a fast interval, then starts
Debian's prometheus-node-exporter on the same fake tree (thermal_zone collector only) and
scrapes it N times. Prints one table. Usage: python bench/thermal_cost.py [--samples 1000]
"""

from __future__ import annotations

import argparse
import http.client
import logging
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client import generate_latest  # noqa: E402
from tpwarden.cluster.reports.thermal.fakes import FakeGpuSampler, build_fake_sysfs  # noqa: E402
from tpwarden.node.thermal.agent import ThermalAgent  # noqa: E402
from tpwarden.node.thermal.metrics import MetricsServer, ThermalCollector  # noqa: E402
from tpwarden.node.thermal.writer import DurableWriter  # noqa: E402
from tpwarden.node.thermal.zones import SysfsZoneReader  # noqa: E402

NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bench_agent(root: Path, logdir: Path, n: int, interval: float) -> dict[str, float]:
    writer = DurableWriter(logdir, "bench")
    agent = ThermalAgent(
        "bench", interval, FakeGpuSampler(), SysfsZoneReader(root), writer, time.time, time.sleep
    )
    lates: list[float] = []
    orig_tick = agent.tick

    def tick():  # noqa: ANN202
        rec = orig_tick()
        if rec is not None:
            lates.append(rec["late_s"])
        return rec

    agent.tick = tick  # type: ignore[method-assign]
    cpu0, wall0 = time.process_time(), time.monotonic()
    agent.run(max_samples=n)
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    writer.close()
    # Cost of one /metrics exposition of the latest sample (server side, no HTTP).
    reg = MetricsServer(ThermalCollector(agent, time.time)).registry
    c0 = time.process_time()
    for _ in range(n):
        generate_latest(reg)
    expo = (time.process_time() - c0) / n
    # Without fsync, to show what durability costs.
    nofsync = DurableWriter(logdir / "nofsync", "bench", fsync=lambda fd: None)
    a2 = ThermalAgent(
        "bench",
        interval,
        FakeGpuSampler(),
        SysfsZoneReader(root),
        nofsync,
        time.time,
        lambda s: None,
    )
    c0 = time.process_time()
    clock = [1e9]
    a2.clock = lambda: clock[0]
    for k in range(n):
        clock[0] = 1e9 + k * interval
        a2.tick()
    tick_nofsync = (time.process_time() - c0) / n
    nofsync.close()
    size = sum(p.stat().st_size for p in logdir.glob("thermal-*.jsonl"))
    return {
        "samples": agent.stats.samples,
        "cpu_per_sample_ms": 1000 * cpu / agent.stats.samples,
        "cpu_per_sample_nofsync_ms": 1000 * tick_nofsync,
        "expo_ms": 1000 * expo,
        "wall_s": wall,
        "late_p50_ms": 1000 * pct(lates, 0.5),
        "late_p99_ms": 1000 * pct(lates, 0.99),
        "late_max_ms": 1000 * max(lates),
        "late_ticks": agent.stats.late_ticks,
        "skipped": agent.stats.skipped_slots,
        "bytes_per_record": size / agent.stats.samples,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def proc_hwm_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def bench_node_exporter(root: Path, n: int) -> dict[str, float] | str:
    if not shutil.which(NODE_EXPORTER):
        return f"{NODE_EXPORTER} not installed"
    port = free_port()
    argv = [NODE_EXPORTER, f"--path.sysfs={root}", "--collector.disable-defaults",
            "--collector.thermal_zone", f"--web.listen-address=127.0.0.1:{port}"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        conn = None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # poll for readiness
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/metrics")
                first = conn.getresponse().read().decode()
                break
            except OSError:
                conn = None
                time.sleep(0.05)
        if conn is None:
            return "node_exporter did not answer"
        zones = [line for line in first.splitlines() if line.startswith("node_thermal_zone_temp{")]
        cpu0, wall0 = proc_cpu_s(proc.pid), time.monotonic()
        for _ in range(n):
            conn.request("GET", "/metrics")
            conn.getresponse().read()
        cpu, wall = proc_cpu_s(proc.pid) - cpu0, time.monotonic() - wall0
        return {
            "scrapes": n,
            "cpu_per_scrape_ms": 1000 * cpu / n,
            "wall_per_scrape_ms": 1000 * wall / n,
            "peak_rss_mib": proc_hwm_mib(proc.pid),
            "zones_seen": len(zones),
            "example": zones[0] if zones else "",
        }
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--interval", type=float, default=0.01, help="agent interval, seconds")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)  # at a 10 ms interval, late-tick notes would flood
    with tempfile.TemporaryDirectory(prefix="thermal-bench-") as tmp:
        root = build_fake_sysfs(Path(tmp) / "sys")
        a = bench_agent(root, Path(tmp) / "logs", args.samples, args.interval)
        ne = bench_node_exporter(root, args.samples)
    print(f"thermal agent: {a['samples']} samples at {args.interval * 1000:g} ms interval in {a['wall_s']:.1f} s "
          f"(7 zones + 4 hwmon sensors, fake GPU, fsync per record)")  # fmt: skip
    print(f"{'':38}{'tpwarden agent':>18}{'node_exporter':>18}")
    ne_cpu = f"{ne['cpu_per_scrape_ms']:.3f}" if isinstance(ne, dict) else "-"
    ne_rss = f"{ne['peak_rss_mib']:.1f}" if isinstance(ne, dict) else "-"
    rows = [
        ("CPU per sample / scrape (ms)", f"{a['cpu_per_sample_ms']:.3f}", ne_cpu),
        ("  agent tick without fsync (ms)", f"{a['cpu_per_sample_nofsync_ms']:.3f}", ""),
        ("  /metrics exposition only (ms)", f"{a['expo_ms']:.3f}", ""),
        ("peak RSS (MiB)", f"{a['peak_rss_mib']:.1f}", ne_rss),
        ("tick lateness p50 (ms)", f"{a['late_p50_ms']:.2f}", ""),
        ("tick lateness p99 (ms)", f"{a['late_p99_ms']:.2f}", ""),
        ("tick lateness max (ms)", f"{a['late_max_ms']:.2f}", ""),
        ("late ticks / skipped slots", f"{a['late_ticks']} / {a['skipped']}", ""),
        ("bytes per record", f"{a['bytes_per_record']:.0f}", ""),
    ]
    for name, x, y in rows:
        print(f"{name:38}{x:>18}{y:>18}")
    if isinstance(ne, dict):
        print(f"node_exporter: {ne['scrapes']} scrapes, {ne['wall_per_scrape_ms']:.2f} ms wall each, "
              f"{ne['zones_seen']} zones, e.g. {ne['example']}")  # fmt: skip
    else:
        print(f"node_exporter: {ne}")
    print(
        f"at a 10 s interval the agent uses ~{a['cpu_per_sample_ms'] / 10_000 * 100:.4f}% of one core"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
