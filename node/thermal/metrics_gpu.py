"""The GPU families of the thermal agent's /metrics, built from one sample record. Pure.

Names and units are tpwarden's own (docs/metrics.md): base units (hertz, bytes, ratio), one
series per GPU labelled ``node, gpu, uuid, model``. A reading NVML did not give is absent, never
zero; the family is still declared so that its HELP and TYPE are always there.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client.core import GaugeMetricFamily, Metric
from tpwarden.cluster.durable import JSONValue
from tpwarden.node.thermal.records import CLOCK_EVENT_BITS, THERMAL_REASONS, clock_event_mask

GPU_LABELS = ["node", "gpu", "uuid", "model"]
_MHZ = 1e6
_MIB = 2**20

# (record field, metric name, factor to the base unit, help)
GPU_GAUGES: tuple[tuple[str, str, float, str], ...] = (
    ("temp_c", "tpwarden_gpu_temperature_celsius", 1.0, "GPU temperature."),
    ("slowdown_temp_c", "tpwarden_gpu_slowdown_temperature_celsius", 1.0,
     "Temperature at which the GPU slows down (NVML threshold)."),
    ("shutdown_temp_c", "tpwarden_gpu_shutdown_temperature_celsius", 1.0,
     "Temperature at which the GPU shuts down (NVML threshold)."),
    ("sm_clock_mhz", "tpwarden_gpu_sm_clock_hertz", _MHZ, "Current SM clock."),
    ("sm_clock_max_mhz", "tpwarden_gpu_sm_clock_max_hertz", _MHZ, "Highest SM clock the GPU supports."),
    ("locked_clock_max_mhz", "tpwarden_gpu_clock_limit_hertz", _MHZ,
     "Locked maximum SM clock (the clock cap); absent when none is set."),
    ("power_w", "tpwarden_gpu_power_watts", 1.0, "Power draw."),
    ("util_pct", "tpwarden_gpu_utilization_ratio", 0.01, "GPU utilization, 0 to 1."),
    ("memory_used_mib", "tpwarden_gpu_memory_used_bytes", _MIB,
     "GPU memory in use (only when NVML reports it; see tpwarden_gpu_memory_unified)."),
    ("memory_total_mib", "tpwarden_gpu_memory_total_bytes", _MIB,
     "GPU memory size (only when NVML reports it; see tpwarden_gpu_memory_unified)."),
)  # fmt: skip


def gpu_labels(gpu: Mapping[str, JSONValue], node: str) -> list[str]:
    return [node, str(gpu.get("index")), str(gpu.get("uuid") or ""), str(gpu.get("name") or "")]


def memory_unified(gpu: Mapping[str, JSONValue]) -> bool | None:
    """True when NVML said memory info is Not Supported (GB10: the memory is the CPU's),
    False when it reported the memory, None when it is missing for another reason."""
    if gpu.get("memory_total_mib") is not None:
        return False
    reason = str((gpu.get("null_reasons") or {}).get("memory_total_mib") or "")
    return True if "not supported" in reason.lower().replace("_", " ") else None


def gpu_metrics(rec: Mapping[str, JSONValue], node: str) -> Iterator[Metric]:
    gpus = rec.get("gpus") or []
    for field, name, factor, help_ in GPU_GAUGES:
        g = GaugeMetricFamily(name, help_, labels=GPU_LABELS)
        for gpu in gpus:
            if gpu.get(field) is not None:
                g.add_metric(gpu_labels(gpu, node), float(gpu[field]) * factor)
        yield g
    unified = GaugeMetricFamily(
        "tpwarden_gpu_memory_unified",
        "1 when NVML reports GPU memory as Not Supported because it is the node's (GB10); "
        "read tpwarden_node_memory_* then.",
        labels=GPU_LABELS,
    )
    mask = GaugeMetricFamily(
        "tpwarden_gpu_clock_event_reasons",
        "Active NVML clock-event reasons as NVML's bitmask.",
        labels=GPU_LABELS,
    )
    active = GaugeMetricFamily(
        "tpwarden_gpu_throttle_active",
        "1 while the named NVML clock-event reason is active.",
        labels=[*GPU_LABELS, "reason"],
    )
    thermal = GaugeMetricFamily(
        "tpwarden_gpu_thermal_throttle_active",
        "1 while any thermal clock-event reason (" + ", ".join(sorted(THERMAL_REASONS)) + ") is active.",
        labels=GPU_LABELS,
    )  # fmt: skip
    for gpu in gpus:
        labels = gpu_labels(gpu, node)
        u = memory_unified(gpu)
        if u is not None:
            unified.add_metric(labels, float(u))
        reasons = gpu.get("clock_event_reasons")
        bits = clock_event_mask(reasons, gpu.get("clock_event_reasons_mask"))
        if bits is not None:
            mask.add_metric(labels, bits)
        if reasons is None:
            continue  # unknown is not "none active"
        on = set(reasons)
        for reason in CLOCK_EVENT_BITS:
            active.add_metric([*labels, reason], float(reason in on))
        thermal.add_metric(labels, float(bool(on & THERMAL_REASONS)))
    yield from (unified, mask, active, thermal)
