"""The lab's Prometheus: Debian's /usr/bin/prometheus (2.42) with the scrape config that
`tpwarden prometheus config` generates for the lab inventory (watchdog/prometheus_config.py).

Listens on loopback (the lane's address: 127.0.0.1:9090 in lane 1, :9092 in lane 2;
``TPWARDEN_LAB_PROMETHEUS_LISTEN`` or ``lab up
--prometheus-listen`` change it), stores under ``<lab root>/prometheus/data``, scrapes and
evaluates every 2 s (the lab's thermal interval is 1 s, the watchdog's 2 s). Started by
``lab up`` (its own process group, like sensord), stopped by ``lab down``.

Its alert rules are tpwarden's own with their windows scaled to the lab's pace
(``RULES_TIME_SCALE``, the product's ``tpwarden prometheus rules --time-scale``; issue 50): the
hung-server alert waits 30 s of flat token counters instead of 2 minutes, as the lab's watchdog
ticks every 2 s instead of every 2 minutes. The shipped windows stay covered by
``promtool test rules`` (tests/unit/test_alert_rules.py).
"""

from __future__ import annotations

import os
import shutil
import signal
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tpwarden.cluster.errors import LabError
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.lab import host
from tpwarden.lab.paths import LabPaths, StepCallback, no_steps
from tpwarden.watchdog.monitoring_files import rules_path
from tpwarden.watchdog.prometheus_config import PromOptions, build_config, render_yaml
from tpwarden.watchdog.rule_scale import scale_rules

BINARY = "/usr/bin/prometheus"
LISTEN_ENV = "TPWARDEN_LAB_PROMETHEUS_LISTEN"
INTERVAL_S = 2.0
READY_TIMEOUT_S = 60.0
RULES_TIME_SCALE = 0.25
RULES_MIN_RANGE_S = 4 * INTERVAL_S  # a window holds a few scrapes, so increase() means something


@dataclass(frozen=True)
class PromStatus:
    running: bool
    listen: str
    url: str
    pid: int | None
    config: str


def _files(paths: LabPaths) -> dict[str, Path]:
    d = paths.prometheus_dir
    return {
        "config": d / "prometheus.yml",
        "data": d / "data",
        "pid": d / "prometheus.pid",
        "log": d / "prometheus.log",
        "listen": d / "listen",
        "rules": d / "tpwarden-rules-scaled.yml",
    }


def listen_address(paths: LabPaths) -> str:
    """Where the running (or last started) lab Prometheus listens."""
    try:
        return _files(paths)["listen"].read_text().strip() or paths.prometheus_listen
    except OSError:
        return os.environ.get(LISTEN_ENV) or paths.prometheus_listen


def base_url(paths: LabPaths) -> str:
    return f"http://{listen_address(paths)}"


def render_rules() -> str:
    """tpwarden's rules at the lab's pace (see the module's docstring)."""
    return scale_rules(rules_path().read_text(), RULES_TIME_SCALE, RULES_MIN_RANGE_S)


def render_config(paths: LabPaths) -> tuple[str, list[str]]:
    """The lab inventory's scrape config at the lab's interval, with the lab's scaled rules,
    and its warnings."""
    spec = load_inventory(paths.inventory)
    rules = str(_files(paths)["rules"])
    cfg = build_config(spec, PromOptions(INTERVAL_S, INTERVAL_S, rules_path=rules))
    if cfg.errors:
        raise LabError("lab scrape config: " + "; ".join(f.render() for f in cfg.errors))
    return render_yaml(cfg, str(paths.inventory)), [f.render() for f in cfg.warnings]


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as resp:  # noqa: S310 - loopback
            return resp.status == 200
    except OSError:
        return False


def start(paths: LabPaths, on_step: StepCallback = no_steps, listen: str | None = None) -> int:
    """Write the config and start Prometheus (or reload a running one); wait until ready."""
    if not Path(BINARY).is_file() and shutil.which("prometheus") is None:
        raise LabError(f"{BINARY} is missing: run scripts/setup.sh (Debian's prometheus)")
    files = _files(paths)
    text, warnings = render_config(paths)
    for w in warnings:
        on_step("prometheus", w)
    files["data"].mkdir(parents=True, exist_ok=True)
    pid = host.read_pid(files["pid"])
    old = files["config"].read_text() if files["config"].is_file() else None
    old_rules = files["rules"].read_text() if files["rules"].is_file() else None
    rules = render_rules()
    host.write_atomic(files["rules"], rules)
    host.write_atomic(files["config"], text)
    if pid is not None:
        if old != text or old_rules != rules:
            os.kill(pid, signal.SIGHUP)  # Prometheus reloads its config on SIGHUP
            on_step("prometheus", f"config reloaded (pid {pid})")
        else:
            on_step("prometheus", f"running (pid {pid}) on {listen_address(paths)}")
        return pid
    addr = listen or os.environ.get(LISTEN_ENV) or paths.prometheus_listen
    host.write_atomic(files["listen"], addr + "\n")
    pid = host.start_detached(
        [
            BINARY if Path(BINARY).is_file() else str(shutil.which("prometheus")),
            f"--config.file={files['config']}",
            f"--storage.tsdb.path={files['data']}",
            "--storage.tsdb.retention.time=2d",
            f"--web.listen-address={addr}",
        ],
        files["log"],
        files["pid"],
    )
    if not host.wait_for(lambda: _ready(f"http://{addr}"), READY_TIMEOUT_S, 0.5):
        tail = files["log"].read_text(errors="replace").splitlines()[-5:]
        host.stop_group(files["pid"], 5)
        raise LabError(f"prometheus did not get ready on {addr}: " + " | ".join(tail))
    on_step("prometheus", f"pid {pid} on http://{addr} ({files['config']})")
    return pid


def stop(paths: LabPaths) -> None:
    host.stop_group(_files(paths)["pid"], 15)


def status(paths: LabPaths) -> PromStatus:
    files = _files(paths)
    pid = host.read_pid(files["pid"])
    addr = listen_address(paths)
    return PromStatus(pid is not None, addr, f"http://{addr}", pid, str(files["config"]))
