"""The thermal agent with the REAL cluster.gpu.Nvml against the lab's NVML stand-in.

pynvml keeps one libnvidia-ml.so.1 per process, so the agent runs in a child process (as the
stub's own tests do); this pytest process never loads the stub."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tpwarden.node.clockcap import LockAnswer, make_record, write_record

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

ROOT = Path(__file__).resolve().parents[2]
STATE = """\
gpu_name=NVIDIA GB10
uuid=GPU-0000-thermal
temp_c=64
sm_clock_natural_mhz=2411
sm_clock_max_mhz=3003
locked_clock_min_mhz=0
locked_clock_max_mhz=2000
power_mw=41230
energy_mj=5000000
util_pct=87
pstate=0
clock_event_reasons=0x21
"""


@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tpwarden.cluster.errors import LabError
    from tpwarden.lab.nvml.build import build_nvml_stub

    cache = os.environ.get("TPWARDEN_TEST_NVML_BUILD_DIR")
    out = Path(cache) if cache else tmp_path_factory.getbasetemp() / "nvml-stub"
    try:
        return build_nvml_stub(out)
    except LabError as exc:
        pytest.skip(f"NVML stub not buildable here: {exc}")


def test_agent_records_real_nvml_readings_and_not_supported(stub: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.write_text(STATE)
    # The cap comes from the node's record of the lock call (NVML reads no cap back): what the
    # clock-cap unit left there after NVML answered SUCCESS.
    record = tmp_path / "clock-cap.json"
    lock = LockAnswer(index=0, answer="SUCCESS", code=0)
    write_record(make_record("cap", 2000, [lock], 1_700_000_000.0), record)
    code = textwrap.dedent(
        f"""
        import ctypes
        from tpwarden.node.gpu import Nvml
        from tpwarden.node.thermal.agent import ThermalAgent
        from tpwarden.cluster.reports.thermal.fakes import build_fake_sysfs
        from tpwarden.node.thermal.writer import DurableWriter
        from tpwarden.node.thermal.zones import SysfsZoneReader
        nvml = Nvml(library_loader=lambda: ctypes.CDLL({str(stub)!r}))
        now = [1_700_000_000.0]
        w = DurableWriter({str(tmp_path / "logs")!r}, "node1")
        a = ThermalAgent("node1", 10.0, nvml, SysfsZoneReader(build_fake_sysfs({str(tmp_path / "sys")!r})),
                         w, lambda: now[0], lambda s: None)
        for k in range(3):
            now[0] = 1_700_000_000.0 + 10 * k
            a.tick()
        w.close(); nvml.close()
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TPWARDEN_LAB_GPU_STATE": str(state)}
    env["TPWARDEN_CLOCK_CAP_RECORD"] = str(record)
    res = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    (path,) = (tmp_path / "logs").glob("thermal-node1-*.jsonl")
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(recs) == 3 and all(r["errors"] == [] for r in recs)
    g = recs[0]["gpus"][0]
    assert (g["name"], g["uuid"], g["temp_c"], g["power_w"], g["util_pct"]) == (
        "NVIDIA GB10", "GPU-0000-thermal", 64, 41.23, 87,
    )  # fmt: skip
    assert g["sm_clock_mhz"] == 2000 and g["locked_clock_max_mhz"] == 2000
    assert set(g["clock_event_reasons"]) == {"gpu_idle", "sw_thermal_slowdown"}
    assert g["memory_used_mib"] is None and "not supported" in g["null_reasons"]["memory_used_mib"]
    assert g["fan_pct"] is None and "fan_pct" in g["null_reasons"]
    assert len(recs[0]["zones"]) == 7


def test_agent_without_driver_logs_zones_and_says_why(stub: Path, tmp_path: Path) -> None:
    code = textwrap.dedent(
        f"""
        import ctypes, json
        from tpwarden.node.gpu import Nvml
        from tpwarden.node.thermal.agent import ThermalAgent
        from tpwarden.cluster.reports.thermal.fakes import build_fake_sysfs
        from tpwarden.node.thermal.zones import SysfsZoneReader
        class W:
            def write(self, r):
                print(json.dumps(r)); return True
        nvml = Nvml(library_loader=lambda: ctypes.CDLL({str(stub)!r}))
        a = ThermalAgent("node1", 10.0, nvml, SysfsZoneReader(build_fake_sysfs({str(tmp_path / "sys")!r})),
                         W(), lambda: 1000.0, lambda s: None)
        a.tick()
        """
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TPWARDEN_LAB_GPU_STATE": str(tmp_path / "absent"),
    }
    res = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    rec = json.loads(res.stdout.strip().splitlines()[-1])
    assert rec["gpus"] == [] and len(rec["zones"]) == 7
    assert rec["errors"][0]["source"] == "gpu" and "driver_not_loaded" in rec["errors"][0]["error"]
