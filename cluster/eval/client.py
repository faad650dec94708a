"""One eval client container on the head, through its Docker gateway: create, fill /bench,
start, wait (watching its log when asked: the progress of a night-long task), collect
/bench/results, remove."""

from __future__ import annotations

import contextlib
import io
import tarfile
import time
from collections.abc import Callable, Mapping
from typing import Any

import docker.errors
import paramiko
import requests
from tpwarden.cluster.bench.runner import _untar, container_facts
from tpwarden.cluster.docker_gw import DockerGateway, create_kwargs
from tpwarden.cluster.errors import DockerError, TpwardenError
from tpwarden.cluster.eval.presets import CONTAINER_DIR
from tpwarden.cluster.launch import ContainerPlan

# called with the log text written since the last call, every `poll_s` while the client runs
Watch = Callable[[str], None]
WATCH_POLL_S = 30.0


def _tar(files: Mapping[str, bytes]) -> bytes:
    """Files under /bench, with a directory entry for every parent (nested task folders)."""
    buf = io.BytesIO()
    now = int(time.time())
    dirs = {"bench"}
    for name in files:
        parts = f"bench/{name}".split("/")[:-1]
        dirs.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in sorted(dirs):
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o777, now
            tar.addfile(info)
        for name, data in files.items():
            info = tarfile.TarInfo(f"bench/{name}")
            info.size, info.mode, info.mtime = len(data), 0o644, now
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def wait_watching(
    api: Any, cid: str, timeout_s: float, watch: Watch | None, poll_s: float = WATCH_POLL_S,
    sleep: Callable[[float], None] = time.sleep,
) -> int:  # fmt: skip
    """The container's exit code. Without `watch`, one blocking wait (as before); with it, poll
    the state and hand `watch` the log written since the last poll (`since`: docker keeps the
    whole log, and tqdm's bar is one ever-growing line)."""
    if watch is None:
        return int(api.wait(cid, timeout=int(timeout_s)).get("StatusCode", -1))
    deadline = time.monotonic() + timeout_s
    since = int(time.time()) - 1
    while time.monotonic() < deadline:
        if not (api.inspect_container(cid).get("State") or {}).get("Running"):
            return int(api.wait(cid, timeout=60).get("StatusCode", -1))
        now = int(time.time())
        watch(api.logs(cid, stdout=True, stderr=True, since=since).decode("utf-8", "replace"))
        since = now
        sleep(poll_s)
    raise DockerError(f"eval client {cid[:12]} still running after {timeout_s:.0f} s")


def run_container(
    gw: DockerGateway, plan: ContainerPlan, files: Mapping[str, bytes], secrets: Mapping[str, str],
    timeout_s: float, watch: Watch | None = None,
) -> tuple[int, str, dict[str, bytes], dict[str, Any]]:  # fmt: skip
    """Create, fill, start, wait, collect /bench/results (also after a failure: the request
    cache is what a resume needs), remove."""
    api = gw.api
    cid = None
    try:
        created = api.create_container(**create_kwargs(plan, {**plan.env, **secrets}, api))
        cid = created["Id"]
        api.put_archive(cid, "/", _tar(files))
        facts = container_facts(api.inspect_container(cid))
        api.start(cid)
        rc = wait_watching(api, cid, timeout_s, watch)
        logs = api.logs(cid, stdout=True, stderr=True).decode("utf-8", "replace")
        try:
            results = _untar(api.get_archive(cid, f"{CONTAINER_DIR}/results")[0])
        except docker.errors.NotFound:
            results = {}
        facts["exit_code"] = rc
        return rc, logs, results, facts
    except (docker.errors.DockerException, requests.RequestException, paramiko.SSHException) as e:
        raise DockerError(f"{gw.node}: eval client {plan.name}: {e}") from None
    finally:
        if cid is not None:
            with contextlib.suppress(TpwardenError):
                gw.remove(cid, stop_timeout=5)
