"""Provisioning: run the playbooks (``playbooks/``, installed as ``tpwarden.playbooks``) through
ansible-runner's Python API.

The one gateway to Ansible. A `ProvisionRequest` is checked and turned into runner arguments
(`prepare`, pure apart from reading the paths it is given and the installed metadata); `run`
executes them with an event callback per task result and returns a typed `ProvisionResult` built
from the runner's stats. Every run leaves ansible-runner's artifact directory (status, rc,
stdout, job events) under ``~/.local/state/tpwarden/provision/<ident>``; its id is logged.

The playbooks ship inside the package, so an installed tpwarden provisions without a checkout:
the nodes' tpwarden wheel is then repacked from the installed distribution (`repack`)
instead of built from the source tree.

The library never prints: progress goes to the ``on_event`` callback, the CLI renders it.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Literal

from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.cluster.errors import ConfigError, TpwardenError
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.inventory.plain import export_resolved
from tpwarden.cluster.provision import repack as provision_repack

log = logging.getLogger(__name__)

# ansible-runner needs the playbooks as a directory on disk: a regular install and an editable one
# (which maps the package to the checkout's folder) both have one; a zipped import has not, and
# then prepare() reports the playbook missing
_PLAYBOOKS = resources.files("tpwarden.playbooks")
PLAYBOOK_DIR = _PLAYBOOKS if isinstance(_PLAYBOOKS, Path) else Path(str(_PLAYBOOKS))
# The source tree the nodes' wheel is built from; None when installed (repacked from the install)
SOURCE_DIR = provision_repack.source_checkout()
TAGS = ("prereqs", "image", "model", "tpwarden", "secrets", "units")
STATE_ROOT = Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local/state")) / "tpwarden"

TaskStatus = Literal["ok", "changed", "failed", "unreachable", "skipped"]
_EVENT_STATUS: dict[str, TaskStatus] = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_unreachable": "unreachable",
    "runner_on_skipped": "skipped",
}


# The model role's last task: its messages say how each node's model was checked and at what
# cost (auto: full sha256 the first time, size+mtime after; playbooks/roles/model).
MODEL_CHECK_TASK = "Model directories match the manifest"
MODEL_VERIFY_MODES = ("auto", "sha256", "size")


class ProvisionError(TpwardenError):
    """ansible-runner could not run the playbook at all (not: a task failed)."""


@dataclass(frozen=True)
class ProvisionRequest:
    """What to run. ``remove`` selects remove.yml; ``check`` is Ansible's --check."""

    inventory: Path
    check: bool = False
    tags: tuple[str, ...] = ()
    remove: bool = False
    source_dir: Path | None = SOURCE_DIR  # None: the nodes get the installed distribution
    playbook_dir: Path = PLAYBOOK_DIR
    extra_vars_files: tuple[Path, ...] = ()
    vault_password_file: Path | None = None
    state_root: Path = STATE_ROOT / "provision"
    wheelhouse_cache: Path = Path.home() / ".cache/tpwarden/wheelhouse"
    ident: str | None = None
    model_verify: str | None = None  # --verify-model: auto | sha256 | size (None: inventory's)

    @property
    def playbook(self) -> str:
        return "remove.yml" if self.remove else "site.yml"


@dataclass(frozen=True)
class PreparedRun:
    ident: str
    private_data_dir: Path
    kwargs: JSONObject = field(repr=False)

    @property
    def artifact_dir(self) -> Path:
        return self.private_data_dir / "artifacts" / self.ident


@dataclass(frozen=True)
class TaskEvent:
    """One task result on one host, as the CLI shows it."""

    host: str
    task: str
    status: TaskStatus
    message: str = ""


@dataclass(frozen=True)
class HostStats:
    host: str
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0

    @property
    def good(self) -> bool:
        return self.failed == 0 and self.unreachable == 0


@dataclass(frozen=True)
class ProvisionResult:
    ident: str
    artifact_dir: Path
    playbook: str
    check: bool
    status: str  # ansible-runner's: successful, failed, timeout, canceled
    rc: int
    hosts: tuple[HostStats, ...]
    failures: tuple[TaskEvent, ...]
    duration_s: float
    model_checks: tuple[TaskEvent, ...] = ()  # how each node's model was checked, and its cost

    @property
    def ok(self) -> bool:
        return self.rc == 0 and self.status == "successful" and all(h.good for h in self.hosts)

    @property
    def changed(self) -> int:
        return sum(h.changed for h in self.hosts)

    def to_json(self) -> JSONObject:
        return {
            "ident": self.ident,
            "artifact_dir": str(self.artifact_dir),
            "playbook": self.playbook,
            "check": self.check,
            "status": self.status,
            "rc": self.rc,
            "ok": self.ok,
            "changed": self.changed,
            "duration_s": round(self.duration_s, 1),
            "hosts": [h.__dict__ for h in self.hosts],
            "failures": [f.__dict__ for f in self.failures],
            "model_checks": [m.__dict__ for m in self.model_checks],
        }


# --- pure parts -------------------------------------------------------------------------------


def parse_tags(text: str | None) -> tuple[str, ...]:
    """``"model,units"`` -> ("model", "units"); unknown tags are a ConfigError."""
    if not text:
        return ()
    tags = tuple(t.strip() for t in text.split(",") if t.strip())
    unknown = [t for t in tags if t not in TAGS]
    if unknown:
        raise ConfigError(
            f"unknown tag(s) {', '.join(unknown)}", key="--tags", hint=f"valid: {', '.join(TAGS)}"
        )
    return tags


def prepare(request: ProvisionRequest, python: str = sys.executable) -> PreparedRun:
    """Check the request and build ansible_runner.run()'s arguments (nothing runs)."""
    inventory = request.inventory.resolve()
    if not inventory.exists():
        raise ConfigError("no such inventory file or directory", file=str(request.inventory))
    playbook = request.playbook_dir / request.playbook
    if not playbook.is_file():
        raise ConfigError(
            f"playbook {playbook} is missing",
            hint="reinstall tpwarden: the playbooks ship inside it (tpwarden/playbooks)",
        )
    if request.source_dir is None:
        try:
            provision_repack.installed_distribution()
        except provision_repack.RepackError as exc:
            raise ConfigError(
                str(exc), key="--source", hint="the node wheel is repacked from the installation"
            ) from None
    elif not (request.source_dir / "pyproject.toml").is_file():
        raise ConfigError(
            f"{request.source_dir} is not a tpwarden source tree (no pyproject.toml)",
            key="--source",
            hint="the node wheelhouse is built from the source",
        )
    for f in (*request.extra_vars_files, *filter(None, [request.vault_password_file])):
        if not f.is_file():
            raise ConfigError("no such file", file=str(f))
    parse_tags(",".join(request.tags))
    ident = request.ident or time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]
    private = request.state_root / ident
    cmdline = ["--check", "--diff"] if request.check else []
    for f in request.extra_vars_files:
        cmdline += ["--extra-vars", f"@{f.resolve()}"]
    if request.vault_password_file:
        cmdline += ["--vault-password-file", str(request.vault_password_file.resolve())]
    bindir = str(Path(python).parent)
    kwargs: JSONObject = {
        "private_data_dir": str(private),
        "project_dir": str(request.playbook_dir),
        "playbook": request.playbook,
        "inventory": str(inventory),
        "ident": ident,
        "extravars": {
            # "": no source tree; the wheelhouse role then repacks the installed tpwarden
            "tpwarden_source_dir": str(request.source_dir.resolve()) if request.source_dir else "",
            "tpwarden_control_python": python,
            "tpwarden_wheelhouse_cache": str(request.wheelhouse_cache),
        },
        "envvars": {
            "ANSIBLE_CONFIG": str(request.playbook_dir / "ansible.cfg"),
            # ansible-runner sets ANSIBLE_HOST_KEY_CHECKING=False unless the caller sets it
            # (ansible_runner/config/_base.py), which beats ansible.cfg and makes Ansible's ssh
            # put `-o StrictHostKeyChecking=no` first in its argv (ssh keeps the first value):
            # vault secrets and the watchdog's known_hosts would travel unverified.
            "ANSIBLE_HOST_KEY_CHECKING": "True",
            "ANSIBLE_NOCOLOR": "1",
            "PATH": bindir + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"),
        },
        "quiet": True,
    }
    if request.model_verify is not None:
        if request.model_verify not in MODEL_VERIFY_MODES:
            raise ConfigError(
                f"--verify-model {request.model_verify!r}",
                key="--verify-model",
                hint=", ".join(MODEL_VERIFY_MODES),
            )
        kwargs["extravars"]["tpwarden_model_verify"] = request.model_verify
    if request.tags:
        kwargs["tags"] = ",".join(request.tags)
    if cmdline:
        kwargs["cmdline"] = " ".join(_shell_quote(a) for a in cmdline)
    return PreparedRun(ident, private, kwargs)


def _shell_quote(arg: str) -> str:
    return shlex.quote(arg)


def task_event(raw: Mapping[str, JSONValue]) -> TaskEvent | None:
    """An ansible-runner job event -> a TaskEvent (None for events that are not task results).
    Loop items are folded into their task's final result."""
    status = _EVENT_STATUS.get(str(raw.get("event", "")))
    data = raw.get("event_data") or {}
    if status is None or not data.get("host"):
        return None
    res = data.get("res") or {}
    if status == "ok" and res.get("changed"):
        status = "changed"
    message = ""
    if status in ("failed", "unreachable"):
        if data.get("ignore_errors"):
            return TaskEvent(data["host"], str(data.get("task", "")), "ok")
        message = str(res.get("msg") or res.get("stderr") or res.get("reason") or "")[:2000]
    elif status == "ok" and str(data.get("task", "")) == MODEL_CHECK_TASK:
        # a loop's items fold into the task's result: each item's own message
        items = [str(r.get("msg") or "") for r in res.get("results") or [] if r.get("msg")]
        message = "; ".join(items or [str(res.get("msg") or "")])[:2000]
    return TaskEvent(data["host"], str(data.get("task", "")), status, message)


def host_stats(stats: Mapping[str, JSONValue] | None) -> tuple[HostStats, ...]:
    """ansible-runner's ``runner.stats`` ({counter: {host: n}}) -> one HostStats per host."""
    stats = stats or {}
    hosts = sorted({h for counter in stats.values() if isinstance(counter, dict) for h in counter})
    names = {
        "ok": "ok",
        "changed": "changed",
        "failures": "failed",
        "dark": "unreachable",
        "skipped": "skipped",
        "rescued": "rescued",
        "ignored": "ignored",
    }
    return tuple(
        HostStats(
            h, **{ours: int((stats.get(theirs) or {}).get(h, 0)) for theirs, ours in names.items()}
        )
        for h in hosts
    )


# --- the run ----------------------------------------------------------------------------------


def run(
    request: ProvisionRequest, on_event: Callable[[TaskEvent], None] | None = None
) -> ProvisionResult:
    """Run the playbook; task failures are in the result (``ok`` false), not raised."""
    try:
        import ansible_runner  # deferred: optional (the `control` extra); nodes have no Ansible
    except ImportError:  # only the control machine needs Ansible
        raise TpwardenError("provisioning needs Ansible: pip install 'tpwarden[control]'") from None

    prepared = prepare(request)
    prepared.private_data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    # The watchdog host gets the inventory as Ansible resolved it (group_vars, vault, templates
    # applied): nodes read it without Ansible (inventory.plain)

    resolved = prepared.private_data_dir / "resolved-inventory.yml"
    resolved.write_text(export_resolved(load_inventory(request.inventory)), encoding="utf-8")
    resolved.chmod(0o600)
    prepared.kwargs["extravars"]["tpwarden_inventory_source"] = str(resolved)
    failures: list[TaskEvent] = []
    model_checks: list[TaskEvent] = []

    def handler(raw: JSONObject) -> bool:
        event = task_event(raw)
        if event is not None:
            if event.status in ("failed", "unreachable"):
                failures.append(event)
            elif event.task == MODEL_CHECK_TASK and event.message:
                model_checks.append(event)
            if on_event is not None:
                on_event(event)
        return True  # keep every event in the artifact directory

    log.info(
        "provision %s (%s%s): artifacts in %s",
        prepared.ident,
        request.playbook,
        " --check" if request.check else "",
        prepared.artifact_dir,
    )
    start = time.monotonic()
    try:
        runner = ansible_runner.run(event_handler=handler, **prepared.kwargs)
    except Exception as exc:  # noqa: BLE001 - ansible-runner raises bare exceptions
        raise ProvisionError(f"ansible-runner could not start: {exc}") from exc
    result = ProvisionResult(
        ident=prepared.ident,
        artifact_dir=Path(runner.config.artifact_dir),
        playbook=request.playbook,
        check=request.check,
        status=str(runner.status),
        rc=int(runner.rc if runner.rc is not None else -1),
        hosts=host_stats(runner.stats),
        failures=tuple(failures),
        duration_s=time.monotonic() - start,
        model_checks=tuple(sorted(model_checks, key=lambda e: e.host)),
    )
    log.info(
        "provision %s: %s rc=%d changed=%d in %.1fs",
        result.ident,
        result.status,
        result.rc,
        result.changed,
        result.duration_s,
    )
    return result
