"""A container as the engine reports it: `docker inspect` JSON -> `ContainerInfo`, our own type
(no docker-py object leaves the gateway). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from tpwarden.cluster.durable import JSONValue
from tpwarden.cluster.labels import LABEL_CONFIG_HASH, LABEL_ROLE
from tpwarden.cluster.signals import Signal, from_exit_status


@dataclass(frozen=True, kw_only=True)
class ContainerInfo:
    """One container as the engine reports it (our own type, no docker-py objects leak)."""

    node: str
    id: str
    name: str
    image: str
    state: str  # created | running | paused | restarting | exited | dead
    labels: Mapping[str, str] = field(default_factory=dict)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    restart_count: int = 0
    oom_killed: bool = False
    error: str = ""
    pid: int | None = None  # the host PID of its init process while it runs (State.Pid)
    # What runs, as the engine started it (the ledger's fingerprint): Path + Args, Config.Env
    # (secret values included: never shown, never in repr), and the image's ID (sha256:...).
    argv: tuple[str, ...] = field(default=(), repr=False)
    env: tuple[str, ...] = field(default=(), repr=False)
    image_id: str = ""

    @property
    def running(self) -> bool:
        return self.state == "running"

    @property
    def paused(self) -> bool:
        return self.state == "paused"

    @property
    def exit_signal(self) -> Signal | None:
        """The signal that ended it, from its exit status (132 = 128 + SIGILL); None when it
        runs or exited on its own."""
        return from_exit_status(self.exit_code)

    @property
    def config_hash(self) -> str | None:
        return self.labels.get(LABEL_CONFIG_HASH)

    @property
    def role(self) -> str | None:
        return self.labels.get(LABEL_ROLE)

    def uptime_s(self, now: datetime) -> float | None:
        if self.state not in ("running", "paused") or self.started_at is None:
            return None
        return max(0.0, (now - self.started_at).total_seconds())


def _parse_ts(value: str | None) -> datetime | None:
    """Docker's RFC 3339 nano timestamps; the zero time means 'never'."""
    if not value or value.startswith("0001-01-01"):
        return None
    head, _, frac = value.rstrip("Z").partition(".")
    frac = (frac.split("+")[0].split("-")[0] + "000000")[:6]
    try:
        return datetime.fromisoformat(f"{head}.{frac}").replace(tzinfo=UTC)
    except ValueError:
        return None


def container_info_from_inspect(node: str, attrs: Mapping[str, JSONValue]) -> ContainerInfo:
    """Pure: `docker inspect` JSON -> ContainerInfo."""
    st = attrs.get("State") or {}
    cfg = attrs.get("Config") or {}
    state = st.get("Status") or (
        "paused" if st.get("Paused") else "running" if st.get("Running") else "exited"
    )
    return ContainerInfo(
        node=node,
        id=attrs.get("Id", ""),
        name=(attrs.get("Name") or "").lstrip("/"),
        image=cfg.get("Image", ""),
        state=state,
        labels=dict(cfg.get("Labels") or {}),
        started_at=_parse_ts(st.get("StartedAt")),
        finished_at=_parse_ts(st.get("FinishedAt")),
        exit_code=st.get("ExitCode") if state in ("exited", "dead") else None,
        restart_count=int(attrs.get("RestartCount") or 0),
        oom_killed=bool(st.get("OOMKilled")),
        error=st.get("Error") or "",
        pid=int(st["Pid"]) if st.get("Pid") else None,  # 0 when it does not run
        argv=tuple(str(a) for a in [attrs.get("Path") or "", *(attrs.get("Args") or [])] if a),
        env=tuple(str(e) for e in cfg.get("Env") or ()),
        image_id=str(attrs.get("Image") or ""),
    )
