"""The typed cluster spec: what the inventory says, validated once.

`tpwarden.cluster.inventory.load.load_inventory()` turns an Ansible inventory into a frozen `ClusterSpec`:
the `tpwarden` settings (`tpwarden.cluster.settings`, pydantic, strict) and the per-host facts
(address, SSH user, `vllm_host_ip`) as `NodeSpec`s.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel
from tpwarden.cluster.container_settings import ContainerSpec
from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.cluster.flag_tables import FlagChoice
from tpwarden.cluster.report_settings import ReportSpec
from tpwarden.cluster.settings import (
    BenchSpec,
    DrafterSpec,
    EvalSpec,
    KvCacheSpec,
    ModelSpec,
    ParallelSpec,
    SecretsSpec,
    SshSpec,
    ThermalSpec,
    TpwardenSettings,
    WatchdogSpec,
)


@dataclass(frozen=True, kw_only=True)
class NodeSpec:
    name: str
    role: Literal["head", "worker"]
    rank: int
    ssh_host: str
    ssh_port: int
    ssh_user: str
    ssh_key_file: str | None
    vllm_host_ip: str
    become: bool = False
    # ansible_ssh_common_args + ansible_ssh_extra_args: where ProxyJump/ProxyCommand come from
    ssh_args: str | None = None
    # Host vars tpwarden_thermal_metrics_host/_port: this node's agent /metrics address when it
    # differs from tpwarden.thermal (e.g. nodes sharing one network namespace, as in the lab).
    thermal_metrics_host: str | None = None
    thermal_metrics_port: int | None = None


@dataclass(frozen=True, kw_only=True)
class ServingSpec:
    """The settings that decide what runs in the containers (hashed into config_hash)."""

    image: str
    vllm_version: str
    model: ModelSpec
    drafter: DrafterSpec | None
    parallel: ParallelSpec
    kv_cache: KvCacheSpec
    max_model_len: int | None
    enforce_eager: bool
    chat_template_kwargs: JSONObject
    gpu_clock_cap_mhz: int | None
    host: str
    port: int
    shm_size: str
    ipc_mode: str
    gpus: str
    env: dict[str, str]
    extra_args: tuple[str, ...]
    container: ContainerSpec = field(default_factory=ContainerSpec)


@dataclass(frozen=True, kw_only=True)
class ClusterSpec:
    name: str
    nodes: tuple[NodeSpec, ...]
    serving: ServingSpec
    secrets: SecretsSpec
    ssh: SshSpec
    watchdog: WatchdogSpec
    thermal: ThermalSpec
    source_file: str
    # the `vllm serve` flag table for this image and version, chosen once when the inventory is
    # loaded (flag_tables.resolve): (table, None) or (None, why none applies)
    flag_table: FlagChoice = field(repr=False, compare=False)
    # the jobs' own settings, typed (bench, eval and the morning report read them here)
    bench: BenchSpec
    eval: EvalSpec
    report: ReportSpec
    settings: TpwardenSettings = field(repr=False, compare=False)
    # tpwarden_watchdog_host: where the watchdog runs (a node name, or a name outside the
    # inventory such as "control": the machine running tpwarden); None: the head
    watchdog_host: str | None = None

    @property
    def head(self) -> NodeSpec:
        return next(n for n in self.nodes if n.role == "head")

    @property
    def workers(self) -> tuple[NodeSpec, ...]:
        return tuple(n for n in self.nodes if n.role == "worker")

    def node(self, name: str) -> NodeSpec:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def thermal_metrics_address(self, node: NodeSpec) -> tuple[str, int]:
        return thermal_metrics_address(self.thermal, node)

    @property
    def api_base(self) -> str:
        """URL a client on the control machine uses to reach the head's API."""
        host = self.serving.host
        if host in ("0.0.0.0", "::"):
            host = self.head.ssh_host
        return f"http://{host}:{self.serving.port}"

    def config_hash(self) -> str:
        """Hash of everything that changes what runs on the nodes (serving settings + topology).
        Secrets' locations are included, their values never."""
        serving = _jsonable(self.serving)
        # Settings added later are hashed only when set: an upgrade alone shows no drift.
        for key, default in _LATER_SETTINGS:
            _drop_default(serving, key, default)
        doc = {
            "serving": serving,
            "secrets": self.secrets.model_dump(),
            "nodes": [(n.name, n.role, n.rank, n.vllm_host_ip) for n in self.nodes],
        }
        blob = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()[:12]


_LATER_SETTINGS: tuple[tuple[str, JSONValue], ...] = (
    ("ipc_mode", "host"),
    ("drafter.prompt_lookup_min", None),
    ("drafter.prompt_lookup_max", None),
    ("drafter.extra", {}),
    ("container.devices", []),
    ("container.cap_add", []),
    ("container.ulimits", {}),
    ("container.mounts", []),
    ("container.privileged", False),
    ("container.stop_timeout_s", 2),
    ("container.secrets_dir", "/run/tpwarden"),
    ("container", {}),  # no container option set: the hash of before they existed
)


def _drop_default(doc: JSONObject, dotted: str, default: JSONValue) -> None:
    *parents, key = dotted.split(".")
    for part in parents:
        doc = doc.get(part) if isinstance(doc, dict) else None  # type: ignore[assignment]
    if isinstance(doc, dict) and key in doc and doc[key] == default:
        del doc[key]


def _jsonable(value: object) -> JSONValue:
    if isinstance(value, BaseModel):
        return value.model_dump()
    if hasattr(value, "__dataclass_fields__"):
        return {k: _jsonable(getattr(value, k)) for k in value.__dataclass_fields__}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def serving_from_settings(s: TpwardenSettings) -> ServingSpec:
    """The serving part of the validated settings: every ServingSpec field is the setting of the
    same name, made immutable where the settings hold a list or a dict."""
    values: JSONObject = {f.name: getattr(s, f.name) for f in dataclasses.fields(ServingSpec)}
    values["chat_template_kwargs"] = dict(s.chat_template_kwargs)
    values["env"] = {k: str(v) for k, v in s.env.items()}
    values["extra_args"] = tuple(s.extra_args)
    return ServingSpec(**values)


def thermal_metrics_address(thermal: ThermalSpec, node: NodeSpec) -> tuple[str, int]:
    """Where ``node``'s thermal agent serves /metrics: its host vars
    (tpwarden_thermal_metrics_host/_port), else tpwarden.thermal.metrics_host/_port."""
    host = getattr(node, "thermal_metrics_host", None) or thermal.metrics_host
    port = getattr(node, "thermal_metrics_port", None) or thermal.metrics_port
    return host, port
