"""Issue 52 item 1: the hardened units grant the GPU's device nodes on every driver generation.

systemd matches `DeviceAllow=char-NAME` against /proc/devices with fnmatch; when nothing matches
it starts the unit anyway with the device denied. NVIDIA's 545/550 drivers renamed major 195
there from `nvidia-frontend` to `nvidia` and `nvidiactl`, and DGX OS on GB10 ships the 580
series. The rendered units are resolved here against real /proc/devices texts of each generation
(tests/fixtures/real/proc_devices/) the way systemd resolves them; `systemd-analyze verify` runs
on them in test_unit_hardening.py. The agent's side (a denied device said as such) is tested
with the real errno the device cgroup gives."""

from __future__ import annotations

import errno
import fnmatch
import os
from pathlib import Path

import pytest
from tpwarden.node.gpu_access import (
    DeviceDenial,
    find_denial,
    names_of_major,
    parse_proc_devices,
    unit_of,
)

from .test_unit_hardening import render_units

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "proc_devices"
PRE_545 = FIXTURES / "pre545_nvidia-frontend_h100-host.txt"
D580 = FIXTURES / "580.76.05_nvidia_proxmox-host.txt"
IMEX = FIXTURES / "550plus_nvidia_imex_cuda-guide.txt"


def devices(path: Path) -> dict[str, tuple[int, ...]]:
    text = "".join(ln for ln in path.read_text().splitlines(True) if not ln.startswith("#"))
    return parse_proc_devices(text)


def rules(unit_text: str) -> list[tuple[str, str]]:
    out = []
    for line in unit_text.splitlines():
        if line.startswith("DeviceAllow="):
            spec, _, access = line.removeprefix("DeviceAllow=").partition(" ")
            out.append((spec, access))
    return out


def allowed_majors(unit_rules: list[tuple[str, str]], devs: dict[str, tuple[int, ...]]) -> dict:
    """What systemd grants for `char-NAME` rules: every major whose /proc/devices name the
    pattern matches (fnmatch, as src/core/cgroup.c does), with the rule's access."""
    out: dict[int, str] = {}
    for spec, access in unit_rules:
        if not spec.startswith("char-"):
            continue
        for name, majors in devs.items():
            if fnmatch.fnmatchcase(name, spec.removeprefix("char-")):
                for major in majors:
                    out[major] = "".join(sorted(set(out.get(major, "")) | set(access)))
    return out


@pytest.fixture(scope="module")
def units(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    rendered = render_units(tmp_path_factory.mktemp("units"))
    return {name: rendered[name].read_text() for name in ("tpwarden-thermal", "tpwarden-clock-cap")}


def test_the_fixtures_are_the_two_generations() -> None:
    assert names_of_major(devices(PRE_545), 195) == ("nvidia-frontend",)
    assert names_of_major(devices(D580), 195) == ("nvidia", "nvidia-modeset", "nvidiactl")
    assert "nvidia-frontend" not in devices(D580)
    assert devices(PRE_545)["infiniband_verbs"] == (231, 240)  # a name on two majors


@pytest.mark.parametrize("fixture", [PRE_545, D580, IMEX], ids=lambda p: p.name)
@pytest.mark.parametrize("unit", ["tpwarden-thermal", "tpwarden-clock-cap"])
def test_the_gpu_nodes_are_granted_and_nothing_else_nvidia(units, fixture, unit) -> None:
    devs = devices(fixture)
    granted = allowed_majors(rules(units[unit]), devs)
    assert "r" in granted.get(195, "") and "w" in granted.get(195, ""), (unit, granted)
    for name in ("nvidia-uvm",):
        for major in devs.get(name, ()):
            assert granted.get(major) == "rw", (name, granted)
    for major in devs.get("nvidia-caps", ()):
        assert granted.get(major) == "r"
    # never the imex channels, nvswitch or nvlink (what char-nvidia* would also open)
    for name in ("nvidia-caps-imex-channels", "nvidia-nvswitch", "nvidia-nvlink", "gdrdrv"):
        for major in devs.get(name, ()):
            assert major not in granted, (name, granted)
    assert ("/dev/nvidiactl", "rw") in rules(units[unit])
    assert not any(spec.endswith("*") for spec, _ in rules(units[unit]))


def test_the_old_name_alone_denies_the_gpu_on_a_580_driver() -> None:
    # what the units granted before: on 545+ nothing matches and /dev/nvidia0 is denied
    old = [("/dev/nvidiactl", "rw"), ("char-nvidia-frontend", "rw"), ("char-nvidia-uvm", "rw")]
    assert 195 in allowed_majors(old, devices(PRE_545))
    assert 195 not in allowed_majors(old, devices(D580))
    assert 195 in allowed_majors([("char-nvidia*", "rw")], devices(IMEX))  # but so is 234:
    assert 234 in allowed_majors([("char-nvidia*", "rw")], devices(IMEX))


def _open_refusing(denied: str, err: int):
    def try_open(path: str) -> None:
        if path == denied:
            raise OSError(err, os.strerror(err), path)

    return try_open


def test_a_cgroup_denial_names_the_unit_the_errno_and_the_drivers_name() -> None:
    denial = find_denial(
        "/dev",
        listdir=lambda d: ["nvidiactl", "nvidia0", "nvidia-uvm", "nvidia-caps"],
        try_open=_open_refusing("/dev/nvidia0", errno.EPERM),
        read_devices=lambda: D580.read_text(),
        read_cgroup=lambda: "0::/system.slice/tpwarden-thermal.service\n",
    )
    assert isinstance(denial, DeviceDenial)
    assert (denial.path, denial.errno_name, denial.cause) == (
        "/dev/nvidia0",
        "EPERM",
        "device_cgroup",
    )
    text = denial.text()
    assert "tpwarden-thermal.service" in text and "EPERM" in text and "char-nvidia" in text
    assert "nvidia, nvidia-modeset, nvidiactl" in text and "not 'no GPU'" in text


def test_a_file_mode_denial_is_told_apart_and_an_open_device_is_none() -> None:
    mode = find_denial(
        "/dev", listdir=lambda d: ["nvidia0"], try_open=_open_refusing("/dev/nvidia0", errno.EACCES),
        read_devices=lambda: "", read_cgroup=lambda: "",
    )  # fmt: skip
    assert mode is not None and mode.cause == "file_permission" and mode.unit is None
    assert "file mode" in mode.text()
    fine = find_denial(
        "/dev", listdir=lambda d: ["nvidia0"], try_open=lambda p: None,
        read_devices=lambda: "", read_cgroup=lambda: "",
    )  # fmt: skip
    assert fine is None
    nodes_gone = find_denial(
        "/dev", listdir=lambda d: [], try_open=_open_refusing("/dev/nvidiactl", errno.ENOENT),
        read_devices=lambda: "", read_cgroup=lambda: "",
    )  # fmt: skip
    assert nodes_gone is None  # no node, no denial: the cause is elsewhere


def test_the_unit_is_read_from_the_processes_own_cgroup() -> None:
    assert unit_of("0::/system.slice/tpwarden-thermal.service\n") == "tpwarden-thermal.service"
    v1 = "12:devices:/system.slice/tpwarden-clock-cap.service\n1:name=systemd:/system.slice/x.service\n"
    assert unit_of(v1) == "tpwarden-clock-cap.service"
    assert unit_of("0::/user.slice/user-0.slice/session-3.scope\n") == "session-3.scope"
    assert unit_of("0::/\n") is None
