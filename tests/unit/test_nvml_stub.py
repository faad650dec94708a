"""The lab's NVML stand-in, driven by the REAL pynvml in subprocesses.

pynvml (and the dynamic loader) keep one libnvidia-ml.so.1 per process, so every check that
loads the stub runs in a child process; this pytest process never loads it.
"""

from __future__ import annotations

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
from tpwarden.lab.nvml.build import LIBRARY_NAME, build_nvml_stub

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

STATE = """\
gpu_name=NVIDIA GB10
uuid=GPU-0000-test
temp_c=57
sm_clock_natural_mhz=2411
sm_clock_max_mhz=3003
power_mw=41230
energy_mj=5000000
util_pct=87
pstate=0
slowdown_temp_c=95
shutdown_temp_c=100
gpu_max_temp_c=88
clock_event_reasons=0x21
"""

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def stub_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = os.environ.get("TPWARDEN_TEST_NVML_BUILD_DIR")
    out = Path(cache) if cache else tmp_path_factory.getbasetemp() / "nvml-stub"
    return build_nvml_stub(out).parent


@pytest.fixture()
def state_file(tmp_path: Path) -> Path:
    path = tmp_path / "gpu" / "state"
    path.parent.mkdir()
    path.write_text(STATE)
    return path


@pytest.fixture()
def public_dir() -> Iterator[Path]:
    """A world-readable directory (pytest's tmp dirs are private to root)."""
    path = Path(tempfile.mkdtemp(prefix="tpwarden-nvml-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def run_pynvml(stub_dir: Path, state: Path, code: str, *, user: int | None = None) -> dict:
    """Run ``code`` (which sets ``out``) with the real pynvml loading the stub; return ``out``."""
    script = "import json, pynvml as n\nout = {}\n" + textwrap.dedent(code)
    script += "\nprint(json.dumps(out))\n"
    env = {
        **os.environ,
        "LD_LIBRARY_PATH": str(stub_dir),
        "TPWARDEN_LAB_GPU_STATE": str(state),
        "PYTHONPATH": str(ROOT),
    }
    argv = [sys.executable, "-c", script]
    if user is not None:
        argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *argv]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_build_is_cached(stub_dir: Path) -> None:
    lib = stub_dir / LIBRARY_NAME
    before = lib.stat().st_mtime_ns
    assert build_nvml_stub(stub_dir) == lib
    assert lib.stat().st_mtime_ns == before


def test_readings_through_real_pynvml(stub_dir: Path, state_file: Path) -> None:
    out = run_pynvml(
        stub_dir,
        state_file,
        """
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        out["count"] = n.nvmlDeviceGetCount()
        out["name"] = n.nvmlDeviceGetName(h)
        out["uuid"] = n.nvmlDeviceGetUUID(h)
        out["driver"] = n.nvmlSystemGetDriverVersion()
        out["cuda"] = n.nvmlSystemGetCudaDriverVersion_v2()
        out["temp_v"] = n.nvmlDeviceGetTemperatureV(h, n.NVML_TEMPERATURE_GPU)
        out["temp"] = n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)
        out["slowdown"] = n.nvmlDeviceGetTemperatureThreshold(
            h, n.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
        out["shutdown"] = n.nvmlDeviceGetTemperatureThreshold(
            h, n.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN)
        out["sm"] = n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)
        out["sm_max"] = n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM)
        out["power_mw"] = n.nvmlDeviceGetPowerUsage(h)
        out["energy_mj"] = n.nvmlDeviceGetTotalEnergyConsumption(h)
        out["util"] = n.nvmlDeviceGetUtilizationRates(h).gpu
        out["pstate"] = n.nvmlDeviceGetPerformanceState(h)
        out["reasons"] = n.nvmlDeviceGetCurrentClocksEventReasons(h)
        out["reasons_old"] = n.nvmlDeviceGetCurrentClocksThrottleReasons(h)
        unsupported = {
            "mem": lambda: n.nvmlDeviceGetMemoryInfo(h),
            "mem_v2": lambda: n.nvmlDeviceGetMemoryInfo(h, n.nvmlMemory_v2),
            "fan": lambda: n.nvmlDeviceGetFanSpeed(h),
            "fan_v2": lambda: n.nvmlDeviceGetFanSpeed_v2(h, 0),
            "mem_clock": lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM),
        }
        for key, fn in unsupported.items():
            try:
                fn()
                out[key] = "answered"
            except n.NVMLError_NotSupported:
                out[key] = "NotSupported"
        n.nvmlShutdown()
        """,
    )
    assert out["count"] == 1
    assert out["name"] == "NVIDIA GB10" and out["uuid"] == "GPU-0000-test"
    assert out["driver"].startswith("580.") and out["cuda"] == 13000
    assert out["temp_v"] == out["temp"] == 57
    assert (out["slowdown"], out["shutdown"]) == (95, 100)
    assert (out["sm"], out["sm_max"]) == (2411, 3003)
    assert (out["power_mw"], out["energy_mj"], out["util"], out["pstate"]) == (
        41230,
        5000000,
        87,
        0,
    )
    assert out["reasons"] == out["reasons_old"] == 0x21
    for key in ("mem", "mem_v2", "fan", "fan_v2", "mem_clock"):
        assert out[key] == "NotSupported", key


def test_lock_as_root_caps_clock_and_persists(stub_dir: Path, state_file: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    run_pynvml(
        stub_dir,
        state_file,
        """
        n.nvmlInit()
        n.nvmlDeviceSetGpuLockedClocks(n.nvmlDeviceGetHandleByIndex(0), 0, 2000)
        """,
    )
    assert "locked_clock_max_mhz=2000" in state_file.read_text()
    check = """
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        out["sm"] = n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)
        out["target"] = n.nvmlDeviceGetClock(h, n.NVML_CLOCK_SM, n.NVML_CLOCK_ID_APP_CLOCK_TARGET)
        out["default"] = n.nvmlDeviceGetClock(h, n.NVML_CLOCK_SM, n.NVML_CLOCK_ID_APP_CLOCK_DEFAULT)
        """
    out = run_pynvml(stub_dir, state_file, check)  # a new process sees the cap
    # ...in the SM clock only: as with real NVML, nothing reads the lock back. `-lgc` supersedes
    # the application clocks and leaves their target alone (it used to read 2000 here).
    assert out == {"sm": 2000, "target": 3003, "default": 3003}
    run_pynvml(
        stub_dir,
        state_file,
        "n.nvmlInit()\nn.nvmlDeviceResetGpuLockedClocks(n.nvmlDeviceGetHandleByIndex(0))\n",
    )
    assert run_pynvml(stub_dir, state_file, check)["sm"] == 2411


def test_lock_as_non_root_is_refused(stub_dir: Path, public_dir: Path) -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to drop privileges")
    shutil.copy(stub_dir / LIBRARY_NAME, public_dir / LIBRARY_NAME)
    state_file = public_dir / "state"
    state_file.write_text(STATE)
    stub_dir = public_dir
    out = run_pynvml(
        stub_dir,
        state_file,
        """
        n.nvmlInit()
        try:
            n.nvmlDeviceSetGpuLockedClocks(n.nvmlDeviceGetHandleByIndex(0), 0, 2000)
            out["lock"] = "accepted"
        except n.NVMLError_NoPermission:
            out["lock"] = "NoPermission"
        out["temp"] = n.nvmlDeviceGetTemperatureV(n.nvmlDeviceGetHandleByIndex(0), 0)
        """,
        user=65534,
    )
    assert out == {"lock": "NoPermission", "temp": 57}
    assert "locked_clock_max_mhz=2000" not in state_file.read_text()


def test_missing_state_file_is_driver_not_loaded(stub_dir: Path, tmp_path: Path) -> None:
    out = run_pynvml(
        stub_dir,
        tmp_path / "absent",
        """
        try:
            n.nvmlInit()
            out["init"] = "ok"
        except n.NVMLError_DriverNotLoaded as exc:
            out["init"] = str(exc)
        """,
    )
    assert out["init"] == "Driver Not Loaded"


LOCK_AND_RESET = """
    n.nvmlInit()
    h = n.nvmlDeviceGetHandleByIndex(0)
    for name, call in (
        ("lock", lambda: n.nvmlDeviceSetGpuLockedClocks(h, 0, 2000)),
        ("reset", lambda: n.nvmlDeviceResetGpuLockedClocks(h)),
    ):
        try:
            call()
            out[name] = "SUCCESS"
        except n.NVMLError as exc:
            out[name] = [exc.value, str(exc)]
    out["sm"] = n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)
    """


@pytest.mark.parametrize(
    ("told", "code", "text"),
    [("NOT_SUPPORTED", 3, "Not Supported"), ("NO_PERMISSION", 4, "Insufficient Permissions")],
)
def test_lock_refused_when_told_even_for_root(
    stub_dir: Path, state_file: Path, told: str, code: int, text: str
) -> None:
    state_file.write_text(STATE + f"locked_clock_max_mhz=0\nlock_clocks_answer={told}\n")
    before = state_file.read_text()
    out = run_pynvml(stub_dir, state_file, LOCK_AND_RESET)
    # nvml.h: NVML_ERROR_NOT_SUPPORTED = 3, NVML_ERROR_NO_PERMISSION = 4
    assert out == {"lock": [code, text], "reset": [code, text], "sm": 2411}
    assert state_file.read_text() == before  # a refused call changes nothing


def test_lock_answer_unknown_value_is_an_unknown_error(stub_dir: Path, state_file: Path) -> None:
    state_file.write_text(STATE + "lock_clocks_answer=SOMETHING_ELSE\n")
    out = run_pynvml(stub_dir, state_file, LOCK_AND_RESET)
    assert out["lock"] == [999, "Unknown Error"]  # NVML_ERROR_UNKNOWN


def test_empty_lock_answer_behaves_as_the_driver(stub_dir: Path, state_file: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    state_file.write_text(STATE + "lock_clocks_answer=\n")
    out = run_pynvml(stub_dir, state_file, LOCK_AND_RESET)
    assert out == {"lock": "SUCCESS", "reset": "SUCCESS", "sm": 2411}  # locked, then reset


NODE_PROBE = ROOT / "playbooks" / "roles" / "baseline" / "files" / "node_probe.py"


def _probe_nvml(env_extra: dict[str, str]) -> dict:
    """The provisioning probe's NVML check, run by a bare python3 (-I -S: no site-packages,
    so no pynvml), as on a node before anything is installed (issue 28 item 7)."""
    code = (
        "import importlib.util, json\n"
        f"spec = importlib.util.spec_from_file_location('node_probe', {str(NODE_PROBE)!r})\n"
        "mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)\n"
        "print(json.dumps(mod.nvml()))\n"
    )
    env = {"PATH": os.environ["PATH"], **env_extra}
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", code], env=env,
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_provisioning_probe_reads_nvml_without_pynvml(stub_dir: Path, state_file: Path) -> None:
    seen = _probe_nvml(
        {"LD_LIBRARY_PATH": str(stub_dir), "TPWARDEN_LAB_GPU_STATE": str(state_file)}
    )
    assert seen == {"ok": True, "count": 1, "names": ["NVIDIA GB10"],
                    "driver": seen["driver"], "error": None}  # fmt: skip
    assert seen["driver"]  # the stub's driver version string
    no_driver = _probe_nvml({"LD_LIBRARY_PATH": str(stub_dir),
                             "TPWARDEN_LAB_GPU_STATE": "/nonexistent/state"})  # fmt: skip
    assert no_driver == {"ok": False, "count": 0, "error": "nvmlInit: Driver Not Loaded"}
    no_library = _probe_nvml({"LD_LIBRARY_PATH": "/nonexistent"})
    assert not no_library["ok"] and "libnvidia-ml.so.1 not loadable" in no_library["error"]
