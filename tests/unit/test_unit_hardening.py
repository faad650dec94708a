"""The provisioned units' sandboxes, scored by the real `systemd-analyze security --offline`
(issue 19): the thermal agent at most 4.0, the watchdog at most 6.0, the clock cap held where it
is now (no target: it needs root for NVML). `systemd-analyze verify` checks the rendered files
as well.

Rendered from the real templates with the real filter plugins, as Ansible renders them."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = ROOT / "playbooks"
ANALYZE = shutil.which("systemd-analyze")
# exposure limits, in systemd-analyze's tenths (its --threshold= scale: 40 is "4.0")
LIMITS = {"tpwarden-thermal": 40, "tpwarden-watchdog": 60, "tpwarden-clock-cap": 30}

pytestmark = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed")


def _filters() -> dict:
    path = PLAYBOOKS / "filter_plugins/tpwarden_filters.py"
    spec = importlib.util.spec_from_file_location("tpwarden_filters", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FilterModule().filters()


def _fake_venv(root: Path) -> Path:
    """Executables where the units name them: `verify` checks that ExecStart= exists."""
    venv = root / "venv"
    (venv / "bin").mkdir(parents=True)
    for name in ("tpwarden", "python"):
        (venv / "bin" / name).write_text("#!/bin/sh\n")
        (venv / "bin" / name).chmod(0o755)
    return venv


def render_units(dest: Path) -> dict[str, Path]:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters.update(_filters())
    env.filters["dirname"] = os.path.dirname  # Ansible's
    defaults = yaml.safe_load((PLAYBOOKS / "roles/tpwarden/defaults/main.yml").read_text())
    cfg = json.loads(json.dumps(defaults["tpwarden_spec_defaults"]))
    cfg["gpu_clock_cap_mhz"] = 2000
    venv = _fake_venv(dest)
    units = {}
    for name in LIMITS:
        template = (PLAYBOOKS / f"roles/units/templates/{name}.service.j2").read_text()
        text = env.from_string(template).render(
            ansible_managed="managed", inventory_hostname="node1", groups={"head": ["node1"]},
            tpwarden_cfg=cfg, tpwarden_venv=str(venv), tpwarden_etc="/etc/tpwarden",
            tpwarden_watchdog_ssh_dir="/etc/tpwarden/watchdog",
            tpwarden_thermal_user=defaults["tpwarden_thermal_user"],
        )  # fmt: skip
        units[name] = dest / f"{name}.service"
        units[name].write_text(text)
    return units


def exposure(unit: Path, threshold: int) -> tuple[float, int]:
    """(the overall exposure, systemd-analyze's exit status against ``threshold``)."""
    done = subprocess.run(
        [ANALYZE, "security", "--offline=true", f"--threshold={threshold}", "--no-pager", str(unit)],
        capture_output=True, text=True, timeout=60, cwd=unit.parent,
    )  # fmt: skip
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d)", done.stdout + done.stderr)
    assert found, done.stdout + done.stderr
    return float(found.group(1)), done.returncode


@pytest.mark.parametrize("name", sorted(LIMITS))
def test_exposure_stays_within_its_limit(tmp_path: Path, name: str) -> None:
    unit = render_units(tmp_path)[name]
    score, rc = exposure(unit, LIMITS[name])
    assert rc == 0 and score <= LIMITS[name] / 10, f"{name}: exposure {score} > {LIMITS[name] / 10}"


def test_the_limit_bites_on_an_unhardened_unit(tmp_path: Path) -> None:
    # What the units were before issue 19 scored 7.7-8.0: the gate must fail such a unit.
    unit = tmp_path / "plain.service"
    unit.write_text("[Service]\nExecStart=/bin/true\nNoNewPrivileges=yes\nProtectSystem=full\n")
    score, rc = exposure(unit, LIMITS["tpwarden-watchdog"])
    assert score > 6.0 and rc != 0


def test_rendered_units_verify(tmp_path: Path) -> None:
    units = render_units(tmp_path)
    done = subprocess.run(
        [ANALYZE, "verify", "--man=no", *map(str, units.values())],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "tpwarden-" not in done.stderr, done.stderr


def test_thermal_agent_has_no_capabilities_and_can_still_read_meminfo(tmp_path: Path) -> None:
    text = render_units(tmp_path)["tpwarden-thermal"].read_text()
    lines = text.splitlines()
    assert "CapabilityBoundingSet=" in lines
    assert "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX" in lines
    # psutil reads /proc/meminfo (unified memory): no ProcSubset=pid
    assert not any(ln.startswith("ProcSubset=") for ln in lines)
    # the log dir stays in place (a log volume, the lab's tmpfs): a root unit's LogsDirectory=
    assert "LogsDirectory=tpwarden/thermal" in lines and "DynamicUser=yes" not in lines
    # its own unprivileged user (issue 29), made by provisioning
    assert "User=tpwarden-thermal" in lines and "Group=tpwarden-thermal" in lines
