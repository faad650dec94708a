"""tpwarden node probe: facts the playbooks need, as one JSON document on stdout.

Runs with the node's own python3, standard library only (NVML through ctypes). Copied to the
node by Ansible's script module and run from there; parameters come from the environment (no
command line built from variables):

    TPWARDEN_PROBE_PATHS  JSON list of paths: disk space of each (nearest existing ancestor)
    TPWARDEN_PROBE_DIRS   JSON list of directories: do they exist (the removal baseline)
"""

import json
import os
import platform
import shutil
import subprocess
import sys


def nearest_existing(path):
    while path and not os.path.exists(path):
        parent = os.path.dirname(path.rstrip("/")) or "/"
        if parent == path:
            break
        path = parent
    return path or "/"


def disk(paths):
    out = {}
    for p in paths:
        where = nearest_existing(p)
        usage = shutil.disk_usage(where)
        out[p] = {"checked": where, "free_bytes": usage.free, "total_bytes": usage.total}
    return out


NVML_LIBRARY = "libnvidia-ml.so.1"  # what the NVIDIA driver installs (and pynvml loads)
NVML_SUCCESS = 0
NAME_BUFFER = 96  # NVML_DEVICE_NAME_V2_BUFFER_SIZE (nvml.h)
DRIVER_BUFFER = 80  # NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE


def nvml():
    """GPU count, names and driver version from the driver's NVML library itself, through
    ctypes: provisioning checks the GPU before it installs anything, so this needs no pynvml
    on the node (nothing by hand: the nodes' system python3 has only the standard library)."""
    import ctypes

    try:
        lib = ctypes.CDLL(NVML_LIBRARY)
    except OSError as e:
        return {"ok": False, "count": 0, "error": f"{NVML_LIBRARY} not loadable: {e}"}
    lib.nvmlErrorString.restype = ctypes.c_char_p

    def check(rc, call):
        if rc != NVML_SUCCESS:
            raise RuntimeError(f"{call}: {lib.nvmlErrorString(rc).decode(errors='replace')}")

    try:
        check(lib.nvmlInit_v2(), "nvmlInit")
    except (RuntimeError, AttributeError) as e:
        return {"ok": False, "count": 0, "error": str(e)}
    try:
        count = ctypes.c_uint(0)
        check(lib.nvmlDeviceGetCount_v2(ctypes.byref(count)), "nvmlDeviceGetCount")
        names = []
        for i in range(count.value):
            handle = ctypes.c_void_p()
            check(lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle)), "GetHandleByIndex")
            name = ctypes.create_string_buffer(NAME_BUFFER)
            check(lib.nvmlDeviceGetName(handle, name, NAME_BUFFER), "nvmlDeviceGetName")
            names.append(name.value.decode(errors="replace"))
        driver = ctypes.create_string_buffer(DRIVER_BUFFER)
        check(lib.nvmlSystemGetDriverVersion(driver, DRIVER_BUFFER), "GetDriverVersion")
        return {
            "ok": count.value > 0,
            "count": count.value,
            "names": names,
            "driver": driver.value.decode(errors="replace"),
            "error": None if count.value else "NVML sees no GPU",
        }
    except (RuntimeError, AttributeError) as e:
        return {"ok": False, "count": 0, "error": f"{type(e).__name__}: {e}"}
    finally:
        lib.nvmlShutdown()


def time_sync():
    try:
        done = subprocess.run(
            ["timedatectl", "show", "--property=NTPSynchronized", "--value"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"synchronized": None, "reason": f"timedatectl: {e}"}
    if done.returncode != 0:
        return {"synchronized": None, "reason": done.stderr.strip() or "timedatectl failed"}
    return {"synchronized": done.stdout.strip() == "yes", "reason": None}


def main():
    paths = json.loads(os.environ.get("TPWARDEN_PROBE_PATHS") or "[]")
    dirs = json.loads(os.environ.get("TPWARDEN_PROBE_DIRS") or "[]")
    libc, libc_version = platform.libc_ver()
    doc = {
        "python_version": "{}.{}".format(*sys.version_info[:2]),
        "python_full_version": platform.python_version(),
        "machine": platform.machine(),
        "libc": libc,
        "glibc": libc_version if libc == "glibc" else "",
        "venv_module": _has_venv(),
        "nvml": nvml(),
        "disk": disk(paths),
        "time": time_sync(),
        "dirs": {d: os.path.isdir(d) for d in dirs},
    }
    json.dump(doc, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")


def _has_venv():
    try:
        import ensurepip  # noqa: F401
        import venv  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    main()
