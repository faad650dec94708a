"""The node-side collector: run on a node by `python3`, print one JSON document.

It is shipped as a zipapp (`tpwarden.cluster.node_zipapp.COLLECTOR`: this module's import
closure, i.e. `cluster/errors.py`, `cluster/durable.py`, `node/gpu.py` (the same NVML gateway
the toolkit tests), `node/clockcap.py` (the node's record of the lock call) and `node/memory.py` (psutil, else /proc/meminfo)), copied to the node by SFTP and run from a
private temp dir (`NodeSession.run_script`). Only the standard library and pynvml are needed on
the node.

    python3 collector.pyz show
    python3 collector.pyz cap 2000        (root: lock SM clocks to 0..2000 MHz, record the answer)
    python3 collector.pyz reset           (root: reset locked clocks, record the answer)
    python3 collector.pyz ports 8000 29501 (can these TCP ports be bound here?)
    python3 collector.pyz paths /models/a /models/b
    python3 collector.pyz --path /models/a cap 2000   (any action: its paths checked too)
    python3 collector.pyz --rdma --memory --drop-caches auto cap 2000
                          (any action: the RDMA fabric (tpwarden.node.rdma), the page cache
                          dropped (root; auto: on a unified-memory node), then the memory)
    python3 collector.pyz fabric          (the RDMA fabric only: `inventory check --nodes`)
    python3 collector.pyz dossier --pid 4242 [--pid ...] [--pyspy /opt/tpwarden/venv/bin/py-spy]
                          [--frozen] [--no-kernel-log]
                          (root: an incident dossier's node part, tpwarden.node.dossier)
    python3 collector.pyz state --window 2 [--exclude-container ID ...]
                          (the ledger's state sample: co-tenants, GPU users, clocks; node.ledger_state)

Output keys: `host`, `action`, `ok`, `error`, `nvml`, `gpus` (with nulls + `missing` reasons), `zones`,
`memory` (the node's: total/available/used bytes + source, or `error`; on GB10 the GPU's too),
`kernel`, `os`, `cpu_count` and `gpu_extras` (power limit, NVML's compute PIDs) for show,
`ports` / `paths` when asked, and `clock_cap` for show/cap/reset: `{record, reason, path}`, the
node's record of the last lock call (tpwarden.node.clockcap; NVML has no read-back of a lock).
`dossier` adds `dossier` (processes, CPU delta, py-spy stacks, kernel log events) beside the
NVML facts. `cap`/`reset` store it (ok or refused, with each GPU's answer) before reporting. Exit 0 even
when a GPU reading is missing; 1 if the action failed (a refused lock call included).
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tpwarden.cluster.durable import JSONObject
from tpwarden.node import clockcap
from tpwarden.node.dossier import collect_dossier
from tpwarden.node.kernlog import read_kernel_log
from tpwarden.node.ledger_state import (
    add_state_parser,
    node_identity,
    nvml_failed,
    state_action,
)
from tpwarden.node.memory import NodeMemory, drop_page_cache, read_node_memory
from tpwarden.node.rdma import read_fabric

COLLECTOR_VERSION = 1

if TYPE_CHECKING:  # imported lazily at run time: pynvml may be absent on the node
    from tpwarden.node.gpu import Nvml


def node_memory_json(read_memory: Callable[[], NodeMemory] | None = None) -> JSONObject:
    """The node's memory as JSON; an unreadable one is ``{"error": ...}``, never a failure."""
    try:
        if read_memory is None:
            read_memory = read_node_memory
        return read_memory().to_json()
    except Exception as e:  # noqa: BLE001 - reported in the JSON, the GPU facts still count
        return {"error": f"{type(e).__name__}: {e}"}


def _gpu_facts(lib: str | None) -> tuple[JSONObject, Nvml | None]:
    try:
        from tpwarden.node import gpu  # imported lazily: pynvml may be absent on the node
    except ImportError as e:
        return {
            "nvml": {
                "state": "library_not_found",
                "available": False,
                "reason": f"cannot import the NVML bindings: {e}",
            },
            "gpus": [],
        }, None
    nvml = gpu.Nvml(gpu.library_from(lib)) if lib else gpu.Nvml()
    return gpu.collect_json(nvml), nvml


def _milli(path: Path) -> float | None:
    return int(path.read_text().strip()) / 1000.0


def read_zones(root: str | Path = "/sys/class/thermal") -> list[JSONObject]:
    """ACPI thermal zones for `tpwarden status`: name, type, °C and the critical trip. A zone
    that cannot be read gets ``temp_c`` None and a reason; one bad zone never spoils the list
    (the thermal agent's sysfs gateway does the same for the night's samples)."""
    base = Path(root)
    try:
        names = sorted(
            (n for n in os.listdir(base) if n.startswith("thermal_zone")),
            key=lambda n: int(n[len("thermal_zone") :] or -1),
        )
    except (OSError, ValueError):
        return []
    out = []
    for name in names:
        z: JSONObject = {"name": name, "type": None, "temp_c": None, "critical_c": None}
        try:
            z["type"] = (base / name / "type").read_text().strip()
            z["temp_c"] = _milli(base / name / "temp")
        except (OSError, ValueError) as e:
            z["reason"] = f"{type(e).__name__}: {e}"
        for trip in (base / name).glob("trip_point_*_type"):
            try:
                if trip.read_text().strip() == "critical":
                    crit = _milli(trip.with_name(trip.name.replace("_type", "_temp")))
                    # a 0 C (or negative) critical trip is a disabled one, not a real limit
                    z["critical_c"] = crit if crit is not None and crit > 0 else z["critical_c"]
            except (OSError, ValueError):
                continue
        out.append(z)
    return out


def check_ports(ports: list[int], host: str = "0.0.0.0") -> JSONObject:
    """Port -> {"free": bool, "reason"}; binds (without listening) and releases at once."""
    out: JSONObject = {}
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            # As servers do: TIME-WAIT leftovers of a stopped server must not read as "in use".
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
                out[str(port)] = {"free": True, "reason": None}
            except OSError as e:
                reason = "in use" if e.errno == errno.EADDRINUSE else str(e)
                out[str(port)] = {"free": False, "reason": reason}
    return out


def check_paths(paths: list[str]) -> JSONObject:
    return {p: {"exists": os.path.exists(p), "is_dir": os.path.isdir(p)} for p in paths}


def _lock(args: argparse.Namespace, doc: JSONObject) -> tuple[Nvml, str | None]:
    """``cap``/``reset``: make the lock call and record each GPU's answer on the node (the only
    proof NVML gives) in ``doc["clock_cap"]``. Returns the gateway (to close) and the refusal."""
    facts, nvml = _gpu_facts(args.nvml_lib)
    if nvml is None:
        raise RuntimeError(facts["nvml"]["reason"])
    try:
        answers = (
            nvml.try_lock_clocks(args.mhz) if args.action == "cap" else nvml.try_reset_clocks()
        )
    except Exception:
        nvml.close()
        raise
    mhz = args.mhz if args.action == "cap" else None
    record = clockcap.make_record(args.action, mhz, answers, time.time())
    stored: JSONObject = {"record": record, "path": str(clockcap.record_path())}
    try:
        clockcap.write_record(record)
        stored["reason"] = None
    except OSError as e:  # the answers still count; `show` will say there is no record
        stored["reason"] = f"clock-cap record not stored: {type(e).__name__}: {e}"
    doc["clock_cap"] = stored
    refused = [a for a in answers if not a.ok]
    if not refused:
        return nvml, None
    what = "lock" if args.action == "cap" else "reset"
    a = refused[0]
    return nvml, f"cannot {what} GPU clocks on GPU {a.index}: {clockcap.refusal_text(a)}"


def _shown_cap(doc: JSONObject) -> None:
    """``show``: the node's clock-cap record as stored (``record`` None with ``reason``)."""
    record, reason = clockcap.read_record()
    doc["clock_cap"] = {"record": record, "reason": reason, "path": str(clockcap.record_path())}


def _gpu_action(
    args: argparse.Namespace, doc: JSONObject, read_memory: Callable[[], NodeMemory] | None
) -> None:
    nvml = None
    try:
        if args.action in ("cap", "reset"):
            nvml, refused = _lock(args, doc)
            # deferred: pynvml may be absent on the node (see _gpu_facts)
            from tpwarden.node import gpu

            doc.update(gpu.collect_json(nvml))
            if refused:
                doc["ok"], doc["error"] = False, refused
        else:
            facts, nvml = _gpu_facts(args.nvml_lib)
            doc.update(facts)
            _shown_cap(doc)
            doc["zones"] = read_zones()
            doc["memory"] = node_memory_json(read_memory)
            doc.update(node_identity())
            try:  # the ledger's extras never fail `show` (status reads it too)
                doc["gpu_extras"] = nvml.extras() if nvml is not None else []
            except Exception as e:  # noqa: BLE001
                doc["gpu_extras"], doc["gpu_extras_error"] = [], f"{type(e).__name__}: {e}"
    except Exception as e:  # noqa: BLE001 - reported in the JSON, never a traceback
        doc["ok"] = False
        doc["error"] = f"{type(e).__name__}: {e}"
        doc.setdefault("gpus", [])
    finally:
        if nvml is not None:
            nvml.close()


def unified_memory(gpus: object) -> bool:
    """NVML answers Not Supported for every GPU's memory: GB10's unified memory."""
    if not isinstance(gpus, list) or not gpus:
        return False
    reasons = [str((g.get("missing") or {}).get("memory_total_mib", "")) for g in gpus]
    return all("not supported" in r.lower() for r in reasons)


def _memory_facts(
    args: argparse.Namespace, doc: JSONObject, read_memory: Callable[[], NodeMemory] | None
) -> None:
    """`--drop-caches` (after the GPU facts: auto needs them), then `--memory`."""
    if args.drop_caches:
        unified = unified_memory(doc.get("gpus"))
        if args.drop_caches == "always" or unified:
            doc["page_cache"] = drop_page_cache(read_memory)
        else:
            doc["page_cache"] = {"dropped": False, "reason": "not a unified-memory node"}
        doc["page_cache"]["unified"] = unified
    if args.memory or args.drop_caches:
        doc["memory"] = node_memory_json(read_memory)


def _dossier_action(args: argparse.Namespace, doc: JSONObject) -> None:
    """The node's part of an incident dossier, then the NVML facts of that moment (a failure
    of either is reported in the JSON; the other still counts)."""
    try:
        doc["dossier"] = collect_dossier(
            args.pids,
            window_s=args.window,
            since_s=args.since,
            pyspy=args.pyspy,
            all_frozen=args.frozen,
            kernel_log=read_kernel_log if args.kernel_log else None,
        )
    except Exception as e:  # noqa: BLE001 - reported in the JSON, the GPU facts still count
        doc["ok"], doc["error"] = False, f"dossier: {type(e).__name__}: {e}"
    nvml = None
    try:
        facts, nvml = _gpu_facts(args.nvml_lib)
        doc.update(facts)
    except Exception as e:  # noqa: BLE001
        nvml_failed(doc, e)
    finally:
        if nvml is not None:
            nvml.close()


def main(argv: list[str] | None = None, read_memory: Callable[[], NodeMemory] | None = None) -> int:
    """``read_memory`` (tests) replaces cluster.memory.read_node_memory."""
    ap = argparse.ArgumentParser(prog="tpwarden-collector")
    ap.add_argument("--nvml-lib", default=os.environ.get("TPWARDEN_NVML_LIB"))
    ap.add_argument(
        "--path", action="append", default=[], dest="also_paths",
        help="also check this path (any action; pre-flight's one call per node)",
    )  # fmt: skip
    ap.add_argument("--rdma", action="store_true", help="also the RDMA fabric (any action)")
    ap.add_argument("--memory", action="store_true", help="also the node's memory (any action)")
    ap.add_argument(
        "--drop-caches", choices=("auto", "always"),
        help="root: drop the page cache (auto: on a unified-memory node), then --memory",
    )  # fmt: skip
    sub = ap.add_subparsers(dest="action", required=True)
    sub.add_parser("show")
    cap = sub.add_parser("cap")
    cap.add_argument("mhz", type=int)
    sub.add_parser("reset")
    sub.add_parser("fabric")
    ports = sub.add_parser("ports")
    ports.add_argument("--host", default="0.0.0.0", help="address the server will bind")
    ports.add_argument("ports", type=int, nargs="+")
    paths = sub.add_parser("paths")
    paths.add_argument("paths", nargs="+")
    dossier = sub.add_parser("dossier")
    dossier.add_argument("--pid", type=int, action="append", default=[], dest="pids")
    dossier.add_argument("--window", type=float, default=1.5, help="CPU-time window, seconds")
    dossier.add_argument("--since", type=float, default=600.0, help="kernel log, seconds back")
    dossier.add_argument("--pyspy", action="append", default=[], help="py-spy paths to try")
    dossier.add_argument(
        "--frozen", action="store_true",
        help="the engine says the container is paused: every py-spy dump nonblocking",
    )  # fmt: skip
    dossier.add_argument(
        "--no-kernel-log", action="store_false", dest="kernel_log",
        help="read no kernel log (run in a diagnostic container, not on the host)",
    )  # fmt: skip
    add_state_parser(sub)
    args = ap.parse_args(argv)
    doc: JSONObject = {
        "collector": COLLECTOR_VERSION,
        "host": socket.gethostname(),
        "euid": os.geteuid(),
        "action": args.action,
        "ok": True,
        "error": None,
        "time_unix_s": time.time(),
    }
    if args.also_paths:
        doc["paths"] = check_paths(args.also_paths)
    if args.action == "ports":
        doc["ports"] = check_ports(args.ports, args.host)
    elif args.action == "paths":
        doc["paths"] = check_paths(args.paths)
    elif args.action == "dossier":
        _dossier_action(args, doc)
    elif args.action == "state":
        state_action(args, doc, lambda: _gpu_facts(args.nvml_lib))
    elif args.action != "fabric":
        _gpu_action(args, doc, read_memory)
    if args.rdma or args.action == "fabric":
        doc["rdma"] = read_fabric()
    _memory_facts(args, doc, read_memory)
    json.dump(doc, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
