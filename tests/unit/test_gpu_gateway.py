"""tpwarden.node.gpu, the NVML gateway, against the lab's stub (in child processes) and without NVML.

pynvml and the dynamic loader keep one NVML library per process, so every check that loads the
stub runs in a child process; in-process tests only use loaders that fail.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from tpwarden.cluster.errors import NvmlError
from tpwarden.lab.nvml.build import LIBRARY_NAME, build_nvml_stub
from tpwarden.node.gpu import Nvml, collect_json, decode_clock_event_reasons

ROOT = Path(__file__).resolve().parents[2]
STATE = """\
gpu_name=NVIDIA GB10
uuid=GPU-0000-test
temp_c=63
sm_clock_natural_mhz=2411
sm_clock_max_mhz=3003
power_mw=41230
energy_mj=5000000
util_pct=90
pstate=0
slowdown_temp_c=95
shutdown_temp_c=100
clock_event_reasons=0x24
"""
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


@pytest.fixture(scope="module")
def stub_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_nvml_stub(tmp_path_factory.getbasetemp() / "nvml-stub")  # shared, cached


@pytest.fixture()
def node(stub_lib: Path) -> Iterator[Path]:
    """A world-readable dir holding a copy of the stub and a state file."""
    path = Path(tempfile.mkdtemp(prefix="tpwarden-gpu-"))
    path.chmod(0o755)
    shutil.copy(stub_lib, path / LIBRARY_NAME)
    (path / "state").write_text(STATE)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def gateway(node: Path, code: str, *, state: Path | None = None, user: int | None = None) -> dict:
    """Run ``code`` with ``nvml`` = a gateway on the stub; it sets ``out``; return ``out``."""
    script = (
        textwrap.dedent(
            f"""
        import json
        from tpwarden.cluster.errors import NvmlError
        from tpwarden.node.gpu import Nvml, collect_json, library_from
        nvml = Nvml(library_loader=library_from({str(node / LIBRARY_NAME)!r}))
        out = {{}}
        """
        )
        + textwrap.dedent(code)
        + "\nnvml.close()\nprint(json.dumps(out))\n"
    )
    env = {
        **os.environ,
        "TPWARDEN_LAB_GPU_STATE": str(state or node / "state"),
        "TPWARDEN_CLOCK_CAP_RECORD": str(node / "clock-cap.json"),  # none: nothing recorded
        "PYTHONPATH": str(ROOT),
    }
    env.pop("LD_LIBRARY_PATH", None)
    argv = [sys.executable, "-c", script]
    if user is not None:
        argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *argv]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


SAMPLE = "out = collect_json(nvml, clock=lambda: 123.0)\n"


@needs_gcc
def test_sample_through_stub(node: Path) -> None:
    out = gateway(node, SAMPLE)
    assert out["time_unix_s"] == 123.0
    assert out["nvml"]["state"] == "ok" and out["nvml"]["device_count"] == 1
    assert out["nvml"]["driver_version"].startswith("580.")
    (gpu,) = out["gpus"]
    assert gpu["name"] == "NVIDIA GB10" and gpu["uuid"] == "GPU-0000-test"
    assert gpu["temp_c"] == 63
    assert (gpu["sm_clock_mhz"], gpu["sm_clock_max_mhz"]) == (2411, 3003)
    assert gpu["power_w"] == pytest.approx(41.23)
    assert gpu["energy_j"] == pytest.approx(5000.0)
    assert gpu["util_pct"] == 90 and gpu["pstate"] == 0
    assert (gpu["slowdown_temp_c"], gpu["shutdown_temp_c"]) == (95, 100)
    assert gpu["clock_event_reasons_mask"] == 0x24
    assert gpu["clock_event_reasons"] == ["sw_power_cap", "sw_thermal_slowdown"]
    # GB10: unified memory and no fan are normal answers, not errors
    for key in ("memory_used_mib", "memory_total_mib", "fan_pct", "locked_clock_max_mhz"):
        assert gpu[key] is None, key
    assert "not supported" in gpu["missing"]["memory_total_mib"]
    assert "/proc/meminfo" in gpu["missing"]["memory_total_mib"]
    assert "not supported" in gpu["missing"]["fan_pct"]
    assert "NVML has no read-back" in gpu["missing"]["locked_clock_max_mhz"]
    assert "no lock call recorded" in gpu["missing"]["locked_clock_max_mhz"]
    assert set(gpu["missing"]) == {
        "memory_used_mib", "memory_total_mib", "fan_pct", "locked_clock_max_mhz"
    }  # fmt: skip


@needs_gcc
def test_lock_as_root_answers_success_and_shows_in_the_sm_clock_only(node: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    out = gateway(node, 'out["answers"] = [a.answer for a in nvml.try_lock_clocks(2000)]\n')
    assert out["answers"] == ["SUCCESS"]
    (gpu,) = gateway(node, SAMPLE)["gpus"]
    assert gpu["sm_clock_mhz"] == 2000
    # NVML has no read-back: the gateway alone (no record written) reports no cap
    assert gpu["locked_clock_max_mhz"] is None
    gateway(node, "nvml.reset_clocks()\n")
    (gpu,) = gateway(node, SAMPLE)["gpus"]
    assert gpu["sm_clock_mhz"] == 2411 and gpu["locked_clock_max_mhz"] is None


@needs_gcc
@pytest.mark.parametrize(
    ("told", "code"), [("NOT_SUPPORTED", 3), ("NO_PERMISSION", 4)], ids=["not-supported", "perm"]
)
def test_a_refused_lock_is_each_gpus_answer_and_lock_clocks_raises_it(
    node: Path, told: str, code: int
) -> None:
    (node / "state").write_text(STATE + f"lock_clocks_answer={told}\n")
    code_ = """
        out["answers"] = [[a.answer, a.code, a.message] for a in nvml.try_lock_clocks(2000)]
        try:
            nvml.lock_clocks(2000)
        except NvmlError as exc:
            out["error"] = str(exc)
        """
    out = gateway(node, code_)
    message = {"NOT_SUPPORTED": "Not Supported", "NO_PERMISSION": "Insufficient Permissions"}[told]
    assert out["answers"] == [[told, code, message]]
    assert out["error"].startswith(f"cannot lock GPU clocks on GPU 0: NVML answered {told}")


@needs_gcc
def test_lock_as_non_root_raises_nvml_error(node: Path) -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to drop privileges")
    code = """
        try:
            nvml.lock_clocks(2000)
            out["error"] = None
        except NvmlError as exc:
            out["error"] = str(exc)
        out["temp_c"] = nvml.sample_all()[0].temp_c.value
        """
    out = gateway(node, code, user=65534)
    assert "NO_PERMISSION" in out["error"] and "root" in out["error"]
    assert out["temp_c"] == 63  # reading still works for an unprivileged user


@needs_gcc
def test_missing_state_file_reads_as_driver_not_loaded(node: Path) -> None:
    code = """
        out["json"] = collect_json(nvml, clock=lambda: 0.0)
        try:
            nvml.lock_clocks(2000)
        except NvmlError as exc:
            out["lock"] = str(exc)
        """
    out = gateway(node, code, state=node / "absent")
    assert out["json"]["nvml"]["state"] == "driver_not_loaded"
    assert out["json"]["nvml"]["available"] is False
    assert "driver not loaded" in out["json"]["nvml"]["reason"]
    assert out["json"]["gpus"] == []
    assert "driver not loaded" in out["lock"]


def test_library_missing_is_a_state_not_a_crash() -> None:
    def loader() -> ctypes.CDLL:
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    nvml = Nvml(library_loader=loader)
    status = nvml.status()
    assert status.state == "library_not_found" and not status.available
    assert "cannot open" in (status.reason or "")
    assert nvml.sample_all() == []
    with pytest.raises(NvmlError, match="cannot lock GPU clocks"):
        nvml.lock_clocks(2000)
    nvml.close()
    nvml.close()
    out = collect_json(Nvml(library_loader=loader), clock=lambda: 1.0)
    json.dumps(out)
    assert out["nvml"]["state"] == "library_not_found" and out["gpus"] == []


def test_invalid_clock_range_is_refused_before_nvml() -> None:
    nvml = Nvml()
    with pytest.raises(NvmlError, match="invalid clock range"):
        nvml.lock_clocks(0)
    with pytest.raises(NvmlError, match="invalid clock range"):
        nvml.lock_clocks(1000, min_mhz=2000)
    assert nvml._status is None  # NVML was never touched


def test_decode_clock_event_reasons_uses_pynvml_bits() -> None:
    assert decode_clock_event_reasons(0) == ()
    assert decode_clock_event_reasons(0x1) == ("gpu_idle",)
    assert decode_clock_event_reasons(0x8 | 0x40 | 0x80) == (
        "hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"
    )  # fmt: skip
    assert decode_clock_event_reasons(0x10 | 0x100) == ("sync_boost", "display_clocks_setting")
    assert decode_clock_event_reasons(0x2) == ("applications_clocks_setting",)
    assert decode_clock_event_reasons(1 << 40)[-1] == f"unknown_{1 << 40:#x}"
