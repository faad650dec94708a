"""The morning field report, pure over sample records (dicts as the agent writes them).

Per node: peak GPU temperature, peak per zone and per zone type, margin to the critical trip,
thermal throttle episodes, samples expected vs received and every gap, plus head vs workers.
Nothing here reads files or the clock; see ``export.py`` for files, CSV, PNG and JSON.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field

from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.node.thermal.records import THERMAL_REASONS, iso_utc
from tpwarden.node.thermal.roles import zone_label, zone_role
from tpwarden.node.thermal.zones import critical_trip_c

GAP_FACTOR = 1.5  # consecutive samples further apart than this many intervals make a gap
GPU_SUMMARY_FIELDS = (
    "temp_c", "sm_clock_mhz", "locked_clock_max_mhz", "power_w", "util_pct",
    "memory_used_mib", "fan_pct",
)  # fmt: skip


@dataclass(frozen=True)
class Gap:
    start: float
    end: float
    kind: str  # "window_start" | "within" | "window_end" | "no_samples"
    missing: int  # grid slots with no sample (estimate: duration / interval)

    @property
    def duration_s(self) -> float:
        return self.end - self.start


@dataclass(frozen=True, kw_only=True)
class ZonePeak:
    zone: str
    type: str | None
    peak_c: float | None
    peak_ts: float | None
    critical_c: float | None
    margin_c: float | None  # critical_c - peak_c
    null_reason: str | None = None  # why there is no peak (every read failed)
    role: str | None = None  # from the inventory's thermal.zone_roles (roles.py)


@dataclass(frozen=True)
class Episodes:
    episodes: int = 0
    duration_s: float = 0.0  # sampled estimate: each active sample stands for one interval


@dataclass(frozen=True, kw_only=True)
class NodeReport:
    node: str
    role: str
    samples_expected: int
    samples_received: int
    gpu_peak_c: float | None
    gpu_peak_ts: float | None
    gpu_margin_c: float | None  # GPU shutdown temperature - peak, when NVML reports one
    zones: tuple[ZonePeak, ...]
    zone_type_peaks: dict[str, float | None]
    hottest_zone: ZonePeak | None
    min_margin_c: float | None  # tightest zone margin to its critical trip
    throttle: Episodes
    throttle_by_reason: dict[str, Episodes]
    gaps: tuple[Gap, ...]
    gpu_fields: dict[str, JSONObject]  # field -> {max, min, null_reason}
    late_samples: int
    skipped_slots: int
    dropped_records: int
    errors: int
    null_reasons: dict[str, str] = field(default_factory=dict)  # node-level missing readings
    # label (role, else "thermal_zoneN (type)") -> {peak_c, critical_c, margin_c}: one entry per
    # role, so seven "acpitz" zones no longer collapse into one number
    role_peaks: dict[str, dict[str, float | None]] = field(default_factory=dict)
    throttle_spans: tuple[tuple[float, float], ...] = ()  # (start, end) of each episode


@dataclass(frozen=True)
class FieldReport:
    since: float
    until: float
    interval_s: float
    nodes: tuple[NodeReport, ...]
    head_vs_workers: dict[str, dict[str, float | None]]


def filter_window(
    records: Iterable[Mapping[str, JSONValue]], since: float | None, until: float | None
) -> list[Mapping[str, JSONValue]]:
    return [
        r
        for r in records
        if isinstance(r.get("ts"), int | float)
        and (since is None or r["ts"] >= since)
        and (until is None or r["ts"] <= until)
    ]


def build_report(
    records: Iterable[Mapping[str, JSONValue]],
    *,
    since: float | None = None,
    until: float | None = None,
    roles: Mapping[str, str] | None = None,
    interval_s: float | None = None,
    zone_roles: Mapping[str, str] | None = None,
) -> FieldReport:
    """Merge records from any number of nodes into the field report.

    The window defaults to the first and last sample of all nodes together, so a node that
    stopped early shows a gap at the end. ``roles`` maps node -> "head"/"worker"; nodes named
    there but without records appear with no samples. Without it, roles recorded by the agents
    are used. ``zone_roles`` maps zone index, name or type to a role (roles.py).
    """
    recs = sorted(filter_window(records, since, until), key=lambda r: r["ts"])
    interval = interval_s or _interval_of(recs)
    if since is None:
        since = recs[0]["ts"] if recs else 0.0
    if until is None:
        until = recs[-1]["ts"] if recs else since
    by_node: dict[str, list[Mapping[str, JSONValue]]] = {n: [] for n in (roles or {})}
    for r in recs:
        by_node.setdefault(str(r.get("node")), []).append(r)
    nodes = tuple(
        _node_report(node, rs, _role(node, rs, roles), since, until, interval, zone_roles)
        for node, rs in sorted(by_node.items())
    )
    return FieldReport(since, until, interval, nodes, head_vs_workers(nodes))


def _interval_of(recs: list[Mapping[str, JSONValue]]) -> float:
    values = [r["interval_s"] for r in recs if isinstance(r.get("interval_s"), int | float)]
    return float(Counter(values).most_common(1)[0][0]) if values else 10.0


def _role(node: str, rs: list[Mapping[str, JSONValue]], roles: Mapping[str, str] | None) -> str:
    if roles and node in roles:
        return roles[node]
    recorded = [r["role"] for r in rs if r.get("role")]
    return recorded[-1] if recorded else "unknown"


def expected_samples(since: float, until: float, interval_s: float) -> int:
    """Grid slots in [since, until] (both ends included)."""
    if until < since:
        return 0
    return int(math.floor((until - since) / interval_s + 1e-9)) + 1


def find_gaps(ts: list[float], since: float, until: float, interval_s: float) -> list[Gap]:
    """Gaps in sorted sample times: missing window start/end, and holes over 1.5 intervals."""
    limit = GAP_FACTOR * interval_s
    if not ts:
        return [Gap(since, until, "no_samples", expected_samples(since, until, interval_s))]
    gaps: list[Gap] = []
    if ts[0] - since > limit:
        gaps.append(Gap(since, ts[0], "window_start", round((ts[0] - since) / interval_s)))
    for a, b in zip(ts, ts[1:], strict=False):
        if b - a > limit:
            gaps.append(Gap(a, b, "within", round((b - a) / interval_s) - 1))
    if until - ts[-1] > limit:
        gaps.append(Gap(ts[-1], until, "window_end", round((until - ts[-1]) / interval_s)))
    return gaps


def _node_report(
    node: str,
    rs: list[Mapping[str, JSONValue]],
    role: str,
    since: float,
    until: float,
    interval: float,
    zone_roles: Mapping[str, str] | None = None,
) -> NodeReport:
    gpu_peak, gpu_peak_ts, shutdown = None, None, None
    for r in rs:
        for g in r.get("gpus") or []:
            t = g.get("temp_c")
            if t is not None and (gpu_peak is None or t > gpu_peak):
                gpu_peak, gpu_peak_ts = t, r["ts"]
            if g.get("shutdown_temp_c") is not None:
                shutdown = g["shutdown_temp_c"]
    zones = _zone_peaks(rs, zone_roles)
    type_peaks: dict[str, float | None] = {}
    for z in zones:
        key = z.type or z.zone
        if z.peak_c is not None:
            cur = type_peaks.get(key)
            type_peaks[key] = z.peak_c if cur is None else max(cur, z.peak_c)
        else:
            type_peaks.setdefault(key, None)
    with_peak = [z for z in zones if z.peak_c is not None]
    hottest = max(with_peak, key=lambda z: z.peak_c or 0.0) if with_peak else None
    margins = [z.margin_c for z in zones if z.margin_c is not None]
    throttle, by_reason = throttle_episodes(rs, interval)
    spans = throttle_spans(rs, interval)
    gpu_fields = _gpu_fields(rs)
    null_reasons: dict[str, str] = {}
    if gpu_peak is None:
        gpu_errors = Counter(
            e.get("error") for r in rs for e in r.get("errors") or [] if e.get("source") == "gpu"
        )
        reason = gpu_fields["temp_c"]["null_reason"]
        if gpu_errors and reason == "no GPU samples":
            reason = str(gpu_errors.most_common(1)[0][0])
        null_reasons["gpu_peak_c"] = reason or "no GPU samples"
    gpu_margin = None
    if gpu_peak is not None and shutdown is not None:
        gpu_margin = round(shutdown - gpu_peak, 3)
    else:
        null_reasons["gpu_margin_c"] = "GPU shutdown temperature not reported"
    return NodeReport(
        node=node,
        role=role,
        samples_expected=expected_samples(since, until, interval),
        samples_received=len(rs),
        gpu_peak_c=gpu_peak,
        gpu_peak_ts=gpu_peak_ts,
        gpu_margin_c=gpu_margin,
        zones=tuple(zones),
        zone_type_peaks=type_peaks,
        hottest_zone=hottest,
        min_margin_c=min(margins) if margins else None,
        throttle=throttle,
        throttle_by_reason=by_reason,
        gaps=tuple(find_gaps([r["ts"] for r in rs], since, until, interval)),
        gpu_fields=gpu_fields,
        late_samples=sum(1 for r in rs if (r.get("late_s") or 0) > min(1.0, 0.1 * interval)),
        skipped_slots=sum(int(r.get("skipped_slots") or 0) for r in rs),
        dropped_records=sum(int(r.get("dropped_records") or 0) for r in rs),
        errors=sum(len(r.get("errors") or []) for r in rs),
        null_reasons=null_reasons,
        role_peaks=role_peaks(zones, zone_roles),
        throttle_spans=tuple(spans),
    )


def role_peaks(
    zones: Iterable[ZonePeak], zone_roles: Mapping[str, str] | None
) -> dict[str, dict[str, float | None]]:
    """Peak, critical trip and margin per role (zones sharing a role: the hottest one)."""
    out: dict[str, dict[str, float | None]] = {}
    for z in zones:
        label = zone_label(z.zone, z.type, zone_roles)
        cur = out.get(label)
        if cur is None or (z.peak_c is not None and (cur["peak_c"] or -1e9) < z.peak_c):
            out[label] = {"peak_c": z.peak_c, "critical_c": z.critical_c, "margin_c": z.margin_c}
    return out


def _zone_peaks(
    rs: list[Mapping[str, JSONValue]], zone_roles: Mapping[str, str] | None = None
) -> list[ZonePeak]:
    acc: dict[str, JSONObject] = {}
    for r in rs:
        for z in r.get("zones") or []:
            a = acc.setdefault(
                z["name"],
                {"type": None, "peak": None, "ts": None, "crit": None, "reasons": Counter()},
            )
            a["type"] = z.get("type") or a["type"]
            crit = critical_trip_c(z.get("trips") or [])
            if crit is not None:
                a["crit"] = crit
            t = z.get("temp_c")
            if t is None:
                a["reasons"][(z.get("null_reasons") or {}).get("temp_c", "unknown")] += 1
            elif a["peak"] is None or t > a["peak"]:
                a["peak"], a["ts"] = t, r["ts"]
    out = []
    for name in sorted(acc, key=_natural):
        a = acc[name]
        margin = (
            round(a["crit"] - a["peak"], 3)
            if a["crit"] is not None and a["peak"] is not None
            else None
        )
        reason = (
            None
            if a["peak"] is not None
            else (a["reasons"].most_common(1)[0][0] if a["reasons"] else "no readings")
        )
        role = zone_role(name, a["type"], zone_roles)
        out.append(
            ZonePeak(
                zone=name,
                type=a["type"],
                peak_c=a["peak"],
                peak_ts=a["ts"],
                critical_c=a["crit"],
                margin_c=margin,
                null_reason=reason,
                role=role,
            )
        )
    return out


def _natural(name: str) -> tuple[str, int]:
    head = name.rstrip("0123456789")
    tail = name[len(head) :]
    return head, int(tail) if tail else -1


def _runs(active: list[tuple[float, bool]], interval_s: float) -> list[tuple[float, float]]:
    """Runs of consecutive active samples (no gap over 1.5 intervals) as (start, end); each
    active sample stands for one interval, so end = last active sample + one interval."""
    spans: list[tuple[float, float]] = []
    start = last = None
    for ts, on in active:
        if on and start is not None and last is not None and ts - last <= GAP_FACTOR * interval_s:
            last = ts
            continue
        if start is not None and last is not None:
            spans.append((start, last + interval_s))
            start = last = None
        if on:
            start = last = ts
    if start is not None and last is not None:
        spans.append((start, last + interval_s))
    return spans


def _episodes(spans: list[tuple[float, float]]) -> Episodes:
    return Episodes(len(spans), round(sum(b - a for a, b in spans), 3))


def _reasons_per_sample(rs: list[Mapping[str, JSONValue]]) -> list[tuple[float, set[str]]]:
    return [
        (r["ts"], {x for g in r.get("gpus") or [] for x in (g.get("clock_event_reasons") or [])})
        for r in rs
    ]


def throttle_spans(
    rs: list[Mapping[str, JSONValue]], interval_s: float
) -> list[tuple[float, float]]:
    """(start, end) of each thermal throttle episode on any GPU of a node (for plots)."""
    per_sample = _reasons_per_sample(rs)
    return _runs([(ts, bool(r & THERMAL_REASONS)) for ts, r in per_sample], interval_s)


def throttle_episodes(
    rs: list[Mapping[str, JSONValue]], interval_s: float
) -> tuple[Episodes, dict[str, Episodes]]:
    """Episodes of thermal clock-event reasons on any GPU of a node: runs of consecutive samples
    (no gap over 1.5 intervals) with the reason active. Duration = run length + one interval."""
    per_sample = _reasons_per_sample(rs)
    overall = _episodes(throttle_spans(rs, interval_s))
    by_reason = {
        reason: _episodes(_runs([(ts, reason in r) for ts, r in per_sample], interval_s))
        for reason in sorted(THERMAL_REASONS)
    }
    return overall, by_reason


def _gpu_fields(rs: list[Mapping[str, JSONValue]]) -> dict[str, JSONObject]:
    out: dict[str, JSONObject] = {}
    for f in GPU_SUMMARY_FIELDS:
        values = [g[f] for r in rs for g in r.get("gpus") or [] if g.get(f) is not None]
        reasons = Counter(
            (g.get("null_reasons") or {}).get(f, "unknown")
            for r in rs
            for g in r.get("gpus") or []
            if g.get(f) is None
        )
        reason = None
        if not values:
            reason = reasons.most_common(1)[0][0] if reasons else "no GPU samples"
        out[f] = {
            "max": max(values) if values else None,
            "min": min(values) if values else None,
            "null_reason": reason,
        }
    return out


def head_vs_workers(nodes: Iterable[NodeReport]) -> dict[str, dict[str, float | None]]:
    """Head peak vs the workers' peaks, per metric (GPU, hottest zone, each zone type)."""
    nodes = list(nodes)
    heads = [n for n in nodes if n.role == "head"]
    workers = [n for n in nodes if n.role == "worker"]
    if not heads or not workers:
        return {}
    head = heads[0]

    def metrics(n: NodeReport) -> dict[str, float | None]:
        m: dict[str, float | None] = {
            "gpu_peak_c": n.gpu_peak_c,
            "hottest_zone_c": n.hottest_zone.peak_c if n.hottest_zone else None,
        }
        m.update({f"zone:{t}": v for t, v in n.zone_type_peaks.items()})
        m.update({f"role:{r}": v["peak_c"] for r, v in n.role_peaks.items()})
        return m

    hm = metrics(head)
    out: dict[str, dict[str, float | None]] = {}
    for key, hv in hm.items():
        wv = [v for v in (metrics(w).get(key) for w in workers) if v is not None]
        wmax = max(wv) if wv else None
        out[key] = {
            "head": hv,
            "workers_min": min(wv) if wv else None,
            "workers_max": wmax,
            "delta_c": round(hv - wmax, 3) if hv is not None and wmax is not None else None,
        }
    return out


def report_to_json(rep: FieldReport) -> JSONObject:
    """JSON-ready dict; times also as ISO strings; missing values are null with a reason."""
    d = asdict(rep)
    d["since_iso"], d["until_iso"] = iso_utc(rep.since), iso_utc(rep.until)
    for node in d["nodes"]:
        for gap in node["gaps"]:
            gap["start_iso"], gap["end_iso"] = iso_utc(gap["start"]), iso_utc(gap["end"])
            gap["duration_s"] = round(gap["end"] - gap["start"], 3)
        if node["gpu_peak_ts"] is not None:
            node["gpu_peak_iso"] = iso_utc(node["gpu_peak_ts"])
    return d
