"""AMX tile permission for every Python process of the lab's real engine (issue 49).

The lab's engine image installs this file as ``tpwarden_lab_amx.py`` in its venv, with a
``tpwarden_lab_amx.pth`` that imports it, so each interpreter of the image (the API server, the
engine core, every worker rank, whatever multiprocessing starts) asks Linux for AMX tile
permission as it starts, before it can run any tile instruction. Standard library only: the image
has no tpwarden.

Why: Linux enables AMX's large register state (XSTATE component 18, XTILEDATA) per process, on
request: a process that runs a tile instruction without having called
``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`` gets SIGILL (the kernel's
Documentation/arch/x86/xstate.rst; Linux 5.16 and later). vLLM 0.32's CPU attention takes its
AMX path (``AttentionImpl<ISA::AMX, ...>``, csrc/cpu/cpu_attn_amx.hpp) whenever the CPU has AMX
tiles, the dtype is bf16 and the block size a multiple of 32, and never makes that call; the only
request comes by accident from oneDNN inside PyTorch, once a bf16 GEMM with more than 4 rows has
run. A 4-token prompt as the server's first request (the watchdog's probe) therefore kills every
rank with SIGILL. PyTorch has the call (``at::cpu::init_amx``, exposed as
``torch._C._cpu._init_amx``; vLLM's own CPU GEMM benchmark calls it by hand) but importing torch
here would slow every interpreter: the same three system calls are made directly.

On a CPU without AMX, a kernel without dynamic XSTATE (before 5.16: there AMX state is either
always enabled or unusable), or another architecture, nothing is asked and nothing changes.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform

SYS_ARCH_PRCTL = 158  # x86-64's system call number
ARCH_GET_XCOMP_SUPP = 0x1021
ARCH_GET_XCOMP_PERM = 0x1022
ARCH_REQ_XCOMP_PERM = 0x1023
XFEATURE_XTILECFG = 17
XFEATURE_XTILEDATA = 18
XTILE_MASK = (1 << XFEATURE_XTILECFG) | (1 << XFEATURE_XTILEDATA)

GRANTED = "granted"
NO_AMX = "not needed: this CPU has no AMX tiles"
NO_XSTATE = "not needed: kernel without dynamic XSTATE permissions"
NOT_X86 = "not needed: not x86-64"


def _errno_name(code: int) -> str:
    return errno.errorcode.get(code, str(code))


def request() -> str:
    """Ask for AMX tile permission for this process (all its threads); say what happened:
    GRANTED, one of the "not needed" states, or "refused: ERRNO". Never raises."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return NOT_X86
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError as exc:
        return f"refused: no libc ({exc})"
    features = ctypes.c_uint64(0)
    if libc.syscall(ctypes.c_long(SYS_ARCH_PRCTL), ctypes.c_long(ARCH_GET_XCOMP_SUPP),
                    ctypes.byref(features)) != 0:  # fmt: skip
        return NO_XSTATE  # EINVAL before Linux 5.16
    if not features.value & (1 << XFEATURE_XTILEDATA):
        return NO_AMX
    if libc.syscall(ctypes.c_long(SYS_ARCH_PRCTL), ctypes.c_long(ARCH_REQ_XCOMP_PERM),
                    ctypes.c_ulong(XFEATURE_XTILEDATA)) != 0:  # fmt: skip
        return f"refused: {_errno_name(ctypes.get_errno())}"
    permitted = ctypes.c_uint64(0)
    if libc.syscall(ctypes.c_long(SYS_ARCH_PRCTL), ctypes.c_long(ARCH_GET_XCOMP_PERM),
                    ctypes.byref(permitted)) != 0:  # fmt: skip
        return f"refused: {_errno_name(ctypes.get_errno())}"
    return GRANTED if permitted.value & XTILE_MASK == XTILE_MASK else "refused: not permitted"


STATE = request()
if os.environ.get("TPWARDEN_LAB_AMX_VERBOSE"):  # the image's build check prints it
    print(f"AMX tile permission: {STATE}")
