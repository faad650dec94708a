"""The lab's sensor model: GPU and ACPI thermal readings that follow simulated load.

Pure part: :func:`step` advances one node's :class:`NodeThermal` by ``dt_s`` under a load in
0..1 with a first-order lag toward targets taken from the field report (GPU ~40 C idle, ~64 C
under full load with the 2000 MHz cap, GPU zone 66-70 C, CPU P-core zone 82 C on the head vs
68-75 C on workers, critical trip 104.8 C). Heat overrides (fault injection) pin a GPU or a zone
to a temperature for a while.

Writers: :func:`write_gpu_state` (the ``key=value`` file the NVML stub reads; see
lab/nvml/nvml_stub.c) and :func:`write_thermal_zones` (a fake ``/sys/class/thermal``).

Driver: :class:`SensorDriver` with ``tick()``; time and load are injected (each rank's load:
lab/rankload.py).

GB10 zone types are not verified (thermal.md): hwmon on GB10 shows only ``acpitz``, so all seven
zones are ``acpitz``; their roles (which one is the GPU zone...) are in :data:`GB10_ZONES`.
"""

from __future__ import annotations

import fcntl
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from tpwarden.cluster.durable import atomic_write_text

GPU = "gpu"  # HeatOverride.target for the GPU sensor; zones are addressed by index
CRITICAL_TRIP_MC = 104800
CLOCK_KEYS = ("locked_clock_min_mhz", "locked_clock_max_mhz")

# nvmlClocksEventReason* bits (fixed by nvml.h; the lab has no pynvml dependency here)
REASON_GPU_IDLE = 0x1
REASON_SW_THERMAL_SLOWDOWN = 0x20
REASON_HW_THERMAL_SLOWDOWN = 0x40


@dataclass(frozen=True, kw_only=True)
class ZoneSpec:
    """One ACPI thermal zone: what it is and where it sits idle and under full load."""

    role: str
    type: str
    idle_c: float
    load_c: float
    head_extra_c: float = 0.0  # the head runs the API server, scheduler and bench client
    trips_mc: tuple[tuple[int, str], ...] = (
        (CRITICAL_TRIP_MC, "critical"),
        (101800, "hot"),
        (94800, "passive"),
    )


GB10_ZONES: tuple[ZoneSpec, ...] = (
    ZoneSpec(role="soc", type="acpitz", idle_c=38.0, load_c=58.0, head_extra_c=6.0),
    ZoneSpec(role="cpu_pcore_0", type="acpitz", idle_c=42.0, load_c=72.0, head_extra_c=10.0),
    ZoneSpec(role="cpu_pcore_1", type="acpitz", idle_c=41.0, load_c=70.0, head_extra_c=10.0),
    ZoneSpec(role="cpu_ecore_0", type="acpitz", idle_c=40.0, load_c=62.0, head_extra_c=8.0),
    ZoneSpec(role="cpu_ecore_1", type="acpitz", idle_c=40.0, load_c=60.0, head_extra_c=8.0),
    ZoneSpec(role="gpu", type="acpitz", idle_c=42.0, load_c=68.0, head_extra_c=0.0),
    ZoneSpec(role="board", type="acpitz", idle_c=36.0, load_c=50.0, head_extra_c=2.0),
)


@dataclass(frozen=True, kw_only=True)
class GpuSpec:
    """GB10 GPU figures used by the model (lab values; thresholds unverified on hardware)."""

    idle_c: float = 40.0
    load_c_at_2000_mhz: float = 64.0  # field report peaks 63-66 C with the 2000 MHz cap
    uncapped_extra_c: float = 10.0  # a 0,2000 cap lowers temperature ~10 C (field report)
    idle_clock_mhz: int = 208
    load_clock_mhz: int = 2411  # typical GB10 load clock 2400-2450 MHz
    max_clock_mhz: int = 3003
    idle_power_mw: int = 5000
    load_power_mw: int = 60000
    gpu_max_temp_c: int = 88
    slowdown_temp_c: int = 95
    shutdown_temp_c: int = 100
    tau_s: float = 30.0  # the GPU follows its rank's load within a minute
    zone_tau_s: float = 90.0


@dataclass(frozen=True)
class HeatOverride:
    """Fault injection: hold ``target`` (``"gpu"`` or a zone index) at ``temp_c`` for a while."""

    target: str | int
    temp_c: float
    remaining_s: float


@dataclass(frozen=True, kw_only=True)
class NodeThermal:
    """One node's simulated sensors."""

    is_head: bool
    gpu_temp_c: float
    zone_temps_c: tuple[float, ...]
    energy_mj: float = 0.0
    load: float = 0.0
    clock_cap_mhz: int = 0
    overrides: tuple[HeatOverride, ...] = ()


def idle_state(is_head: bool, gpu: GpuSpec = GpuSpec()) -> NodeThermal:
    """A node that has been idle for a long time."""
    zones = tuple(z.idle_c + (0.3 * z.head_extra_c if is_head else 0.0) for z in GB10_ZONES)
    return NodeThermal(is_head=is_head, gpu_temp_c=gpu.idle_c, zone_temps_c=zones)


def natural_clock_mhz(load: float, gpu: GpuSpec = GpuSpec()) -> int:
    """The SM clock the GPU would pick without a cap: idle clock, or boost as soon as busy."""
    return gpu.idle_clock_mhz if load < 0.01 else gpu.load_clock_mhz


def effective_clock_mhz(load: float, cap_mhz: int, gpu: GpuSpec = GpuSpec()) -> int:
    natural = natural_clock_mhz(load, gpu)
    return min(natural, cap_mhz) if cap_mhz > 0 else natural


def gpu_target_c(load: float, cap_mhz: int, gpu: GpuSpec = GpuSpec()) -> float:
    """Steady GPU temperature for a load; a higher effective clock runs hotter."""
    clock = effective_clock_mhz(1.0, cap_mhz, gpu)
    span = max(gpu.load_clock_mhz - 2000, 1)
    hot = gpu.load_c_at_2000_mhz + gpu.uncapped_extra_c * (clock - 2000) / span
    return gpu.idle_c + (hot - gpu.idle_c) * _clamp(load)


def zone_target_c(zone: ZoneSpec, load: float, is_head: bool) -> float:
    load = _clamp(load)
    extra = zone.head_extra_c * (0.3 + 0.7 * load) if is_head else 0.0
    return zone.idle_c + (zone.load_c - zone.idle_c) * load + extra


def power_mw(load: float, cap_mhz: int, gpu: GpuSpec = GpuSpec()) -> int:
    clock_share = effective_clock_mhz(1.0, cap_mhz, gpu) / gpu.load_clock_mhz
    busy = (gpu.load_power_mw - gpu.idle_power_mw) * _clamp(load) * clock_share
    return int(gpu.idle_power_mw + busy)


def _clamp(x: float) -> float:
    return 0.0 if x != x else min(1.0, max(0.0, x))  # NaN counts as idle


def _lag(current: float, target: float, dt_s: float, tau_s: float) -> float:
    if dt_s <= 0:
        return current
    return current + (target - current) * (1.0 - math.exp(-dt_s / tau_s))


def step(
    state: NodeThermal,
    load: float,
    dt_s: float,
    *,
    clock_cap_mhz: int | None = None,
    gpu: GpuSpec = GpuSpec(),
) -> NodeThermal:
    """Advance one node by ``dt_s`` seconds under ``load`` (0..1). Pure."""
    load = _clamp(load)
    cap = state.clock_cap_mhz if clock_cap_mhz is None else clock_cap_mhz
    gpu_t = _lag(state.gpu_temp_c, gpu_target_c(load, cap, gpu), dt_s, gpu.tau_s)
    zones = [
        _lag(t, zone_target_c(z, load, state.is_head), dt_s, gpu.zone_tau_s)
        for z, t in zip(GB10_ZONES, state.zone_temps_c, strict=True)
    ]
    still: list[HeatOverride] = []
    for ov in state.overrides:  # an override holds its target while it lasts
        if ov.target == GPU:
            gpu_t = ov.temp_c
        elif isinstance(ov.target, int) and 0 <= ov.target < len(zones):
            zones[ov.target] = ov.temp_c
        left = ov.remaining_s - max(dt_s, 0.0)
        if left > 0:
            still.append(replace(ov, remaining_s=left))
    energy = state.energy_mj + power_mw(load, cap, gpu) * max(dt_s, 0.0)
    return NodeThermal(
        is_head=state.is_head,
        gpu_temp_c=gpu_t,
        zone_temps_c=tuple(zones),
        energy_mj=energy,
        load=load,
        clock_cap_mhz=cap,
        overrides=tuple(still),
    )


def with_heat(
    state: NodeThermal, target: str | int, temp_c: float, duration_s: float
) -> NodeThermal:
    """Add a heat override (applied from the next :func:`step` on, and immediately here)."""
    ov = HeatOverride(target, float(temp_c), float(duration_s))
    gpu_t, zones = state.gpu_temp_c, list(state.zone_temps_c)
    if target == GPU:
        gpu_t = ov.temp_c
    elif isinstance(target, int) and 0 <= target < len(zones):
        zones[target] = ov.temp_c
    else:
        raise ValueError(f"heat target must be {GPU!r} or a zone index 0..{len(zones) - 1}")
    return replace(
        state, gpu_temp_c=gpu_t, zone_temps_c=tuple(zones), overrides=(*state.overrides, ov)
    )


def gpu_state_fields(state: NodeThermal, gpu: GpuSpec = GpuSpec()) -> dict[str, int | str]:
    """The readings the NVML stub serves, for :func:`write_gpu_state` (no clock-lock keys)."""
    temp = round(state.gpu_temp_c)
    reasons = REASON_GPU_IDLE if state.load < 0.01 else 0
    natural = natural_clock_mhz(state.load, gpu)
    if temp >= gpu.slowdown_temp_c:
        reasons |= REASON_HW_THERMAL_SLOWDOWN
        natural = min(natural, gpu.load_clock_mhz // 2)
    elif temp >= gpu.gpu_max_temp_c:
        reasons |= REASON_SW_THERMAL_SLOWDOWN
        natural = min(natural, 1500)
    return {
        "temp_c": temp,
        "sm_clock_natural_mhz": natural,
        "sm_clock_max_mhz": gpu.max_clock_mhz,
        "power_mw": power_mw(state.load, state.clock_cap_mhz, gpu),
        "energy_mj": int(state.energy_mj),
        "util_pct": round(100 * state.load),
        "pstate": 0 if state.load >= 0.01 else 8,
        "slowdown_temp_c": gpu.slowdown_temp_c,
        "shutdown_temp_c": gpu.shutdown_temp_c,
        "gpu_max_temp_c": gpu.gpu_max_temp_c,
        "clock_event_reasons": f"{reasons:#x}",
    }


# -- files ---------------------------------------------------------------------------------------
def parse_gpu_state(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def read_gpu_state(path: Path) -> dict[str, str]:
    try:
        return parse_gpu_state(Path(path).read_text())
    except FileNotFoundError:
        return {}


def read_clock_cap_mhz(path: Path) -> int:
    try:
        return max(int(read_gpu_state(path).get("locked_clock_max_mhz", "0"), 0), 0)
    except ValueError:
        return 0


def _atomic_write(path: Path, text: str, *, durable: bool = False) -> None:
    """Readers see the old or the new content, never a torn one. Fake sysfs readings are
    rewritten every tick and worthless after a reboot: only the GPU state file is fsynced."""
    atomic_write_text(path, text, mode=0o644, sync=durable)


def write_gpu_state(
    path: Path, values: Mapping[str, object], *, reset_clocks: bool = False
) -> None:
    """Merge ``values`` into the stub's state file, atomically, keeping a clock cap set by NVML.

    Locked-clock keys already in the file win over ``values`` unless ``reset_clocks`` (node
    boot: real caps do not survive a reboot). Serialised with the stub by ``flock(<path>.lock)``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{path}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        merged = read_gpu_state(path)
        kept = {k: merged[k] for k in CLOCK_KEYS if k in merged}
        merged.update({k: str(v) for k, v in values.items()})
        if reset_clocks:
            merged.update({k: "0" for k in CLOCK_KEYS})
        else:
            merged.update(kept)
        for k in CLOCK_KEYS:
            merged.setdefault(k, "0")
        body = "".join(f"{k}={v}\n" for k, v in merged.items())
        header = "# tpwarden lab GPU state (see lab/nvml/nvml_stub.c)\n"
        _atomic_write(path, header + body, durable=True)


def write_thermal_zones(
    sysfs_thermal_dir: Path, temps_c: Sequence[float], zones: Sequence[ZoneSpec] = GB10_ZONES
) -> None:
    """Write ``thermal_zoneN/`` like ``/sys/class/thermal``: temps in millidegrees C.

    Static files (type, trips, policy, mode) are written when the zone's ``type`` is absent or
    different; ``temp`` is replaced atomically every call.
    """
    root = Path(sysfs_thermal_dir)
    for n, (spec, temp) in enumerate(zip(zones, temps_c, strict=True)):
        zdir = root / f"thermal_zone{n}"
        zdir.mkdir(parents=True, exist_ok=True)
        type_file = zdir / "type"
        if not type_file.is_file() or type_file.read_text() != spec.type + "\n":
            _write_static_zone(zdir, spec)
        _atomic_write(zdir / "temp", f"{round(temp * 1000)}\n")


def _write_static_zone(zdir: Path, spec: ZoneSpec) -> None:
    static = {"policy": "step_wise", "available_policies": "step_wise user_space"}
    static["mode"] = "enabled"
    for i, (trip_mc, kind) in enumerate(spec.trips_mc):
        static[f"trip_point_{i}_temp"] = str(trip_mc)
        static[f"trip_point_{i}_type"] = kind
        static[f"trip_point_{i}_hyst"] = "0"
    static["type"] = spec.type  # last: its presence marks the zone complete
    for name, value in static.items():
        _atomic_write(zdir / name, value + "\n")


# -- driver --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeSensorPaths:
    """Where one node's fake sensors live on the lab host."""

    name: str
    gpu_state_path: Path
    thermal_dir: Path
    is_head: bool = False


LoadSource = Callable[[], Mapping[str, float]]


class SensorDriver:
    """Advances every node's model on ``tick()`` and writes its files. Starts nothing itself."""

    def __init__(
        self,
        node_dirs: Sequence[NodeSensorPaths],
        load_source: LoadSource,
        clock: Callable[[], float],
        gpu: GpuSpec = GpuSpec(),
    ) -> None:
        self.node_dirs = tuple(node_dirs)
        self.load_source = load_source
        self.clock = clock
        self.gpu = gpu
        self.states: dict[str, NodeThermal] = {}
        self._last_s: float | None = None

    def boot(self, name: str) -> None:
        """A node (re)boots: idle temperatures, clock cap cleared (real caps do not persist)."""
        node = self._node(name)
        self.states[name] = idle_state(node.is_head, self.gpu)
        write_gpu_state(node.gpu_state_path, self._static_fields(node), reset_clocks=True)

    def heat(self, name: str, target: str | int, temp_c: float, duration_s: float) -> None:
        self._node(name)
        state = self.states.get(name) or idle_state(self._node(name).is_head, self.gpu)
        self.states[name] = with_heat(state, target, temp_c, duration_s)

    def cool(self, name: str) -> None:
        """Undo a heat fault now: the node's sensors restart from their idle values (a rehearsal
        must not leave a hot node behind for the next one), then follow the load again."""
        self.states[name] = idle_state(self._node(name).is_head, self.gpu)

    def tick(self) -> None:
        now = self.clock()
        dt = 0.0 if self._last_s is None else max(now - self._last_s, 0.0)
        self._last_s = now
        try:
            loads = dict(self.load_source())
        except Exception:  # noqa: BLE001 - a broken load source must not stop the sensors
            loads = {}
        for node in self.node_dirs:
            state = self.states.get(node.name) or idle_state(node.is_head, self.gpu)
            cap = read_clock_cap_mhz(node.gpu_state_path)
            state = step(state, loads.get(node.name, 0.0), dt, clock_cap_mhz=cap, gpu=self.gpu)
            self.states[node.name] = state
            values = {**self._static_fields(node), **gpu_state_fields(state, self.gpu)}
            write_gpu_state(node.gpu_state_path, values)
            write_thermal_zones(node.thermal_dir, state.zone_temps_c)

    def _node(self, name: str) -> NodeSensorPaths:
        for node in self.node_dirs:
            if node.name == name:
                return node
        raise KeyError(f"no such lab node: {name}")

    @staticmethod
    def _static_fields(node: NodeSensorPaths) -> dict[str, object]:
        suffix = f"{sum(map(ord, node.name)) & 0xFFFF:04x}"
        return {
            "device_count": 1,
            "gpu_name": "NVIDIA GB10",
            "uuid": f"GPU-5e7a1ab0-0000-4000-8000-00000000{suffix}",
            "driver_version": "580.95.05",
            "cuda_driver_version": 13000,
        }
