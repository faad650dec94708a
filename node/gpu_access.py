"""Can this process open the GPU's device nodes? A denied device is a cause, not "no GPU".

NVML opens /dev/nvidiactl and then /dev/nvidia<N> for each GPU. Under a systemd unit with
`DevicePolicy=closed`, `DeviceAllow=char-NAME` is matched against the names in /proc/devices;
NVIDIA's 545/550 drivers renamed major 195 there "from nvidia-frontend to nvidia and nvidiactl"
(device paths unchanged). A unit that grants only the old name starts anyway with the device
denied: /dev/nvidiactl (granted by path) opens, /dev/nvidia0 does not, and NVML initialises but
counts no GPU (nvidia-smi: "No devices found"). The device cgroup refuses an open with EPERM;
file modes refuse with EACCES. This module tells them apart and names the unit and the name the
driver registers, so the thermal agent can say why it has no GPU readings.

Standard library only (the node's zipapps carry it); every reader is injectable.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

PROC_DEVICES = Path("/proc/devices")
PROC_CGROUP = Path("/proc/self/cgroup")
NVIDIA_MAJOR = 195  # NV_MAJOR_DEVICE_NUMBER: /dev/nvidia<N> and /dev/nvidiactl
_GPU_NODE = re.compile(r"^nvidia\d+$")


def parse_proc_devices(text: str) -> dict[str, tuple[int, ...]]:
    """/proc/devices -> character device name -> its majors (the block section is skipped)."""
    out: dict[str, list[int]] = {}
    section = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.endswith(":"):
            section = stripped[:-1].lower()
            continue
        parts = stripped.split(None, 1)
        if section != "character devices" or len(parts) != 2 or not parts[0].isdigit():
            continue
        out.setdefault(parts[1], []).append(int(parts[0]))
    return {name: tuple(majors) for name, majors in out.items()}


def names_of_major(devices: dict[str, tuple[int, ...]], major: int) -> tuple[str, ...]:
    return tuple(sorted(name for name, majors in devices.items() if major in majors))


def unit_of(cgroup_text: str) -> str | None:
    """The systemd unit a process runs in, from /proc/self/cgroup ("0::/system.slice/x.service")."""
    for line in cgroup_text.splitlines():
        path = line.rsplit(":", 1)[-1]
        for part in reversed(path.split("/")):
            if part.endswith((".service", ".scope")):
                return part
    return None


@dataclass(frozen=True)
class DeviceDenial:
    """A GPU device node this process may not open, and why."""

    path: str
    errno_name: str  # EPERM: the device cgroup (a unit's DevicePolicy); EACCES: file mode
    unit: str | None
    registered_as: tuple[str, ...]  # what /proc/devices calls the node's major

    @property
    def cause(self) -> str:
        return "device_cgroup" if self.errno_name == "EPERM" else "file_permission"

    def text(self) -> str:
        names = ", ".join(self.registered_as) or "nothing"
        if self.cause == "device_cgroup":
            where = f"the device policy of {self.unit}" if self.unit else "a device cgroup"
            fix = (
                f"; /proc/devices names major {NVIDIA_MAJOR} {names}: the unit needs "
                "DeviceAllow=char-nvidia (545+ drivers) beside char-nvidia-frontend"
            )
        else:
            where, fix = "its file mode", ""
        return (
            f"GPU device permission denied, not 'no GPU': open {self.path}: {self.errno_name} "
            f"({where} refuses it{fix})"
        )

    def to_json(self) -> dict[str, str | None]:
        return {"path": self.path, "errno": self.errno_name, "cause": self.cause,
                "unit": self.unit, "registered_as": ", ".join(self.registered_as) or None}  # fmt: skip


def _try_open(path: str) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    os.close(fd)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def find_denial(
    dev: str | Path = "/dev",
    *,
    listdir: Callable[[str], Sequence[str]] = os.listdir,
    try_open: Callable[[str], None] = _try_open,
    read_devices: Callable[[], str] = lambda: _read(PROC_DEVICES),
    read_cgroup: Callable[[], str] = lambda: _read(PROC_CGROUP),
) -> DeviceDenial | None:
    """The first /dev/nvidia<N> (then /dev/nvidiactl) this process may not open; None when
    every one opens or none exists (then the cause is elsewhere: no driver, no GPU)."""
    try:
        names = sorted(n for n in listdir(str(dev)) if _GPU_NODE.match(n))
    except OSError:
        return None
    for name in [*names, "nvidiactl"]:
        path = os.path.join(str(dev), name)
        try:
            try_open(path)
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EACCES):
                continue
            devices = parse_proc_devices(read_devices())
            return DeviceDenial(
                path=path,
                errno_name=errno.errorcode[exc.errno],
                unit=unit_of(read_cgroup()),
                registered_as=names_of_major(devices, NVIDIA_MAJOR),
            )
    return None
