"""`servectl thermal ...`: the thermal agent on one node and the morning report.

Mounted by the lead as ``servectl thermal``. This layer parses options, renders tables and
sets exit codes; the work lives in ``watchdog.thermal``.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from cluster.errors import ServectlError

app = typer.Typer(help="GPU and ACPI thermal logging: agent, report.", no_args_is_help=True)
log = logging.getLogger("servectl.thermal")

DEFAULT_DIR = "/var/log/servectl/thermal"
_DEFAULT_DIR = Path(DEFAULT_DIR)
_SYS = Path("/sys")


def parse_time(text: str | None) -> float | None:
    """Epoch seconds or ISO 8601 (naive means UTC, as in the files' ts_iso)."""
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise typer.BadParameter(f"{text!r}: not epoch seconds or ISO 8601") from exc
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


class _NoGpu:
    """Stands in when NVML cannot be opened: every sample records why, zones still log."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def sample_all(self) -> list[Any]:
        raise ServectlError(f"GPU unavailable: {self.reason}")


def _gpu_sampler() -> Any:
    try:
        from cluster.gpu import Nvml
    except ImportError as exc:  # pynvml missing: no GPU is a normal state for this agent
        log.warning("NVML unavailable, logging thermal zones only: %s", exc)
        return _NoGpu(str(exc))
    nvml = Nvml()
    status = nvml.status()
    if not status.available:
        log.warning("NVML %s: %s; logging thermal zones only", status.state, status.reason)
    return nvml


@app.command()
def agent(
    node: str = typer.Option(..., "--node", help="This node's name (as in the inventory)."),
    directory: Annotated[
        Path, typer.Option("--dir", help="Where the JSON-lines files go.")
    ] = _DEFAULT_DIR,
    interval: float = typer.Option(10.0, "--interval", min=0.05, help="Seconds between samples."),
    metrics_port: int = typer.Option(
        9835, "--metrics-port", help="Port for /metrics on 127.0.0.1 (-1: off)."
    ),
    sysfs_root: Annotated[
        Path, typer.Option("--sysfs-root", help="Root of sysfs (a fake tree in the lab).")
    ] = _SYS,
    role: str | None = typer.Option(
        None, "--role", help="head or worker (recorded in each sample)."
    ),
    alert_margin: float | None = typer.Option(
        None, "--alert-margin", help="Alert when a zone is within this many C of its critical trip."
    ),
    max_file_mb: float = typer.Option(64.0, "--max-file-mb", help="Rotate files at this size."),
    budget_mb: float = typer.Option(
        1024.0, "--budget-mb", help="Delete the oldest files beyond this total."
    ),
) -> None:
    """Run the thermal agent on this node until SIGTERM or Ctrl-C."""
    from watchdog.thermal.agent import ThermalAgent
    from watchdog.thermal.alerts import AlertPolicy
    from watchdog.thermal.metrics import MetricsServer, ThermalCollector
    from watchdog.thermal.writer import DurableWriter
    from watchdog.thermal.zones import SysfsZoneReader

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    stop = threading.Event()
    writer = DurableWriter(
        directory,
        node,
        max_file_bytes=int(max_file_mb * 2**20),
        max_total_bytes=int(budget_mb * 2**20),
    )
    gpu = _gpu_sampler()
    the_agent = ThermalAgent(
        node, interval, gpu, SysfsZoneReader(sysfs_root), writer, time.time, stop.wait,
        role=role, alerts=AlertPolicy(zone_margin_c=alert_margin),
    )  # fmt: skip

    def _stop(signum: int, _frame: Any) -> None:
        log.info("signal %d: stopping", signum)
        the_agent.stop()
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    server = None
    if metrics_port >= 0:
        server = MetricsServer(ThermalCollector(the_agent, time.time), "127.0.0.1", metrics_port)
        log.info("metrics on http://127.0.0.1:%d/metrics", server.start())
    try:
        stats = the_agent.run()
    finally:
        if server:
            server.stop()
        writer.close()
        close = getattr(gpu, "close", None)
        if close:
            close()
    log.info("stopped: %s", stats)


def _fmt(v: float | None, unit: str = " C") -> str:
    return "-" if v is None else f"{v:.1f}{unit}"


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


@app.command()
def report(
    from_dir: Annotated[
        Path,
        typer.Option(
            "--from-dir", exists=True, file_okay=False, help="Directory of thermal-*.jsonl files."
        ),
    ],
    since: str | None = typer.Option(
        None, "--since", help="Window start (epoch or ISO 8601, UTC if no zone)."
    ),
    until: str | None = typer.Option(None, "--until", help="Window end."),
    head: str | None = typer.Option(None, "--head", help="The head node (others are workers)."),
    csv_path: Annotated[
        Path | None, typer.Option("--csv", help="Write every sample as CSV here.")
    ] = None,
    plot_path: Annotated[Path | None, typer.Option("--plot", help="Write a PNG plot here.")] = None,
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Peaks, margins to critical, throttle episodes and gaps from local agent files."""
    from watchdog.thermal.export import report_from_dir, write_csv, write_plot
    from watchdog.thermal.report import report_to_json

    rep, records, stats = report_from_dir(
        from_dir, since=parse_time(since), until=parse_time(until), head=head
    )
    if csv_path:
        write_csv(records, csv_path)
    if plot_path:
        write_plot(rep, records, plot_path)
    if as_json:
        doc = report_to_json(rep)
        doc["read"] = {
            "records": stats.records,
            "bad_lines": stats.bad_lines,
            "truncated_tail": stats.truncated_tail,
        }
        typer.echo(json.dumps(doc, indent=2))
        return
    console = Console()
    if not rep.nodes:
        console.print(f"no samples in {from_dir} for this window")
        raise typer.Exit(1)
    _render(console, rep)
    if stats.bad_lines:
        console.print(
            f"[yellow]skipped {stats.bad_lines} unreadable line(s) ({stats.truncated_tail} truncated at a file end)[/]"
        )
    for p in (csv_path, plot_path):
        if p:
            console.print(f"wrote {p}")


def _render(console: Console, rep: Any) -> None:
    t = Table(
        title=f"Thermal {_iso(rep.since)} .. {_iso(rep.until)} UTC, every {rep.interval_s:g} s"
    )
    for col in (
        "node",
        "role",
        "samples",
        "GPU peak",
        "hottest zone",
        "min margin to crit",
        "thermal throttle",
        "gaps",
    ):
        t.add_column(col)
    for n in rep.nodes:
        hz = n.hottest_zone
        t.add_row(
            n.node, n.role, f"{n.samples_received}/{n.samples_expected}",
            _fmt(n.gpu_peak_c) if n.gpu_peak_c is not None else f"- ({n.null_reasons.get('gpu_peak_c', '')})",
            f"{_fmt(hz.peak_c)} {hz.type}" if hz else "-",
            _fmt(n.min_margin_c),
            f"{n.throttle.episodes} ({n.throttle.duration_s:g} s)" if n.throttle.episodes else "none",
            str(len(n.gaps)) if n.gaps else "none",
        )  # fmt: skip
    console.print(t)
    types = sorted({k for n in rep.nodes for k in n.zone_type_peaks})
    zt = Table(title="Peak per zone type")
    zt.add_column("node")
    for ty in types:
        zt.add_column(ty)
    for n in rep.nodes:
        zt.add_row(n.node, *(_fmt(n.zone_type_peaks.get(ty)) for ty in types))
    console.print(zt)
    hv = rep.head_vs_workers
    if hv:
        line = ", ".join(
            f"{k} {_fmt(v['head'])} vs {_fmt(v['workers_min'])}-{_fmt(v['workers_max'])}"
            for k, v in hv.items()
            if k in ("gpu_peak_c", "hottest_zone_c")
        )
        console.print(f"head vs workers: {line}")
    for n in rep.nodes:
        for g in n.gaps:
            console.print(
                f"[yellow]gap[/] {n.node}: {_iso(g.start)} .. {_iso(g.end)} ({g.end - g.start:.0f} s, {g.kind}, ~{g.missing} missing)"
            )


def _todo(what: str) -> None:
    typer.echo(f"servectl thermal {what}: not implemented yet", err=True)
    raise typer.Exit(2)


# TODO(lead): all-nodes commands over SSH/systemd (cluster.ssh, cluster.control). Stubs only.
@app.command()
def start() -> None:
    """TODO: start the agent on every node (systemd unit). Not implemented yet."""
    _todo("start")


@app.command("stop")
def stop_cmd() -> None:
    """TODO: stop the agent on every node. Not implemented yet."""
    _todo("stop")


@app.command()
def status() -> None:
    """TODO: agent state and last sample per node. Not implemented yet."""
    _todo("status")


@app.command()
def watch() -> None:
    """TODO: live table of all nodes' /metrics. Not implemented yet."""
    _todo("watch")
