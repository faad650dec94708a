"""`tpwarden.container`: options of the serving containers beyond the defaults (issue 28):
devices, added capabilities, ulimits, extra mounts, privileged, where secret files live. Docker
run's flags of the same names; validated once with the other settings (cluster/settings.py)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)


class _Model(BaseModel):
    # as cluster/settings.py's models: unknown keys and wrong types are errors at load time
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


def _absolute(value: str) -> str:
    if value.startswith("-") or not value.startswith("/"):
        raise ValueError(f"{value!r} is not an absolute path (start it with /)")
    return value


AbsPath = Annotated[str, AfterValidator(_absolute)]


# Linux capabilities (capabilities(7)) that `cap_add` may name, without the CAP_ prefix.
CAPABILITIES = frozenset(
    "AUDIT_CONTROL AUDIT_READ AUDIT_WRITE BLOCK_SUSPEND BPF CHECKPOINT_RESTORE CHOWN "
    "DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID IPC_LOCK IPC_OWNER KILL LEASE "
    "LINUX_IMMUTABLE MAC_ADMIN MAC_OVERRIDE MKNOD NET_ADMIN NET_BIND_SERVICE NET_BROADCAST "
    "NET_RAW PERFMON SETFCAP SETGID SETPCAP SETUID SYSLOG SYS_ADMIN SYS_BOOT SYS_CHROOT "
    "SYS_MODULE SYS_NICE SYS_PACCT SYS_PTRACE SYS_RAWIO SYS_RESOURCE SYS_TIME "
    "SYS_TTY_CONFIG WAKE_ALARM".split()
)
UNLIMITED = -1  # docker's value for RLIM_INFINITY (`--ulimit memlock=-1:-1`)


def _limit_value(text: Any) -> int:
    if isinstance(text, bool):
        raise ValueError("expected a number, -1 or unlimited, got a boolean")
    if isinstance(text, int):
        number = text
    elif isinstance(text, str) and text.strip().lower() in ("unlimited", "infinity", "-1"):
        return UNLIMITED
    elif isinstance(text, str) and text.strip().isdigit():
        number = int(text.strip())
    else:
        raise ValueError(f"{text!r} is not a limit (a whole number, -1 or unlimited)")
    if number < UNLIMITED:
        raise ValueError(f"{number} is not a limit (a whole number >= 0, -1 or unlimited)")
    return number


def parse_ulimit(value: Any) -> Any:
    """`-1`, `unlimited`, `1048576` (soft = hard) or `"soft:hard"` (docker's --ulimit form)
    -> {"soft": N, "hard": N}; a mapping {soft, hard} is checked by the model itself."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and ":" in value:
        soft, hard = value.split(":", 1)
        return {"soft": _limit_value(soft), "hard": _limit_value(hard)}
    limit = _limit_value(value)
    return {"soft": limit, "hard": limit}


class UlimitSpec(_Model):
    soft: int = Field(ge=UNLIMITED, description="Soft limit (-1: unlimited).")
    hard: int = Field(ge=UNLIMITED, description="Hard limit (-1: unlimited).")

    @model_validator(mode="after")
    def _order(self) -> UlimitSpec:
        if self.hard != UNLIMITED and (self.soft == UNLIMITED or self.soft > self.hard):
            raise ValueError(f"soft limit {self.show(self.soft)} exceeds hard limit {self.hard}")
        return self

    @staticmethod
    def show(limit: int) -> str:
        return "unlimited" if limit == UNLIMITED else str(limit)

    def __str__(self) -> str:
        return f"{self.show(self.soft)}:{self.show(self.hard)}"


class DeviceSpec(_Model):
    host: str = Field(description="Device path on the node.")
    container: str = Field(description="Path in the container (default: the node's).")
    permissions: str = Field("rwm", description="cgroup permissions: letters of rwm.")

    def __str__(self) -> str:
        return f"{self.host}:{self.container}:{self.permissions}"


def parse_device(value: Any) -> Any:
    """docker's --device form: `/dev/x`, `/dev/x:/dev/y` or `/dev/x:/dev/y:rw`; the mapping
    form (host, container, permissions) is what a dump of the settings holds."""
    if isinstance(value, dict):
        host = str(value.get("host", ""))
        return parse_device(
            f"{host}:{value.get('container', host)}:{value.get('permissions', 'rwm')}"
        )
    if not isinstance(value, str):
        raise ValueError("expected a device such as /dev/infiniband or /dev/x:/dev/y:rw")
    parts = value.split(":")
    if len(parts) > 3 or not all(parts):
        raise ValueError(f"{value!r} is not HOST[:CONTAINER[:PERMISSIONS]]")
    host = parts[0]
    container = parts[1] if len(parts) > 1 else host
    permissions = parts[2] if len(parts) > 2 else "rwm"
    for path in (host, container):
        if not path.startswith("/"):
            raise ValueError(f"{path!r} is not an absolute device path (e.g. /dev/infiniband)")
    if not re.fullmatch(r"[rwm]{1,3}", permissions) or len(set(permissions)) != len(permissions):
        raise ValueError(f"{permissions!r} is not a device permission (letters of rwm)")
    return {"host": host, "container": container, "permissions": permissions}


def capability(value: str) -> str:
    name = value.upper().removeprefix("CAP_")
    if name == "ALL":
        raise ValueError("ALL is every capability: set privileged: true if that is meant")
    if name not in CAPABILITIES:
        raise ValueError(f"{value!r} is not a Linux capability (capabilities(7), e.g. IPC_LOCK)")
    return name


class ExtraMount(_Model):
    source: AbsPath = Field(description="Path on the node.")
    target: AbsPath = Field(description="Path in the container.")
    read_only: bool = Field(True, description="false for a read-write mount.")


# The container paths tpwarden mounts itself (launch.py): an extra mount must not shadow them.
MANAGED_TARGETS = ("/run/tpwarden", "/run/secrets")


class ContainerSpec(_Model):
    """Options of every serving container beyond the defaults (docker run's flags of the same
    names). Multi-node RDMA (NCCL over RoCE/InfiniBand) needs devices [/dev/infiniband],
    cap_add [IPC_LOCK] and ulimits {memlock: unlimited}."""

    devices: list[Annotated[DeviceSpec, BeforeValidator(parse_device)]] = Field(
        default_factory=list, description="Host devices: /dev/x[:/dev/in-container[:rwm]]."
    )
    cap_add: list[Annotated[str, AfterValidator(capability)]] = Field(
        default_factory=list, description="Added Linux capabilities, e.g. [IPC_LOCK]."
    )
    ulimits: dict[
        Literal[
            "core", "cpu", "data", "fsize", "locks", "memlock", "msgqueue", "nice",
            "nofile", "nproc", "rss", "rtprio", "rttime", "sigpending", "stack",
        ],
        Annotated[UlimitSpec, BeforeValidator(parse_ulimit)],
    ] = Field(
        default_factory=dict,
        description='Resource limits, NAME: N, -1, unlimited or "SOFT:HARD" (memlock: -1).',
    )  # fmt: skip
    mounts: list[ExtraMount] = Field(
        default_factory=list, description="Extra bind mounts (read-only unless read_only: false)."
    )
    privileged: bool = Field(
        False,
        description="Every capability and device of the node (explicit opt-in; `plan` warns).",
    )
    stop_timeout_s: int = Field(
        2,
        ge=0,
        le=3600,
        description="Seconds vLLM gets between SIGTERM and SIGKILL when its container is "
        "stopped (the container's StopTimeout: `down`, `restart`, a rollout and a `docker stop` "
        "by hand). Its own shutdown took 11-14 s in the lab and frees nothing that killing the "
        "container does not (the kernel releases memory, GPU and RDMA resources with the "
        "processes).",
    )
    secrets_dir: AbsPath = Field(
        "/run/tpwarden",
        description="Node directory where apply writes the API key file (mode 0600) that the "
        "head's container mounts read-only.",
    )

    @field_validator("ulimits")
    @classmethod
    def _nofile_finite(cls, value: dict[str, UlimitSpec]) -> dict[str, UlimitSpec]:
        limit = value.get("nofile")
        if limit is not None and UNLIMITED in (limit.soft, limit.hard):
            raise ValueError("nofile cannot be unlimited (the kernel caps it at fs.nr_open)")
        return value

    @field_validator("mounts")
    @classmethod
    def _not_managed(cls, value: list[ExtraMount]) -> list[ExtraMount]:
        targets = [m.target.rstrip("/") or "/" for m in value]
        for target in targets:
            for managed in MANAGED_TARGETS:
                if target == managed or target.startswith(managed + "/"):
                    raise ValueError(
                        f"target {target} would cover {managed}, where tpwarden mounts secrets"
                    )
            if targets.count(target) > 1:
                raise ValueError(f"target {target} is mounted twice")
        return value
