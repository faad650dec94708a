"""The sample record: the boundary protocols (GPU sampler, zone reader, writer) and the pure
conversion of their results into one JSON-ready dict per sample."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Protocol

from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.node.thermal.zones import SysfsSnapshot

# GpuSample fields (node/gpu.py), in record order. Most are Reading(value, reason).
GPU_FIELDS: tuple[str, ...] = (
    "index", "name", "uuid", "temp_c", "sm_clock_mhz", "sm_clock_max_mhz",
    "locked_clock_max_mhz", "power_w", "energy_j", "util_pct", "memory_used_mib",
    "memory_total_mib", "fan_pct", "pstate", "slowdown_temp_c", "shutdown_temp_c",
    "clock_event_reasons",
)  # fmt: skip

# NVML clock-event bits by the names cluster.gpu uses (nvml.h; thermal.md 1.3). Used only to
# rebuild the bitmask dcgm-exporter publishes; the record keeps the names.
CLOCK_EVENT_BITS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clocks_setting": 0x100,
    "board_limit": 0x200,
    "reliability": 0x400,
}
# Reasons that mean "too hot". hw_slowdown may also be power brake, but it is how a thermal
# emergency shows up, so the report and the alerts count it with the thermal ones.
THERMAL_REASONS: frozenset[str] = frozenset(
    {"sw_thermal_slowdown", "hw_thermal_slowdown", "hw_slowdown"}
)


class GpuSampler(Protocol):
    """What the agent needs from tpwarden.node.gpu.Nvml."""

    def sample_all(self) -> Sequence[object]: ...


class ZoneReader(Protocol):
    def read(self) -> SysfsSnapshot: ...


class RecordWriter(Protocol):
    def write(self, record: JSONObject) -> bool: ...


def iso_utc(ts: float) -> str:
    return (
        datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


def _jsonable(value: JSONValue) -> JSONValue:
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if isinstance(value, float):
        return round(value, 3)
    return value


def gpu_to_record(sample: object) -> JSONObject:
    """One GpuSample -> dict with plain values; missing ones are None and named in null_reasons.

    Accepts any object with the GpuSample attributes; a field that is a ``Reading`` contributes
    its value and, when the value is None, its reason.
    """
    names = list(GPU_FIELDS)
    if dataclasses.is_dataclass(sample):
        names += [f.name for f in dataclasses.fields(sample) if f.name not in GPU_FIELDS]
    rec: JSONObject = {}
    reasons: dict[str, str] = {}
    for name in names:
        raw = getattr(sample, name, dataclasses.MISSING)
        if raw is dataclasses.MISSING:
            value, reason = None, "not provided by the GPU sampler"
        elif hasattr(raw, "value") and hasattr(raw, "reason"):
            value, reason = raw.value, raw.reason
        else:
            value, reason = raw, None
        rec[name] = _jsonable(value)
        if value is None:
            reasons[name] = str(reason or "unknown")
    rec["null_reasons"] = reasons
    return rec


def clock_event_mask(reasons: Sequence[str] | None, raw: int | None = None) -> int | None:
    """The NVML bitmask: ``raw`` (GpuSample.clock_event_reasons_mask) when the sampler gave it,
    else rebuilt from the names."""
    if raw is not None:
        return int(raw)
    if reasons is None:
        return None
    mask = 0
    for r in reasons:
        mask |= CLOCK_EVENT_BITS.get(r, 0)
    return mask
