"""The applied plan: what runs now, recorded where every actor reads it (design principle 10).

`up`, `restart` and `rollout` record the plan they applied: its config hash, the inventory
revision (content hash) and the inventory text itself, as `applied.json`:

* on the control machine: `<state dir>/applied/<cluster>.json`, and `<watchdog.state_dir>/
  applied.json` when that directory exists here (a watchdog running on this machine);
* on the head node: `<watchdog.state_dir>/applied.json` when that directory exists there (the
  provisioned watchdog).

The inventory is what the operator wants next; the applied plan is what runs. A watchdog restart
replays the applied plan (never the inventory file, which a rollout may be editing), and the
watchdog follows its probe target, key reference and policy from it, re-reading it when its
hash changes. A rollout, a rollback or an operator `up` with a new inventory records a new plan,
so they change what the watchdog restarts.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tpwarden.cluster.durable import (
    JSONObject,
    atomic_write_json,
    default_state_dir,
    json_bytes,
    read_json,
)
from tpwarden.cluster.errors import ConfigError, TpwardenError
from tpwarden.cluster.inventory.load import build_spec
from tpwarden.cluster.inventory.plain import export_resolved, resolved_from_text
from tpwarden.cluster.spec import ClusterSpec
from tpwarden.cluster.ssh.gateway import NodeSession

log = logging.getLogger(__name__)

APPLIED_NAME = "applied.json"


@dataclass(frozen=True, kw_only=True)
class AppliedPlan:
    cluster: str
    config_hash: str
    inventory_revision: str  # content hash of inventory_text
    inventory_text: str
    inventory_path: str  # where the text came from (file:line in errors)
    action: str  # up | restart | rollout | rollback | watchdog
    by: str
    applied_at: float

    def spec(self) -> ClusterSpec:
        # The text is the inventory as Ansible resolved it (export_resolved): read back without
        # Ansible, so the watchdog on a node (no Ansible there) rebuilds exactly what was applied.
        return build_spec(
            resolved_from_text(self.inventory_text, self.inventory_path), self.inventory_path
        )

    def to_json(self) -> JSONObject:
        return asdict(self)

    @classmethod
    def from_json(cls, data: JSONObject) -> AppliedPlan:
        try:
            return cls(**{k: data[k] for k in cls.__dataclass_fields__})
        except (KeyError, TypeError) as exc:
            raise ConfigError(f"applied plan unreadable: {exc}", key="applied.json") from None


def revision(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def plan_for(
    spec: ClusterSpec, action: str, by: str, now: float | None = None
) -> AppliedPlan | None:
    """The applied-plan record for `spec`: the inventory as Ansible resolved it (group_vars,
    host_vars, vault and templates applied), one file, so that it means the same everywhere."""
    source = getattr(spec, "source_file", None) or "<inventory>"
    text = export_resolved(spec)
    return AppliedPlan(
        cluster=spec.name,
        config_hash=spec.config_hash(),
        inventory_revision=revision(text),
        inventory_text=text,
        inventory_path=str(source),
        action=action,
        by=by,
        applied_at=time.time() if now is None else now,
    )


def local_paths(spec: ClusterSpec, state_dir: str | Path | None = None) -> list[str]:
    """Where this machine keeps the applied plan of `spec`'s cluster."""
    base = Path(state_dir) if state_dir else default_state_dir()
    paths = [str(base / "applied" / f"{spec.name}.json")]
    wd_dir = spec.watchdog.state_dir
    if os.path.isdir(wd_dir):
        paths.append(os.path.join(wd_dir, APPLIED_NAME))
    return paths


def write_local(plan: AppliedPlan, paths: list[str]) -> None:
    for path in paths:
        atomic_write_json(path, plan.to_json())


def write_head(plan: AppliedPlan, session: NodeSession, wd_state_dir: str) -> bool:
    """Copy the record to the head node's watchdog state dir (if there is one). Never raises
    for the node: a record that could not be copied is logged (the head's watchdog then keeps
    the previous plan; `tpwarden watchdog status` shows which hash it follows)."""
    remote = os.path.join(wd_state_dir, APPLIED_NAME)
    try:
        if session.run(["test", "-d", wd_state_dir], timeout=10).rc != 0:
            return False
        session.put_atomic(json_bytes(plan.to_json()), remote, timeout=10)
        return True
    except TpwardenError as exc:
        log.warning("could not record the applied plan on the head node: %s", exc)
        return False


def read_applied(path: str | Path) -> AppliedPlan | None:
    data = read_json(str(path))
    return None if data is None else AppliedPlan.from_json(data)
