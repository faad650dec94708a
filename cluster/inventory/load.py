"""Ansible inventory -> `ClusterSpec`, validated once.

The inventory is an ordinary Ansible inventory, resolved by Ansible's own engine
(`tpwarden.cluster.inventory.ansible`): YAML or INI, a file or a directory, group_vars/ and
host_vars/ beside it, vault, Jinja templating. A plain one-file YAML inventory is read to the
same answer without loading Ansible (`tpwarden.cluster.inventory.static_yaml`). Group `head`
holds exactly one host, group `workers` the others; the serving settings are the variable
`tpwarden` of group `all` (under `all.vars` or in `group_vars/all.yml`). Every error names the
file, the line the value came from, the key and a fix, and is raised before anything touches a
node.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import tempfile
from pathlib import Path

from pydantic import ValidationError
from tpwarden.cluster import flag_tables
from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.inventory.ansible import Resolved, resolve
from tpwarden.cluster.inventory.plain import read_resolved
from tpwarden.cluster.inventory.static_yaml import resolve_static
from tpwarden.cluster.inventory.values import (
    check_address,
    check_extra_args,
    check_host_key_checking,
    check_host_name,
    check_strings,
    located,
    translate,
)
from tpwarden.cluster.inventory.yaml_guard import check_files, check_yaml
from tpwarden.cluster.settings import TpwardenSettings
from tpwarden.cluster.spec import ClusterSpec, NodeSpec, serving_from_settings
from tpwarden.cluster.ssh.route import route_for

_ADDRESS_HINT = (
    "a name such as node2.example.internal or an address such as 10.0.0.12, with no spaces, "
    "ssh options or shell characters; a port goes in ansible_port"
)


def load_inventory(path: str | Path, *, flag_table: bool = False) -> ClusterSpec:
    """Read and validate an inventory file or directory. Raises ConfigError (exit status 2).

    `flag_table`: also refuse when no `vllm serve` flag table fits the image (`inventory check`,
    `plan`); without it an unknown version only leaves extra_args unchecked (provision and
    `flags fetch` must load the inventory to fetch the table; a node has no cache)."""
    source = Path(path)
    if not source.exists():
        raise ConfigError(
            "file not found",
            file=str(path),
            hint="pass -i with an existing inventory file or directory",
        )
    check_files(source)
    if not _have_ansible():
        # a node (the watchdog host) reads the resolved copy provisioning wrote for it
        return build_spec(read_resolved(source), str(path), flag_table=flag_table)
    return build_spec(_resolve(source), str(path), flag_table=flag_table)


def _resolve(source: Path) -> Resolved:
    """Ansible's answer: read directly for a plain YAML file (`static_yaml`), else from Ansible."""
    return resolve_static(source) or resolve(source)


def _have_ansible() -> bool:
    return importlib.util.find_spec("ansible") is not None


def parse_inventory(text: str, path: str = "<inventory>") -> ClusterSpec:
    """Validate an inventory given as YAML text (a rollout's revision of the file at `path`).

    group_vars/ and host_vars/ beside `path` apply to it as they would to the file."""
    check_yaml(text, path)
    home = Path(path).parent if path != "<inventory>" else None
    with tempfile.TemporaryDirectory(prefix="tpwarden-inv-") as tmp:
        name = Path(path).name if home else "inventory.yml"
        if not name.endswith((".yml", ".yaml")):
            name += ".yml"
        target = Path(tmp) / name
        target.write_text(text, encoding="utf-8")
        for vars_dir in ("group_vars", "host_vars"):
            if home is not None and (home / vars_dir).is_dir():
                os.symlink((home / vars_dir).resolve(), Path(tmp) / vars_dir)
        try:
            check_files(Path(tmp) / name)
            return build_spec(_resolve(target), path)
        except ConfigError as exc:
            raise _renamed(exc, str(target), path, tmp, home) from None


def _renamed(exc: ConfigError, temp: str, path: str, tmp: str, home: Path | None) -> ConfigError:
    file = exc.file
    if file == temp:
        file = path
    elif file and file.startswith(tmp) and home is not None:
        file = str(home / os.path.relpath(file, tmp))
    if file == exc.file:
        return exc
    return ConfigError(exc.message, file=file, line=exc.line, key=exc.key, hint=exc.hint)


def build_spec(inv: Resolved, path: str, *, flag_table: bool = False) -> ClusterSpec:
    """Resolved Ansible variables -> the typed spec, with every cross-field check."""
    head, workers = _topology(inv, path)
    raw = _settings(inv, path)
    check_strings(inv, raw, ("tpwarden",))
    try:
        settings = TpwardenSettings.model_validate(raw)
    except ValidationError as exc:
        raise translate(inv, raw, exc) from None
    _cross_checks(inv, raw, settings)
    # the one load of the flag table: extra_args are checked with it here, `plan` reuses it
    flags = flag_tables.resolve(settings.vllm_version, settings.image)
    check_extra_args(inv, settings, flags, required_by=path if flag_table else None)
    nodes = _nodes(inv, [head, *workers])
    expected = len(nodes) * settings.parallel.gpus_per_node
    if settings.parallel.tensor != expected:
        raise located(
            inv,
            ("tpwarden", "parallel", "tensor"),
            f"tensor size {settings.parallel.tensor} does not match {len(nodes)} nodes x "
            f"{settings.parallel.gpus_per_node} GPU(s) per node",
            hint=f"set it to {expected} or change the node list",
        )
    return ClusterSpec(
        name=settings.cluster_name,
        nodes=tuple(nodes),
        serving=serving_from_settings(settings),
        secrets=settings.secrets,
        ssh=settings.ssh,
        watchdog=settings.watchdog,
        thermal=settings.thermal,
        source_file=path,
        flag_table=flags,
        bench=settings.bench,
        eval=settings.eval,
        report=settings.report,
        settings=settings,
        watchdog_host=_watchdog_host(inv, head),
    )


def _topology(inv: Resolved, path: str) -> tuple[str, list[str]]:
    heads, workers = inv.groups["head"], inv.groups["workers"]
    if not heads:
        raise ConfigError(
            "no head node",
            file=path,
            key="head",
            hint="add a group `head` with exactly one host: all.children.head.hosts in YAML, "
            "a [head] section in INI",
        )
    if len(heads) > 1:
        raise located(
            inv,
            (heads[1],),
            f"group head has {len(heads)} hosts ({', '.join(heads)})",
            key="head.hosts",
            hint="exactly one host is the head; move the others to workers",
        )
    if heads[0] in workers:
        raise located(
            inv,
            (heads[0],),
            f"{heads[0]} is in group head and in group workers",
            key=heads[0],
            hint="list it only under head",
        )
    for name in [*heads, *workers]:
        check_host_name(inv, name)
    return heads[0], list(workers)


def _settings(inv: Resolved, path: str) -> JSONObject:
    for host in inv.settings_by_host:
        raise located(
            inv,
            (host, "tpwarden"),
            f"tpwarden is set for {host} outside group all",
            key="tpwarden",
            hint="tpwarden settings belong to group all: all.vars.tpwarden or group_vars/all.yml",
        )
    raw = inv.settings
    if raw is None:
        raise ConfigError(
            "missing the tpwarden settings",
            file=path,
            key="tpwarden",
            hint="set tpwarden under all.vars or in group_vars/all.yml; copy the block from "
            "inventory.example.yml",
        )
    if not isinstance(raw, dict):
        raise located(inv, ("tpwarden",), "must be a mapping", key="tpwarden")
    return raw


def _cross_checks(inv: Resolved, raw: JSONObject, s: TpwardenSettings) -> None:
    if s.port == s.parallel.master_port:
        where = ("tpwarden", "port") if "port" in raw else ("tpwarden", "parallel", "master_port")
        raise located(
            inv,
            where,
            f"port {s.port} is also parallel.master_port",
            key="tpwarden.port",
            hint="the API port and the rendezvous port must differ",
        )
    if (
        s.drafter
        and s.drafter.method in ("dflash", "eagle", "eagle3", "draft_model")
        and not s.drafter.path
    ):
        raise located(
            inv,
            ("tpwarden", "drafter"),
            f"drafter.path is required for method {s.drafter.method}",
            key="tpwarden.drafter.path",
            hint="point it at the drafter's model directory",
        )


def _nodes(inv: Resolved, names: list[str]) -> list[NodeSpec]:
    nodes = []
    seen: dict[tuple[str, int], str] = {}
    for rank, name in enumerate(names):
        hvars = inv.host_vars.get(name, {})
        check_strings(inv, hvars, (name,))
        check_host_key_checking(inv, name, hvars)
        host = hvars.get("ansible_host", name)
        port = hvars.get("ansible_port", 22)
        user = hvars.get("ansible_user", "root")
        if isinstance(port, str) and port.isdigit():
            port = int(port)  # INI and templated values arrive as text, as Ansible accepts
        if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
            raise located(
                inv, (name, "ansible_port"), f"ansible_port {port!r} is not a port (1-65535)"
            )
        check_address(inv, (name, "ansible_host"), host, hint=_ADDRESS_HINT)
        if not isinstance(user, str) or not user or user.startswith("-"):
            raise located(inv, (name, "ansible_user"), "ansible_user must be a user name")
        vllm_ip = hvars["vllm_host_ip"] if "vllm_host_ip" in hvars else host
        try:
            ipaddress.ip_address(vllm_ip)
        except ValueError:
            raise located(
                inv,
                (name, "vllm_host_ip"),
                f"vllm_host_ip {vllm_ip!r} is not an IP address",
                hint="set vllm_host_ip to the address NCCL and vLLM should use",
            ) from None
        if (host, port) in seen:
            raise located(
                inv, (name, "ansible_host"), f"{name} has the same address as {seen[(host, port)]}"
            )
        seen[(host, port)] = name
        key_file = hvars.get("ansible_ssh_private_key_file")
        thermal_host, thermal_port = _thermal_metrics(inv, name, hvars)
        ssh_args = _ssh_args(hvars)
        try:
            route_for(host, ssh_args, None)  # the user's ssh_config is read when connecting
        except ValueError as exc:
            arg = "ansible_ssh_common_args"
            if "ansible_ssh_extra_args" in hvars and arg not in hvars:
                arg = "ansible_ssh_extra_args"
            raise located(
                inv, (name, arg), str(exc), hint="e.g. -o ProxyJump=user@bastion:22"
            ) from None
        nodes.append(
            NodeSpec(
                name=name,
                role="head" if rank == 0 else "worker",
                rank=rank,
                ssh_host=host,
                ssh_port=port,
                ssh_user=user,
                ssh_key_file=os.path.expanduser(str(key_file)) if key_file else None,
                vllm_host_ip=str(vllm_ip),
                become=_truthy(hvars.get("ansible_become", False)),
                ssh_args=ssh_args,
                thermal_metrics_host=thermal_host,
                thermal_metrics_port=thermal_port,
            )
        )
    return nodes


def _thermal_metrics(inv: Resolved, name: str, hvars: JSONObject) -> tuple[str | None, int | None]:
    """Per-host override of the thermal agent's /metrics address (the unit template reads the
    same two host vars)."""
    host = hvars.get("tpwarden_thermal_metrics_host")
    port = hvars.get("tpwarden_thermal_metrics_port")
    if host is not None:
        check_address(
            inv,
            (name, "tpwarden_thermal_metrics_host"),
            host,
            hint="an address of this node (or 0.0.0.0)",
        )
    if isinstance(port, str) and port.isdigit():
        port = int(port)
    if port is not None and (
        not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535
    ):
        raise located(
            inv,
            (name, "tpwarden_thermal_metrics_port"),
            f"tpwarden_thermal_metrics_port {port!r} is not a port (1-65535)",
        )
    return host, port


def _watchdog_host(inv: Resolved, head: str) -> str | None:
    value = inv.host_vars.get(head, {}).get("tpwarden_watchdog_host")
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise located(
            inv, (head, "tpwarden_watchdog_host"), "tpwarden_watchdog_host must be a name"
        )
    return value


def _ssh_args(hvars: JSONObject) -> str | None:
    parts = [hvars.get("ansible_ssh_common_args"), hvars.get("ansible_ssh_extra_args")]
    text = " ".join(str(p) for p in parts if p)
    return text or None


def _truthy(value: JSONValue) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)
