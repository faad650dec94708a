"""Fakes at the thermal agent's boundaries, for tests, the bench and the lab: a fake `/sys`
thermal tree (bind-mounted at `/sys/class/thermal` in lab nodes) and a fake GPU sampler shaped
like cluster.gpu's GpuSample."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

CRITICAL_MC = 104_800

# (type, temp millidegrees): a GB10-like node at moderate load. Types mirror the field report's
# zones (ACPI, CPU P-core/E-core, GPU, SoC); the real strings are unverified (thermal.md).
DEFAULT_ZONES: tuple[tuple[str, int], ...] = (
    ("acpitz", 45_000),
    ("cpu-p-core", 68_000),
    ("cpu-e-core", 61_000),
    ("gpu", 62_000),
    ("soc", 55_000),
    ("lpddr", 50_000),
    ("nvme", 41_000),
)
DEFAULT_TRIPS: tuple[tuple[str, int], ...] = (
    ("critical", CRITICAL_MC),
    ("hot", 100_000),
    ("passive", 95_000),
)
DEFAULT_HWMON: tuple[tuple[str, Sequence[tuple[str | None, int]]], ...] = (
    ("acpitz", ((None, 45_000), (None, 68_000))),
    ("nvme", (("Composite", 41_000),)),
    ("mlx5", ((None, 58_000),)),
)


def build_fake_sysfs(
    root: str | Path,
    zones: Sequence[tuple[str, int]] = DEFAULT_ZONES,
    trips: Sequence[tuple[str, int]] = DEFAULT_TRIPS,
    hwmon: Sequence[tuple[str, Sequence[tuple[str | None, int]]]] = DEFAULT_HWMON,
) -> Path:
    """Create `<root>/class/thermal/thermal_zone*` and `<root>/class/hwmon/hwmon*`; returns root."""
    root = Path(root)
    thermal = root / "class" / "thermal"
    for i, (ztype, temp_mc) in enumerate(zones):
        z = thermal / f"thermal_zone{i}"
        z.mkdir(parents=True, exist_ok=True)
        (z / "type").write_text(ztype + "\n")
        (z / "temp").write_text(f"{temp_mc}\n")
        (z / "mode").write_text("enabled\n")
        (z / "policy").write_text("step_wise\n")
        for j, (ttype, ttemp) in enumerate(trips):
            (z / f"trip_point_{j}_type").write_text(ttype + "\n")
            (z / f"trip_point_{j}_temp").write_text(f"{ttemp}\n")
    for i, (name, sensors) in enumerate(hwmon):
        h = root / "class" / "hwmon" / f"hwmon{i}"
        h.mkdir(parents=True, exist_ok=True)
        (h / "name").write_text(name + "\n")
        for j, (label, temp_mc) in enumerate(sensors, start=1):
            (h / f"temp{j}_input").write_text(f"{temp_mc}\n")
            if label is not None:
                (h / f"temp{j}_label").write_text(label + "\n")
    return root


def set_zone_temps(root: str | Path, temps_mc: Mapping[int, int]) -> None:
    """Change zone temperatures in place (zone index -> millidegrees)."""
    for i, temp_mc in temps_mc.items():
        (Path(root) / "class" / "thermal" / f"thermal_zone{i}" / "temp").write_text(f"{temp_mc}\n")


# -- fake GPU sampler ---------------------------------------------------------------------------
@dataclass(frozen=True)
class FakeReading:
    """Same shape as cluster.gpu.Reading."""

    value: object
    reason: str | None = None


NOT_SUPPORTED = "NVML_ERROR_NOT_SUPPORTED"


def gb10_sample(
    index: int = 0,
    temp_c: float = 55.0,
    sm_clock_mhz: float = 2000.0,
    power_w: float = 30.0,
    util_pct: float = 80.0,
    reasons: tuple[str, ...] = (),
) -> FakeGpuSample:
    """A GpuSample-shaped object as a GB10 answers: memory and fan NOT_SUPPORTED."""
    ns = FakeReading(None, NOT_SUPPORTED)
    return FakeGpuSample(
        index=index,
        name="NVIDIA GB10",
        uuid=f"GPU-fake-{index:04d}",
        temp_c=FakeReading(temp_c),
        sm_clock_mhz=FakeReading(sm_clock_mhz),
        sm_clock_max_mhz=FakeReading(3003),
        locked_clock_max_mhz=FakeReading(2000),
        power_w=FakeReading(power_w),
        energy_j=FakeReading(12345.0),
        util_pct=FakeReading(util_pct),
        memory_used_mib=ns,
        memory_total_mib=ns,
        fan_pct=ns,
        pstate=FakeReading("P0"),
        slowdown_temp_c=ns,
        shutdown_temp_c=ns,
        clock_event_reasons=FakeReading(reasons),
    )


@dataclass(frozen=True, kw_only=True)
class FakeGpuSample:
    index: int
    name: str
    uuid: str
    temp_c: FakeReading
    sm_clock_mhz: FakeReading
    sm_clock_max_mhz: FakeReading
    locked_clock_max_mhz: FakeReading
    power_w: FakeReading
    energy_j: FakeReading
    util_pct: FakeReading
    memory_used_mib: FakeReading
    memory_total_mib: FakeReading
    fan_pct: FakeReading
    pstate: FakeReading
    slowdown_temp_c: FakeReading
    shutdown_temp_c: FakeReading
    clock_event_reasons: FakeReading


class FakeGpuSampler:
    """Returns ``samples`` (or raises ``error``) on every call; counts calls."""

    def __init__(self, samples: list[object] | None = None, error: Exception | None = None) -> None:
        self.samples = samples if samples is not None else [gb10_sample()]
        self.error = error
        self.calls = 0

    def sample_all(self) -> list[object]:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return list(self.samples)
