"""Fault injection for the lab: one function per ``tpwarden lab fault ...``.

Node faults act on the node (its sshd, log fs, sensors); container faults act on the node's
serving container (labels io.tpwarden.cluster=lab, io.tpwarden.node=NODE) on the host engine;
simulator faults write the vLLM simulator's fault file (schema: vllm_sim/faults.py).
"""

from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path
from typing import Any

import docker
import docker.errors
from tpwarden.cluster.errors import LabError
from tpwarden.cluster.labels import LABEL_COMPONENT
from tpwarden.lab import nodes, sensord
from tpwarden.lab.host import write_atomic
from tpwarden.lab.paths import CLUSTER_LABEL, NODE_LABEL, SERVER_COMPONENT, LabPaths

FILL_NAME = ".tpwarden-lab-fill"
SIM_KINDS = ("boot_stuck_at", "boot_crash_at", "http_5xx", "engine_dead", "hang", "slow_steps")
_SSH_UNITS = ["ssh.socket", "ssh.service"]


def cut(paths: LabPaths, name: str) -> None:
    """Cut the node off as a network failure would: its sshd stops listening and every open
    SSH connection to it dies (a pooled connection must not make a dead node look alive)."""
    node = paths.node(name)
    nodes.nsenter(node, ["systemctl", "stop", *_SSH_UNITS])
    # Per-connection sshd processes outlive the service (KillMode=process); end them too.
    # pkill exits 1 when nothing matched, which is fine here.
    nodes.nsenter(node, ["sh", "-c", "pkill -KILL -x sshd || true"])


def restore(paths: LabPaths, name: str) -> None:
    nodes.nsenter(paths.node(name), ["systemctl", "start", "ssh.service"])


def heat(
    paths: LabPaths,
    name: str,
    *,
    gpu_temp_c: float | None = None,
    zones: dict[str, float] | None = None,
    duration_s: float = 60,
    now: float | None = None,
) -> dict:
    """Write the node's heat.json (merged with overrides still active); return it."""
    node = paths.node(name)
    for zone in zones or {}:
        sensord.zone_index(zone)  # validate before writing
    now = time.time() if now is None else now
    doc: dict = {"zones": {}}
    if node.heat.is_file():
        old = json.loads(node.heat.read_text())
        if float(old.get("until", 0)) > now:
            doc = old
    if gpu_temp_c is not None:
        doc["gpu_temp_c"] = gpu_temp_c
    doc.setdefault("zones", {}).update(zones or {})
    doc["until"] = max(float(doc.get("until", 0)), now + duration_s)
    write_atomic(node.heat, json.dumps(doc, sort_keys=True) + "\n")
    return doc


def cool(paths: LabPaths, name: str) -> None:
    """End every heat override of the node (the sensor daemon sees heat.json go)."""
    paths.node(name).heat.unlink(missing_ok=True)


def fill_logs(paths: LabPaths, name: str) -> int:
    """Fill the node's /var/log/tpwarden until ENOSPC; return the bytes written."""
    target = paths.node(name).logfs / FILL_NAME
    written = 0
    chunk = b"\0" * (1 << 20)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        while True:
            try:
                written += os.write(fd, chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    break
                chunk = chunk[: len(chunk) // 2]
    finally:
        os.close(fd)
    return written


def free_logs(paths: LabPaths, name: str) -> None:
    (paths.node(name).logfs / FILL_NAME).unlink(missing_ok=True)


# A node fault hits the node's server rank only (SERVER_COMPONENT): a bench or eval client that
# happens to run on the same node is the operator's tool, and freezing it too would test
# something else.


def _containers(paths: LabPaths, name: str, client: docker.DockerClient) -> list:
    labels = [f"{CLUSTER_LABEL}={paths.cluster_name}", f"{NODE_LABEL}={name}",
              f"{LABEL_COMPONENT}={SERVER_COMPONENT}"]  # fmt: skip
    found = client.containers.list(all=True, filters={"label": labels})
    if not found:
        raise LabError(f"{name}: no lab server container (labels {', '.join(labels)})")
    return found


def _applies(container: Any, action: str) -> bool:
    """Unpause only what is paused (a restart replaced the paused one: nothing to do)."""
    status = container.status
    return status == "paused" if action == "unpause" else status in ("running", "restarting")


def container_action(
    paths: LabPaths, name: str, action: str, client: docker.DockerClient | None = None
) -> list[str]:
    """``pause``, ``unpause`` or ``kill`` the node's lab containers; return their names."""
    paths.node(name)
    if action not in ("pause", "unpause", "kill"):
        raise LabError(f"unknown container action {action!r}")
    try:
        client = client or docker.from_env()
        done = []
        for container in _containers(paths, name, client):
            if action in ("pause", "unpause") and not _applies(container, action):
                continue
            getattr(container, action)()
            done.append(container.name)
    except docker.errors.DockerException as exc:
        raise LabError(f"docker {action} on {name}: {exc}") from exc
    return done


def _parse_value(kind: str, phase: str | None, value: str | None) -> object:
    if kind in ("boot_stuck_at", "boot_crash_at"):
        if not phase:
            raise LabError(f"{kind} needs --phase (a boot phase name of the simulator)")
        return phase
    if kind == "http_5xx":
        return int(value) if value else True
    if kind == "slow_steps":
        return float(value) if value else 4.0
    return True


def sim_fault(
    paths: LabPaths,
    kind: str,
    node_rank: int | None = None,
    phase: str | None = None,
    value: str | None = None,
    when_argv: list[str] | None = None,
) -> dict:
    """Add one simulator fault (all ranks, or one ``node_rank``); return the whole file.
    ``when_argv``: the fault hits only servers whose command line contains all these strings."""
    if kind not in SIM_KINDS:
        raise LabError(f"unknown simulator fault {kind!r} (kinds: {', '.join(SIM_KINDS)})")
    doc = read_sim_faults(paths.sim_faults)
    entry = {kind: _parse_value(kind, phase, value)}
    if when_argv:
        entry["when_argv"] = list(when_argv)
    if node_rank is None:
        doc.setdefault("all", {}).update(entry)
    else:
        doc.setdefault("node_rank", {}).setdefault(str(node_rank), {}).update(entry)
    write_atomic(paths.sim_faults, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return doc


def read_sim_faults(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except ValueError as exc:
        raise LabError(f"{path}: not JSON: {exc}") from exc
    return doc if isinstance(doc, dict) else {}


def clear_sim_faults(paths: LabPaths) -> None:
    paths.sim_faults.unlink(missing_ok=True)
