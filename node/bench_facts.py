"""Node-side facts for a benchmark manifest: run on a node as `python3 bench_facts.py`.

Standard library only (psutil if the node has it is not needed): CPU use per process sampled
from /proc over `--sample-s`, processes holding /dev/nvidia* (GPU users), ACPI thermal zones,
load average. Prints one JSON document. Command lines are printed as they are; the control
machine redacts secrets before anything is written (`tpwarden.cluster.secrets.redact_argv`).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the script runs alone on a node (copied, `python3 FILE`): standard library only
    from tpwarden.cluster.durable import JSONObject

HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_ticks() -> dict[int, tuple[int, str]]:
    out: dict[int, tuple[int, str]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="utf-8", errors="replace") as f:
                raw = f.read()
            comm = raw[raw.index("(") + 1 : raw.rindex(")")]
            rest = raw[raw.rindex(")") + 2 :].split()
            out[int(name)] = (int(rest[11]) + int(rest[12]), comm)
        except (OSError, ValueError, IndexError):
            continue
    return out


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def _gpu_pids() -> set[int]:
    pids = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            for fd in os.listdir(f"/proc/{name}/fd"):
                if os.readlink(f"/proc/{name}/fd/{fd}").startswith("/dev/nvidia"):
                    pids.add(int(name))
                    break
        except OSError:
            continue
    return pids


def _zones() -> list[JSONObject]:
    base = "/sys/class/thermal"
    zones: list[JSONObject] = []
    try:
        names = sorted(n for n in os.listdir(base) if n.startswith("thermal_zone"))
    except OSError:
        return zones
    for n in names:
        try:
            with open(f"{base}/{n}/type") as f:
                kind = f.read().strip()
            with open(f"{base}/{n}/temp") as f:
                temp_c = int(f.read().strip()) / 1000.0
        except (OSError, ValueError):
            continue
        zones.append({"zone": n, "type": kind, "temp_c": temp_c})
    return zones


def main(argv: list[str]) -> int:
    sample_s = float(argv[argv.index("--sample-s") + 1]) if "--sample-s" in argv else 1.0
    min_cpu = float(argv[argv.index("--min-cpu-pct") + 1]) if "--min-cpu-pct" in argv else 10.0
    t0, a = time.monotonic(), _cpu_ticks()
    time.sleep(sample_s)
    dt, b = time.monotonic() - t0, _cpu_ticks()
    gpu = _gpu_pids()
    procs: list[JSONObject] = []
    for pid, (ticks, comm) in b.items():
        pct = 100.0 * (ticks - a.get(pid, (ticks, comm))[0]) / HZ / dt
        if pct >= min_cpu or pid in gpu:
            procs.append(
                {
                    "pid": pid,
                    "comm": comm,
                    "cpu_pct": round(pct, 1),
                    "gpu": pid in gpu,
                    "argv": _cmdline(pid)[:64],
                }
            )
    procs.sort(key=lambda p: -p["cpu_pct"])
    doc = {
        "host": socket.gethostname(),
        "time_unix_s": time.time(),
        "loadavg": list(os.getloadavg()),
        "cpu_count": os.cpu_count(),
        "sample_s": round(dt, 3),
        "min_cpu_pct": min_cpu,
        "processes": procs[:40],
        "thermal_zones": _zones(),
    }
    json.dump(doc, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
