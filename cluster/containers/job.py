"""What `DockerGateway.run_to_completion` takes and gives back, and its pure helpers (issue 31).

A `ContainerJob` is one client container run to its end: created from a `ContainerPlan`, files
put in, started, waited for, its result folder fetched, removed in every case. The bench and
eval clients are such jobs. No docker import here: the gateway (`tpwarden.cluster.containers.gateway`)
makes the calls; this module holds the types, the tar helpers and the inspect facts.
"""

from __future__ import annotations

import io
import tarfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from tpwarden.cluster.durable import JSONObject, JSONValue

if TYPE_CHECKING:
    from tpwarden.cluster.launch import ContainerPlan

# called with the log text written since the last call, every `poll_s` while the job runs
Watch = Callable[[str], None]
WATCH_POLL_S = 30.0


@dataclass(frozen=True, kw_only=True)
class ContainerJob:
    """`plan` (image, argv, mounts, network, labels ...) with `env` (the plan's env plus the
    resolved secrets: they go to the engine only). `files` (relative names, nested allowed) are
    put under `files_dir`, each parent folder with `dir_mode`, when there are any; the files of
    `results_dir` come back, also after a failure. `timeout_s` bounds the wait; with `watch`
    the container is polled every `poll_s` and `watch` gets its new log. `role` names the job
    in errors ("bench client")."""

    plan: ContainerPlan
    env: Mapping[str, str]
    role: str
    timeout_s: float
    results_dir: str
    files: Mapping[str, bytes] = field(default_factory=dict)
    files_dir: str = "/"
    dir_mode: int = 0o755
    watch: Watch | None = None
    poll_s: float = WATCH_POLL_S


@dataclass(frozen=True)
class JobResult:
    exit_code: int
    logs: str  # stdout and stderr, whole
    results: dict[str, bytes]  # base name -> content, from `results_dir`
    facts: JSONObject  # `container_facts` of the created container, plus "exit_code"
    elapsed_s: float  # start to exit


def tar_files(
    files: Mapping[str, bytes],
    top: str = "",
    dir_mode: int = 0o755,
    executable: frozenset[str] = frozenset(),
) -> bytes:
    """`files` under `top` (a folder relative to the container's root, "" for the root) with a
    directory entry for `top` and every parent of a nested name; the names in `executable`
    get mode 0755, the others 0644."""
    top = top.strip("/")
    names = [str(PurePosixPath(top, name.lstrip("/"))) for name in files]
    dirs = {top} if top else set()
    for name in names:
        parts = name.split("/")[:-1]
        dirs.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    now = int(time.time())
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in sorted(dirs):
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, dir_mode, now
            tar.addfile(info)
        for (given, data), name in zip(files.items(), names, strict=True):
            info = tarfile.TarInfo(name)
            mode = 0o755 if given in executable else 0o644
            info.size, info.mode, info.mtime = len(data), mode, now
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def untar_files(chunks: Iterable[bytes]) -> dict[str, bytes]:
    """The regular files of a `get_archive` stream, by base name."""
    out: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(b"".join(chunks)), mode="r") as tar:
        for member in tar.getmembers():
            if member.isfile():
                f = tar.extractfile(member)
                if f is not None:
                    out[PurePosixPath(member.name).name] = f.read()
    return out


def container_facts(attrs: Mapping[str, JSONValue]) -> JSONObject:
    """Pure: what the engine says about a client container (for the run dir and tests)."""
    hc = attrs.get("HostConfig") or {}
    cfg = attrs.get("Config") or {}
    return {
        "name": (attrs.get("Name") or "").lstrip("/"),
        "image": cfg.get("Image"),
        "network_mode": hc.get("NetworkMode"),
        "device_requests": hc.get("DeviceRequests"),
        "devices": hc.get("Devices"),
        "runtime": hc.get("Runtime"),
        "mounts": [
            {"source": m.get("Source"), "target": m.get("Target"), "read_only": m.get("ReadOnly")}
            for m in hc.get("Mounts") or []
        ],
        "labels": cfg.get("Labels") or {},
        "cmd": cfg.get("Cmd"),
    }


def folder_job(
    plan: ContainerPlan, secrets: Mapping[str, str], role: str, folder: str,
    files: Mapping[str, bytes], timeout_s: float, *, dir_mode: int = 0o755,
    watch: Watch | None = None,
) -> ContainerJob:  # fmt: skip
    """The bench and eval clients' job shape: `files` put under `folder`, `folder`/results
    fetched, the plan's env plus the secrets."""
    return ContainerJob(
        plan=plan,
        env={**plan.env, **secrets},
        role=role,
        timeout_s=timeout_s,
        results_dir=f"{folder}/results",
        files=files,
        files_dir=folder,
        dir_mode=dir_mode,
        watch=watch,
    )


@dataclass(frozen=True, kw_only=True)
class OneShot:
    """A throwaway container (`DockerGateway.run_once`): argv[0] is the entrypoint; `files`
    (name in the container's root -> content; those in `executable` runnable) are copied in
    before it starts. With `pid_of` (a container's id) it joins that container's PID namespace
    (`docker run --pid container:ID`, as a Kubernetes debug container targets a process), with
    the capabilities in `cap_add` (SYS_PTRACE to read its processes' memory)."""

    image: str
    argv: tuple[str, ...]
    files: Mapping[str, bytes] = field(default_factory=dict)
    executable: frozenset[str] = frozenset()
    pid_of: str | None = None
    cap_add: tuple[str, ...] = ()
    user: str | None = None  # the image's own user when None
    env: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    gpus: bool = False
    timeout_s: float = 300.0


@dataclass(frozen=True)
class OneShotResult:
    exit_code: int
    stdout: str
    stderr: str
