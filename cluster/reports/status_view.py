"""`tpwarden status` as text cells for a terminal of a given width: a pure view of ClusterStatus.

Operators read status over SSH from a phone at night. A table whose cells wrap letter by letter
("runni / ng") is unreadable exactly when it matters, so the layout degrades by dropping and
abbreviating columns in a fixed priority order; it never narrows a column below its content.
Every node keeps its verdict and its reason in full (the reason is the last column and wraps on
word boundaries only). ``wide=True`` keeps every column. Nothing here prints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tpwarden.cluster.control.status_model import ClusterStatus, NodeStatus, ServerStatus
from tpwarden.cluster.durable import JSONValue
from tpwarden.cluster.signals import from_exit_status
from tpwarden.node.clockcap import NO_READ_BACK, utc
from tpwarden.node.thermal.roles import zone_role

DASH = "-"
HASH_CHARS = 8  # enough to tell two config hashes apart; the full one is in --json
REASON_MIN = 24  # the reason column never gets fewer cells than this (it wraps on words)
REASON_SHARE = 0.4  # ...and up to this share of the width before optional columns are kept
# rich Table with the default box: one border cell per column edge and one padding cell each side
CELL_OVERHEAD = 3


@dataclass(frozen=True)
class Column:
    key: str
    header: str
    short: str  # header when space is short (abbreviation, never a truncated word)
    priority: int  # lower is kept longer; 0 is never dropped


# Ordered as shown left to right; priority decides what goes first when space runs out.
COLUMNS: tuple[Column, ...] = (
    Column("node", "node", "node", 0),
    Column("role", "role", "role", 6),
    Column("verdict", "verdict", "verdict", 0),
    Column("state", "container", "ctr", 3),  # the verdict already says exited, paused, missing
    Column("up", "up", "up", 2),
    Column("config", "config", "cfg", 5),
    Column("gpu_c", "GPU °C", "°C", 1),
    Column("memory", "memory used", "mem", 1),  # GB10: the node's unified memory, GPU's too
    Column("zone", "hottest zone °C", "zone °C", 4),
    Column("sm_mhz", "SM MHz", "MHz", 7),
    Column("power_w", "W", "W", 8),
    Column("cap_mhz", "cap MHz", "cap", 9),
    Column("container", "container name", "name", 10),
)
REASON = Column("reason", "reason", "reason", 0)


def fmt(value: JSONValue, unit: str = "", digits: int = 0) -> str:
    """None -> "-" (never "None"); numbers rounded, with a unit when given."""
    if value is None or value == "":
        return DASH
    if isinstance(value, float):
        value = f"{value:.{digits}f}"
    return f"{value}{unit}"


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return DASH
    s = int(seconds)
    if s >= 86400:
        return f"{s // 86400}d{s % 86400 // 3600:02d}h"
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def node_verdict(n: NodeStatus) -> tuple[str, str | None]:
    """One node: a one-word verdict and the reason behind it (None when all is well)."""
    if not n.reachable:
        return "unreachable", n.reason or "no answer over SSH"
    if n.state is None:
        return "missing", n.reason or "no serving container"
    if n.state != "running":
        sig = from_exit_status(n.exit_code)
        named = f": {sig.name}" if sig else ""
        oom = " from the OOM killer" if n.oom_killed else ""
        code = f" (exit code {n.exit_code}{named}{oom})" if n.exit_code is not None else ""
        died = f"; {n.crash.lead.who} {n.crash.lead.how}" if n.crash else ""
        return n.state, f"container {n.state}{code}{died}"
    alarms = [
        r
        for g in n.gpus
        for r in (g.get("clock_event_reasons") or [])
        if "thermal" in r or "power_brake" in r or r == "hw_slowdown"
    ]
    if alarms:
        return "throttled", "GPU clock events: " + ", ".join(alarms)
    if n.drift:
        return "drift", f"runs config {n.config_hash}, not the inventory's"
    return "ok", n.gpu_reason


def _gpu(n: NodeStatus) -> Mapping[str, JSONValue]:
    return n.gpus[0] if n.gpus else {}


def memory_cell(n: NodeStatus) -> str:
    """ "71%uni" on GB10 (NVML memory Not Supported: the node's memory is the GPU's, so the
    node's used share is shown), "40%gpu" where NVML reports the GPU's own memory, "35%" for the
    node's memory otherwise, "-" when unread. Six cells: it must fit the 80-column table next to
    the uptime; --json has the bytes and ``unified``."""
    g = _gpu(n)
    m = n.memory or {}
    if not m.get("unified") and g.get("memory_total_mib"):
        return f"{100 * (g.get('memory_used_mib') or 0) / g['memory_total_mib']:.0f}%gpu"
    if not m.get("total_bytes") or m.get("used_bytes") is None:
        return DASH
    return f"{100 * m['used_bytes'] / m['total_bytes']:.0f}%" + ("uni" if m.get("unified") else "")


def hottest_zone(n: NodeStatus, zone_roles: Mapping[str, str] | None = None) -> str:
    """ "82 P-cores": the hottest ACPI zone, named by its role (thermal.zone_roles) when mapped,
    else by its zone number (every GB10 zone's type is "acpitz", which says nothing)."""
    read = [z for z in n.zones if z.get("temp_c") is not None]
    if not read:
        return DASH
    z = max(read, key=lambda z: z["temp_c"])
    role = zone_role(z["name"], z.get("type"), zone_roles)
    return f"{z['temp_c']:.0f} {role or z['name'].replace('thermal_zone', 'tz')}"


def node_cells(n: NodeStatus, zone_roles: Mapping[str, str] | None = None) -> dict[str, str]:
    verdict, reason = node_verdict(n)
    g = _gpu(n)
    config = DASH if not n.config_hash else n.config_hash[:HASH_CHARS] + ("*" if n.drift else "")
    return {
        "node": n.node,
        "role": n.role,
        "verdict": verdict,
        "state": fmt(n.state),
        "up": fmt_duration(n.uptime_s),
        "config": config,
        "gpu_c": fmt(g.get("temp_c")),
        "memory": memory_cell(n),
        "zone": hottest_zone(n, zone_roles),
        "sm_mhz": fmt(g.get("sm_clock_mhz")),
        "power_w": fmt(g.get("power_w")),
        "cap_mhz": fmt(g.get("locked_clock_max_mhz")),
        "container": fmt(n.container),
        "reason": reason or DASH,
    }


@dataclass(frozen=True, kw_only=True)
class StatusView:
    title: str
    ok: bool
    headers: tuple[str, ...]
    keys: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    server: tuple[tuple[str, str], ...]
    notes: tuple[str, ...]


def _width(col: Column, header: str, cells: Sequence[Mapping[str, str]]) -> int:
    return max([len(header), *(len(c[col.key]) for c in cells)]) + CELL_OVERHEAD


def choose_columns(
    cells: Sequence[Mapping[str, str]], width: int, wide: bool = False
) -> list[tuple[Column, str]]:
    """Columns (with the header to use) that fit ``width`` next to a reason column of at least
    REASON_MIN cells: short headers first, then drop by priority. Pure."""
    if wide:
        return [(c, c.header) for c in COLUMNS]
    # the reason is what the operator reads at night: give it up to REASON_SHARE of the width
    # (its full length when shorter) before any optional column
    longest = max([len(REASON.header), *(len(c[REASON.key]) for c in cells)])
    reason_w = max(REASON_MIN, min(longest, int(width * REASON_SHARE)))
    budget = width - 1 - reason_w - CELL_OVERHEAD
    chosen = {c.key: c.header for c in COLUMNS}

    def used() -> int:
        return sum(_width(c, chosen[c.key], cells) for c in COLUMNS if c.key in chosen)

    for c in sorted(COLUMNS, key=lambda c: -c.priority):  # abbreviate the least important first
        if used() <= budget:
            break
        chosen[c.key] = c.short
    for c in sorted(COLUMNS, key=lambda c: -c.priority):
        if used() <= budget or c.priority == 0:
            break
        del chosen[c.key]
    return [(c, chosen[c.key]) for c in COLUMNS if c.key in chosen]


def server_rows(s: ServerStatus) -> tuple[tuple[str, str], ...]:
    health = fmt(s.health_status) if s.health_status is not None else f"- ({s.health_error or '?'})"
    probe = (
        fmt(s.probe_latency_ms, " ms") if s.probe_ok else f"failed: {s.probe_error or 'no answer'}"
    )
    model = DASH if s.model is None else f"{s.model} (max_model_len {fmt(s.max_model_len)})"
    return (
        ("url", s.url),
        ("health", health),
        ("model", model),
        ("drafter k", fmt(s.drafter_k)),
        ("1-token probe", probe),
        ("running / waiting", f"{fmt(s.requests_running)} / {fmt(s.requests_waiting)}"),
        ("KV cache usage", fmt(s.kv_cache_usage_pct, " %", 1)),
    )


def _cap_row(nodes: Sequence[NodeStatus]) -> tuple[tuple[str, str], ...]:
    summary = clock_cap_summary(nodes)
    return (("GPU clock cap", summary),) if summary else ()


_CAP_LABELS = {"refused": "lock call refused", "reset": "reset", "none": "no cap recorded"}


def clock_cap_summary(nodes: Sequence[NodeStatus]) -> str | None:
    """The GPU clock cap of every node by its record of the lock call (GPU rows annotated by
    `tpwarden.node.clockcap.annotate_gpus`), e.g. "2000 MHz on node1, node2, set at
    2026-12-04T03:20:11Z; NVML has no read-back"; None when no node reported one."""
    groups: dict[tuple[str, JSONValue], list[tuple[str, float | None]]] = {}
    for n in nodes:
        for g in n.gpus[:1]:
            state = g.get("clock_cap_state")
            if state:
                key = (state, g.get("locked_clock_max_mhz"))
                groups.setdefault(key, []).append((n.node, g.get("clock_cap_time_unix_s")))
    parts = []
    for (state, mhz), members in groups.items():
        names = ", ".join(name for name, _ in members)
        if state == "set":
            times = [t for _, t in members if isinstance(t, (int, float))]
            when = f", set at {utc(min(times))}" if times else ""
            parts.append(f"{mhz} MHz on {names}{when}")
        else:
            parts.append(f"{_CAP_LABELS.get(state, state)} on {names}")
    return "; ".join(parts) + f"; {NO_READ_BACK}" if parts else None


def status_view(
    st: ClusterStatus,
    width: int,
    wide: bool = False,
    zone_roles: Mapping[str, str] | None = None,
) -> StatusView:
    """The whole screen as strings, laid out for ``width`` columns."""
    cells = [node_cells(n, zone_roles) for n in st.nodes]
    cols = choose_columns(cells, width, wide)
    keys = tuple(c.key for c, _ in cols) + (REASON.key,)
    return StatusView(
        title=f"{st.cluster}: {st.verdict.value} (config {st.config_hash[:HASH_CHARS]})",
        ok=st.ok,
        headers=tuple(h for _, h in cols) + (REASON.header,),
        keys=keys,
        rows=tuple(tuple(c[k] for k in keys) for c in cells),
        server=server_rows(st.server) + _cap_row(st.nodes),
        notes=st.notes,
    )
