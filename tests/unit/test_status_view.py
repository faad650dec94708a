"""`tpwarden status` on small and large terminals, from fixed observations.

Snapshots live in tests/unit/snapshots/status_<width>.txt; the checks below them say what the
snapshots must show (no word broken across lines, every reason in full, one node per line at
80 columns) so a regenerated snapshot cannot silently get worse.
Regenerate after an intended layout change: TPWARDEN_UPDATE_SNAPSHOTS=1 pytest this file.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from rich.console import Console
from tpwarden.cluster.cli.control import status_renderables
from tpwarden.cluster.control.status_model import (
    ClusterStatus,
    NodeStatus,
    ServerStatus,
    Verdict,
    derive_verdict,
    node_memory,
)
from tpwarden.cluster.reports.status_view import choose_columns, fmt, node_cells, status_view

SNAPSHOTS = Path(__file__).parent / "snapshots"
HASH = "1f2661cca5ba9e07"


def _gpu(temp, mhz, w, reasons=()):
    """A GB10 GPU: NVML answers Not Supported for its memory (unified with the node's)."""
    return (
        {
            "index": 0,
            "temp_c": temp,
            "sm_clock_mhz": mhz,
            "power_w": w,
            "locked_clock_max_mhz": 2000,
            "clock_event_reasons": list(reasons),
            "memory_used_mib": None,
            "memory_total_mib": None,
            "missing": {"memory_total_mib": "NVML: Not Supported; unified memory (GB10)"},
        },
    )


GIB = 1024**3
# 128 GiB node, 91 GiB held: what the collector reports for a GB10 node.
GB10_MEMORY = {"memory": {"total_bytes": 128 * GIB, "available_bytes": 37 * GIB,
                          "used_bytes": 91 * GIB, "source": "psutil"}}  # fmt: skip


def _zones(pcore, gpu_zone):
    """Seven GB10 zones, all 'acpitz', as the collector reports them."""
    temps = {0: 48.0, 1: pcore, 3: 60.0, 5: gpu_zone}
    return tuple(
        {"name": f"thermal_zone{i}", "type": "acpitz", "temp_c": temps.get(i, 45.0),
         "critical_c": 104.8}
        for i in range(7)
    )  # fmt: skip


ZONE_ROLES = {"1": "P-cores", "3": "E-cores", "5": "GPU zone", "0": "SoC"}


# What a 3 a.m. page looks like: a worker cut off, another one's container killed, one hot.
NODES = (
    NodeStatus(
        "node1", "head", True, container="tpwarden-glm-node1", state="running",
        uptime_s=34217.0, config_hash=HASH, gpus=_gpu(66, 1998, 87.4), zones=_zones(82.0, 69.0),
        memory=node_memory(GB10_MEMORY, _gpu(66, 1998, 87.4)),
    ),
    NodeStatus(
        "node2", "worker", True, container="tpwarden-glm-node2", state="running",
        uptime_s=34210.0, config_hash=HASH, gpus=_gpu(91, 1020, 60.2, ["sw_thermal_slowdown"]),
        zones=_zones(72.0, 94.0),
    ),
    NodeStatus(
        "node3", "worker", False,
        reason="SSH connect to 127.0.0.13:22 timed out after 5 s (no route to host)",
    ),
    NodeStatus(
        "node4", "worker", True, container="tpwarden-glm-node4", state="exited",
        exit_code=137, config_hash=HASH, gpus=(), gpu_reason="NVML: Not Supported",
    ),
)  # fmt: skip
SERVER = ServerStatus(
    "http://127.0.0.11:8000", 200, model="glm-5.3-flash", max_model_len=1048576,
    probe_ok=False, probe_error="ReadTimeout after 120 s", drafter_k=3,
)  # fmt: skip


def _status() -> ClusterStatus:
    verdict, notes = derive_verdict(NODES, SERVER)
    return ClusterStatus("glm", HASH, verdict, NODES, SERVER, 5.02, notes)


def _render(width: int, wide: bool = False) -> str:
    con = Console(width=width, record=True, color_system=None, file=open(os.devnull, "w"))
    for r in status_renderables(_status(), width, wide, ZONE_ROLES):
        con.print(r)
    return con.export_text()


def _words(text: str) -> set[str]:
    return set(re.findall(r"[\w.:/()°-]+", text))


@pytest.mark.parametrize("width", [80, 120, 200])
def test_status_snapshot(width):
    text = _render(width)
    path = SNAPSHOTS / f"status_{width}.txt"
    if os.environ.get("TPWARDEN_UPDATE_SNAPSHOTS"):
        path.write_text(text)
    assert text == path.read_text(), f"status at {width} columns changed; see {path}"


@pytest.mark.parametrize("width", [80, 120, 200])
def test_no_line_too_wide_and_no_word_broken(width):
    text = _render(width)
    lines = text.splitlines()
    assert all(len(line) <= width for line in lines)
    words = _words(text)
    # Every value a cell holds appears as one unbroken word somewhere on the screen.
    for n in NODES:
        cells = node_cells(n)
        for key in ("node", "verdict", "state"):
            assert cells[key] in words, (width, key, cells[key])
        assert cells["config"] == "-" or cells["config"][:8] in text
        for word in cells["reason"].split():
            assert word.strip("()") in {w.strip("()") for w in words}, (width, word)
    assert "None" not in text


@pytest.mark.parametrize("width", [80, 120, 200])
def test_every_reason_in_full(width):
    flat = " ".join(_render(width).replace("│", " ").split())
    for n in NODES:
        reason = node_cells(n)["reason"]
        if reason != "-":
            # the reason may wrap between words; joined back, it reads exactly as written
            assert _join_column(_render(width), n.node, reason), (width, reason)
    assert "ReadTimeout after 120 s" in flat


def _join_column(text: str, node: str, reason: str) -> bool:
    """Collect the last column's text from the node's line and its continuation lines."""
    lines = [ln for ln in text.splitlines() if ln.startswith("│")]
    for i, ln in enumerate(lines):
        cells = [c.strip() for c in ln.strip("│").split("│")]
        if cells[0] != node:
            continue
        parts = [cells[-1]]
        for more in lines[i + 1 :]:
            cont = [c.strip() for c in more.strip("│").split("│")]
            if cont[0]:
                break
            parts.append(cont[-1])
        return " ".join(p for p in parts if p) == reason
    return False


def test_80_columns_one_node_per_line_with_verdict_and_reason():
    text = _render(80)
    for n in NODES:
        cells = node_cells(n)
        line = next(ln for ln in text.splitlines() if ln.startswith(f"│ {n.node} "))
        assert f" {cells['verdict']} " in line
        assert cells["reason"].split()[0] in line


def test_wide_keeps_every_column_and_narrow_drops_least_important_first():
    cells = [node_cells(n) for n in NODES]
    assert [c.key for c, _ in choose_columns(cells, 40, wide=True)][-1] == "container"
    narrow = [c.key for c, _ in choose_columns(cells, 80)]
    assert {"node", "verdict"} <= set(narrow) and "container" not in narrow
    wide = [c.key for c, _ in choose_columns(cells, 200)]
    assert len(wide) > len(narrow)


def test_none_is_a_dash_everywhere():
    assert fmt(None) == "-" and fmt(None, " %") == "-"
    view = status_view(_status(), 80)
    assert ("KV cache usage", "-") in view.server
    assert all("None" not in c for row in view.rows for c in row)
    assert Verdict(_status().verdict) is Verdict.BROKEN or _status().verdict.value in view.title


def test_hottest_zone_is_named_by_its_role():
    from tpwarden.cluster.reports.status_view import hottest_zone

    assert hottest_zone(NODES[0], ZONE_ROLES) == "82 P-cores"
    assert hottest_zone(NODES[1], ZONE_ROLES) == "94 GPU zone"
    assert hottest_zone(NODES[0], None) == "82 tz1"  # every type is acpitz: the number it is
    assert hottest_zone(NODES[2], ZONE_ROLES) == "-"
    assert "82 P-cores" in _render(200) and "94 GPU zone" in _render(120)


def test_collector_reads_zones_one_bad_zone_spoils_nothing(tmp_path):
    from tpwarden.cluster.reports.thermal.fakes import build_fake_sysfs
    from tpwarden.node.collector import read_zones

    zones = tuple(("acpitz", 45_000 + 1000 * i) for i in range(12))
    root = build_fake_sysfs(tmp_path, zones=zones)
    (root / "class" / "thermal" / "thermal_zone3" / "temp").write_text("garbage\n")
    got = read_zones(root / "class" / "thermal")
    assert [z["name"] for z in got][:3] == ["thermal_zone0", "thermal_zone1", "thermal_zone2"]
    assert got[-1]["name"] == "thermal_zone11" and got[-1]["temp_c"] == 56.0
    assert got[3]["temp_c"] is None and "ValueError" in got[3]["reason"]
    assert {z["critical_c"] for z in got} == {104.8}
    assert read_zones(tmp_path / "nothing") == []


def test_gb10_unified_memory_shown_on_80_columns_and_in_wide():
    narrow = _render(80)
    assert "mem" in narrow and "71%uni" in narrow  # node1: 91 of 128 GiB, NVML Not Supported
    assert all(len(line) <= 80 for line in narrow.splitlines())
    wide = _render(200, wide=True)
    assert "memory used" in wide and "71%uni" in wide
