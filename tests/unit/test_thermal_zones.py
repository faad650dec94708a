"""Thermal-zone and hwmon reader on a fake sysfs tree."""

from __future__ import annotations

import errno
from pathlib import Path

from tpwarden.cluster.reports.thermal.fakes import CRITICAL_MC, build_fake_sysfs
from tpwarden.node.thermal.zones import SysfsZoneReader, zone_to_record


def test_reads_seven_zones_with_types_temps_and_trips(tmp_path: Path) -> None:
    root = build_fake_sysfs(tmp_path)
    snap = SysfsZoneReader(root).read()
    assert [z.name for z in snap.zones] == [f"thermal_zone{i}" for i in range(7)]
    p = snap.zones[1]
    assert (p.type, p.temp_c, p.reason) == ("cpu-p-core", 68.0, None)
    assert [(t.type, t.temp_c) for t in p.trips] == [
        ("critical", 104.8),
        ("hot", 100.0),
        ("passive", 95.0),
    ]
    assert p.critical_c == CRITICAL_MC / 1000
    assert snap.errors == ()


def test_zones_sort_naturally(tmp_path: Path) -> None:
    root = build_fake_sysfs(tmp_path, zones=[("acpitz", 40_000)] * 12)
    names = [z.name for z in SysfsZoneReader(root).read().zones]
    assert names[9:] == ["thermal_zone9", "thermal_zone10", "thermal_zone11"]


def test_unreadable_zone_is_null_with_reason_and_others_survive(tmp_path: Path) -> None:
    root = build_fake_sysfs(tmp_path)
    bad = root / "class/thermal/thermal_zone3/temp"

    def read_text(path: Path) -> str:
        if path == bad:
            raise OSError(errno.EIO, "Input/output error")
        if path.name == "temp" and path.parent.name == "thermal_zone5":
            raise OSError(errno.ENODATA, "No data available")
        return path.read_text()

    zones = SysfsZoneReader(root, read_text=read_text).read().zones
    assert zones[3].temp_c is None and zones[3].reason == "EIO: Input/output error"
    assert zones[5].temp_c is None and zones[5].reason.startswith("ENODATA")
    assert zones[3].type == "gpu" and len(zones[3].trips) == 3
    assert all(z.temp_c is not None for i, z in enumerate(zones) if i not in (3, 5))
    rec = zone_to_record(zones[3])
    assert rec["temp_c"] is None and rec["null_reasons"] == {"temp_c": "EIO: Input/output error"}


def test_real_filesystem_failure_and_garbage(tmp_path: Path) -> None:
    root = build_fake_sysfs(tmp_path)
    t0 = root / "class/thermal/thermal_zone0/temp"
    t0.unlink()
    t0.mkdir()  # reading a directory fails with EISDIR: a real OSError, no injection
    (root / "class/thermal/thermal_zone1/temp").write_text("garbage\n")
    zones = SysfsZoneReader(root).read().zones
    assert zones[0].temp_c is None and zones[0].reason.startswith("EISDIR")
    assert zones[1].temp_c is None and zones[1].reason.startswith("unparseable")


def test_hwmon_with_labels(tmp_path: Path) -> None:
    root = build_fake_sysfs(tmp_path)
    hw = SysfsZoneReader(root).read().hwmon
    assert [(h.chip, h.chip_name, h.sensor, h.label, h.temp_c) for h in hw] == [
        ("hwmon0", "acpitz", "temp1", None, 45.0),
        ("hwmon0", "acpitz", "temp2", None, 68.0),
        ("hwmon1", "nvme", "temp1", "Composite", 41.0),
        ("hwmon2", "mlx5", "temp1", None, 58.0),
    ]


def test_missing_thermal_class_is_a_sweep_error_not_an_exception(tmp_path: Path) -> None:
    snap = SysfsZoneReader(tmp_path / "nothing").read()
    assert snap.zones == () and snap.hwmon == ()
    assert snap.errors and "ENOENT" in snap.errors[0]
