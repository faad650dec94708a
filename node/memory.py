"""The node's memory, which on GB10 is also the GPU's (unified: NVML answers Not Supported).

psutil.virtual_memory() is the source wherever psutil can be imported: in the node venv that
provisioning installs (tpwarden's dependencies) and so in the provisioned thermal agent. The two
zipapps (status collector, `thermal start` agent) run on the node's own ``python3``, which has
psutil only when the distribution's package is installed (Debian: python3-psutil); psutil is a
C extension and cannot travel inside a zipapp. There, and only there, /proc/meminfo is read the
way psutil reads it on Linux (used = total - available). Standard library only at import time.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from tpwarden.cluster.durable import JSONObject

MEMINFO = Path("/proc/meminfo")


@dataclass(frozen=True)
class NodeMemory:
    total_bytes: int
    available_bytes: int
    source: str  # "psutil" or "/proc/meminfo"

    @property
    def used_bytes(self) -> int:
        """What a workload holds: total minus what could be had without swapping."""
        return self.total_bytes - self.available_bytes

    def to_json(self) -> JSONObject:
        return {**asdict(self), "used_bytes": self.used_bytes}


class VirtualMemory(Protocol):
    """What a psutil ``svmem`` gives that this module reads."""

    @property
    def total(self) -> int: ...

    @property
    def available(self) -> int: ...


def from_virtual_memory(vm: VirtualMemory, source: str = "psutil") -> NodeMemory:
    """A psutil ``svmem`` (or anything with ``total`` and ``available``) -> NodeMemory."""
    return NodeMemory(int(vm.total), int(vm.available), source)


def parse_meminfo(text: str) -> NodeMemory:
    """/proc/meminfo text -> NodeMemory (kB lines; MemAvailable since Linux 3.14)."""
    kb: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            kb[key.strip()] = int(parts[0])
    if "MemTotal" not in kb or "MemAvailable" not in kb:
        raise ValueError("/proc/meminfo has no MemTotal/MemAvailable")
    return NodeMemory(kb["MemTotal"] * 1024, kb["MemAvailable"] * 1024, str(MEMINFO))


def _psutil_virtual_memory() -> Callable[[], VirtualMemory] | None:
    try:
        # deferred: the nodes' zipapps run on python3 without psutil (/proc/meminfo then)
        import psutil
    except ImportError:
        return None
    return psutil.virtual_memory


def read_node_memory(
    virtual_memory: Callable[[], VirtualMemory] | None = None,
    read_meminfo: Callable[[], str] | None = None,
) -> NodeMemory:
    """psutil's reading; /proc/meminfo when this interpreter has no psutil. Both injectable."""
    vm = virtual_memory or _psutil_virtual_memory()
    if vm is not None:
        return from_virtual_memory(vm())
    return parse_meminfo((read_meminfo or MEMINFO.read_text)())


def memory_reader(
    virtual_memory: Callable[[], VirtualMemory] | None = None,
) -> Callable[[], NodeMemory]:
    """A reader bound once (the import is looked up once, not per sample)."""
    vm = virtual_memory or _psutil_virtual_memory()
    return lambda: read_node_memory(vm)


DROP_CACHES = Path("/proc/sys/vm/drop_caches")


def drop_page_cache(
    read_memory: Callable[[], NodeMemory] | None = None,
    sync: Callable[[], None] | None = None,
    write: Callable[[str], None] | None = None,
) -> JSONObject:
    """`sync; echo 3 > /proc/sys/vm/drop_caches` (root; NVIDIA's GB10 playbooks do it before
    vLLM starts): clean page cache, dentries and inodes go back to free memory. Returns what it
    did with the available memory before and after, or why it did not (never raises)."""
    read = read_memory or read_node_memory
    before = read().available_bytes
    try:
        (sync or os.sync)()
        (write or (lambda text: DROP_CACHES.write_text(text)))("3\n")
    except OSError as exc:
        return {"dropped": False, "reason": f"{DROP_CACHES}: {type(exc).__name__}: {exc.strerror or exc}",
                "available_before_bytes": before}  # fmt: skip
    return {"dropped": True, "available_before_bytes": before,
            "available_after_bytes": read().available_bytes}  # fmt: skip
