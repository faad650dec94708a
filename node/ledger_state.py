"""The collector's ledger parts (issue 53): the node's identity for a fingerprint (`show` adds
it) and the state sample taken with each canary (`state`).

    python3 collector.pyz state --window 2 --exclude-container <full id> [...]
        [--min-cpu 5] [--min-rss-mib 1024]

`state` adds `state`: `source` (psutil or /proc), `window_s`, `cotenants` (by command name,
busiest first, `cotenants.summarize`), `gpu_users` (serving vs other holders of /dev/nvidia*
and NVML's compute PIDs), `loadavg`; and the NVML facts read first, when it is asked (clocks,
clock event reasons, temperatures under the canary's load), before the CPU window. Standard library only at import time.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from tpwarden.cluster.durable import JSONObject
from tpwarden.node.cotenants import Proc, gpu_holders, gpu_users, snapshot, summarize

if TYPE_CHECKING:  # the NVML gateway is imported lazily: pynvml may be absent on the node
    from tpwarden.node.gpu import Nvml

GpuFacts = Callable[[], "tuple[JSONObject, Nvml | None]"]


def nvml_failed(doc: JSONObject, e: Exception) -> None:
    """NVML could not be read: the reason in the JSON, no GPU rows (the other facts still count)."""
    doc["nvml"] = {"state": "error", "available": False, "reason": f"{type(e).__name__}: {e}"}
    doc.setdefault("gpus", [])


def os_name(path: str = "/etc/os-release") -> str | None:
    """PRETTY_NAME of os-release(5), None when absent."""
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                key, _, value = line.strip().partition("=")
                if key == "PRETTY_NAME":
                    return value.strip().strip('"')
    except OSError:
        return None
    return None


def node_identity() -> JSONObject:
    """What a fingerprint reads of the node beside NVML: kernel release, OS, CPU count."""
    return {"kernel": os.uname().release, "os": os_name(), "cpu_count": os.cpu_count()}


def add_state_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    state = sub.add_parser("state")
    state.add_argument("--window", type=float, default=2.0, help="CPU window, seconds")
    state.add_argument(
        "--exclude-container", action="append", default=[], dest="containers",
        help="a serving or canary container's full ID: its processes are not co-tenants",
    )  # fmt: skip
    state.add_argument("--min-cpu", type=float, default=5.0, help="percent of one core")
    state.add_argument("--min-rss-mib", type=float, default=1024.0)


def state_action(args: argparse.Namespace, doc: JSONObject, gpu_facts: GpuFacts) -> None:
    """Two process snapshots `--window` apart, then the GPU facts of that moment. A failure of
    either part is reported in the JSON; the other still counts."""
    state: JSONObject = {"window_s": args.window}
    holders: set[int] = set()
    nvml = None
    try:  # first: the clocks and their reasons as the caller's load runs (it asked now)
        facts, nvml = gpu_facts()
        doc.update(facts)
        for extra in nvml.extras() if nvml is not None else []:
            holders |= set(extra.get("compute_pids") or ())
    except Exception as e:  # noqa: BLE001
        nvml_failed(doc, e)
    finally:
        if nvml is not None:
            nvml.close()
    after: dict[int, Proc] = {}
    try:
        before, source = snapshot()
        t0 = time.monotonic()
        time.sleep(max(0.0, args.window))
        after, _ = snapshot()
        dt = time.monotonic() - t0
        cot = summarize(
            before, after, dt, exclude_containers=args.containers, self_pid=os.getpid(),
            min_cpu_pct=args.min_cpu, min_rss_mib=args.min_rss_mib,
        )  # fmt: skip
        state.update(source=source, window_s=round(dt, 3), cotenants=[c.to_json() for c in cot])
        holders |= gpu_holders()
        state["loadavg"] = list(os.getloadavg())
    except Exception as e:  # noqa: BLE001 - reported in the JSON, the GPU facts still count
        doc["ok"], doc["error"] = False, f"state: {type(e).__name__}: {e}"
    state["gpu_users"] = gpu_users(holders, after, args.containers)
    doc["state"] = state
