"""Node memory (unified with the GPU's on GB10): psutil's reading, /proc/meminfo without psutil."""

from __future__ import annotations

import pytest
from tpwarden.node.memory import parse_meminfo, read_node_memory

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
