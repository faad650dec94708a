"""tpwarden node probe: facts the playbooks need, as one JSON document on stdout.

Runs with the node's own python3 (standard library, plus pynvml if installed). Copied to the
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


def nvml():
    try:
        import pynvml
    except ImportError as e:
        return {"ok": False, "count": 0, "error": f"pynvml not importable: {e}"}
    try:
        pynvml.nvmlInit()
    except Exception as e:  # noqa: BLE001 - reported, never a traceback
        return {"ok": False, "count": 0, "error": f"nvmlInit: {e}"}
    try:
        count = pynvml.nvmlDeviceGetCount()
        names = []
        for i in range(count):
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
            names.append(name.decode() if isinstance(name, bytes) else str(name))
        driver = pynvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else str(driver)
        return {
            "ok": count > 0,
            "count": count,
            "names": names,
            "driver": driver,
            "error": None if count else "NVML sees no GPU",
        }
    except Exception as e:  # noqa: BLE001
        return {"ok": False, "count": 0, "error": f"{type(e).__name__}: {e}"}
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


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
