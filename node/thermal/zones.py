"""Linux thermal sysfs gateway: `class/thermal/thermal_zone*` and `class/hwmon/hwmon*/temp*`.

The only module of the thermal agent that reads sysfs. A zone or sensor that cannot be read
(EIO, ENODATA and EAGAIN happen on real hardware) becomes ``temp_c=None`` plus a reason; one bad
zone never spoils the sweep. ``sysfs_root`` defaults to ``/sys`` and can point at a fake tree.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tpwarden.cluster.durable import JSONValue

ReadText = Callable[[Path], str]

_NUM = re.compile(r"(\d+)")


@dataclass(frozen=True)
class TripPoint:
    index: int
    type: str | None
    temp_c: float | None
    reason: str | None = None  # why type or temp is missing


@dataclass(frozen=True)
class ZoneReading:
    name: str  # "thermal_zone0"
    type: str | None
    temp_c: float | None
    reason: str | None  # why temp_c is None
    trips: tuple[TripPoint, ...] = ()

    @property
    def critical_c(self) -> float | None:
        return critical_trip_c({"type": t.type, "temp_c": t.temp_c} for t in self.trips)


@dataclass(frozen=True, kw_only=True)
class HwmonReading:
    chip: str  # "hwmon0" (the number is unstable across boots; chip_name is not)
    chip_name: str | None  # content of `name`, e.g. "acpitz", "nvme"
    sensor: str  # "temp1"
    label: str | None
    temp_c: float | None
    reason: str | None
    crit_c: float | None = None


@dataclass(frozen=True)
class SysfsSnapshot:
    zones: tuple[ZoneReading, ...]
    hwmon: tuple[HwmonReading, ...]
    errors: tuple[str, ...] = ()  # sweep-level problems (e.g. no thermal class at all)


def _natural_key(name: str) -> list[object]:
    return [int(p) if p.isdigit() else p for p in _NUM.split(name)]


def os_error_reason(exc: OSError) -> str:
    """'EIO: Input/output error' style text for an OSError."""
    name = errno.errorcode.get(exc.errno or 0, "OSError")
    return f"{name}: {exc.strerror or exc}"


def _default_read_text(path: Path) -> str:
    with open(path, encoding="ascii", errors="replace") as f:
        return f.read()


class SysfsZoneReader:
    """Reads thermal zones and hwmon temperatures under ``sysfs_root``. Stateless apart from
    its paths; every call to :meth:`read` is a fresh sweep."""

    def __init__(
        self, sysfs_root: str | os.PathLike[str] = "/sys", read_text: ReadText | None = None
    ):
        self.root = Path(sysfs_root)
        self._read_text = read_text or _default_read_text

    # -- primitives -------------------------------------------------------------------------
    def _text(self, path: Path) -> tuple[str | None, str | None]:
        try:
            return self._read_text(path).strip(), None
        except OSError as exc:
            return None, os_error_reason(exc)

    def _millideg(self, path: Path) -> tuple[float | None, str | None]:
        text, reason = self._text(path)
        if text is None:
            return None, reason
        try:
            return int(text) / 1000.0, None
        except ValueError:
            return None, f"unparseable: {text[:40]!r}"

    # -- thermal zones ------------------------------------------------------------------------
    def read_zones(self) -> tuple[tuple[ZoneReading, ...], tuple[str, ...]]:
        base = self.root / "class" / "thermal"
        try:
            names = [n for n in os.listdir(base) if n.startswith("thermal_zone")]
        except OSError as exc:
            return (), (f"{base}: {os_error_reason(exc)}",)
        zones = [self._read_zone(base / n) for n in sorted(names, key=_natural_key)]
        return tuple(zones), ()

    def _read_zone(self, path: Path) -> ZoneReading:
        ztype, _ = self._text(path / "type")
        temp_c, reason = self._millideg(path / "temp")
        return ZoneReading(path.name, ztype, temp_c, reason, self._read_trips(path))

    def _read_trips(self, path: Path) -> tuple[TripPoint, ...]:
        try:
            entries = os.listdir(path)
        except OSError:
            return ()
        indexes = sorted(
            int(m.group(1)) for e in entries if (m := re.fullmatch(r"trip_point_(\d+)_temp", e))
        )
        trips = []
        for i in indexes:
            ttype, type_reason = self._text(path / f"trip_point_{i}_type")
            temp_c, temp_reason = self._millideg(path / f"trip_point_{i}_temp")
            if temp_c is not None and temp_c <= 0:
                # firmware writes 0 (or a negative sentinel) for a trip it does not use; a
                # "critical at 0 C" trip would keep the near-critical alert firing forever
                temp_c, temp_reason = None, f"disabled (trip temp {temp_c:g} C)"
            trips.append(TripPoint(i, ttype, temp_c, temp_reason or type_reason))
        return tuple(trips)

    # -- hwmon ----------------------------------------------------------------------------------
    def read_hwmon(self) -> tuple[HwmonReading, ...]:
        base = self.root / "class" / "hwmon"
        try:
            chips = sorted((n for n in os.listdir(base) if n.startswith("hwmon")), key=_natural_key)
        except OSError:
            return ()  # hwmon is optional; its absence is not an error
        out: list[HwmonReading] = []
        for chip in chips:
            cpath = base / chip
            chip_name, _ = self._text(cpath / "name")
            try:
                inputs = [e for e in os.listdir(cpath) if re.fullmatch(r"temp\d+_input", e)]
            except OSError:
                continue
            for entry in sorted(inputs, key=_natural_key):
                sensor = entry[: -len("_input")]
                temp_c, reason = self._millideg(cpath / entry)
                label = None
                if (cpath / f"{sensor}_label").exists():
                    label, _ = self._text(cpath / f"{sensor}_label")
                crit_c = None
                if (cpath / f"{sensor}_crit").exists():
                    crit_c, _ = self._millideg(cpath / f"{sensor}_crit")
                out.append(
                    HwmonReading(
                        chip=chip,
                        chip_name=chip_name,
                        sensor=sensor,
                        label=label,
                        temp_c=temp_c,
                        reason=reason,
                        crit_c=crit_c,
                    )
                )
        return tuple(out)

    def read(self) -> SysfsSnapshot:
        zones, errors = self.read_zones()
        return SysfsSnapshot(zones, self.read_hwmon(), errors)


def critical_trip_c(trips: Iterable[Mapping[str, JSONValue]]) -> float | None:
    """The lowest critical trip of a zone's trips (records or readings); a trip at 0 C or below
    is a disabled one (records written before the reader knew that may still hold it)."""
    temps = [
        float(t["temp_c"])
        for t in trips
        if t.get("type") == "critical" and t.get("temp_c") is not None and t["temp_c"] > 0
    ]
    return min(temps) if temps else None


def zone_to_record(z: ZoneReading) -> dict[str, object]:
    """JSON form of one zone as the agent writes it."""
    rec: dict[str, object] = {
        "name": z.name,
        "type": z.type,
        "temp_c": z.temp_c,
        "trips": [{"type": t.type, "temp_c": t.temp_c} for t in z.trips],
    }
    if z.temp_c is None:
        rec["null_reasons"] = {"temp_c": z.reason or "unknown"}
    return rec


def hwmon_to_record(h: HwmonReading) -> dict[str, object]:
    rec: dict[str, object] = {
        "chip": h.chip,
        "chip_name": h.chip_name,
        "sensor": h.sensor,
        "label": h.label,
        "temp_c": h.temp_c,
    }
    if h.crit_c is not None:
        rec["crit_c"] = h.crit_c
    if h.temp_c is None:
        rec["null_reasons"] = {"temp_c": h.reason or "unknown"}
    return rec
