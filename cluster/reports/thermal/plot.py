"""The thermal plot: one panel per node, in °C, in the operator's time zone, with the critical
trip and every thermal throttle episode marked. Matplotlib (Agg) only; no file I/O here
(``figure_png`` returns bytes; export.py writes files atomically)."""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, tzinfo
from typing import Any

from tpwarden.cluster.plotting import pyplot
from tpwarden.cluster.reports.thermal.localtime import span_text, tz_name
from tpwarden.cluster.reports.thermal.report import GAP_FACTOR, FieldReport, NodeReport
from tpwarden.node.thermal.roles import zone_role

THROTTLE_GID = "throttle"  # gid of each episode's span (tests find them by it)
THROTTLE_COLOUR = "#ff8c00"
CRITICAL_GID = "critical"
MARK_GID = "event"
OTHER = "other zones (max)"  # zones the role map does not name, as one line


def _series(
    rs: list[Mapping[str, Any]], value_of: Any, interval: float, tz: tzinfo
) -> tuple[list[datetime], list[float]]:
    """Times and values with a NaN at each gap, so lines break where data is missing."""
    xs: list[datetime] = []
    ys: list[float] = []
    last = None
    for r in rs:
        if last is not None and r["ts"] - last > GAP_FACTOR * interval:
            xs.append(datetime.fromtimestamp((r["ts"] + last) / 2, tz=tz))
            ys.append(float("nan"))
        v = value_of(r)
        xs.append(datetime.fromtimestamp(r["ts"], tz=tz))
        ys.append(float("nan") if v is None else float(v))
        last = r["ts"]
    return xs, ys


def _max(values: Iterable[Any]) -> float | None:
    vs = [v for v in values if v is not None]
    return max(vs) if vs else None


def _zone_lines(
    rs: list[Mapping[str, Any]], zone_roles: Mapping[str, str] | None
) -> dict[str, Any]:
    """Label -> value function: one line per role when roles are mapped, else the hottest zone
    (seven unnamed 'acpitz' lines would be noise)."""
    if not zone_roles:
        return {"hottest ACPI zone": lambda r: _max(z.get("temp_c") for z in r.get("zones") or [])}
    labels = sorted(
        {zone_role(z["name"], z.get("type"), zone_roles) or OTHER
         for r in rs for z in r.get("zones") or []}
    )  # fmt: skip

    def value(label: str) -> Any:
        return lambda r: _max(
            z.get("temp_c")
            for z in r.get("zones") or []
            if (zone_role(z["name"], z.get("type"), zone_roles) or OTHER) == label
        )

    return {label: value(label) for label in labels}


def _panel_title(n: NodeReport) -> str:
    parts = [f"{n.node} ({n.role})"]
    if n.gpu_peak_c is not None:
        parts.append(f"GPU peak {n.gpu_peak_c:.0f} °C")
    hz = n.hottest_zone
    if hz is not None and hz.peak_c is not None:
        parts.append(f"hottest zone {hz.peak_c:.0f} °C ({hz.role or hz.zone})")
    if n.min_margin_c is not None:
        parts.append(f"{n.min_margin_c:.0f} °C below critical")
    parts.append(
        f"{n.throttle.episodes} throttle episode(s)" if n.throttle.episodes else "no throttling"
    )
    return ", ".join(parts)


def thermal_figure(
    rep: FieldReport,
    records: Iterable[Mapping[str, Any]],
    tz: tzinfo = UTC,
    zone_roles: Mapping[str, str] | None = None,
    marks: Iterable[tuple[float, str]] = (),
) -> Any:
    """The matplotlib Figure (caller closes it). ``marks``: (time, label) drawn on every panel,
    e.g. the watchdog's restarts."""
    plt = pyplot()
    # deferred: matplotlib after choosing the Agg backend
    import matplotlib.dates as mdates

    by_node: dict[str, list[Mapping[str, Any]]] = {n.node: [] for n in rep.nodes}
    for r in sorted(records, key=lambda r: r["ts"]):
        by_node.setdefault(str(r.get("node")), []).append(r)
    nodes = list(rep.nodes) or []
    fig, axes = plt.subplots(
        max(1, len(nodes)), 1, figsize=(13, 1.0 + 2.4 * max(1, len(nodes))), sharex=True,
        squeeze=False,
    )  # fmt: skip
    for ax, n in zip(axes[:, 0], nodes, strict=False):
        rs = by_node.get(n.node, [])
        gpu = _series(rs, lambda r: _max(g.get("temp_c") for g in r.get("gpus") or []),
                      rep.interval_s, tz)  # fmt: skip
        ax.plot(*gpu, label="GPU (NVML)", linewidth=1.6, color="black")
        for label, fn in _zone_lines(rs, zone_roles).items():
            ax.plot(*_series(rs, fn, rep.interval_s, tz), label=label, linewidth=1.0)
        crits = [z.critical_c for z in n.zones if z.critical_c is not None]
        if crits:
            ax.axhline(min(crits), color="red", linestyle="--", linewidth=1, gid=CRITICAL_GID,
                       label=f"critical trip {min(crits):g} °C")  # fmt: skip
        for i, (a, b) in enumerate(n.throttle_spans):
            ax.axvspan(
                datetime.fromtimestamp(a, tz=tz), datetime.fromtimestamp(b, tz=tz),
                color=THROTTLE_COLOUR, alpha=0.35, gid=THROTTLE_GID,
                label="thermal throttle" if i == 0 else None,
            )  # fmt: skip
        for i, (ts, label) in enumerate(marks):
            ax.axvline(datetime.fromtimestamp(ts, tz=tz), color="purple", linestyle=":",
                       linewidth=1.2, gid=MARK_GID, label=label if i == 0 else None)  # fmt: skip
        ax.set_title(_panel_title(n), loc="left", fontsize="medium")
        ax.set_ylabel("°C")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="x-small")
    bottom = axes[-1, 0]
    locator = mdates.AutoDateLocator(tz=tz, minticks=4, maxticks=12)  # type: ignore[no-untyped-call]
    bottom.xaxis.set_major_locator(locator)
    bottom.xaxis.set_major_formatter(_time_formatter(tz))
    bottom.set_xlim(
        datetime.fromtimestamp(rep.since, tz=tz), datetime.fromtimestamp(rep.until, tz=tz)
    )
    bottom.set_xlabel(f"time ({tz_name(tz, rep.until)})")
    fig.suptitle(f"Thermal, {span_text(rep.since, rep.until, tz)}, every {rep.interval_s:g} s")
    fig.tight_layout()
    return fig


def tick_labels(ticks: list[datetime]) -> list[str]:
    """Labels for time ticks that differ from each other at every span: HH:MM, with seconds
    when a tick falls inside a minute (a demo's few minutes: 20:51:20, 20:51:40 instead of
    20:51, 20:51), and, when the span crosses midnight, the day above the first tick and above
    each tick of a new day (above every tick when times of day repeat: a span over a day)."""
    if not ticks:
        return []
    fmt = "%H:%M" if all(t.second == 0 and t.microsecond == 0 for t in ticks) else "%H:%M:%S"
    days = [t.date() for t in ticks]
    labels = [t.strftime(fmt) for t in ticks]
    if len(set(zip(days, labels, strict=True))) < len(labels):  # below a second apart
        labels = [t.strftime("%H:%M:%S.%f")[:-3] for t in ticks]
    if days[0] == days[-1]:
        return labels
    every = len(set(labels)) < len(labels)
    return [
        f"{t.strftime('%a %d')}\n{label}" if every or i == 0 or days[i] != days[i - 1] else label
        for i, (t, label) in enumerate(zip(ticks, labels, strict=True))
    ]


def _time_formatter(tz: tzinfo) -> Any:
    """A matplotlib formatter that labels an axis's ticks together with `tick_labels`
    (matplotlib hands a formatter all the ticks at once, `format_ticks`)."""
    # deferred: matplotlib after choosing the Agg backend
    import matplotlib.dates as mdates
    import matplotlib.ticker as mticker

    class TimeTicks(mticker.Formatter):
        def format_ticks(self, values: list[float]) -> list[str]:
            return tick_labels([mdates.num2date(v, tz) for v in values])  # type: ignore[no-untyped-call]

        def __call__(self, x: float, pos: int | None = None) -> str:
            return tick_labels([mdates.num2date(x, tz)])[0]  # type: ignore[no-untyped-call]

    return TimeTicks()


def figure_png(fig: Any, dpi: int = 100) -> bytes:
    plt = pyplot()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    return buf.getvalue()
