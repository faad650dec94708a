"""Node memory (unified with the GPU's on GB10): psutil's reading, /proc/meminfo without psutil."""

from __future__ import annotations

import argparse

import pytest
from tpwarden.node import collector
from tpwarden.node.memory import NodeMemory, drop_page_cache, parse_meminfo, read_node_memory

MEMINFO = """MemTotal:       127535896 kB
MemFree:         1203344 kB
MemAvailable:   31457280 kB
Buffers:          123456 kB
"""


class VM:
    total = 100 * 2**30
    available = 25 * 2**30


def test_psutil_reading_is_used_when_given() -> None:
    m = read_node_memory(lambda: VM(), read_meminfo=lambda: pytest.fail("meminfo read"))
    assert (m.total_bytes, m.available_bytes, m.used_bytes) == (100 * 2**30, 25 * 2**30, 75 * 2**30)
    assert m.to_json()["source"] == "psutil" and m.to_json()["used_bytes"] == 75 * 2**30


def test_meminfo_fallback_when_this_python_has_no_psutil(monkeypatch) -> None:
    import tpwarden.node.memory as memory

    monkeypatch.setattr(memory, "_psutil_virtual_memory", lambda: None)
    m = read_node_memory(read_meminfo=lambda: MEMINFO)
    assert m.total_bytes == 127535896 * 1024 and m.available_bytes == 31457280 * 1024
    assert m.used_bytes == (127535896 - 31457280) * 1024 and m.source == "/proc/meminfo"


def test_meminfo_without_memavailable_is_an_error_not_a_guess() -> None:
    with pytest.raises(ValueError, match="MemAvailable"):
        parse_meminfo("MemTotal: 1000 kB\nMemFree: 10 kB\n")


def test_real_psutil_agrees_with_the_kernel() -> None:
    """psutil is a declared dependency; on Linux it reads the same /proc/meminfo."""
    from pathlib import Path

    import psutil

    kernel = parse_meminfo(Path("/proc/meminfo").read_text())
    ours = read_node_memory()
    assert ours.source == "psutil"
    assert ours.total_bytes == psutil.virtual_memory().total == kernel.total_bytes


# -- issue 52 item 3: the page cache dropped before a (re)start ---------------------------------


class Readings:
    """Available memory before and after the drop (the node's own reader, injected)."""

    def __init__(self, *available_gib: float) -> None:
        self.values = [int(v * 2**30) for v in available_gib]

    def __call__(self) -> NodeMemory:
        return NodeMemory(128 * 2**30, self.values.pop(0), "psutil")


def test_the_page_cache_is_synced_then_dropped_and_the_gain_said() -> None:
    done: list[str] = []
    out = drop_page_cache(Readings(80, 110), sync=lambda: done.append("sync"), write=done.append)
    assert done == ["sync", "3\n"]  # echo 3 > /proc/sys/vm/drop_caches, after a sync
    assert out == {"dropped": True, "available_before_bytes": 80 * 2**30,
                   "available_after_bytes": 110 * 2**30}  # fmt: skip


def test_a_drop_that_is_refused_says_why_and_raises_nothing() -> None:
    def refuse(text: str) -> None:
        raise PermissionError(13, "Permission denied")

    out = drop_page_cache(Readings(80), sync=lambda: None, write=refuse)
    assert out["dropped"] is False and "PermissionError: Permission denied" in out["reason"]


def test_the_collector_drops_only_on_a_unified_memory_node_when_auto(monkeypatch, capsys) -> None:
    dropped: list[bool] = []
    monkeypatch.setattr(
        collector, "drop_page_cache", lambda read: dropped.append(True) or {"dropped": True}
    )
    gb10 = [{"index": 0, "missing": {"memory_total_mib": "nvmlDeviceGetMemoryInfo: not supported"}}]
    h100 = [{"index": 0, "missing": {}}]
    assert collector.unified_memory(gb10) and not collector.unified_memory(h100)
    assert not collector.unified_memory([])
    for gpus, mode, expect in ((gb10, "auto", True), (h100, "auto", False), (h100, "always", True)):
        dropped.clear()
        doc = {"gpus": gpus}
        args = argparse.Namespace(drop_caches=mode, memory=True)
        collector._memory_facts(args, doc, Readings(50))
        assert bool(dropped) is expect and doc["page_cache"]["unified"] is (gpus is gb10)
        assert doc["memory"]["available_bytes"] == 50 * 2**30
